//! What the secret URLs refuse: every wrong secret is the same 404, a server's URL reads
//! only its own deployments, a signal URL completes only its own deployment, a rotated
//! URL is dead at once.

use flue_proto::poll::{Metadata, Transport};
use flue_proto::{ConfigSpec, CreateDeployment, DeploymentStatus, RegisterServer, ServerId};
use flue_tests::Flue;
use serde_json::{Value, json};

use super::{anonymous, register_polling};

/// Status and JSON body of `GET url`, without a token.
async fn get(url: &str) -> (u16, Value) {
    let response = anonymous().get(url).send().await.expect("GET");
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON body"))
}

async fn metadata(url: &str) -> Metadata {
    let (status, body) = get(url).await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_value(body).expect("Heat metadata")
}

/// The URL with its last path segment (the secret) replaced.
fn with_secret(url: &str, secret: &str) -> String {
    let (base, _) = url.rsplit_once('/').expect("a path");
    format!("{base}/{secret}")
}

fn signal_url(item: &flue_proto::poll::HeatItem) -> String {
    item.inputs
        .iter()
        .find(|i| i.name == "deploy_signal_id")
        .and_then(|i| i.value.as_str())
        .expect("deploy_signal_id")
        .to_owned()
}

#[tokio::test]
async fn a_wrong_secret_or_unknown_name_is_the_same_404_confirming_nothing() {
    let flue = Flue::start().await;
    let access = register_polling(&flue, "p1").await;
    flue.register("agent1").await;
    let secret = access
        .metadata_url
        .rsplit('/')
        .next()
        .expect("secret")
        .to_owned();
    let expected = json!({"error": {"code": "not_found", "message": "not found"}});
    let wrong = [
        with_secret(&access.metadata_url, "AAAA"),
        with_secret(&access.metadata_url, ""),
        access
            .metadata_url
            .replace("/servers/p1/", "/servers/nobody/"),
        access
            .metadata_url
            .replace("/servers/p1/", "/servers/agent1/"),
        access
            .metadata_url
            .replace("/heat/default/", "/heat/othertenant/"),
        access
            .metadata_url
            .replace("/servers/p1/", "/servers/bad.id/"),
    ];
    for url in &wrong {
        let (status, body) = get(url).await;
        assert_eq!(status, 404, "{}", url.replace(&secret, "<secret>"));
        assert_eq!(body, expected, "{}", url.replace(&secret, "<secret>"));
    }
    assert_eq!(metadata(&access.metadata_url).await.deployments.len(), 0);
    // Registering it again shows no URL, nor the secret's hash; reads neither.
    let again = flue
        .admin_client()
        .register_server(&RegisterServer {
            transport: Transport::Poll,
            id: ServerId::new("p1").expect("id"),
            name: String::new(),
        })
        .await
        .expect("register again");
    assert!(again.poll.is_none());
    let read = flue
        .admin_client()
        .get_server(&ServerId::new("p1").expect("id"))
        .await
        .expect("read");
    assert_eq!(read.transport, Transport::Poll);
    assert!(read.poll_secret_sha256.is_none(), "{read:?}");
    // Nor with the other transport.
    let other = flue
        .admin_client()
        .register_server(&RegisterServer {
            transport: Transport::Nats,
            id: ServerId::new("p1").expect("id"),
            name: String::new(),
        })
        .await;
    assert!(
        other.is_err(),
        "a polling server registered as an agent's: {other:?}"
    );
    let logs = flue.gateway.logs().lines().join("\n");
    assert!(
        !logs.contains(&secret),
        "the secret is in the gateway's logs"
    );
}

#[tokio::test]
async fn a_polling_servers_url_reads_only_its_own_deployments_and_signals_only_its_own() {
    let flue = Flue::start().await;
    let p1 = register_polling(&flue, "p1").await;
    let p2 = register_polling(&flue, "p2").await;
    let spec: ConfigSpec = serde_json::from_value(json!({
        "id": "c", "group": "script", "config": "#!/bin/sh\n",
        "inputs": [{"name": "password", "hidden": true}, {"name": "count", "type": "Number"}],
    }))
    .expect("spec");
    flue.client().create_config(&spec).await.expect("config");
    let create = |server: &str| CreateDeployment {
        input_values: [
            ("password".to_owned(), json!("pa55-word")),
            ("count".to_owned(), json!(3)),
        ]
        .into(),
        ..CreateDeployment::new("c".parse().expect("id"), server.parse().expect("id"))
    };
    let d1 = flue
        .client()
        .create_deployment(&create("p1"))
        .await
        .expect("d1");
    let d2 = flue
        .client()
        .create_deployment(&create("p2"))
        .await
        .expect("d2");

    // p1's secret does not open p2's metadata; each URL lists its own deployment only.
    let p1_secret = p1.metadata_url.rsplit('/').next().expect("secret");
    let crossed = with_secret(&p2.metadata_url, p1_secret);
    assert_eq!(get(&crossed).await.0, 404);
    let m1 = metadata(&p1.metadata_url).await;
    let m2 = metadata(&p2.metadata_url).await;
    assert_eq!(m1.deployments.len(), 1);
    assert_eq!(m1.deployments[0].id, d1.id.as_str());
    assert_eq!(m2.deployments[0].id, d2.id.as_str());
    // Heat's item: the hidden value opened for this server only, types kept.
    let value = |name: &str| {
        m1.deployments[0]
            .inputs
            .iter()
            .find(|i| i.name == name)
            .map(|i| i.value.clone())
    };
    assert_eq!(value("password"), Some(json!("pa55-word")));
    assert_eq!(value("count"), Some(json!(3)));
    assert_eq!(
        value("deploy_signal_transport"),
        Some(json!("TEMP_URL_SIGNAL"))
    );
    let read = flue.client().get_deployment(&d1.id).await.expect("read");
    assert_eq!(read.input_values.get("password"), Some(&json!("<hidden>")));

    // d1's signal secret does not complete d2, nor does a wrong secret complete d1.
    let s1 = signal_url(&m1.deployments[0]);
    let s2 = signal_url(&m2.deployments[0]);
    let s1_secret = s1.rsplit('/').next().expect("secret");
    for url in [with_secret(&s2, s1_secret), with_secret(&s1, "AAAA")] {
        let response = anonymous()
            .put(&url)
            .json(&json!({"deploy_status_code": 0}))
            .send()
            .await
            .expect("PUT");
        assert_eq!(response.status().as_u16(), 404);
    }
    for d in [&d1, &d2] {
        let now = flue.client().get_deployment(&d.id).await.expect("read");
        assert_eq!(now.status, DeploymentStatus::Queued, "{now:?}");
    }
    // Its own signal, as heat-config-notify sends it, fails it on a non-zero code.
    let response = anonymous()
        .put(&s2)
        .json(&json!({"deploy_stdout": "", "deploy_stderr": "boom", "deploy_status_code": 2}))
        .send()
        .await
        .expect("PUT");
    assert_eq!(response.status().as_u16(), 200);
    let done = flue.finished(&d2.id).await;
    assert_eq!(done.status, DeploymentStatus::Failed);
    assert_eq!(done.deploy_status_code, Some(2));
    assert_eq!(
        flue.client()
            .get_deployment(&d1.id)
            .await
            .expect("read")
            .status,
        DeploymentStatus::Queued
    );
}

#[tokio::test]
async fn a_rotated_metadata_url_is_refused_at_once_and_the_new_one_works() {
    let flue = Flue::start().await;
    let old = register_polling(&flue, "p1").await;
    let rotated = flue
        .admin_client()
        .rotate_server_credentials(&ServerId::new("p1").expect("id"))
        .await
        .expect("rotate");
    assert!(rotated.credentials.is_none());
    let new = rotated.poll.expect("a new metadata URL");
    assert_ne!(new.metadata_url, old.metadata_url);
    assert_eq!(get(&old.metadata_url).await.0, 404);
    assert_eq!(get(&new.metadata_url).await.0, 200);
}
