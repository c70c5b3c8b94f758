//! `flue server register --transport poll` and `rotate-credentials` of a polling server.

use std::os::unix::fs::PermissionsExt;

use flue_tests::Flue;

use super::anonymous;
use crate::security::flue_cli;

/// The `metadata_url = …` value of an os-collect-config snippet.
fn metadata_url(snippet: &str) -> String {
    snippet
        .lines()
        .find_map(|l| l.strip_prefix("metadata_url = "))
        .unwrap_or_else(|| panic!("no metadata_url in:\n{snippet}"))
        .to_owned()
}

async fn status(url: &str) -> u16 {
    anonymous()
        .get(url)
        .send()
        .await
        .expect("GET")
        .status()
        .as_u16()
}

#[tokio::test]
async fn the_cli_registers_a_polling_server_printing_its_os_collect_config_once_and_rotates_it() {
    let flue = Flue::start().await;
    let out = flue_cli(
        &flue,
        &["server", "register", "web1", "--transport", "poll"],
    )
    .await;
    assert!(out.status.success(), "{out:?}");
    let snippet = String::from_utf8(out.stdout).expect("utf-8");
    assert!(snippet.contains("[request]\nmetadata_url = "), "{snippet}");
    assert!(snippet.contains("command = os-refresh-config"), "{snippet}");
    let old = metadata_url(&snippet);
    assert_eq!(status(&old).await, 200);

    let again = flue_cli(
        &flue,
        &["server", "register", "web1", "--transport", "poll"],
    )
    .await;
    assert!(again.status.success(), "{again:?}");
    let text = String::from_utf8_lossy(&again.stdout);
    assert!(text.contains("registered before"), "{text}");
    assert!(!text.contains(&old), "the URL is shown once only");

    let file = flue.path("occ.conf");
    let file_arg = file.display().to_string();
    let rotated = flue_cli(
        &flue,
        &["server", "rotate-credentials", "web1", "--creds", &file_arg],
    )
    .await;
    assert!(rotated.status.success(), "{rotated:?}");
    let written = std::fs::read_to_string(&file).expect("snippet written");
    let mode = std::fs::metadata(&file).expect("file").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let new = metadata_url(&written);
    assert_ne!(new, old);
    assert_eq!(status(&old).await, 404);
    assert_eq!(status(&new).await, 200);

    let bad = flue_cli(
        &flue,
        &["server", "register", "web2", "--transport", "swift"],
    )
    .await;
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("--transport") && err.contains("swift"),
        "{err}"
    );
}
