//! A stack's units, each under a key of its own in `flue_stack_units`: a write stores
//! only the units it names, a stack stored as one record before still loads and moves
//! its units out on its next write, delete removes the unit keys, and the stack and
//! unit listings come in cursor pages.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use flue_proto::NEXT_CURSOR_HEADER;
use flue_proto::stack::unit_token;
use serde_json::{Value, json};
use tower::ServiceExt;

use super::fixture::{Fixture, code, message};

const UNITS: &str = "flue_stack_units";

fn unit(member: &str, status: &str) -> Value {
    json!({
        "resource": "grp",
        "member": member,
        "server_id": format!("srv-{member}"),
        "actions": [],
        "depends_on": [],
        "action": "CREATE",
        "status": status,
    })
}

fn head(expected_revision: Option<u64>, changed_units: Value) -> Value {
    let mut body = json!({
        "status": {"action": "CREATE", "status": "IN_PROGRESS"},
        "state": {"parameters": {"size": 3}},
        "changed_units": changed_units,
    });
    if let Some(revision) = expected_revision {
        body["expected_revision"] = json!(revision);
    }
    body
}

fn revision(stack: &Value) -> u64 {
    stack["revision"].as_u64().expect("revision")
}

/// `GET path`: the body and the next page's cursor.
async fn get_page(fx: &Fixture, path: &str) -> (StatusCode, Value, Option<String>) {
    let token = fx
        .tokens
        .for_route(&Method::GET, path.split('?').next().expect("path"));
    let req = Request::builder()
        .uri(path)
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .body(Body::empty())
        .expect("request");
    let resp = fx.app.clone().oneshot(req).await.expect("infallible");
    let status = resp.status();
    let next = resp
        .headers()
        .get(NEXT_CURSOR_HEADER)
        .map(|v| v.to_str().expect("ascii").to_owned());
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .expect("body");
    (status, serde_json::from_slice(&bytes).expect("json"), next)
}

/// Every page of `base` (ending in `?`) by `limit`: the pages' sizes and `field` of each item.
async fn walk(fx: &Fixture, base: &str, limit: usize, field: &str) -> (Vec<usize>, Vec<String>) {
    let (mut sizes, mut names) = (Vec::new(), Vec::new());
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("{base}limit={limit}");
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let (s, items, next) = get_page(fx, &path).await;
        assert_eq!(s, StatusCode::OK, "{items}");
        let items = items.as_array().expect("array").clone();
        sizes.push(items.len());
        names.extend(
            items
                .iter()
                .map(|i| i[field].as_str().expect(field).to_owned()),
        );
        match next {
            Some(next) => cursor = Some(next),
            None => return (sizes, names),
        }
    }
}

/// The KV revision of unit `key` of stack `stack`, `None` when it has no key of its own.
async fn unit_revision(
    units: &async_nats::jetstream::kv::Store,
    stack: &str,
    key: &str,
) -> Option<u64> {
    units
        .entry(format!("default.{stack}.{}", unit_token(key)))
        .await
        .expect("entry")
        .filter(|e| e.operation == async_nats::jetstream::kv::Operation::Put)
        .map(|e| e.revision)
}

#[tokio::test]
async fn a_write_stores_only_the_units_it_names_and_answers_with_those() {
    let fx = Fixture::start().await;
    let js = fx.jetstream().await;
    let three = json!({"grp/a": unit("a", "COMPLETE"), "grp/b": unit("b", "COMPLETE"), "grp/c": unit("c", "COMPLETE")});
    let (s, created) = fx
        .call(Method::PUT, "/v1/stacks/st", Some(head(None, three)))
        .await;
    assert_eq!(s, StatusCode::OK, "{created}");
    assert_eq!(
        created["state"]["units"].as_object().expect("units").len(),
        3
    );
    let units = js.get_key_value(UNITS).await.expect("units bucket");
    let stacks = js
        .get_key_value("flue_stacks")
        .await
        .expect("stacks bucket");
    let stored_head: Value =
        serde_json::from_slice(&stacks.get("default.st").await.expect("get").expect("head"))
            .expect("json");
    assert_eq!(
        stored_head["state"]["units"],
        json!({}),
        "the head holds no unit"
    );
    let before_a = unit_revision(&units, "st", "grp/a")
        .await
        .expect("a stored");
    let before_b = unit_revision(&units, "st", "grp/b")
        .await
        .expect("b stored");

    // One unit changes, one leaves: the third is not written.
    let change = json!({"grp/b": unit("b", "FAILED"), "grp/c": null});
    let (s, updated) = fx
        .call(
            Method::PUT,
            "/v1/stacks/st",
            Some(head(Some(revision(&created)), change)),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{updated}");
    assert_eq!(
        updated["state"]["units"],
        json!({"grp/b": unit("b", "FAILED")})
    );
    assert_eq!(unit_revision(&units, "st", "grp/a").await, Some(before_a));
    assert!(unit_revision(&units, "st", "grp/b").await.expect("b") > before_b);
    assert_eq!(unit_revision(&units, "st", "grp/c").await, None);

    let (s, read) = fx.call(Method::GET, "/v1/stacks/st", None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        read["state"]["units"],
        json!({"grp/a": unit("a", "COMPLETE"), "grp/b": unit("b", "FAILED")})
    );
    assert_eq!(revision(&read), revision(&updated));

    // A writer still at the old revision writes nothing, units included.
    let stale = json!({"grp/a": unit("a", "FAILED")});
    let (s, body) = fx
        .call(
            Method::PUT,
            "/v1/stacks/st",
            Some(head(Some(revision(&created)), stale)),
        )
        .await;
    assert_eq!(
        (s, code(&body)),
        (StatusCode::CONFLICT, "revision_mismatch")
    );
    assert_eq!(unit_revision(&units, "st", "grp/a").await, Some(before_a));

    // Units given both ways, or under a key too long to store, are refused by name.
    let mut both = head(Some(revision(&updated)), json!({}));
    both["state"]["units"] = json!({"grp/a": unit("a", "COMPLETE")});
    let (s, body) = fx.call(Method::PUT, "/v1/stacks/st", Some(both)).await;
    assert_eq!(
        (s, code(&body)),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_input")
    );
    assert!(message(&body).contains("changed_units"), "{body}");
    let long = json!({"x".repeat(300): unit("a", "COMPLETE")});
    let (s, body) = fx
        .call(
            Method::PUT,
            "/v1/stacks/st",
            Some(head(Some(revision(&updated)), long)),
        )
        .await;
    assert_eq!(
        (s, code(&body)),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_input")
    );
    assert!(
        message(&body).starts_with("changed_units: a unit key"),
        "{body}"
    );
    fx.shutdown().await;
}

#[tokio::test]
async fn a_stack_stored_as_one_record_still_loads_and_moves_its_units_out_on_its_next_write() {
    let fx = Fixture::start().await;
    let js = fx.jetstream().await;
    // A stack as gateways stored it before units had keys of their own.
    let legacy = json!({
        "id": "old", "tenant": "default", "revision": 0,
        "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
        "status": {"action": "CREATE", "status": "COMPLETE"},
        "state": {
            "parameters": {"size": 2},
            "units": {"grp/a": unit("a", "COMPLETE"), "grp/b": unit("b", "COMPLETE")},
        },
    });
    let stacks = js
        .get_key_value("flue_stacks")
        .await
        .expect("stacks bucket");
    stacks
        .put(
            "default.old",
            serde_json::to_vec(&legacy).expect("json").into(),
        )
        .await
        .expect("put");
    let (s, read) = fx.call(Method::GET, "/v1/stacks/old", None).await;
    assert_eq!(s, StatusCode::OK, "{read}");
    assert_eq!(read["state"]["units"], legacy["state"]["units"]);
    let (_, listed) = walk(&fx, "/v1/stacks/old/units?", 1, "key").await;
    assert_eq!(listed, ["grp/a", "grp/b"]);

    // The next write changes one unit: the other moves to its own key too.
    let change = json!({"grp/b": unit("b", "FAILED")});
    let (s, updated) = fx
        .call(
            Method::PUT,
            "/v1/stacks/old",
            Some(head(Some(revision(&read)), change)),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{updated}");
    let units = js.get_key_value(UNITS).await.expect("units bucket");
    assert!(unit_revision(&units, "old", "grp/a").await.is_some());
    assert!(unit_revision(&units, "old", "grp/b").await.is_some());
    let stored_head: Value =
        serde_json::from_slice(&stacks.get("default.old").await.expect("get").expect("head"))
            .expect("json");
    assert_eq!(stored_head["state"]["units"], json!({}));
    let (_, read) = fx.call(Method::GET, "/v1/stacks/old", None).await;
    assert_eq!(
        read["state"]["units"],
        json!({"grp/a": unit("a", "COMPLETE"), "grp/b": unit("b", "FAILED")})
    );

    // An engine from before `changed_units` sends every unit: still stored and answered whole.
    let mut whole = head(Some(revision(&read)), json!(null));
    whole
        .as_object_mut()
        .expect("object")
        .remove("changed_units");
    whole["state"]["units"] = json!({"grp/a": unit("a", "FAILED")});
    let (s, replaced) = fx.call(Method::PUT, "/v1/stacks/old", Some(whole)).await;
    assert_eq!(s, StatusCode::OK, "{replaced}");
    assert_eq!(
        replaced["state"]["units"],
        json!({"grp/a": unit("a", "FAILED")})
    );
    assert_eq!(
        unit_revision(&units, "old", "grp/b").await,
        None,
        "left the stack"
    );
    fx.shutdown().await;
}

#[tokio::test]
async fn stacks_and_their_units_are_listed_in_cursor_pages_and_deleted_with_their_keys() {
    let fx = Fixture::start().await;
    let js = fx.jetstream().await;
    let members: Vec<String> = (0..5).map(|i| format!("m{i}")).collect();
    let five: serde_json::Map<String, Value> = members
        .iter()
        .map(|m| (format!("grp/{m}"), unit(m, "COMPLETE")))
        .collect();
    for id in ["s3", "s1", "s2"] {
        let (s, body) = fx
            .call(
                Method::PUT,
                &format!("/v1/stacks/{id}"),
                Some(head(None, Value::Object(five.clone()))),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{body}");
    }
    let (sizes, ids) = walk(&fx, "/v1/stacks?", 2, "id").await;
    assert_eq!(
        (sizes, ids),
        (
            vec![2, 1],
            vec!["s1".to_owned(), "s2".to_owned(), "s3".to_owned()]
        )
    );
    let (_, first, _) = get_page(&fx, "/v1/stacks?limit=1").await;
    assert_eq!(
        first[0]["state"]["units"],
        json!({}),
        "a listing shows heads"
    );
    let (sizes, keys) = walk(&fx, "/v1/stacks/s2/units?", 2, "key").await;
    assert_eq!(sizes, [2, 2, 1]);
    assert_eq!(
        keys,
        members
            .iter()
            .map(|m| format!("grp/{m}"))
            .collect::<Vec<_>>()
    );

    // A cursor of the stack listing is not one of the units listing.
    let (_, _, cursor) = get_page(&fx, "/v1/stacks?limit=1").await;
    let (s, body, _) = get_page(
        &fx,
        &format!("/v1/stacks/s2/units?cursor={}", cursor.expect("cursor")),
    )
    .await;
    assert_eq!((s, code(&body)), (StatusCode::BAD_REQUEST, "invalid_query"));
    let (s, body, _) = get_page(&fx, "/v1/stacks/nope/units").await;
    assert_eq!((s, code(&body)), (StatusCode::NOT_FOUND, "not_found"));

    let (s, _) = fx.call(Method::DELETE, "/v1/stacks/s2", None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let units = js.get_key_value(UNITS).await.expect("units bucket");
    for m in &members {
        assert_eq!(unit_revision(&units, "s2", &format!("grp/{m}")).await, None);
        assert!(
            unit_revision(&units, "s1", &format!("grp/{m}"))
                .await
                .is_some()
        );
    }
    // Unit keys a delete left behind (it stopped half-way) are not a new stack's.
    units
        .put(
            format!("default.s2.{}", unit_token("ghost")),
            serde_json::to_vec(&unit("g", "COMPLETE"))
                .expect("json")
                .into(),
        )
        .await
        .expect("put");
    let (s, again) = fx
        .call(Method::PUT, "/v1/stacks/s2", Some(head(None, json!({}))))
        .await;
    assert_eq!(s, StatusCode::OK, "{again}");
    let (_, read) = fx.call(Method::GET, "/v1/stacks/s2", None).await;
    assert_eq!(read["state"]["units"], json!({}));
    fx.shutdown().await;
}
