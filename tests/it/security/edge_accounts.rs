//! State and edge accounts (issue 22): an agent is a user of its tenant's edge account,
//! which holds no stream and reaches the state account only through service imports, so
//! the replies of its requests cannot touch the tenant's state. Proven by attack, with a
//! real gateway, broker and victim agent; and the same attack with an agent of the state
//! account (the layout before) deletes the request stream.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use async_nats::jetstream;
use bytes::Bytes;
use flue_gateway::natsauth::{AccountKind, NatsAuth, accounts, jwt, perms};
use flue_proto::creds::{AgentCredentials, UserCreds};
use flue_proto::jsapi::{self, JS_DOMAIN};
use flue_proto::subject::{self, REQUEST_STREAM};
use flue_proto::{DeploymentId, DeploymentStatus, ServerId, TenantId};
use flue_tests::{Flue, WAIT, broker_has_read, connect_options};
use futures_util::StreamExt as _;
use nkeys::KeyPair;

use super::refusals_at;
use super::scan::stream_names;

const THIEF: &str = "thief";
const THIEF_STACK: &str = "st-thief";

pub(super) fn tenant() -> TenantId {
    "default".parse().expect("id")
}

fn id<T: std::str::FromStr>(s: &str) -> T
where
    T::Err: std::fmt::Debug,
{
    s.parse().expect("valid id")
}

/// The seed of one of the default tenant's accounts, read from the gateway's state dir.
pub(super) fn account_key(state_dir: &Path, kind: AccountKind) -> KeyPair {
    let stem = match kind {
        AccountKind::Tenant => "account",
        AccountKind::Events => "events",
        AccountKind::Edge => "edge",
        AccountKind::Listen => "listen",
    };
    let path = state_dir
        .join(accounts::ACCOUNTS_DIR)
        .join("default")
        .join(format!("{stem}.nk"));
    let seed = std::fs::read_to_string(&path).expect("an account seed");
    KeyPair::from_seed(seed.trim()).expect("a seed")
}

/// A thief agent's credentials (server `thief`, stack `st-thief`): minted as the gateway
/// mints an agent's (`NatsAuth::agent_jwt`), or, given the state account, signed by it with
/// the same rights, as the gateway did before the edge account existed.
fn thief_creds(flue: &Flue, kind: AccountKind) -> UserCreds {
    let key = KeyPair::new_user();
    let stacks = [id(THIEF_STACK)];
    let jwt = match kind {
        AccountKind::Tenant => {
            let account = account_key(&flue.gateway.state_dir(), kind);
            let rights = perms::agent(&tenant(), &id(THIEF), None, &stacks);
            accounts::sign_user(&account, &key.public_key(), "thief", rights).expect("jwt")
        }
        _ => NatsAuth::open(&flue.gateway.state_dir())
            .expect("state dir")
            .agent_jwt(&tenant(), &id(THIEF), &key.public_key(), &stacks)
            .expect("the gateway's agent jwt"),
    };
    UserCreds {
        jwt,
        seed: key.seed().expect("seed"),
    }
}

/// A Flue whose victim has a queued deployment (no agent yet) and a data key, the thief
/// registered (its consumer exists) with nothing queued.
async fn victim_and_thief() -> (Flue, DeploymentId) {
    let flue = Flue::start().await;
    flue.register("victim").await;
    flue.register(THIEF).await;
    flue.script_config("hello", "#!/bin/sh\necho hello\n", &[], &[])
        .await;
    let d = flue.deploy("hello", "victim", &[]).await;
    // The thief's own queue holds a request too: a pull of it is answered with a message
    // that carries a reply (its ack subject).
    let own = flue.deploy("hello", THIEF, &[]).await;
    let js = jetstream::new(flue.nats.client().await);
    js.get_key_value(subject::DATA_BUCKET)
        .await
        .expect("data bucket")
        .put("default.st-victim.k", Bytes::from_static(b"victim's value"))
        .await
        .expect("put");
    // The gateway marks the request published in its record (at once, or itself when no
    // agent answers within 5 s): a write of its own that must not fall between snapshots.
    let deployments = js
        .get_key_value(subject::DEPLOYMENTS_BUCKET)
        .await
        .expect("deployments bucket");
    for key in [&d.id, &own.id].map(|id| format!("default.{id}")) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let entry = deployments
                .get(&key)
                .await
                .expect("read")
                .expect("recorded");
            let record: serde_json::Value = serde_json::from_slice(&entry).expect("json");
            if record["request_published"] == true {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the request was never marked published"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    (flue, d.id)
}

/// A stream's state, per subject: its count and the sequence of its last message.
#[derive(Debug, Clone, PartialEq, Eq)]
struct StreamState {
    messages: u64,
    last_seq: u64,
    subjects: BTreeMap<String, (usize, u64)>,
}

/// Every stream of the state and events accounts, and every request consumer's progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Snapshot {
    streams: BTreeMap<String, StreamState>,
    /// Request consumer → (delivered stream seq, ack floor stream seq, ack pending, pending).
    consumers: BTreeMap<String, (u64, u64, usize, u64)>,
}

pub(super) async fn snapshot(flue: &Flue) -> Snapshot {
    let mut streams = BTreeMap::new();
    for (account, client) in [
        ("state", flue.nats.client().await),
        ("events", flue.nats.events_client().await),
    ] {
        let js = jetstream::new(client);
        let names = stream_names(&js).await;
        for name in names {
            // A stream deleted while listed (an attack that worked) is left out.
            let Ok(stream) = js.get_stream(&name).await else {
                continue;
            };
            let (messages, last_seq, subjects) = stream_state(&stream).await;
            streams.insert(
                format!("{account}/{name}"),
                StreamState {
                    messages,
                    last_seq,
                    subjects,
                },
            );
        }
    }
    let js = jetstream::new(flue.nats.client().await);
    let mut consumers = BTreeMap::new();
    // Gone after an attack that worked: `changes` names the stream.
    let Ok(requests) = js.get_stream(REQUEST_STREAM).await else {
        return Snapshot { streams, consumers };
    };
    let names: Vec<String> = requests
        .consumer_names()
        .map(|n| n.expect("name"))
        .collect()
        .await;
    for name in names {
        let info = requests.consumer_info(&name).await.expect("consumer info");
        consumers.insert(name, progress(&info));
    }
    Snapshot { streams, consumers }
}

/// A stream's message count and last sequence, and per subject its count and the
/// sequence of its last message.
pub(super) async fn stream_state(
    stream: &jetstream::stream::Stream,
) -> (u64, u64, BTreeMap<String, (usize, u64)>) {
    let mut with = stream.info_with_subjects(">").await.expect("info");
    let (messages, last_seq) = (with.info.state.messages, with.info.state.last_sequence);
    let mut subjects = BTreeMap::new();
    while let Some(entry) = with.next().await {
        let (subject, count) = entry.expect("subject count");
        subjects.insert(subject, (count, 0));
    }
    for (subject, (_, last)) in &mut subjects {
        *last = stream
            .get_last_raw_message_by_subject(subject)
            .await
            .map_or(0, |m| m.sequence);
    }
    (messages, last_seq, subjects)
}

/// A consumer's progress: delivered and ack floor stream sequences, acks pending,
/// messages pending.
pub(super) fn progress(info: &jetstream::consumer::Info) -> (u64, u64, usize, u64) {
    (
        info.delivered.stream_sequence,
        info.ack_floor.stream_sequence,
        info.num_ack_pending,
        info.num_pending,
    )
}

/// True for a subject the thief may change itself: its own answers, keys, presence and
/// the events about them.
fn thiefs(subject: &str) -> bool {
    subject.split('.').any(|t| t == THIEF || t == THIEF_STACK)
}

/// What changed from `before` to `after` beyond the thief's own subjects.
pub(super) fn changes(before: &Snapshot, after: &Snapshot) -> Vec<String> {
    let mut changed = Vec::new();
    for (name, was) in &before.streams {
        let Some(now) = after.streams.get(name) else {
            changed.push(format!("stream {name} is gone"));
            continue;
        };
        let subjects: BTreeSet<&String> = was.subjects.keys().chain(now.subjects.keys()).collect();
        let mut thief_wrote = false;
        for subject in subjects {
            let (a, b) = (was.subjects.get(subject), now.subjects.get(subject));
            if a == b {
                continue;
            }
            if thiefs(subject) {
                thief_wrote = true;
            } else {
                changed.push(format!("{name}: {subject}: {a:?} -> {b:?}"));
            }
        }
        if !thief_wrote && (was.messages, was.last_seq) != (now.messages, now.last_seq) {
            changed.push(format!(
                "{name}: messages/last seq {:?} -> {:?}",
                (was.messages, was.last_seq),
                (now.messages, now.last_seq)
            ));
        }
    }
    for name in after.streams.keys() {
        if !before.streams.contains_key(name) {
            changed.push(format!("stream {name} appeared"));
        }
    }
    let others = |s: &Snapshot| -> Vec<_> {
        s.consumers
            .iter()
            .filter(|(name, _)| !name.ends_with(&format!("-{THIEF}")))
            .map(|(n, c)| (n.clone(), *c))
            .collect()
    };
    if others(before) != others(after) {
        changed.push(format!(
            "request consumers: {:?} -> {:?}",
            others(before),
            others(after)
        ));
    }
    changed
}

/// `subject` with each wildcard made a concrete token: the tenant's in a Flue subject's
/// tenant place (`flue.*.…`), `victim` elsewhere.
fn concrete(subject: &str) -> String {
    subject
        .split('.')
        .enumerate()
        .map(|(i, t)| match t {
            "*" if i == 1 && subject.starts_with("flue.") => "default",
            "*" | ">" => "victim",
            t => t,
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// Every reply the attack names: each subject stored in a stream of the state and events
/// accounts and each stream's configured subjects, `STREAM.PURGE` and `STREAM.DELETE` of
/// each stream (both API spellings), each request consumer's ack subject.
pub(super) async fn replies(flue: &Flue, before: &Snapshot) -> Vec<String> {
    let mut replies = BTreeSet::new();
    for (name, state) in &before.streams {
        replies.extend(state.subjects.keys().cloned());
        let stream = name.split_once('/').expect("account/stream").1;
        replies.extend(jsapi::api(&format!("STREAM.PURGE.{stream}")));
        replies.extend(jsapi::api(&format!("STREAM.DELETE.{stream}")));
    }
    for client in [flue.nats.client().await, flue.nats.events_client().await] {
        let js = jetstream::new(client);
        let names = stream_names(&js).await;
        for name in names {
            let mut stream = js.get_stream(&name).await.expect("stream");
            let info = stream.info().await.expect("info");
            replies.extend(info.config.subjects.iter().map(|s| concrete(s)));
        }
    }
    for consumer in before.consumers.keys() {
        replies.insert(format!(
            "{}1.1.1.1700000000000000000.0",
            jsapi::consumer_acks(REQUEST_STREAM, consumer).trim_end_matches('>')
        ));
    }
    // The victim's own subjects and records, stored yet or not.
    let victim: ServerId = id("victim");
    replies.insert(subject::request(&tenant(), &victim));
    replies.insert(subject::response(&tenant(), &victim));
    replies.insert(subject::heartbeat(&tenant(), &victim));
    for name in before.streams.keys() {
        if let Some(bucket) = name.split_once("/KV_").map(|(_, b)| b) {
            replies.insert(jsapi::kv_watch(bucket, "default.victim"));
        }
    }
    replies.into_iter().collect()
}

/// Publishes, as `creds`, on every subject its JWT allows (wildcards made concrete) with
/// each of `replies`, each with a body its service answers; returns how many. Waits until
/// the broker has answered a request sent after them all.
async fn attack(flue: &Flue, creds: &UserCreds, replies: &[String]) -> usize {
    let inbox = subject::agent_inbox_prefix(&tenant(), &id(THIEF));
    let (thief, _refused) = refusals_at(&flue.nats.url(), creds, Some(inbox)).await;
    let claims: jwt::Claims<jwt::User> = jwt::decode(&creds.jwt).expect("the thief's jwt");
    let subjects: Vec<String> = claims
        .nats
        .publish
        .allow
        .iter()
        .map(|s| concrete(s).replace(".victim", ".k"))
        .collect();
    let mut published = 0;
    for subject in &subjects {
        let body = if subject.contains("MSG.NEXT") {
            Bytes::from_static(br#"{"batch":1,"no_wait":true}"#)
        } else if subject.contains("$KV.") || subject.contains(".resp.") {
            Bytes::from_static(b"thief")
        } else {
            Bytes::new()
        };
        for reply in replies {
            thief
                .publish_with_reply(subject.clone(), reply.clone(), body.clone())
                .await
                .expect("publish");
            published += 1;
        }
    }
    // The JetStream API answers in order of arrival: once the thief's own consumer info
    // (sent last) is answered, every request before it has been.
    let own = subject::request_consumer(&tenant(), &id(THIEF));
    let [info, _] = jsapi::consumer_info(REQUEST_STREAM, &own);
    for _ in 0..2 {
        broker_has_read(&thief, &info).await;
    }
    published
}

/// Every record the victim's deployment needs still reads through the API.
async fn records_read(flue: &Flue, deployment: &DeploymentId) {
    let client = flue.client();
    let server = client
        .get_server(&id::<ServerId>("victim"))
        .await
        .expect("the victim's server record reads");
    assert!(server.keys.is_some());
    client
        .list_servers()
        .await
        .expect("every server record reads");
    let record = client
        .get_deployment(deployment)
        .await
        .expect("the victim's deployment reads");
    assert_eq!(record.status, DeploymentStatus::Queued);
}

#[tokio::test]
async fn every_subject_an_agent_may_publish_with_every_state_reply_changes_no_stream_or_record() {
    let (flue, queued) = victim_and_thief().await;
    let creds = thief_creds(&flue, AccountKind::Edge);
    let before = snapshot(&flue).await;
    let replies = replies(&flue, &before).await;
    for expected in [
        "$KV.flue_servers.default.victim",
        "$KV.flue_stacks.default.victim",
        "$KV.flue_data.default.st-victim.k",
        "flue.default.req.victim",
        "flue.default.resp.victim",
        "$JS.API.STREAM.DELETE.FLUE_REQ",
        "$JS.flue.API.STREAM.PURGE.KV_flue_deployments",
        "$JS.API.STREAM.DELETE.FLUE_EVT",
    ] {
        assert!(
            replies.iter().any(|r| r == expected),
            "{expected}: {replies:?}"
        );
    }
    assert!(
        replies.iter().any(|r| r.starts_with("flue.default.evt.")),
        "{replies:?}"
    );
    let published = attack(&flue, &creds, &replies).await;
    assert!(published >= 17 * 100, "only {published} publishes");
    let after = snapshot(&flue).await;
    let changed = changes(&before, &after);
    assert!(
        changed.is_empty(),
        "{published} publishes changed the state:\n{}",
        changed.join("\n")
    );
    records_read(&flue, &queued).await;
    // The victim still deploys: its queued request, then a new one.
    let _victim = flue.agent("victim", &[]).await;
    let done = flue.finished(&queued).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    let again = flue.deploy("hello", "victim", &[]).await;
    let done = flue.finished(&again.id).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
}

#[tokio::test]
async fn the_same_attack_by_an_agent_of_the_state_account_deletes_the_request_stream() {
    let (flue, _) = victim_and_thief().await;
    let creds = thief_creds(&flue, AccountKind::Tenant);
    let before = snapshot(&flue).await;
    let replies = replies(&flue, &before).await;
    attack(&flue, &creds, &replies).await;
    let js = jetstream::new(flue.nats.client().await);
    let deadline = tokio::time::Instant::now() + WAIT;
    while js.get_stream(REQUEST_STREAM).await.is_ok() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "FLUE_REQ survived the attack by a state account user"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let changed = changes(&before, &snapshot(&flue).await);
    assert!(
        changed.iter().any(|c| c.contains("FLUE_REQ is gone")),
        "{changed:?}"
    );
}

#[tokio::test]
async fn nothing_but_a_gateway_puts_a_message_on_a_request_queue() {
    let (flue, _) = victim_and_thief().await;
    let agent = thief_creds(&flue, AccountKind::Edge);
    // A user of the whole edge account: what a leaf node's link holds.
    let edge = accounts::mint_user(
        &account_key(&flue.gateway.state_dir(), AccountKind::Edge),
        "whole edge account",
        Default::default(),
    )
    .expect("minted");
    let js = jetstream::new(flue.nats.client().await);
    let queue = subject::request(&tenant(), &id("victim"));
    let count = || async {
        let mut stream = js.get_stream(REQUEST_STREAM).await.expect("stream");
        stream.info().await.expect("info").state.messages
    };
    let before = count().await;
    assert_eq!(before, 2, "the victim's and the thief's queued requests");
    for (who, creds) in [("the agent", &agent), ("an edge account user", &edge)] {
        let client = connect_options(creds)
            .custom_inbox_prefix(subject::agent_inbox_prefix(&tenant(), &id(THIEF)))
            .connect(flue.nats.url())
            .await
            .expect("connects");
        let domain = jetstream::with_domain(client.clone(), JS_DOMAIN);
        let plain = jetstream::new(client.clone());
        for subject in [
            queue.clone(),
            format!("$JS.API.{queue}"),
            format!("$JS.{JS_DOMAIN}.API.{queue}"),
        ] {
            client
                .publish(subject.clone(), Bytes::from_static(b"forged"))
                .await
                .expect("a core publish returns ok");
            for context in [&domain, &plain] {
                if let Ok(ack) = context
                    .publish(subject.clone(), Bytes::from_static(b"forged"))
                    .await
                {
                    assert!(
                        ack.await.is_err(),
                        "{who} stored a message on {subject} (a request queue)"
                    );
                }
            }
        }
        // Everything above has been handled by the broker before the count.
        let own = subject::request_consumer(&tenant(), &id(THIEF));
        let [probe, _] = jsapi::consumer_info(REQUEST_STREAM, &own);
        broker_has_read(&client, &probe).await;
        assert_eq!(
            count().await,
            before,
            "{who} put a message on a request queue"
        );
    }
    // The gateway does.
    flue.deploy("hello", "victim", &[]).await;
    assert_eq!(
        count().await,
        before + 1,
        "the gateway's deployment is queued"
    );
}

/// Turns the gateway's state directory back into the layout before the edge account: the
/// state account JWT without exports (re-signed later than the one the broker holds, and
/// pushed to it), no edge account.
async fn to_the_old_layout(flue: &Flue) {
    let state_dir = flue.gateway.state_dir();
    let dir = state_dir.join(accounts::ACCOUNTS_DIR).join("default");
    let text = std::fs::read_to_string(dir.join("account.jwt")).expect("account jwt");
    let mut claims: jwt::Claims<jwt::Account> = jwt::decode(&text).expect("claims");
    assert!(!claims.nats.exports.is_empty(), "today's layout exports");
    claims.nats.exports.clear();
    let seed = std::fs::read_to_string(state_dir.join(accounts::OPERATOR_KEY)).expect("seed");
    let operator = KeyPair::from_seed(seed.trim()).expect("operator");
    let old = jwt::encode(&operator, &mut claims.clone(), claims.iat + 1).expect("signed");
    std::fs::write(dir.join("account.jwt"), &old).expect("write");
    std::fs::remove_file(dir.join("edge.nk")).expect("edge key");
    std::fs::remove_file(dir.join("edge.jwt")).expect("edge jwt");
    let auth = NatsAuth::open(&state_dir).expect("state dir");
    let system = connect_options(&auth.system_creds().expect("system user"))
        .connect(flue.nats.url())
        .await
        .expect("system user connects");
    flue_gateway::natsauth::push::push(&system, &old)
        .await
        .expect("the broker takes the old layout's state account");
}

/// `server`'s credentials file with its user JWT signed by the state account instead (the
/// same user key and rights): what a gateway minted before the edge account existed.
fn as_old_credentials(flue: &Flue, server: &str) {
    let path = flue.creds_path(server);
    let text = flue.in_state_account(&std::fs::read_to_string(&path).expect("read"));
    std::fs::write(&path, text).expect("write");
}

fn issuer(creds_text: &str) -> String {
    let creds = AgentCredentials::parse(creds_text).expect("parse");
    jwt::decode::<jwt::User>(&creds.user.jwt)
        .expect("claims")
        .iss
}

#[tokio::test]
async fn an_old_state_dir_moves_to_the_edge_layout_at_start_and_its_agents_work_until_rotated() {
    let mut flue = Flue::start().await;
    flue.register("web1").await;
    flue.script_config("hello", "#!/bin/sh\necho hello\n", &[], &[])
        .await;
    as_old_credentials(&flue, "web1");
    let queued = [
        flue.deploy("hello", "web1", &[]).await.id,
        flue.deploy("hello", "web1", &[]).await.id,
    ];
    flue.gateway.kill().await;
    to_the_old_layout(&flue).await;

    // The start re-signs the state account with its exports and makes the edge account.
    flue.gateway.restart().await;
    let state_dir = flue.gateway.state_dir();
    let dir = state_dir.join(accounts::ACCOUNTS_DIR).join("default");
    let state: jwt::Claims<jwt::Account> =
        jwt::decode(&std::fs::read_to_string(dir.join("account.jwt")).expect("read"))
            .expect("claims");
    let edge: jwt::Claims<jwt::Account> =
        jwt::decode(&std::fs::read_to_string(dir.join("edge.jwt")).expect("edge made"))
            .expect("claims");
    assert!(!state.nats.exports.is_empty(), "no exports after the start");
    assert!(edge.nats.imports.iter().all(|i| i.account == state.sub));
    assert!(!edge.nats.imports.is_empty());

    // The old agent (a user of the state account) still works: it runs what was queued.
    let old_text = std::fs::read_to_string(flue.creds_path("web1")).expect("read");
    assert_eq!(issuer(&old_text), state.sub, "an old agent's credentials");
    let mut old = flue.agent("web1", &[]).await;
    for d in &queued {
        let done = flue.finished(d).await;
        assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    }
    old.terminate().await;
    let waiting = flue.deploy("hello", "web1", &[]).await.id;

    // The documented rotation re-issues its credentials from the edge account and
    // revokes the old user; the new agent runs what was queued meanwhile.
    let rotated = flue
        .admin_client()
        .rotate_server_credentials(&id("web1"))
        .await
        .expect("rotated")
        .credentials
        .expect("credentials");
    assert_eq!(issuer(&rotated), edge.sub, "rotated into the edge account");
    let old_user = AgentCredentials::parse(&old_text).expect("parse").user;
    assert!(
        connect_options(&old_user)
            .connect(flue.nats.url())
            .await
            .is_err(),
        "the old user is refused once rotated"
    );
    std::fs::write(flue.creds_path("web1"), &rotated).expect("write");
    let _new = flue.agent_in("web1", "agent-web1-new", &[], &[]).await;
    let done = flue.finished(&waiting).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
}
