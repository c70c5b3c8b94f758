//! NATS URLs with credentials (`--nats-url`, `FLUE_NATS_URL`): the one parser
//! (`flue_proto::nats_url::NatsUrls`) and every way it shows them (the log form, the URL
//! handed to agents). None may print a password or a token.
#![no_main]

use flue_proto::nats_url::{Credentials, NatsUrls, redact};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(urls) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = NatsUrls::parse(urls);
    for url in parsed.servers() {
        let start = url.find("://").map_or(0, |i| i + 3);
        assert!(!url[start..].contains('@'), "userinfo left in {url:?}");
    }
    let credentials = parsed.credentials();
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
    let other = NatsUrls::parse(&swapped);
    assert_eq!(
        parsed.redacted(),
        other.redacted(),
        "the redacted URL shows the credentials of {urls:?}"
    );
    assert_eq!(
        redact(urls),
        redact(&swapped),
        "redact shows the credentials of {urls:?}"
    );
    assert_eq!(
        format!("{parsed} {parsed:?}"),
        format!("{other} {other:?}"),
        "Display or Debug shows the credentials of {urls:?}"
    );
    assert_eq!(
        parsed.without_credentials(),
        other.without_credentials(),
        "the URL handed to agents keeps the credentials of {urls:?}"
    );
});

/// `urls` with each URL's secret replaced by another: the password of `user:password@`,
/// the whole of `token@`. The userinfo is what the parser takes: everything
/// between the scheme and the last `@`.
fn swap_userinfo(urls: &str) -> String {
    urls.split(',')
        // Blanks around a URL are not part of it, as the parser reads them.
        .map(str::trim)
        .map(|url| {
            let start = url.find("://").map_or(0, |i| i + 3);
            let Some(at) = url[start..].rfind('@') else {
                return url.to_owned();
            };
            let userinfo = &url[start..start + at];
            if userinfo.is_empty() {
                // `@host`: no credentials, nothing to swap (the parser drops the `@`).
                return url.to_owned();
            }
            let swapped = match userinfo.split_once(':') {
                Some((user, _)) => format!("{user}:other-secret"),
                None => "other-token".to_owned(),
            };
            format!("{}{swapped}{}", &url[..start], &url[start + at..])
        })
        .collect::<Vec<_>>()
        .join(",")
}
