//! The HTTP API's answers to good and bad requests (`tower::ServiceExt::oneshot`).

use std::time::Duration;

use async_nats::jetstream;
use axum::http::{Method, StatusCode};
use flue_proto::subject;
use serde_json::json;

use super::fixture::{Fixture, code, config_and_server, message, script_config};

#[tokio::test]
async fn health_and_unknown_routes_answer_json() {
    let fx = Fixture::start().await;
    let (s, body) = fx.call(Method::GET, "/healthz", None).await;
    assert_eq!((s, &body["status"]), (StatusCode::OK, &json!("ok")));
    let (s, body) = fx.call(Method::GET, "/v1/nothing", None).await;
    assert_eq!((s, code(&body)), (StatusCode::NOT_FOUND, "not_found"));
    let (s, body) = fx.call(Method::DELETE, "/v1/configs", None).await;
    assert_eq!(
        (s, code(&body)),
        (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed")
    );
    fx.shutdown().await;
}

#[tokio::test]
async fn configs_round_trip_and_conflict() {
    let fx = Fixture::start().await;
    let (s, created) = fx
        .call(Method::POST, "/v1/configs", Some(script_config("c1")))
        .await;
    assert_eq!(s, StatusCode::CREATED);
    assert_eq!(created["id"], "c1");
    assert_eq!(created["options"], json!({}));
    let (s, read) = fx.call(Method::GET, "/v1/configs/c1", None).await;
    assert_eq!((s, &read), (StatusCode::OK, &created));

    let (s, again) = fx
        .call(Method::POST, "/v1/configs", Some(script_config("c1")))
        .await;
    assert_eq!(
        (s, &again),
        (StatusCode::OK, &created),
        "identical body is idempotent"
    );

    let mut other = script_config("c1");
    other["config"] = json!("echo other");
    let (s, body) = fx.call(Method::POST, "/v1/configs", Some(other)).await;
    assert_eq!((s, code(&body)), (StatusCode::CONFLICT, "conflict"));

    let (s, body) = fx
        .call(Method::POST, "/v1/configs", Some(json!({"group": "../x"})))
        .await;
    assert_eq!(
        (s, code(&body)),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_config")
    );

    let (s, random) = fx
        .call(
            Method::POST,
            "/v1/configs",
            Some(json!({"group": "script"})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    assert!(random["id"].as_str().is_some_and(|id| !id.is_empty()));

    let (s, body) = fx.call(Method::GET, "/v1/configs/nope", None).await;
    assert_eq!((s, code(&body)), (StatusCode::NOT_FOUND, "not_found"));
    let (s, body) = fx.call(Method::GET, "/v1/configs/a.b", None).await;
    assert_eq!((s, code(&body)), (StatusCode::BAD_REQUEST, "invalid_id"));
    assert!(
        message(&body).contains("config id") && message(&body).contains("'.'"),
        "{body}"
    );
    fx.shutdown().await;
}

#[tokio::test]
async fn configs_with_hidden_defaults_are_never_compared() {
    let fx = Fixture::start().await;
    let spec = |default: &str| {
        json!({
            "id": "c-secret", "group": "script",
            "inputs": [{"name": "password", "hidden": true, "default": default}]
        })
    };
    let (s, created) = fx
        .call(Method::POST, "/v1/configs", Some(spec("s3cret")))
        .await;
    assert_eq!(s, StatusCode::CREATED);
    assert_eq!(created["inputs"][0]["default"], "<hidden>");
    // A right guess and a wrong one get the same answer.
    for guess in ["s3cret", "wrong"] {
        let (s, body) = fx
            .call(Method::POST, "/v1/configs", Some(spec(guess)))
            .await;
        assert_eq!(
            (s, code(&body)),
            (StatusCode::CONFLICT, "conflict"),
            "{guess}"
        );
        assert!(
            message(&body).contains("hidden defaults are not compared"),
            "{body}"
        );
    }
    fx.shutdown().await;
}

#[tokio::test]
async fn body_errors_map_to_the_contract_codes() {
    let fx = Fixture::start_with(|c| c.max_body_bytes = 1024).await;
    let json_ct = Some("application/json");

    let (s, body) = fx.post_raw("/v1/configs", json_ct, "{\"group\": ").await;
    assert_eq!(
        (s, code(&body)),
        (StatusCode::BAD_REQUEST, "malformed_json")
    );

    let (s, body) = fx
        .post_raw("/v1/configs", json_ct, "{\"config\": \"x\"}")
        .await;
    assert_eq!(
        (s, code(&body)),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_body")
    );
    assert!(message(&body).contains("missing field `group`"), "{body}");

    let (s, body) = fx
        .post_raw(
            "/v1/configs",
            json_ct,
            "{\"group\": \"script\", \"grup\": 1}",
        )
        .await;
    assert_eq!(
        (s, code(&body)),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_body")
    );
    assert!(message(&body).contains("grup"), "{body}");

    let (s, body) = fx.post_raw("/v1/configs", json_ct, "{\"group\": 5}").await;
    assert_eq!(
        (s, code(&body)),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_body")
    );

    let bad_id = json!({"config_id": "c1", "server_id": "s.1"}).to_string();
    let (s, body) = fx.post_raw("/v1/deployments", json_ct, bad_id).await;
    assert_eq!(
        (s, code(&body)),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_body")
    );
    assert!(
        message(&body).starts_with("server_id: contains '.' at byte 1"),
        "{body}"
    );

    let (s, body) = fx
        .post_raw("/v1/configs", None, "{\"group\": \"script\"}")
        .await;
    assert_eq!(
        (s, code(&body)),
        (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
    );
    let (s, body) = fx
        .post_raw("/v1/configs", Some("text/plain"), "{\"group\": \"script\"}")
        .await;
    assert_eq!(
        (s, code(&body)),
        (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
    );

    let big = json!({"group": "script", "config": "x".repeat(4096)}).to_string();
    let (s, body) = fx.post_raw("/v1/configs", json_ct, big).await;
    assert_eq!(
        (s, code(&body)),
        (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large")
    );
    fx.shutdown().await;
}

#[tokio::test]
async fn registration_is_idempotent_and_creates_the_consumer() {
    let fx = Fixture::start_with(|c| c.agent_nats_url = Some("nats://agents:4222".into())).await;
    let (s, first) = fx
        .call(
            Method::POST,
            "/v1/servers",
            Some(json!({"id": "web1", "name": "Web"})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    assert_eq!(first["agent"]["nats_url"], "nats://agents:4222");
    assert_eq!(first["agent"]["request_consumer"], "req-7-default-web1");
    assert_eq!(first["agent"]["response_subject"], "flue.default.resp.web1");
    let (s, again) = fx
        .call(
            Method::POST,
            "/v1/servers",
            Some(json!({"id": "web1", "name": "Web"})),
        )
        .await;
    // The credentials are handed out once, by the registration that minted them.
    let creds = first["credentials"]
        .as_str()
        .expect("first registration mints credentials");
    let creds = flue_proto::creds::AgentCredentials::parse(creds).expect("a credentials file");
    assert_eq!(creds.settings.server.as_str(), "web1");
    assert_eq!(
        first["server"]["keys"]["signing"].as_str(),
        Some(
            nkeys::KeyPair::from_seed(&creds.user.seed)
                .expect("seed")
                .public_key()
                .as_str()
        ),
        "the recorded key is the one handed out"
    );
    let mut first = first;
    first.as_object_mut().expect("object").remove("credentials");
    assert_eq!((s, &again), (StatusCode::OK, &first));

    let js = fx.jetstream().await;
    let mut consumer: jetstream::consumer::PullConsumer = js
        .get_consumer_from_stream("req-7-default-web1", subject::REQUEST_STREAM)
        .await
        .expect("consumer exists");
    let info = consumer.info().await.expect("info");
    assert_eq!(info.config.filter_subject, "flue.default.req.web1");
    assert_eq!(info.config.max_ack_pending, 1);
    assert_eq!(info.config.ack_wait, Duration::from_secs(10));

    // Reads add the server's presence: unknown, since no agent ever sent a heartbeat.
    let mut read = first["server"].clone();
    read["presence"] = json!({"status": "unknown"});
    let (s, list) = fx.call(Method::GET, "/v1/servers", None).await;
    assert_eq!((s, list), (StatusCode::OK, json!([read])));
    let (s, one) = fx.call(Method::GET, "/v1/servers/web1", None).await;
    assert_eq!((s, &one), (StatusCode::OK, &read));
    let (s, body) = fx.call(Method::GET, "/v1/servers/web2", None).await;
    assert_eq!((s, code(&body)), (StatusCode::NOT_FOUND, "not_found"));
    let (s, body) = fx
        .call(Method::GET, "/v1/servers/web2/deployments", None)
        .await;
    assert_eq!((s, code(&body)), (StatusCode::NOT_FOUND, "not_found"));
    let (s, body) = fx
        .call(Method::GET, "/v1/servers/we%20b/deployments", None)
        .await;
    assert_eq!((s, code(&body)), (StatusCode::BAD_REQUEST, "invalid_id"));
    fx.shutdown().await;
}

#[tokio::test]
async fn deployment_validation() {
    let fx = Fixture::start().await;
    config_and_server(&fx).await;
    let (s, body) = fx
        .call(
            Method::POST,
            "/v1/deployments",
            Some(json!({"config_id": "c9", "server_id": "web1"})),
        )
        .await;
    assert_eq!((s, code(&body)), (StatusCode::NOT_FOUND, "not_found"));
    assert_eq!(message(&body), "config \"c9\" not found");
    let (s, body) = fx
        .call(
            Method::POST,
            "/v1/deployments",
            Some(json!({"config_id": "c1", "server_id": "s9"})),
        )
        .await;
    assert_eq!(
        (s, message(&body)),
        (StatusCode::NOT_FOUND, "server \"s9\" not found")
    );
    for timeout in [0, 7 * 24 * 3600 + 1] {
        let (s, body) = fx
            .call(
                Method::POST,
                "/v1/deployments",
                Some(json!({"config_id": "c1", "server_id": "web1", "timeout_secs": timeout})),
            )
            .await;
        assert_eq!(
            (s, code(&body)),
            (StatusCode::UNPROCESSABLE_ENTITY, "invalid_input"),
            "{timeout}"
        );
    }
    let (s, body) = fx.call(Method::GET, "/v1/deployments/nope", None).await;
    assert_eq!((s, code(&body)), (StatusCode::NOT_FOUND, "not_found"));
    let (s, body) = fx
        .call(Method::GET, "/v1/deployments/nope?wait_secs=61", None)
        .await;
    assert_eq!(
        (s, code(&body)),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_input")
    );
    let (s, body) = fx
        .call(Method::GET, "/v1/deployments/nope?after_status=DONE", None)
        .await;
    assert_eq!(
        (s, code(&body)),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_input")
    );
    fx.shutdown().await;
}
