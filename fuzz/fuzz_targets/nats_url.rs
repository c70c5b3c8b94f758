//! NATS URLs with credentials (`--nats-url`, `FLUE_NATS_URL`): the split into URLs and
//! credentials (`flue_proto::nats_url`), and every redaction that prints such a URL (the
//! agent's and the gateway's log forms, the gateway's URL for agents). None may print a
//! password or a token.
#![no_main]

use flue_proto::nats_url::{Credentials, split_credentials};
use flue_proto::{ServerId, TenantId};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(urls) = std::str::from_utf8(data) else {
        return;
    };
    let (plain, credentials) = split_credentials(urls);
    for url in &plain {
        let start = url.find("://").map_or(0, |i| i + 3);
        assert!(!url[start..].contains('@'), "userinfo left in {url:?}");
    }
    match &credentials {
        Some(Credentials::UserPassword(user, _)) => assert_eq!(
            format!("{credentials:?}"),
            format!("Some(UserPassword({user:?}, \"***\"))")
        ),
        Some(Credentials::Token(_)) => {
            assert_eq!(format!("{credentials:?}"), "Some(Token(\"***\"))")
        }
        None => {}
    }
    // A redaction that prints nothing of the secret prints the same whatever the
    // secret is: swap every userinfo for another and compare.
    let swapped = swap_userinfo(urls);
    assert_eq!(
        agent_log_form(urls),
        agent_log_form(&swapped),
        "the agent's redacted URL shows the credentials of {urls:?}"
    );
    assert_eq!(
        flue_gateway::config::redact_urls(urls),
        flue_gateway::config::redact_urls(&swapped),
        "the gateway's redacted URL shows the password of {urls:?}"
    );
    assert_eq!(
        flue_gateway::config::strip_userinfo(urls),
        flue_gateway::config::strip_userinfo(&swapped),
        "the URL handed to agents keeps the credentials of {urls:?}"
    );
});

/// The agent's form of its URL for logs and errors.
fn agent_log_form(urls: &str) -> String {
    let mut config = flue_agent::Config::new(
        TenantId::new("t").expect("valid"),
        ServerId::new("s").expect("valid"),
    );
    config.nats_url = urls.to_owned();
    config.redacted_nats_url()
}

/// `urls` with each URL's secret replaced by another: the password of `user:password@`,
/// the whole of `token@`. The userinfo is what `split_credentials` takes: everything
/// between the scheme and the last `@`.
fn swap_userinfo(urls: &str) -> String {
    urls.split(',')
        .map(|url| {
            let start = url.find("://").map_or(0, |i| i + 3);
            let Some(at) = url[start..].rfind('@') else {
                return url.to_owned();
            };
            let userinfo = &url[start..start + at];
            let swapped = match userinfo.split_once(':') {
                Some((user, _)) => format!("{user}:other-secret"),
                None => "other-token".to_owned(),
            };
            format!("{}{swapped}{}", &url[..start], &url[start + at..])
        })
        .collect::<Vec<_>>()
        .join(",")
}
