//! `/v1/stacks`: create-only and compare-and-set writes, listing, and delete clearing
//! the stack's data space (and no other stack's).

use axum::http::{Method, StatusCode};
use flue_proto::subject;
use serde_json::{Value, json};

use super::fixture::{Fixture, code, message};

fn put_body(expected_revision: Option<u64>, step: &str) -> Value {
    let mut body = json!({
        "status": {"action": "CREATE", "status": "IN_PROGRESS"},
        "state": {"parameters": {"step": step}}
    });
    if let Some(revision) = expected_revision {
        body["expected_revision"] = json!(revision);
    }
    body
}

fn revision(stack: &Value) -> u64 {
    stack["revision"].as_u64().expect("revision")
}

#[tokio::test]
async fn stacks_are_created_once_and_replaced_only_at_their_revision() {
    let fx = Fixture::start().await;
    let (s, list) = fx.call(Method::GET, "/v1/stacks", None).await;
    assert_eq!((s, list), (StatusCode::OK, json!([])));

    let (s, created) = fx
        .call(Method::PUT, "/v1/stacks/st1", Some(put_body(None, "one")))
        .await;
    assert_eq!(s, StatusCode::OK, "{created}");
    assert_eq!(
        (&created["id"], &created["tenant"]),
        (&json!("st1"), &json!("default"))
    );
    assert_eq!(created["created_at"], created["updated_at"]);
    assert_eq!(created["status"]["action"], "CREATE");
    assert_eq!(created["state"]["parameters"]["step"], "one");
    let first = revision(&created);

    let (s, body) = fx
        .call(Method::PUT, "/v1/stacks/st1", Some(put_body(None, "again")))
        .await;
    assert_eq!((s, code(&body)), (StatusCode::CONFLICT, "conflict"));
    assert_eq!(message(&body), "stack \"st1\" exists");

    let mut update = put_body(Some(first), "two");
    update["status"] = json!({"action": "CREATE", "status": "FAILED", "reason": "web: boom"});
    let (s, updated) = fx.call(Method::PUT, "/v1/stacks/st1", Some(update)).await;
    assert_eq!(s, StatusCode::OK, "{updated}");
    let second = revision(&updated);
    assert!(second > first, "{first} -> {second}");
    assert_eq!(updated["created_at"], created["created_at"]);
    assert_eq!(updated["status"]["reason"], "web: boom");
    assert_eq!(updated["state"]["parameters"]["step"], "two");

    // A writer still at the first revision lost the race: it is told the current one.
    let (s, body) = fx
        .call(
            Method::PUT,
            "/v1/stacks/st1",
            Some(put_body(Some(first), "stale")),
        )
        .await;
    assert_eq!(
        (s, code(&body)),
        (StatusCode::CONFLICT, "revision_mismatch")
    );
    assert!(
        message(&body).contains(&format!("is at revision {second}, not {first}")),
        "{body}"
    );
    let (s, read) = fx.call(Method::GET, "/v1/stacks/st1", None).await;
    assert_eq!((s, &read), (StatusCode::OK, &updated));

    // An update never creates: not even at revision 0.
    for revision in [0, 1] {
        let (s, body) = fx
            .call(
                Method::PUT,
                "/v1/stacks/nope",
                Some(put_body(Some(revision), "x")),
            )
            .await;
        assert_eq!(
            (s, message(&body)),
            (StatusCode::NOT_FOUND, "stack \"nope\" not found"),
            "{revision}"
        );
    }
    let (s, body) = fx.call(Method::GET, "/v1/stacks/nope", None).await;
    assert_eq!((s, code(&body)), (StatusCode::NOT_FOUND, "not_found"));

    let (s, a) = fx
        .call(Method::PUT, "/v1/stacks/a-st", Some(put_body(None, "a")))
        .await;
    assert_eq!(s, StatusCode::OK);
    let (s, list) = fx.call(Method::GET, "/v1/stacks", None).await;
    assert_eq!((s, list), (StatusCode::OK, json!([a, updated])), "by id");
    fx.shutdown().await;
}

#[tokio::test]
async fn stack_requests_are_validated() {
    let fx = Fixture::start().await;
    let (s, body) = fx.call(Method::GET, "/v1/stacks/a.b", None).await;
    assert_eq!((s, code(&body)), (StatusCode::BAD_REQUEST, "invalid_id"));
    assert!(message(&body).contains("stack id"), "{body}");
    let (s, body) = fx
        .call(Method::PUT, "/v1/stacks/a%20b", Some(put_body(None, "x")))
        .await;
    assert_eq!((s, code(&body)), (StatusCode::BAD_REQUEST, "invalid_id"));

    let mut unknown = put_body(None, "x");
    unknown["revision"] = json!(3);
    let (s, body) = fx.call(Method::PUT, "/v1/stacks/st", Some(unknown)).await;
    assert_eq!(
        (s, code(&body)),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_body")
    );
    assert!(message(&body).contains("revision"), "{body}");
    let (s, body) = fx
        .call(Method::PUT, "/v1/stacks/st", Some(json!({"state": {}})))
        .await;
    assert_eq!(
        (s, code(&body)),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_body")
    );
    assert!(message(&body).contains("missing field `status`"), "{body}");

    let (s, body) = fx
        .call(Method::DELETE, "/v1/stacks/st?expected_revision=x", None)
        .await;
    assert_eq!(
        (s, code(&body)),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_input")
    );
    let (s, body) = fx.call(Method::POST, "/v1/stacks", None).await;
    assert_eq!(
        (s, code(&body)),
        (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed")
    );
    fx.shutdown().await;
}

#[tokio::test]
async fn deleting_a_stack_clears_its_data_space_and_only_its_own() {
    let fx = Fixture::start().await;
    let js = fx.jetstream().await;
    // The gateway creates the data space at start; agents only use it.
    let data = js
        .get_key_value(subject::DATA_BUCKET)
        .await
        .expect("data bucket exists");
    assert_eq!(data.status().await.expect("status").history(), 1);

    let (s, created) = fx
        .call(Method::PUT, "/v1/stacks/st1", Some(put_body(None, "one")))
        .await;
    assert_eq!(s, StatusCode::OK);
    // `st10` shares `st1` as a text prefix: its keys must survive `st1`'s delete.
    let keys = [
        "default.st1.db/address",
        "default.st1.a.b",
        "default.st10.k",
    ];
    for key in keys {
        data.put(key, "v".into()).await.expect("put");
    }

    let stale = revision(&created) + 1;
    let (s, body) = fx
        .call(
            Method::DELETE,
            &format!("/v1/stacks/st1?expected_revision={stale}"),
            None,
        )
        .await;
    assert_eq!(
        (s, code(&body)),
        (StatusCode::CONFLICT, "revision_mismatch")
    );
    assert!(
        data.get(keys[0]).await.expect("get").is_some(),
        "a refused delete keeps the data"
    );

    let uri = format!("/v1/stacks/st1?expected_revision={}", revision(&created));
    let (s, _) = fx.call(Method::DELETE, &uri, None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    for key in keys[..2].iter().copied() {
        assert!(data.get(key).await.expect("get").is_none(), "{key} purged");
    }
    assert_eq!(
        data.get(keys[2]).await.expect("get").as_deref(),
        Some(&b"v"[..]),
        "another stack's key is kept"
    );
    let (s, _) = fx.call(Method::GET, "/v1/stacks/st1", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, body) = fx.call(Method::DELETE, "/v1/stacks/st1", None).await;
    assert_eq!((s, code(&body)), (StatusCode::NOT_FOUND, "not_found"));
    let (s, list) = fx.call(Method::GET, "/v1/stacks", None).await;
    assert_eq!(
        (s, list),
        (StatusCode::OK, json!([])),
        "deleted ones are not listed"
    );
    // Data left without a record (a delete whose purge failed) goes with the next delete.
    data.put("default.orphan.k", "v".into()).await.expect("put");
    let (s, _) = fx.call(Method::DELETE, "/v1/stacks/orphan", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert!(data.get("default.orphan.k").await.expect("get").is_none());

    // The name is free again; the new stack starts with an empty data space.
    let (s, again) = fx
        .call(Method::PUT, "/v1/stacks/st1", Some(put_body(None, "new")))
        .await;
    assert_eq!(s, StatusCode::OK, "{again}");
    assert_eq!(again["state"]["parameters"]["step"], "new");
    let (s, _) = fx.call(Method::DELETE, "/v1/stacks/st1", None).await;
    assert_eq!(
        s,
        StatusCode::NO_CONTENT,
        "without a revision: unconditional"
    );
    fx.shutdown().await;
}
