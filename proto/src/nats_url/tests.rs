//! Edge cases of broker URLs: where credentials hide, and that they never show.

use super::*;

fn user(u: &str, p: &str) -> Option<Credentials> {
    Some(Credentials::UserPassword(u.into(), p.into()))
}

#[test]
fn credentials_come_out_of_the_urls() {
    let urls = NatsUrls::parse("nats://gw:p%40ss/w?@a:4222, tls://b:4223");
    assert_eq!(urls.servers(), ["nats://a:4222", "tls://b:4223"]);
    assert_eq!(urls.credentials(), user("gw", "p@ss/w?"));
    assert!(!format!("{:?}", urls.credentials()).contains("p@ss"));
    assert_eq!(NatsUrls::parse("nats://h:1").credentials(), None);
    assert_eq!(decode("a%zz%4"), "a%zz%4");
}

#[test]
fn a_password_may_hold_at_slash_question_mark_and_colon() {
    let urls = NatsUrls::parse("nats://u:p@ss/x?y:z@h:4222");
    assert_eq!(urls.servers(), ["nats://h:4222"]);
    assert_eq!(urls.credentials(), user("u", "p@ss/x?y:z"));
    assert_eq!(urls.redacted(), "nats://u:***@h:4222");
}

#[test]
fn escapes_are_decoded_for_the_client_and_hidden_as_written_and_decoded() {
    let urls = NatsUrls::parse("nats://u%2Bx:p%40ss%2Fw@h:1");
    assert_eq!(urls.credentials(), user("u+x", "p@ss/w"));
    assert_eq!(urls.redacted(), "nats://u%2Bx:***@h:1");
    assert_eq!(urls.secrets(), ["u%2Bx:p%40ss%2Fw", "p%40ss%2Fw", "p@ss/w"]);
}

#[test]
fn a_lone_token_is_hidden_whole() {
    let urls = NatsUrls::parse("tls://s3cr3t-t0ken@h:4443");
    assert_eq!(
        urls.credentials(),
        Some(Credentials::Token("s3cr3t-t0ken".into()))
    );
    assert_eq!(urls.redacted(), "tls://***@h:4443");
    assert_eq!(urls.to_string(), "tls://***@h:4443");
    assert_eq!(urls.secrets(), ["s3cr3t-t0ken"]);
    assert_eq!(format!("{:?}", urls.credentials()), "Some(Token(\"***\"))");
}

#[test]
fn several_urls_are_each_redacted_and_the_first_credentials_win() {
    let urls = NatsUrls::parse("nats://u:p@h:1,nats://t@h:2,h:3,u:p/?@x@h:4, ,");
    assert_eq!(
        urls.redacted(),
        "nats://u:***@h:1,nats://***@h:2,h:3,u:***@h:4"
    );
    assert_eq!(urls.credentials(), user("u", "p"));
    assert_eq!(urls.servers(), ["nats://h:1", "nats://h:2", "h:3", "h:4"]);
    assert_eq!(urls.without_credentials(), "nats://h:1,nats://h:2,h:3,h:4");
    assert_eq!(urls.secrets(), ["u:p/?@x", "p/?@x", "u:p", "p", "t"]);
    assert_eq!(
        format!("{urls:?}"),
        "NatsUrls(\"nats://u:***@h:1,nats://***@h:2,h:3,u:***@h:4\")"
    );
}

#[test]
fn a_url_without_a_scheme_still_gives_its_credentials() {
    let urls = NatsUrls::parse("t0k3n@h:1");
    assert_eq!(urls.servers(), ["h:1"]);
    assert_eq!(urls.credentials(), Some(Credentials::Token("t0k3n".into())));
    assert_eq!(redact("u:pw@h:1"), "u:***@h:1");
    assert_eq!(redact("127.0.0.1:4222"), "127.0.0.1:4222");
}

#[test]
fn urls_without_credentials_are_shown_as_given() {
    assert_eq!(redact("nats://127.0.0.1:4222"), "nats://127.0.0.1:4222");
    assert_eq!(
        NatsUrls::parse("ws://u:p@h:1/path").without_credentials(),
        "ws://h:1/path"
    );
    let empty = NatsUrls::parse("nats://@h:1");
    assert_eq!(empty.credentials(), None);
    assert_eq!(empty.redacted(), "nats://h:1");
    assert!(empty.secrets().is_empty());
    assert_eq!(
        NatsUrls::parse("nats://u:@h:1").credentials(),
        user("u", ""),
        "an empty password is still a password"
    );
}
