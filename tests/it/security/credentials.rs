//! Agent credentials (issue 10, point 3, the agent's side): an agent does not start
//! without them, the CLI writes them privately, a rotation makes the old ones useless for
//! answers, and no seed ever reaches a log.

use std::os::unix::fs::PermissionsExt as _;

use super::flue_cli;
use async_nats::HeaderMap;
use async_nats::jetstream;
use flue_proto::creds::AgentCredentials;
use flue_proto::signing::{self, AnswerClaims};
use flue_proto::{
    AgentMessage, DeploymentStatus, EventType, PROTOCOL_VERSION, RequestDigest, ServerId, TenantId,
    subject,
};
use flue_tests::{Agent, EventTap, Flue, WAIT};
use nkeys::KeyPair;
use time::OffsetDateTime;

#[tokio::test]
async fn an_agent_without_credentials_refuses_to_start_unless_told_it_is_insecure() {
    let flue = Flue::start_dev_broker(&[]).await;
    flue.register("s").await;
    let mut agent = Agent::spawn(&flue.nats.url(), "s", &flue.path("agent-a"), &[]);
    let status = agent.wait_exit().await;
    assert!(!status.success(), "started without credentials");
    agent.logs().wait_for("no credentials file", WAIT).await;
    assert!(!flue.path("agent-a").exists(), "it touched its state dir");

    let agent = Agent::spawn_with(
        &flue.nats.url(),
        "s",
        &flue.path("agent-b"),
        &[],
        &["--insecure-unsigned-requests"],
    );
    agent.logs().wait_for("INSECURE", WAIT).await;
    agent.ready().await;
}

#[tokio::test]
async fn the_cli_writes_credentials_privately_and_never_over_a_file_without_force() {
    let flue = Flue::start().await;
    let file = flue.path("web1.creds");
    let path = file.display().to_string();
    let out = flue_cli(&flue, &["server", "register", "web1", "--creds", &path]).await;
    assert!(out.status.success(), "{out:?}");
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("SEED"),
        "secret printed"
    );
    let mode = std::fs::metadata(&file)
        .expect("written")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let first = std::fs::read_to_string(&file).expect("read");
    let creds = AgentCredentials::parse(&first).expect("a credentials file");
    assert_eq!(creds.settings.server.as_str(), "web1");

    // An existing file is refused before anything is minted.
    let out = flue_cli(
        &flue,
        &["server", "rotate-credentials", "web1", "--creds", &path],
    )
    .await;
    assert!(!out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--force"),
        "{out:?}"
    );
    let server = flue
        .client()
        .get_server(&ServerId::new("web1").expect("id"))
        .await
        .expect("server");
    let recorded = server.keys.expect("keys").signing;
    let first_key = KeyPair::from_seed(&creds.user.seed)
        .expect("seed")
        .public_key();
    assert_eq!(recorded, first_key, "keys changed by a refused rotation");

    let out = flue_cli(
        &flue,
        &[
            "server",
            "rotate-credentials",
            "web1",
            "--creds",
            &path,
            "--force",
        ],
    )
    .await;
    assert!(out.status.success(), "{out:?}");
    let second = AgentCredentials::parse(&std::fs::read_to_string(&file).expect("read"))
        .expect("a credentials file");
    let second_key = KeyPair::from_seed(&second.user.seed)
        .expect("seed")
        .public_key();
    assert_ne!(second_key, first_key);
    let mode = std::fs::metadata(&file)
        .expect("written")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[tokio::test]
async fn rotation_makes_the_old_credentials_useless_for_answers_and_no_seed_is_logged() {
    let flue = Flue::start().await;
    flue.register("s").await;
    let old = std::fs::read_to_string(flue.creds_path("s")).expect("kept credentials");
    let old = AgentCredentials::parse(&old).expect("credentials");
    let id = ServerId::new("s").expect("id");
    let rotated = flue
        .admin_client()
        .rotate_server_credentials(&id)
        .await
        .expect("rotate");
    let new = AgentCredentials::parse(&rotated.credentials.expect("new credentials"))
        .expect("credentials");
    assert_ne!(new.user.seed, old.user.seed);

    flue.script_config("real", "#!/bin/sh\necho real\n", &[], &[])
        .await;
    let mut tap = EventTap::from_start(&flue.nats.events_client().await).await;
    let real = flue.deploy("real", "s", &[]).await;
    // An answer as the old agent would sign it, for the real request.
    let js = jetstream::new(flue.nats.client().await);
    let request = js
        .get_stream(subject::REQUEST_STREAM)
        .await
        .expect("stream")
        .get_last_raw_message_by_subject(&subject::request(&tenant(), &id))
        .await
        .expect("the real request");
    let started = AgentMessage::Started {
        v: PROTOCOL_VERSION,
        deployment_id: real.id.clone(),
        at: OffsetDateTime::now_utc(),
        request_digest: Some(RequestDigest::of(&request.payload)),
    };
    let body = serde_json::to_vec(&started).expect("json");
    let claims = AnswerClaims {
        v: signing::CLAIMS_VERSION,
        tenant: tenant(),
        server: id.clone(),
        digest: RequestDigest::of(&body),
        at: OffsetDateTime::now_utc(),
    };
    let old_key = KeyPair::from_seed(&old.user.seed).expect("seed");
    let signed = signing::sign(&claims, &old_key).expect("signs");
    let mut headers = HeaderMap::new();
    headers.insert(signing::ANSWER_CLAIMS_HEADER, signed.claims.as_str());
    headers.insert(signing::SIGNATURE_HEADER, signed.signature.as_str());
    let seq = js
        .publish_with_headers(subject::response(&tenant(), &id), headers, body.into())
        .await
        .expect("publish")
        .await
        .expect("stored")
        .sequence;
    let refused = tap
        .wait_for("the old key refused", WAIT, |e| {
            e.ty == EventType::ServerAnswerRejected && e.data["stream_seq"] == seq
        })
        .await;
    assert_eq!(refused.data["code"], "bad_signature", "{}", refused.data);
    let now = flue.client().get_deployment(&real.id).await.expect("read");
    assert_eq!(now.status, DeploymentStatus::Queued, "{now:?}");

    // The harness sees its kept file is stale and rotates again for the real agent.
    let agent = flue.agent("s", &[]).await;
    let done = flue.finished(&real.id).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");

    let current = std::fs::read_to_string(flue.creds_path("s")).expect("kept credentials");
    let current = AgentCredentials::parse(&current).expect("credentials");
    let gateway_seed =
        std::fs::read_to_string(flue.gateway.state_dir().join("signing.nk")).expect("gateway key");
    let secrets = [
        old.user.seed.as_str(),
        new.user.seed.as_str(),
        current.user.seed.as_str(),
        current.settings.xkey_seed.as_str(),
        gateway_seed.trim(),
    ];
    let logs = [flue.gateway.logs().lines(), agent.logs().lines()].concat();
    for line in &logs {
        for secret in secrets {
            assert!(!line.contains(secret), "a seed in the logs: {line}");
        }
    }
}

fn tenant() -> TenantId {
    "default".parse().expect("tenant")
}
