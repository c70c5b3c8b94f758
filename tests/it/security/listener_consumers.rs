//! Issue 22 point 3: a NATS listener's consumers on `FLUE_EVT` are bounded per credential
//! (its own eight names, nothing unnamed, nobody else's), go away once idle (the stream's
//! idle limit, enforced by the broker), and its tenant's admin lists and deletes them
//! (`/v1/listener-consumers`, `flue events consumers`), no other role or tenant.

use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use bytes::Bytes;
use flue_proto::auth::Role;
use flue_proto::creds::{ListenerConsumers, UserCreds};
use flue_proto::event::EVENT_STREAM;
use flue_proto::jsapi::{JS_DOMAIN, api};
use flue_proto::subject::listener_of_consumer;
use flue_tests::{Flue, WAIT};
use reqwest::{Method, StatusCode};
use serde_json::Value;

use super::broker_listener_webhooks::refused;
use super::{consumer_names, flue_cli, refusals_at};

/// A new listener credential of the default tenant, minted by `flue events credentials`:
/// its consumer names and a connection as it, collecting what the broker refuses it.
async fn listener(flue: &Flue, file: &str) -> (Vec<String>, async_nats::Client, super::Refusals) {
    let file = flue.path(file);
    let path = file.display().to_string();
    let out = flue_cli(flue, &["events", "credentials", "--out", path.as_str()]).await;
    assert!(out.status.success(), "{out:?}");
    let names = consumer_names(&out);
    let creds = UserCreds::parse(&std::fs::read_to_string(&file).expect("read")).expect("creds");
    let (client, errors) = refusals_at(&flue.nats.url(), &creds, None).await;
    (names, client, errors)
}

/// `name` as a pull consumer of the listener's, from the stream's start.
fn named(name: &str) -> consumer::pull::Config {
    consumer::pull::Config {
        name: Some(name.to_owned()),
        ..Default::default()
    }
}

/// `method /v1/listener-consumers[/name]` with `token`.
async fn call(flue: &Flue, token: &str, method: Method, name: Option<&str>) -> reqwest::Response {
    let mut url = format!("{}/v1/listener-consumers", flue.gateway.url());
    if let Some(name) = name {
        url = format!("{url}/{name}");
    }
    reqwest::Client::new()
        .request(method, url)
        .bearer_auth(token)
        .send()
        .await
        .expect("the gateway answers")
}

/// The listener consumers `token`'s tenant has, by name.
async fn listed(flue: &Flue, token: &str) -> ListenerConsumers {
    let response = call(flue, token, Method::GET, None).await;
    assert_eq!(response.status(), StatusCode::OK);
    response.json().await.expect("a list")
}

#[tokio::test]
async fn a_listener_creates_only_its_own_eight_consumers_and_nothing_unnamed_or_anothers() {
    let flue = Flue::start_operator(&[]).await;
    let (mine, client, errors) = listener(&flue, "one.creds").await;
    let (theirs, other, _) = listener(&flue, "two.creds").await;
    assert_eq!(mine.len(), 8, "{mine:?}");
    let id = listener_of_consumer(&mine[0]).expect("a listener consumer name");
    assert!(
        mine.iter().all(|n| listener_of_consumer(n) == Some(id)),
        "{mine:?}"
    );
    let js = jetstream::with_domain(client.clone(), JS_DOMAIN);
    let stream = js.get_stream(EVENT_STREAM).await.expect("the event stream");
    for name in &mine {
        stream
            .create_consumer(named(name))
            .await
            .unwrap_or_else(|e| panic!("its own consumer {name}: {e}"));
    }

    // A ninth name, an unnamed (ephemeral) one, a legacy durable, another listener's
    // consumer: each refused by the broker, none answered.
    let js_api = |rest: &str| api(rest)[0].clone();
    let ninth = format!("lsn-{id}-9");
    let attacks = [
        js_api(&format!("CONSUMER.CREATE.{EVENT_STREAM}")),
        js_api(&format!("CONSUMER.CREATE.{EVENT_STREAM}.{ninth}")),
        js_api(&format!(
            "CONSUMER.CREATE.{EVENT_STREAM}.mine.flue.default.evt.>"
        )),
        js_api(&format!("CONSUMER.DURABLE.CREATE.{EVENT_STREAM}.mine")),
        js_api(&format!("CONSUMER.CREATE.{EVENT_STREAM}.{}", theirs[0])),
        js_api(&format!("CONSUMER.DELETE.{EVENT_STREAM}.{}", theirs[0])),
        js_api(&format!("CONSUMER.MSG.NEXT.{EVENT_STREAM}.{}", theirs[0])),
        js_api(&format!("CONSUMER.INFO.{EVENT_STREAM}.{}", theirs[0])),
        format!("$JS.ACK.{EVENT_STREAM}.{}.1.1.1.0.0", theirs[0]),
    ];
    let inbox = client.new_inbox();
    let mut answers = client.subscribe(format!("{inbox}.>")).await.expect("sub");
    for (n, subject) in attacks.iter().enumerate() {
        client
            .publish_with_reply(
                subject.clone(),
                format!("{inbox}.{n}"),
                Bytes::from(format!(
                    r#"{{"stream_name":"{EVENT_STREAM}","config":{{"name":"{ninth}","durable_name":"mine"}}}}"#
                )),
            )
            .await
            .expect("a denied publish still returns ok");
    }
    client.flush().await.expect("flush");
    for subject in &attacks {
        refused(&errors, subject).await;
    }
    assert!(
        futures_util::FutureExt::now_or_never(futures_util::StreamExt::next(&mut answers))
            .is_none(),
        "the JetStream API answered a refused request"
    );

    // Deleting its own frees a name for a new start position; the other listener's
    // bound is its own, not shared.
    js.delete_consumer_from_stream(&mine[0], EVENT_STREAM)
        .await
        .expect("it deletes its own consumer");
    stream
        .create_consumer(consumer::pull::Config {
            deliver_policy: consumer::DeliverPolicy::New,
            ..named(&mine[0])
        })
        .await
        .expect("and makes it again");
    jetstream::with_domain(other, JS_DOMAIN)
        .create_consumer_on_stream(named(&theirs[0]), EVENT_STREAM)
        .await
        .expect("another listener has its own eight");
    let all = listed(&flue, flue.gateway.tokens().get(Role::Admin)).await;
    assert_eq!(all.consumers.len(), 9, "{all:?}");
}

#[tokio::test]
async fn the_admin_lists_and_deletes_listener_consumers_and_no_other_role_or_tenant_can() {
    let flue = Flue::start_operator(&[]).await;
    let acme = flue.create_tenant("acme").await;
    let (mine, client, _) = listener(&flue, "listener.creds").await;
    let stream = jetstream::with_domain(client, JS_DOMAIN)
        .get_stream(EVENT_STREAM)
        .await
        .expect("the event stream");
    for name in &mine[..2] {
        stream.create_consumer(named(name)).await.expect("created");
    }
    // An SSE client's consumer is the gateway's: never listed.
    let sse = flue
        .http()
        .get(format!("{}/v1/events", flue.gateway.url()))
        .send()
        .await
        .expect("GET /v1/events");
    assert_eq!(sse.status(), 200);

    let tokens = flue.gateway.tokens();
    let admin = tokens.get(Role::Admin);
    let all = listed(&flue, admin).await;
    let names: Vec<&str> = all.consumers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, [mine[0].as_str(), mine[1].as_str()]);
    let id = listener_of_consumer(&mine[0]).expect("listener");
    for c in &all.consumers {
        assert_eq!(c.listener.as_deref(), Some(id));
        assert_eq!(c.idle_limit_secs, 3_600, "the stream's default idle limit");
    }

    // Another tenant's admin finds none of them, and cannot delete one.
    let theirs = listed(&flue, acme.get(Role::Admin)).await;
    assert!(theirs.consumers.is_empty(), "{theirs:?}");
    let response = call(&flue, acme.get(Role::Admin), Method::DELETE, Some(&mine[0])).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    // No other role of the tenant lists or deletes them.
    for role in [Role::Engine, Role::Viewer, Role::Listener] {
        for method in [Method::GET, Method::DELETE] {
            let name = (method == Method::DELETE).then_some(mine[0].as_str());
            let response = call(&flue, tokens.get(role), method.clone(), name).await;
            assert_eq!(response.status(), StatusCode::FORBIDDEN, "{role} {method}");
        }
    }
    assert_eq!(
        listed(&flue, admin).await.consumers.len(),
        2,
        "none deleted"
    );

    // A bad name is a 400 naming the field; the admin deletes one, then it is gone.
    for bad in ["a.b", "a%20b", "%3E"] {
        let response = call(&flue, admin, Method::DELETE, Some(bad)).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{bad}");
        let body: Value = response.json().await.expect("a JSON error");
        let message = body["error"]["message"].as_str().expect("message");
        assert!(message.contains("consumer name"), "{bad}: {body}");
    }
    let response = call(&flue, admin, Method::DELETE, Some(&mine[0])).await;
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    let response = call(&flue, admin, Method::DELETE, Some(&mine[0])).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let left = listed(&flue, admin).await;
    assert_eq!(left.consumers.len(), 1, "{left:?}");
    assert_eq!(left.consumers[0].name, mine[1]);

    // The CLI does the same.
    let out = flue_cli(&flue, &["events", "consumers"]).await;
    assert!(out.status.success(), "{out:?}");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains(&mine[1]) && table.contains(id), "{table}");
    let out = flue_cli(&flue, &["events", "delete-consumer", &mine[1]]).await;
    assert!(out.status.success(), "{out:?}");
    let out = flue_cli(&flue, &["events", "delete-consumer", &mine[1]]).await;
    assert!(!out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no listener consumer"),
        "{out:?}"
    );
    assert!(listed(&flue, admin).await.consumers.is_empty());
}

#[tokio::test]
async fn an_idle_listener_consumer_is_deleted_by_the_broker_and_a_longer_idle_limit_is_refused() {
    let flue = Flue::start_operator(&["--listener-idle-secs", "30"]).await;
    let (mine, client, _) = listener(&flue, "listener.creds").await;
    let stream = jetstream::with_domain(client, JS_DOMAIN)
        .get_stream(EVENT_STREAM)
        .await
        .expect("the event stream");
    let longer = stream
        .create_consumer(consumer::pull::Config {
            inactive_threshold: Duration::from_secs(3_600),
            ..named(&mine[1])
        })
        .await
        .expect_err("an idle limit beyond the stream's");
    assert!(
        longer.to_string().contains("inactive_threshold"),
        "{longer}"
    );
    // A durable one (the finding: durables outlived their listener).
    let idle = stream
        .create_consumer(consumer::pull::Config {
            durable_name: Some(mine[0].clone()),
            ..named(&mine[0])
        })
        .await
        .expect("created");
    let config = &idle.cached_info().config;
    assert_eq!(
        config.durable_name.as_deref(),
        Some(mine[0].as_str()),
        "durable"
    );
    assert_eq!(
        config.inactive_threshold,
        Duration::from_secs(30),
        "the gateway gives its idle limit to a consumer that sets none"
    );

    // Never pulled from: the broker deletes it 30 s on (plus its jitter of up to 1 s).
    let admin = flue.gateway.tokens().get(Role::Admin);
    let gone = async {
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        loop {
            tick.tick().await;
            if listed(&flue, admin).await.consumers.is_empty() {
                return;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30) + WAIT, gone)
        .await
        .expect("the idle consumer is deleted");

    // The gateway's own consumers on the stream are under no listener's idle limit: SSE
    // still sees a new event.
    flue.register("s1").await;
    let replay = flue
        .http()
        .get(format!(
            "{}/v1/events?from=start&follow=false&type=server.registered",
            flue.gateway.url()
        ))
        .send()
        .await
        .expect("GET /v1/events");
    assert_eq!(replay.status(), 200);
    let body = tokio::time::timeout(WAIT, replay.text())
        .await
        .expect("the replay ends")
        .expect("a body");
    assert!(body.contains("server:s1:registered"), "{body}");
}

#[tokio::test]
async fn a_gateway_given_a_shorter_idle_limit_gives_it_to_new_listener_consumers_and_older_ones_keep_theirs()
 {
    let mut flue = Flue::start_operator(&[]).await;
    let (mine, client, _) = listener(&flue, "listener.creds").await;
    let stream = jetstream::with_domain(client, JS_DOMAIN)
        .get_stream(EVENT_STREAM)
        .await
        .expect("the event stream");
    let older = stream
        .create_consumer(named(&mine[0]))
        .await
        .expect("a consumer idle up to an hour");
    assert_eq!(
        older.cached_info().config.inactive_threshold,
        Duration::from_secs(3_600)
    );

    // The same deployment's gateway, now with a limit of 30 s, alone.
    flue.gateway.kill().await;
    let second = flue_tests::Gateway::start_like(
        &flue.gateway,
        &flue.nats.url(),
        &["--listener-idle-secs", "30"],
    )
    .await;
    let newer = stream
        .create_consumer(named(&mine[1]))
        .await
        .expect("a consumer under the new limit");
    assert_eq!(
        newer.cached_info().config.inactive_threshold,
        Duration::from_secs(30)
    );
    let refused = stream
        .create_consumer(consumer::pull::Config {
            inactive_threshold: Duration::from_secs(3_600),
            ..named(&mine[2])
        })
        .await
        .expect_err("longer than the new limit");
    assert!(
        refused.to_string().contains("inactive_threshold"),
        "{refused}"
    );

    // The older consumer keeps its own; the stream has no limit of its own to change.
    let events = jetstream::new(flue.nats.events_client().await);
    let mut evt = events.get_stream(EVENT_STREAM).await.expect("stream");
    let config = evt.info().await.expect("info").config.clone();
    assert!(
        config
            .consumer_limits
            .as_ref()
            .is_none_or(|l| l.inactive_threshold.is_zero()),
        "{:?}",
        config.consumer_limits
    );
    let info = evt
        .consumer_info(&mine[0])
        .await
        .expect("the older consumer");
    assert_eq!(info.config.inactive_threshold, Duration::from_secs(3_600));
    let response = reqwest::Client::new()
        .get(format!("{}/v1/listener-consumers", second.url()))
        .bearer_auth(second.tokens().get(Role::Admin))
        .send()
        .await
        .expect("the second gateway answers");
    assert_eq!(response.status(), StatusCode::OK);
}
