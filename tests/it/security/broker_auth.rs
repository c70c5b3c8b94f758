//! Broker authentication against a real nats-server in operator mode, configured by
//! `flue-gateway init`: no anonymous clients, tenants isolated by accounts, listeners
//! confined to their tenant's events, `init` idempotent. Agents: `broker_agent.rs`.

use std::os::unix::fs::PermissionsExt as _;

use async_nats::jetstream::{self, consumer, stream};
use bytes::Bytes;
use flue_gateway::natsauth::jwt::{self, Claims, Permissions, User};
use flue_proto::creds::UserCreds;
use flue_proto::event::EVENT_STREAM;
use flue_proto::jsapi::JS_DOMAIN;
use flue_proto::subject;
use flue_tests::{SecureNats, WAIT, admin};
use futures_util::StreamExt as _;
use nkeys::KeyPair;

use super::{refusals, wait_for_marker};

#[tokio::test]
async fn anonymous_and_foreign_users_are_refused_at_connect() {
    let secure = SecureNats::start(&["acme"], None).await;
    let anonymous = async_nats::connect(secure.nats.url()).await;
    assert!(anonymous.is_err(), "an anonymous client connected");

    // A user signed by an account the operator never signed.
    let stranger = KeyPair::new_account();
    let user = KeyPair::new_user();
    let mut claims = Claims::new(
        user.public_key(),
        "stranger",
        User::new(Permissions::default()),
    );
    let creds = UserCreds {
        jwt: jwt::encode(&stranger, &mut claims, 1).expect("encodes"),
        seed: user.seed().expect("seed"),
    };
    let e = secure
        .nats
        .connect(&creds)
        .await
        .expect_err("foreign user refused");
    assert!(e.to_lowercase().contains("authorization"), "{e}");

    // The real proof of the encoder: a user it signed for a known account gets in.
    let (_gateway, _events) = secure.gateway("acme").await;
}

#[tokio::test]
async fn a_tenants_gateway_user_never_reaches_another_tenants_streams_or_subjects() {
    let secure = SecureNats::start(&["alpha", "beta"], None).await;
    let (alpha, _) = secure.gateway("alpha").await;
    let (beta, _) = secure.gateway("beta").await;
    let (alpha_js, beta_js) = (jetstream::new(alpha.clone()), jetstream::new(beta.clone()));
    let config = || stream::Config {
        name: subject::REQUEST_STREAM.to_owned(),
        subjects: vec![subject::REQUEST_SUBJECTS.to_owned()],
        ..Default::default()
    };
    // Both accounts hold a stream of the same name over the same subjects.
    alpha_js
        .create_stream(config())
        .await
        .expect("alpha's stream");
    beta_js
        .create_stream(config())
        .await
        .expect("beta's stream");

    let mut everything = alpha.subscribe(">").await.expect("alpha subscribes to >");
    alpha.flush().await.expect("flush");
    beta_js
        .publish("flue.beta.req.web1", Bytes::from_static(b"beta's request"))
        .await
        .expect("publish")
        .await
        .expect("beta's request stored");
    beta.publish(
        "flue.alpha.req.web1",
        Bytes::from_static(b"beta writes alpha's name"),
    )
    .await
    .expect("publish");
    beta.flush().await.expect("flush");
    // Whatever crossed would reach alpha's `>` before alpha's own later message.
    alpha
        .publish("alpha.marker", Bytes::from_static(b"m"))
        .await
        .expect("publish");
    let seen = wait_for_marker(&mut everything, "alpha.marker").await;
    assert!(
        seen.iter()
            .all(|s| !s.contains("beta") && !s.starts_with("flue.")),
        "alpha saw {seen:?}"
    );
    let alpha_stream = alpha_js
        .get_stream(subject::REQUEST_STREAM)
        .await
        .expect("alpha's stream")
        .info()
        .await
        .expect("info")
        .state
        .messages;
    assert_eq!(alpha_stream, 0, "beta's messages landed in alpha's stream");
    let names: Vec<String> = alpha_js
        .stream_names()
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .map(|n| n.expect("name"))
        .collect();
    assert_eq!(
        names,
        [subject::REQUEST_STREAM],
        "alpha lists only its own stream"
    );
    let beta_stream = beta_js
        .get_stream(subject::REQUEST_STREAM)
        .await
        .expect("beta's stream")
        .info()
        .await
        .expect("info")
        .state
        .messages;
    assert_eq!(
        beta_stream, 2,
        "what beta published stays in beta's own stream"
    );
}

/// Events of `tenant` in its events account: the stream and two events.
async fn tenant_events(secure: &SecureNats, tenant: &str) -> async_nats::Client {
    let (_, events) = secure.gateway(tenant).await;
    let js = jetstream::new(events.clone());
    js.create_stream(stream::Config {
        name: EVENT_STREAM.to_owned(),
        subjects: vec![flue_proto::event::EVENT_SUBJECTS.to_owned()],
        ..Default::default()
    })
    .await
    .expect("event stream");
    for n in 1..=2 {
        js.publish(
            format!("flue.{tenant}.evt.server.~.web1.n{n}"),
            Bytes::from(format!("{tenant} event {n}")),
        )
        .await
        .expect("publish")
        .await
        .expect("event stored");
    }
    events
}

#[tokio::test]
async fn a_listener_replays_its_tenants_events_and_can_do_nothing_else() {
    let secure = SecureNats::start(&["alpha", "beta"], None).await;
    let alpha_events = tenant_events(&secure, "alpha").await;
    let _beta_events = tenant_events(&secure, "beta").await;
    let (alpha_main, _) = secure.gateway("alpha").await;
    let creds = secure
        .auth
        .listener_creds(&"alpha".parse().expect("id"))
        .expect("listener");
    let (listener, errors) = refusals(&secure, &creds, None).await;
    let js = jetstream::with_domain(listener.clone(), JS_DOMAIN);

    // Replay from the start with an ordered consumer.
    let stream = js
        .get_stream(EVENT_STREAM)
        .await
        .expect("listener reads the stream info");
    let replay = stream
        .create_consumer(consumer::pull::OrderedConfig {
            deliver_policy: consumer::DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .expect("listener creates an ordered consumer");
    let mut messages = replay.messages().await.expect("messages");
    let mut payloads = Vec::new();
    while payloads.len() < 2 {
        let msg = tokio::time::timeout(WAIT, messages.next())
            .await
            .expect("replayed in time")
            .expect("a message")
            .expect("no error");
        payloads.push(String::from_utf8_lossy(&msg.payload).into_owned());
    }
    assert_eq!(payloads, ["alpha event 1", "alpha event 2"]);
    // A message get by sequence also works (the gateway's FLUE_EVT has no direct get).
    let first = stream.get_raw_message(1).await.expect("message get");
    assert_eq!(&first.payload[..], b"alpha event 1");

    // It cannot publish an event, through JetStream or core NATS.
    let forged = js
        .publish(
            "flue.alpha.evt.server.~.web1.forged",
            Bytes::from_static(b"forged"),
        )
        .await;
    if let Ok(ack) = forged {
        assert!(ack.await.is_err(), "a listener's event was stored");
    }
    listener
        .publish(
            "flue.alpha.evt.server.~.web1.forged2",
            Bytes::from_static(b"forged"),
        )
        .await
        .expect("core publish returns ok even when denied");
    // Nor subscribe to the tenant account's subjects (a different account entirely).
    let mut requests = listener
        .subscribe("flue.alpha.req.>")
        .await
        .expect("subscribe call");
    let mut marker = listener
        .subscribe("_INBOX.marker")
        .await
        .expect("allowed sub");
    listener.flush().await.expect("flush");
    alpha_main
        .publish("flue.alpha.req.web1", Bytes::from_static(b"a request"))
        .await
        .expect("publish");
    alpha_main.flush().await.expect("flush");
    alpha_events
        .publish("_INBOX.marker", Bytes::from_static(b"m"))
        .await
        .expect("publish");
    alpha_events.flush().await.expect("flush");
    if tokio::time::timeout(WAIT, marker.next()).await.is_err() {
        panic!("no marker; refused: {:?}", errors.lock().expect("lock"));
    }
    assert!(
        futures_util::FutureExt::now_or_never(requests.next()).is_none(),
        "the listener received a tenant-account message"
    );
    let stored = jetstream::new(alpha_events.clone())
        .get_stream(EVENT_STREAM)
        .await
        .expect("stream")
        .info()
        .await
        .expect("info")
        .state
        .messages;
    assert_eq!(stored, 2, "nothing the listener published was stored");
    let errors = errors.lock().expect("lock").join("\n");
    assert!(
        errors.contains(
            "Permissions Violation for Publish to \"flue.alpha.evt.server.~.web1.forged2\""
        ),
        "{errors}"
    );
    assert!(
        errors.contains("Permissions Violation for Subscription to \"flue.alpha.req.>\""),
        "{errors}"
    );
}

#[tokio::test]
async fn init_keeps_its_keys_and_writes_only_private_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let state_arg = state.to_str().expect("utf-8");
    let first = admin(&["init", "--state-dir", state_arg, "--tenant", "acme"]).await;
    let conf = std::fs::read_to_string(state.join("broker/nats-server.conf")).expect("conf");
    let again = admin(&["init", "--state-dir", state_arg, "--tenant", "acme"]).await;
    assert_eq!(first, again, "the same operator key and configuration path");
    let account = std::fs::read_to_string(state.join("accounts/acme/account.jwt")).expect("jwt");
    admin(&["tenant", "create", "other", "--state-dir", state_arg]).await;
    assert_eq!(
        std::fs::read_to_string(state.join("accounts/acme/account.jwt")).expect("jwt"),
        account,
        "an existing account is kept"
    );
    let rewritten = std::fs::read_to_string(state.join("broker/nats-server.conf")).expect("conf");
    assert!(
        rewritten.len() > conf.len(),
        "the new tenant's accounts are preloaded"
    );
    for entry in walk(&state) {
        let mode = std::fs::metadata(&entry)
            .expect("meta")
            .permissions()
            .mode()
            & 0o777;
        let expected = if entry.is_dir() { 0o700 } else { 0o600 };
        assert_eq!(mode, expected, "{}", entry.display());
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut all = vec![dir.to_owned()];
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            all.extend(walk(&path));
        } else {
            all.push(path);
        }
    }
    all
}
