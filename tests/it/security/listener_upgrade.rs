//! The listener upgrade (issue 22): a gateway started on a state dir written before the
//! listener account re-signs the events account revoking every user it issued until then,
//! so a listener of the events account (the old layout, whose replies could reach its
//! streams) is refused by the broker from then on, and says so in its start log; a listener
//! minted afterwards, in the listener account, reads every event, none lost.

use async_nats::jetstream::{self, consumer};
use flue_gateway::natsauth::{AccountKind, NatsAuth, accounts, jwt};
use flue_proto::creds::UserCreds;
use flue_proto::event::EVENT_STREAM;
use flue_proto::jsapi::JS_DOMAIN;
use flue_proto::subject::listener_consumer;
use flue_tests::{EventTap, Flue, Sse, WAIT, connect_options, wait_until};
use futures_util::StreamExt as _;
use nkeys::KeyPair;

use super::edge_accounts::{account_key, tenant};
use super::listener_accounts::{Layout, listener_creds};
use super::{consumer_names, flue_cli, refusals_at};

/// What the warning of the upgrade tells the admin to run.
const MINT_AGAIN: &str = "flue events credentials";

/// Reads the event stream from its start through the consumer `name` of a listener
/// connected as `client`, until the event at stream sequence `last`: each event's
/// sequence and id.
async fn read_as_listener(
    client: &async_nats::Client,
    name: &str,
    last: u64,
) -> Vec<(u64, String)> {
    let js = jetstream::with_domain(client.clone(), JS_DOMAIN);
    let stream = js.get_stream(EVENT_STREAM).await.expect("the event stream");
    let consumer = stream
        .create_consumer(consumer::pull::OrderedConfig {
            name: Some(name.to_owned()),
            deliver_policy: consumer::DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .expect("the listener's consumer");
    let mut messages = consumer.messages().await.expect("messages");
    let mut read = Vec::new();
    while read.last().is_none_or(|(seq, _)| *seq < last) {
        let msg = tokio::time::timeout(WAIT, messages.next())
            .await
            .unwrap_or_else(|_| panic!("no event after {read:?} within {WAIT:?}"))
            .expect("a message")
            .expect("no error");
        let seq = msg.info().expect("a JetStream message").stream_sequence;
        let event: flue_proto::CloudEvent =
            serde_json::from_slice(&msg.payload).expect("a CloudEvent");
        read.push((seq, event.id));
    }
    read
}

/// The last sequence of `FLUE_EVT`, read as a user of the events account.
async fn last_event(flue: &Flue) -> u64 {
    let js = jetstream::new(flue.nats.events_client().await);
    let mut stream = js.get_stream(EVENT_STREAM).await.expect("the event stream");
    stream.info().await.expect("info").state.last_sequence
}

/// Turns the gateway's state directory back into the layout before the listener account:
/// the events account JWT without exports (re-signed later than the one the broker holds,
/// and pushed to it), no listener account.
async fn to_the_old_listener_layout(flue: &Flue) {
    let state_dir = flue.gateway.state_dir();
    let system = NatsAuth::open(&state_dir)
        .expect("state dir")
        .system_creds()
        .expect("system user");
    let dir = state_dir.join(accounts::ACCOUNTS_DIR).join("default");
    let text = std::fs::read_to_string(dir.join("events.jwt")).expect("events account jwt");
    let mut claims: jwt::Claims<jwt::Account> = jwt::decode(&text).expect("claims");
    assert!(!claims.nats.exports.is_empty(), "today's layout exports");
    assert!(claims.nats.revocations.is_empty(), "{:?}", claims.nats);
    claims.nats.exports.clear();
    let seed = std::fs::read_to_string(state_dir.join(accounts::OPERATOR_KEY)).expect("seed");
    let operator = KeyPair::from_seed(seed.trim()).expect("operator");
    let old = jwt::encode(&operator, &mut claims.clone(), claims.iat + 1).expect("signed");
    std::fs::write(dir.join("events.jwt"), &old).expect("write");
    std::fs::remove_file(dir.join("listen.nk")).expect("listener account key");
    std::fs::remove_file(dir.join("listen.jwt")).expect("listener account jwt");
    let system = connect_options(&system)
        .connect(flue.nats.url())
        .await
        .expect("system user connects");
    flue_gateway::natsauth::push::push(&system, &old)
        .await
        .expect("the broker takes the old layout's events account");
}

/// Waits (bounded by [`WAIT`]) until the broker refuses a connection as `creds`; the
/// error it gave.
async fn refused_connection(flue: &Flue, creds: &UserCreds) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match connect_options(creds).connect(flue.nats.url()).await {
            Err(e) => return e.to_string(),
            Ok(client) => drop(client),
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the old listener still connects after {WAIT:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await; // polling interval
    }
}

#[tokio::test]
async fn an_old_listener_of_the_events_account_is_revoked_at_start_and_a_new_one_reads_every_event()
{
    let mut flue = Flue::start().await;
    flue.register("web1").await;
    let _agent = flue.agent("web1", &[]).await;
    flue.script_config("hello", "#!/bin/sh\necho hello\n", &[], &[])
        .await;
    let first = flue.deploy("hello", "web1", &[]).await.id;
    flue.finished(&first).await;
    // Its last event is stored before the gateway goes (it may follow the record).
    let completed = format!("deployment:{first}:completed");
    EventTap::from_start(&flue.nats.events_client().await)
        .await
        .wait_for(&completed, WAIT, |e| e.id == completed)
        .await;

    // A listener of the old layout (a user of the events account) reads every event.
    let (old_id, old_creds) = listener_creds(&flue, Layout::Events);
    flue.gateway.kill().await;
    to_the_old_listener_layout(&flue).await;
    let last_before = last_event(&flue).await;
    let (old, old_errors) = refusals_at(&flue.nats.url(), &old_creds, None).await;
    let old_read = read_as_listener(&old, &listener_consumer(&old_id, 1), last_before).await;
    assert_eq!(old_read.len() as u64, last_before, "{old_read:?}");

    // The gateway starts again on the same state dir and broker.
    let from = flue.gateway.logs().len();
    flue.gateway.restart().await;
    let replay_before = Sse::replay(&flue).await;
    assert_eq!(
        replay_before, old_read,
        "the SSE replay and the old listener agree"
    );

    // Its start log warns, naming what mints listeners anew.
    let warning = flue
        .gateway
        .logs()
        .wait_for_after(from, MINT_AGAIN, WAIT)
        .await;
    assert!(warning.contains("WARN"), "{warning}");
    assert!(
        flue.gateway.logs().lines()[..from]
            .iter()
            .all(|l| !l.contains(MINT_AGAIN)),
        "the first start warned already"
    );

    // The old credential is refused: a new connection, and the one it held.
    let error = refused_connection(&flue, &old_creds).await;
    assert!(
        error.to_lowercase().contains("authorization violation"),
        "{error}"
    );
    let js = jetstream::with_domain(old.clone(), JS_DOMAIN);
    let made = js
        .create_consumer_on_stream(
            consumer::pull::Config {
                name: Some(listener_consumer(&old_id, 2)),
                ..Default::default()
            },
            EVENT_STREAM,
        )
        .await;
    assert!(made.is_err(), "the held connection still creates: {made:?}");
    // The broker closed it when the re-signed account reached it, and refuses it again.
    let told = |what: &str| {
        let errors = old_errors.lock().expect("lock");
        errors
            .iter()
            .position(|e| e.contains(what))
            .map(|at| (at, errors.join("\n")))
    };
    let (revoked, _) = wait_until(
        "the broker closes the old listener's connection",
        WAIT,
        || told("User Authentication Revoked"),
    )
    .await;
    let (refused, errors) = wait_until("the broker refuses its reconnection", WAIT, || {
        told("authorization violation")
    })
    .await;
    assert!(revoked < refused, "{errors}");

    // The harness's user of the events account was issued before the restart too.
    let (tenant_user, events_user) = NatsAuth::open(&flue.gateway.state_dir())
        .expect("state dir")
        .gateway_creds(&tenant())
        .expect("the gateway's users");
    flue.nats.connect_as(tenant_user, events_user);

    // No event lost: the stream and a replay hold what they held, then the events of
    // a deployment made after the restart.
    let second = flue.deploy("hello", "web1", &[]).await.id;
    flue.finished(&second).await;
    let completed = format!("deployment:{second}:completed");
    assert!(last_event(&flue).await > last_before);
    // The gateway's copy lags the stream a little: a replay ends where the copy was.
    let deadline = tokio::time::Instant::now() + WAIT;
    let replay_after = loop {
        let replay = Sse::replay(&flue).await;
        if replay.iter().any(|(_, id)| *id == completed) {
            break replay;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {completed} in {replay:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await; // polling interval
    };
    assert_eq!(
        replay_after[..replay_before.len()],
        replay_before,
        "the events before the restart, as they were"
    );
    let seqs: Vec<u64> = replay_after.iter().map(|(seq, _)| *seq).collect();
    let every: Vec<u64> = (1..=replay_after.len() as u64).collect();
    assert_eq!(seqs, every, "no sequence missing");
    let mut ids: Vec<&String> = replay_after.iter().map(|(_, id)| id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(
        ids.len(),
        replay_after.len(),
        "an event twice: {replay_after:?}"
    );

    // A listener minted now (the listener account) reads every event, those before
    // the restart included.
    let file = flue.path("new.creds");
    let path = file.display().to_string();
    let out = flue_cli(&flue, &["events", "credentials", "--out", path.as_str()]).await;
    assert!(out.status.success(), "{out:?}");
    let names = consumer_names(&out);
    let creds = UserCreds::parse(&std::fs::read_to_string(&file).expect("read")).expect("creds");
    let listen = account_key(&flue.gateway.state_dir(), AccountKind::Listen);
    let issuer = jwt::decode::<jwt::User>(&creds.jwt).expect("claims").iss;
    assert_eq!(
        issuer,
        listen.public_key(),
        "minted in the listener account"
    );
    let (new, _) = refusals_at(&flue.nats.url(), &creds, None).await;
    let last = replay_after.last().expect("events").0;
    let new_read = read_as_listener(&new, &names[0], last).await;
    assert_eq!(new_read, replay_after, "the new listener reads every event");
}
