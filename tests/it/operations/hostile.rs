//! Hostile operation bodies and ids: each gets a 4xx JSON naming what is wrong, never
//! a 5xx, never a queued operation, and the gateway keeps serving.

use flue_proto::operation::OPERATIONS_STREAM;
use serde_json::{Value, json};

use flue_proto::auth::Role;
use flue_tests::{Flue, WAIT};

use crate::hardening::raw;

use super::{group_body, read, submit};

/// A raw JSON body posted to `path`: status and body.
async fn post_raw(flue: &Flue, path: &str, body: String) -> (u16, Value) {
    let gw = &flue.gateway;
    let resp = gw
        .http()
        .post(format!("{}{path}", gw.url()))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("gateway answers");
    let status = resp.status().as_u16();
    (status, resp.json().await.expect("a JSON body"))
}

/// The message of an error body.
fn message(body: &Value) -> &str {
    body["error"]["message"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn hostile_operation_bodies_and_ids_get_a_4xx_naming_what_is_wrong_and_queue_nothing() {
    let flue = Flue::start().await;
    let log = flue.path("hooks.log");
    let gw = &flue.gateway;
    let template = super::GROUP_TEMPLATE;

    // Ids that must never reach a subject.
    for id in ["a.b", "a*", "a>", "a%20b", "a.%3E"] {
        let (status, _, body) = submit(gw, id, &group_body("create", 1, &log)).await;
        assert_eq!(status, 400, "{id}: {body}");
        assert!(message(&body).contains("stack id"), "{id}: {body}");
        let (status, body) = read(gw, id, "0123456789abcdef0123456789abcdef").await;
        assert_eq!(status, 400, "{id}: {body}");
    }
    for op in ["x.y", "*", ">", "a%20b"] {
        let (status, body) = read(gw, "fine", op).await;
        assert_eq!(status, 400, "{op}: {body}");
        assert!(message(&body).contains("operation id"), "{op}: {body}");
    }

    let mut cases: Vec<(String, Value, &str)> = Vec::new();
    // A get_file of something not sent, by absolute or climbing path: never read from
    // the gateway's disk.
    for path in ["/etc/hostname", "../../../../../../etc/hostname"] {
        let mut body = group_body("create", 1, &log);
        body["template"] = json!(template.replace("scripts/record.sh", path));
        cases.push((
            "get_file".into(),
            body,
            "template.resources.config.properties.config",
        ));
    }
    // A deeply nested template (YAML flow sequences 100,000 deep).
    let mut body = group_body("create", 1, &log);
    body["template"] = json!(format!(
        "heat_template_version: 2018-08-31\nresources: {}",
        "[".repeat(100_000)
    ));
    cases.push(("nested template".into(), body, "template"));
    // A deeply nested parameter value (JSON 100,000 deep).
    let mut body = group_body("create", 1, &log);
    body["parameters"]["count"] = json!("PLACEHOLDER");
    let nested = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
    let raw = body.to_string().replace("\"PLACEHOLDER\"", &nested);
    for (what, body, names) in cases {
        let (status, _, answer) = submit(gw, "hostile", &body).await;
        assert!((400..500).contains(&status), "{what}: {status} {answer}");
        assert!(message(&answer).contains(names), "{what}: {answer}");
    }
    let (status, answer) = post_raw(&flue, "/v1/stacks/hostile/operations", raw).await;
    assert!(
        (400..500).contains(&status),
        "nested parameter: {status} {answer}"
    );

    // A huge files map: 300,000 entries (past the API's body limit).
    let mut body = group_body("create", 1, &log);
    let files = body["files"].as_object_mut().expect("files");
    for i in 0..300_000 {
        files.insert(format!("f/{i}"), json!("x"));
    }
    // Refused on its declared length, before it is sent: a client still sending it when
    // the gateway closes the connection would see a broken pipe, not the answer.
    let length = serde_json::to_vec(&body).expect("json").len();
    let mut s = raw::connect(gw.url()).await;
    raw::send(
        &mut s,
        &format!(
            "POST /v1/stacks/hostile/operations HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n",
            gw.tokens().get(Role::Engine)
        ),
    )
    .await;
    let a = raw::answer(&mut s, WAIT).await;
    assert_eq!(a.status, 413, "many files ({length} bytes): {a:?}");
    assert_eq!(a.body["error"]["code"], "body_too_large", "{a:?}");
    // Nothing was queued, no stack exists, and the gateway still serves.
    let nats = flue.nats.client().await;
    let js = async_nats::jetstream::new(nats);
    let mut stream = js.get_stream(OPERATIONS_STREAM).await.expect("stream");
    let info = stream.info().await.expect("info");
    assert_eq!(info.state.messages, 0, "nothing queued");
    assert_eq!(info.state.last_sequence, 0, "nothing was ever queued");
    let missing = flue
        .client()
        .get_stack(&"hostile".parse().expect("id"))
        .await;
    assert!(missing.is_err_and(|e| e.is_not_found()));
    let (status, _) = read(gw, "hostile", "0123456789abcdef0123456789abcdef").await;
    assert_eq!(status, 404);

    // One file just within the API's body limit: queued if a broker message holds it
    // (this broker's max payload is larger than its 1 MiB default), else 413.
    let mut body = group_body("create", 1, &log);
    body["files"]["big"] = json!("x".repeat(1_040_000));
    let (status, _, answer) = submit(gw, "hostile", &body).await;
    assert!(
        status == 202 || status == 413,
        "a big file: {status} {answer}"
    );
}
