//! `FLUE_OPS` over NATS: neither a listener's credentials nor an agent's (its user as
//! it holds it after joining the stack) read the operations queue, take from it, or
//! queue a forged operation into it; and another tenant's token learns nothing of an
//! operation's existence over HTTP.

use async_nats::jetstream;
use flue_proto::auth::Role;
use flue_proto::creds::{AgentCredentials, UserCreds};
use flue_proto::jsapi::JS_DOMAIN;
use flue_proto::operation::{OPERATIONS_STREAM, OperationState, operation_subject};
use flue_proto::{CreateTenant, DeploymentId, ServerId, StackId, TenantId, subject};
use flue_tests::auth::default_tenant;
use flue_tests::{Flue, Tokens, WAIT, file_lines, wait_until};

use super::takeover::gated_body;
use super::{accepted, ended};
use crate::security::refusals_at;

#[tokio::test]
async fn listener_and_agent_credentials_neither_read_take_from_nor_feed_the_operations_queue() {
    let flue = Flue::start().await;
    flue.register("web1").await;
    let _web1 = flue.agent("web1", &[]).await;
    let (log, gate) = (flue.path("hooks.log"), flue.path("gate"));
    let op = accepted(&flue.gateway, "held", &gated_body(&log, &gate)).await;
    wait_until("the first hook runs", WAIT, || {
        file_lines(&log)
            .contains(&"start first".to_owned())
            .then_some(())
    })
    .await;
    let stack: StackId = "held".parse().expect("id");
    let ops_subject = operation_subject(&default_tenant(), &stack);

    let listener = flue
        .admin_client()
        .create_listener_credentials()
        .await
        .expect("listener credentials");
    let listener = UserCreds::parse(&listener.credentials).expect("creds");
    let web1: ServerId = "web1".parse().expect("id");
    let record = flue.client().get_server(&web1).await.expect("server");
    let text = std::fs::read_to_string(flue.creds_path("web1")).expect("creds");
    let mut agent = AgentCredentials::parse(&text).expect("creds").user;
    if let Some(jwt) = record.agent_jwt {
        agent.jwt = jwt;
    }
    let agent_inbox = subject::agent_inbox_prefix(&default_tenant(), &web1);

    let admin = jetstream::new(flue.nats.client().await);
    let before = admin
        .get_stream(OPERATIONS_STREAM)
        .await
        .expect("stream")
        .info()
        .await
        .expect("info")
        .state
        .last_sequence;
    for (who, creds, inbox) in [
        ("listener", &listener, None),
        ("agent", &agent, Some(agent_inbox)),
    ] {
        let (client, _) = refusals_at(&flue.nats.url(), creds, inbox).await;
        let js = jetstream::with_domain(client.clone(), JS_DOMAIN);
        assert!(
            js.get_stream(OPERATIONS_STREAM).await.is_err(),
            "{who} read the queue's stream"
        );
        let direct = client
            .request(
                format!("$JS.{JS_DOMAIN}.API.DIRECT.GET.{OPERATIONS_STREAM}"),
                format!(r#"{{"last_by_subj":"{ops_subject}"}}"#).into(),
            )
            .await;
        assert!(
            direct.is_err() || direct.is_ok_and(|m| m.payload.is_empty()),
            "{who} read a queued operation"
        );
        let taken = client
            .request(
                format!("$JS.{JS_DOMAIN}.API.CONSUMER.MSG.NEXT.{OPERATIONS_STREAM}.flue-engine"),
                r#"{"batch":1,"no_wait":true}"#.into(),
            )
            .await;
        assert!(taken.is_err(), "{who} took from the queue: {taken:?}");
        // A denied publish returns Ok: the stream itself shows nothing came in.
        client
            .publish(ops_subject.clone(), "{}".into())
            .await
            .expect("publish returns");
        client.flush().await.expect("flush");
    }

    std::fs::write(&gate, "open").expect("open the gate");
    let done = ended(&flue.gateway, "held", &op.id).await;
    assert_eq!(done.state, OperationState::Succeeded, "{done:?}");
    let after = admin
        .get_stream(OPERATIONS_STREAM)
        .await
        .expect("stream")
        .info()
        .await
        .expect("info")
        .state
        .last_sequence;
    assert_eq!(after, before, "a forged operation was queued");
}

#[tokio::test]
async fn another_tenant_gets_for_an_existing_operation_exactly_the_404_of_a_missing_one() {
    let flue = Flue::start().await;
    flue.register("web1").await;
    let _web1 = flue.agent("web1", &[]).await;
    let gw = &flue.gateway;
    let log = flue.path("hooks.log");
    let op = accepted(gw, "mine", &super::group_body("create", 1, &log)).await;
    assert_eq!(
        ended(gw, "mine", &op.id).await.state,
        OperationState::Succeeded
    );
    let acme = TenantId::new("acme").expect("id");
    gw.client_as(Role::Operator)
        .create_tenant(&CreateTenant {
            id: acme.clone(),
            name: "Acme".to_owned(),
        })
        .await
        .expect("the operator creates a tenant");
    let engine = Tokens::for_tenant(&gw.state_dir(), &acme)
        .get(Role::Engine)
        .to_owned();
    let http = reqwest::Client::new();
    let get = |stack: &str, op: &str| {
        http.get(format!("{}/v1/stacks/{stack}/operations/{op}", gw.url()))
            .bearer_auth(&engine)
            .send()
    };
    let missing_op = DeploymentId::random().to_string();
    let answers = [
        get("mine", &op.id).await.expect("answers"),
        get("mine", &missing_op).await.expect("answers"),
    ];
    let mut bodies = Vec::new();
    for answer in answers {
        assert_eq!(answer.status().as_u16(), 404);
        bodies.push(answer.text().await.expect("body"));
    }
    assert_eq!(
        bodies[0].replace(&op.id, "OP"),
        bodies[1].replace(&missing_op, "OP"),
        "the answers tell an existing operation from a missing one"
    );
}
