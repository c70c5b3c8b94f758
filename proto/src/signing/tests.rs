//! Unit tests of signing and verification.

use super::*;

fn ids() -> (TenantId, ServerId) {
    ("acme".parse().expect("id"), "web1".parse().expect("id"))
}

fn at(secs: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_700_000_000 + secs).expect("time")
}

fn claims(body: &[u8]) -> RequestClaims {
    let (tenant, server) = ids();
    RequestClaims {
        v: CLAIMS_VERSION,
        tenant,
        server,
        deployment: "d1".parse().expect("id"),
        digest: RequestDigest::of(body),
        created: at(0),
        expires: at(600),
    }
}

fn check(signed: &Signed, key: &KeyPair, body: &[u8], now: i64) -> Result<RequestClaims, Refusal> {
    let (tenant, server) = ids();
    verify_request(
        Some(&signed.claims),
        Some(&signed.signature),
        &key.public_key(),
        body,
        (&tenant, &server),
        at(now),
    )
}

fn code(r: Result<RequestClaims, Refusal>) -> RefusalCode {
    r.expect_err("refused").code
}

#[test]
fn a_signed_request_verifies_with_the_signing_key() {
    let key = KeyPair::new_server();
    let signed = sign(&claims(b"body"), &key).expect("signs");
    assert_eq!(
        check(&signed, &key, b"body", 10).expect("valid"),
        claims(b"body")
    );
    assert!(!signed.signature.contains('='), "no padding");
}

#[test]
fn tampered_claims_or_body_are_a_bad_signature() {
    let key = KeyPair::new_server();
    let signed = sign(&claims(b"body"), &key).expect("signs");
    let mut tampered = signed.clone();
    tampered.claims = tampered.claims.replace("\"d1\"", "\"d2\"");
    assert_eq!(
        code(check(&tampered, &key, b"body", 10)),
        RefusalCode::BadSignature
    );
    assert_eq!(
        code(check(&signed, &key, b"other body", 10)),
        RefusalCode::BadSignature
    );
}

#[test]
fn another_key_is_a_bad_signature() {
    let key = KeyPair::new_server();
    let signed = sign(&claims(b"body"), &KeyPair::new_server()).expect("signs");
    assert_eq!(
        code(check(&signed, &key, b"body", 10)),
        RefusalCode::BadSignature
    );
}

#[test]
fn an_expired_signature_is_refused() {
    let key = KeyPair::new_server();
    let signed = sign(&claims(b"body"), &key).expect("signs");
    assert_eq!(
        code(check(&signed, &key, b"body", 600)),
        RefusalCode::Expired
    );
}

#[test]
fn another_server_or_tenant_is_refused() {
    let key = KeyPair::new_server();
    let mut other = claims(b"body");
    other.server = "db1".parse().expect("id");
    let signed = sign(&other, &key).expect("signs");
    assert_eq!(
        code(check(&signed, &key, b"body", 10)),
        RefusalCode::WrongServer
    );
    let mut other = claims(b"body");
    other.tenant = "globex".parse().expect("id");
    let signed = sign(&other, &key).expect("signs");
    assert_eq!(
        code(check(&signed, &key, b"body", 10)),
        RefusalCode::WrongTenant
    );
}

#[test]
fn missing_or_junk_headers_are_refused_without_panicking() {
    let key = KeyPair::new_server();
    let (tenant, server) = ids();
    let who = (&tenant, &server);
    let pinned = key.public_key();
    let r = verify_request(None, Some("x"), &pinned, b"", who, at(0));
    assert_eq!(code(r), RefusalCode::Unsigned);
    let signed = sign(&claims(b"body"), &key).expect("signs");
    for junk in ["", "!!!", "a", "AAAA", &"A".repeat(86)] {
        let r = verify_request(
            Some(&signed.claims),
            Some(junk),
            &pinned,
            b"body",
            who,
            at(0),
        );
        assert_eq!(code(r), RefusalCode::BadSignature, "{junk:?}");
    }
    // Signed junk is still not a claim.
    let junk = Signed {
        claims: "not json".into(),
        signature: BASE64URL_NOPAD.encode(&key.sign(b"not json").expect("signs")),
    };
    assert_eq!(
        code(check(&junk, &key, b"body", 0)),
        RefusalCode::BadSignature
    );
    let r = verify_request(Some("{}"), Some("AA"), "not a key", b"", who, at(0));
    assert_eq!(code(r), RefusalCode::BadSignature);
}

#[test]
fn answers_verify_with_the_agents_key_only() {
    let user = KeyPair::new_user();
    let (tenant, server) = ids();
    let claims = AnswerClaims {
        v: CLAIMS_VERSION,
        tenant: tenant.clone(),
        server: server.clone(),
        digest: RequestDigest::of(b"answer"),
        at: at(0),
    };
    let signed = sign(&claims, &user).expect("signs");
    let who = (&tenant, &server);
    let ok = verify_answer(
        Some(&signed.claims),
        Some(&signed.signature),
        &user.public_key(),
        b"answer",
        who,
    );
    assert_eq!(ok.expect("valid"), claims);
    let other = KeyPair::new_user().public_key();
    let r = verify_answer(
        Some(&signed.claims),
        Some(&signed.signature),
        &other,
        b"answer",
        who,
    );
    assert_eq!(r.expect_err("other key").code, RefusalCode::BadSignature);
    let r = verify_answer(
        Some(&signed.claims),
        Some(&signed.signature),
        &user.public_key(),
        b"changed",
        who,
    );
    assert_eq!(r.expect_err("other body").code, RefusalCode::BadSignature);
    let r = verify_answer(None, None, &user.public_key(), b"answer", who);
    assert_eq!(r.expect_err("unsigned").code, RefusalCode::Unsigned);
}

#[test]
fn refusal_codes_are_spelled_as_on_the_wire() {
    for code in [
        RefusalCode::Unsigned,
        RefusalCode::BadSignature,
        RefusalCode::WrongServer,
        RefusalCode::WrongTenant,
        RefusalCode::Expired,
        RefusalCode::Replayed,
        RefusalCode::Undecodable,
        RefusalCode::UnknownServer,
    ] {
        assert_eq!(
            serde_json::to_value(code).expect("ser"),
            serde_json::json!(code.as_str())
        );
    }
}

/// A window signed at `at(0)` for `body` under message id `m1`, with `key`.
fn window(key: &KeyPair, body: &[u8]) -> Signed {
    let w = PublishWindow::of(RequestDigest::of(body), "m1".into(), at(0));
    sign(&w, key).expect("signs")
}

fn stored<'a>(w: &'a Signed, msg_id: Option<&'a str>, secs: i64) -> Stored<'a> {
    Stored {
        window: Some(&w.claims),
        signature: Some(&w.signature),
        msg_id,
        stored: at(secs),
    }
}

#[test]
fn a_request_stored_in_its_window_under_its_message_id_passes() {
    let key = KeyPair::new_server();
    let w = window(&key, b"body");
    let pinned = key.public_key();
    assert_eq!(
        verify_window(stored(&w, Some("m1"), 1), &pinned, b"body"),
        Ok(())
    );
    let last = i64::try_from(PUBLISH_WINDOW.as_secs()).expect("secs");
    assert_eq!(
        verify_window(stored(&w, Some("m1"), last), &pinned, b"body"),
        Ok(())
    );
}

#[test]
fn a_copy_stored_after_the_window_or_under_another_message_id_is_a_replay() {
    let key = KeyPair::new_server();
    let w = window(&key, b"body");
    let pinned = key.public_key();
    let late = i64::try_from(PUBLISH_WINDOW.as_secs()).expect("secs") + 1;
    let r = verify_window(stored(&w, Some("m1"), late), &pinned, b"body");
    let refusal = r.expect_err("late");
    assert_eq!(refusal.code, RefusalCode::Replayed);
    assert!(
        refusal.detail.contains("publish window closed"),
        "{refusal}"
    );
    for other in [Some("m2"), Some(""), None] {
        let r = verify_window(stored(&w, other, 1), &pinned, b"body");
        assert_eq!(
            r.expect_err("other id").code,
            RefusalCode::Replayed,
            "{other:?}"
        );
    }
}

#[test]
fn a_missing_forged_or_moved_window_is_refused() {
    let key = KeyPair::new_server();
    let pinned = key.public_key();
    let w = window(&key, b"body");
    let none = Stored {
        window: None,
        signature: None,
        msg_id: Some("m1"),
        stored: at(1),
    };
    let r = verify_window(none, &pinned, b"body");
    assert_eq!(r.expect_err("none").code, RefusalCode::Unsigned);
    // Signed by someone else.
    let forged = window(&KeyPair::new_server(), b"body");
    let r = verify_window(stored(&forged, Some("m1"), 1), &pinned, b"body");
    assert_eq!(r.expect_err("forged").code, RefusalCode::BadSignature);
    // Another request's window on this body.
    let r = verify_window(stored(&w, Some("m1"), 1), &pinned, b"other body");
    assert_eq!(r.expect_err("moved").code, RefusalCode::BadSignature);
}
