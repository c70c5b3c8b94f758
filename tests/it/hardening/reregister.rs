//! Events: a server registered again goes online on its agent's first heartbeat, the
//! `server.registered` data always names the server, and an empty `type` filter is refused.

use std::time::Duration;

use axum::http::{Method, StatusCode};
use flue_proto::{CloudEvent, EventType, RegisterServer, ServerId};
use flue_tests::{Agent, EventTap, Flue, WAIT};

use crate::gateway::fixture::Fixture;

/// The agent's longest heartbeat interval: only its first heartbeat can explain an
/// `online` seen before this.
const SLOW_AGENT: &[&str] = &["--heartbeat-secs", "60"];
/// A presence timeout no test waits for.
const SLOW_GATEWAY: &[&str] = &["--presence-timeout-secs", "120"];
/// Well below the agent's second heartbeat (60 s after its first).
const BEFORE_SECOND_HEARTBEAT: Duration = Duration::from_secs(40);

fn about(ty: EventType, server: &str) -> impl Fn(&CloudEvent) -> bool + '_ {
    move |e| e.ty == ty && e.server.as_ref().is_some_and(|s| s.as_str() == server)
}

async fn start_agent(flue: &Flue, server: &str, state: &str) -> Agent {
    flue.agent_in(server, state, &[], SLOW_AGENT).await
}

#[tokio::test]
async fn a_server_registered_again_goes_online_on_its_agents_first_heartbeat() {
    let flue = Flue::start_with(SLOW_GATEWAY).await;
    let id = ServerId::new("s").expect("id");
    flue.register("s").await;
    let mut tap = EventTap::from_start(&flue.nats.events_client().await).await;
    let mut first = start_agent(&flue, "s", "agent-1").await;
    tap.wait_for("first online", WAIT, about(EventType::ServerOnline, "s"))
        .await;
    assert!(first.terminate().await.success());
    tap.wait_for("offline", WAIT, about(EventType::ServerOffline, "s"))
        .await;

    flue.admin_client()
        .delete_server(&id)
        .await
        .expect("deregister");
    flue.register("s").await;
    let _second = start_agent(&flue, "s", "agent-2").await;
    let online =
        |e: &CloudEvent| about(EventType::ServerOnline, "s")(e) && e.id != "server:s:online:1";
    // The agent heartbeats once at start and then every 60 s: an online within 40 s of
    // its start can only come from its first heartbeat.
    let back = tap
        .wait_for(
            "online after registering again",
            BEFORE_SECOND_HEARTBEAT,
            online,
        )
        .await;
    let events = tap.events();
    let registered_again = events
        .iter()
        .rposition(about(EventType::ServerRegistered, "s"))
        .expect("registered again");
    let online_at = events.iter().position(|e| e.id == back.id).expect("seen");
    assert!(
        registered_again < online_at,
        "online before the registration"
    );
}

#[tokio::test]
async fn server_registered_events_always_carry_the_name() {
    let flue = Flue::start().await;
    let mut tap = EventTap::from_start(&flue.nats.events_client().await).await;
    for (id, name) in [("named", "Web One"), ("unnamed", "")] {
        flue.admin_client()
            .register_server(&RegisterServer {
                transport: Default::default(),
                id: ServerId::new(id).expect("id"),
                name: name.to_owned(),
            })
            .await
            .expect("register");
        let e = tap
            .wait_for("registered", WAIT, about(EventType::ServerRegistered, id))
            .await;
        assert_eq!(e.data["server_id"], id, "{}", e.data);
        assert_eq!(e.data["name"], name, "{}", e.data);
    }
}

#[tokio::test]
async fn an_empty_type_filter_is_a_400_like_every_other_empty_parameter() {
    let fx = Fixture::start().await;
    for query in [
        "type=",
        "type=%20",
        "type=,",
        "type=deployment.completed,,server.online",
    ] {
        let (status, body) = fx
            .call(
                Method::GET,
                &format!("/v1/events?{query}&follow=false"),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
        assert_eq!(body["error"]["code"], "invalid_query", "{query}: {body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("\"type\"") && message.contains("empty"),
            "{query}: {message}"
        );
    }
}
