//! A tenant network's leaf link, attacked (issue 22): whoever holds a tenant network's
//! `leaf.creds` speaks the leaf protocol to the hub's leaf node port itself, over a raw
//! socket, as a leaf node would. The link may do what the agents of the servers named in
//! `leaf-config --server` need and use its tenant's data space; another server's queue,
//! answers and heartbeats are refused (the hub logs the violation and closes the link), and
//! the replies a leaf may name (which nats-server does not check on a leaf link) change no
//! stream and no consumer of the state account but the served server's own.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use async_nats::jetstream;
use flue_gateway::natsauth::jwt;
use flue_proto::creds::UserCreds;
use flue_proto::operation::{OPERATIONS_CONSUMER, OPERATIONS_STREAM};
use flue_proto::subject::{self, REQUEST_STREAM, RESPONSE_STREAM};
use flue_proto::{DeploymentId, DeploymentStatus, ServerId, TenantId};
use flue_tests::leaf_proto::{Event, LeafLink};
use flue_tests::{Flue, WAIT, admin, free_port};
use futures_util::StreamExt as _;

use super::edge_accounts::{progress, stream_state};
use super::scan::stream_names;

/// The server behind the leaf node (named in `leaf-config`).
const SERVED: &str = "web1";
/// A server of the same tenant that is not behind it.
const VICTIM: &str = "web2";

fn id<T: std::str::FromStr>(s: &str) -> T
where
    T::Err: std::fmt::Debug,
{
    s.parse().expect("valid id")
}

fn tenant() -> TenantId {
    id("default")
}

/// One consumer's progress: delivered and ack floor stream sequences, acks pending,
/// messages pending.
type Progress = (u64, u64, usize, u64);

/// A stream's message count, last sequence, and per subject its count and last sequence.
type StreamState = (u64, u64, BTreeMap<String, (usize, u64)>);

/// Every stream of the state and events accounts (message count, last sequence, per
/// subject count and last sequence) and every consumer of every stream.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Snapshot {
    streams: BTreeMap<String, StreamState>,
    consumers: BTreeMap<String, Progress>,
}

async fn snapshot(flue: &Flue) -> Snapshot {
    let mut streams = BTreeMap::new();
    let mut consumers = BTreeMap::new();
    for (account, client) in [
        ("state", flue.nats.client().await),
        ("events", flue.nats.events_client().await),
    ] {
        let js = jetstream::new(client);
        for name in stream_names(&js).await {
            let Ok(stream) = js.get_stream(&name).await else {
                continue;
            };
            let (messages, last, subjects) = stream_state(&stream).await;
            let names: Vec<String> = stream
                .consumer_names()
                .map(|n| n.expect("name"))
                .collect()
                .await;
            for consumer in names {
                let Ok(info) = stream.consumer_info(&consumer).await else {
                    continue;
                };
                consumers.insert(format!("{account}/{name}/{consumer}"), progress(&info));
            }
            streams.insert(format!("{account}/{name}"), (messages, last, subjects));
        }
    }
    Snapshot { streams, consumers }
}

/// True for what the served server may change itself: its own subjects, keys of its
/// tenant's data space, and the events and records about them.
fn served(subject: &str) -> bool {
    subject.split('.').any(|t| t == SERVED)
        || subject.starts_with(&format!("$KV.{}.", subject::DATA_BUCKET))
}

/// What changed from `before` to `after` beyond what the served server may change: every
/// stream's subjects but the served server's, and every consumer but its request
/// consumer and those that only follow what it writes (its answers, read by the gateway,
/// whose progress is compared by what they have left: nothing pending, nothing unacked).
fn changes(before: &Snapshot, after: &Snapshot, own: &[String]) -> Vec<String> {
    let mut changed = Vec::new();
    for (name, (messages, last, subjects)) in &before.streams {
        let Some((now_messages, now_last, now_subjects)) = after.streams.get(name) else {
            changed.push(format!("stream {name} is gone"));
            continue;
        };
        let all: BTreeSet<&String> = subjects.keys().chain(now_subjects.keys()).collect();
        let mut own_writes = false;
        for subject in all {
            let (a, b) = (subjects.get(subject), now_subjects.get(subject));
            if a == b {
                continue;
            }
            if served(subject) {
                own_writes = true;
            } else {
                changed.push(format!("{name}: {subject}: {a:?} -> {b:?}"));
            }
        }
        if !own_writes && (messages, last) != (now_messages, now_last) {
            changed.push(format!(
                "{name}: messages/last seq {:?} -> {:?}",
                (messages, last),
                (now_messages, now_last)
            ));
        }
    }
    for (name, was) in &before.consumers {
        let Some(now) = after.consumers.get(name) else {
            changed.push(format!("consumer {name} is gone"));
            continue;
        };
        if own.iter().any(|o| name.ends_with(&format!("/{o}"))) {
            continue;
        }
        let follows_the_served_server = !name.contains(&format!("/{REQUEST_STREAM}/"));
        let same = if follows_the_served_server {
            (was.2, was.3) == (now.2, now.3)
        } else {
            was == now
        };
        if !same {
            changed.push(format!("consumer {name}: {was:?} -> {now:?}"));
        }
    }
    changed
}

/// A Flue with a leaf node port, `web1` and `web2` registered (their consumers moved to
/// their sealed names), two deployments queued for
/// each and one of `web2`'s in flight (pulled, not acknowledged, by a state account user
/// standing for an agent at work), and `leaf-config --server web1`'s leaf user.
async fn hub_with_two_servers() -> (Flue, String, UserCreds, Vec<DeploymentId>) {
    let port = free_port();
    let flue = Flue::start_operator_leafnodes(&[], port).await;
    flue.register(SERVED).await;
    flue.register(VICTIM).await;
    // Both consumers moved to their sealed names, as agents of this release have them
    // moved: the attacker's guess, the older name, then names nothing.
    let client = flue.nats.client().await;
    for server in [SERVED, VICTIM] {
        flue_tests::consumers::sealed_by_heartbeat(&client, tenant().as_str(), server).await;
    }
    flue.script_config("hello", "#!/bin/sh\necho hello\n", &[], &[])
        .await;
    let mut deployments = Vec::new();
    for server in [SERVED, VICTIM, SERVED, VICTIM] {
        deployments.push(flue.deploy("hello", server, &[]).await.id);
    }
    published(&flue, &deployments).await;
    // Dropped unacknowledged: in flight until its ack wait, and then until a pull.
    hold_in_flight(&flue, VICTIM).await;
    let out = tempfile::tempdir().expect("tempdir");
    let dir = out.path().join("leaf");
    admin(&[
        "leaf-config",
        "--state-dir",
        flue.gateway.state_dir().to_str().expect("utf-8"),
        "--tenant",
        tenant().as_str(),
        "--hub",
        &format!("nats-leaf://127.0.0.1:{port}"),
        "--server",
        SERVED,
        "--out",
        dir.to_str().expect("utf-8"),
    ])
    .await;
    let creds = std::fs::read_to_string(dir.join("leaf.creds")).expect("leaf.creds");
    let creds = UserCreds::parse(&creds).expect("creds");
    (flue, format!("127.0.0.1:{port}"), creds, deployments)
}

/// Waits until the gateway has marked each deployment's request published in its record
/// (a write of its own that must not fall between snapshots).
async fn published(flue: &Flue, deployments: &[DeploymentId]) {
    let js = jetstream::new(flue.nats.client().await);
    let records = js
        .get_key_value(subject::DEPLOYMENTS_BUCKET)
        .await
        .expect("deployments bucket");
    for d in deployments {
        let key = format!("{}.{d}", tenant());
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let entry = records.get(&key).await.expect("read").expect("recorded");
            let record: serde_json::Value = serde_json::from_slice(&entry).expect("json");
            if record["request_published"] == true {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{d}: the request was never marked published"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// `subject` with each wildcard token made concrete (`k`).
fn concrete(subject: &str) -> String {
    subject
        .split('.')
        .map(|t| if t == "*" || t == ">" { "k" } else { t })
        .collect::<Vec<_>>()
        .join(".")
}

/// The inbox the positive controls are answered on: the served agent's, which the leaf
/// user may receive.
fn control_inbox(n: usize) -> String {
    format!(
        "{}.control.{n}",
        subject::agent_inbox_prefix(&tenant(), &id(SERVED))
    )
}

/// The request consumers the leaf user may pull from (whatever [`perms::agent`] grants
/// the served server's agent, read from its JWT).
fn own_consumers(creds: &UserCreds) -> Vec<String> {
    let claims: jwt::Claims<jwt::User> = jwt::decode(&creds.jwt).expect("the leaf user's jwt");
    let prefix = format!("$JS.API.CONSUMER.MSG.NEXT.{REQUEST_STREAM}.");
    let names: Vec<String> = claims
        .nats
        .publish
        .allow
        .iter()
        .filter_map(|s| s.strip_prefix(&prefix).map(str::to_owned))
        .collect();
    assert!(!names.is_empty(), "the leaf user pulls from no consumer");
    names
}

/// Pulls one request of `consumer` over `link` (no wait) and returns the answer (a
/// request, `404 No Messages`, or an error), which arrives on the served agent's inbox.
async fn pull(link: &mut LeafLink, consumer: &str, n: usize) -> Event {
    let inbox = control_inbox(n);
    let [_, next] = flue_proto::jsapi::consumer_next(REQUEST_STREAM, consumer);
    link.lmsg(&next, Some(&inbox), br#"{"batch":1,"no_wait":true}"#)
        .await;
    let answer = link
        .until(|e| matches!(e, Event::Msg { subject, .. } if *subject == inbox))
        .await;
    answer.unwrap_or_else(|| panic!("no answer to the pull of {consumer}: {:?}", link.seen()))
}

/// The request consumer of the state account that delivers `server`'s queue (found by
/// its filter, whatever its name).
async fn consumer_of(flue: &Flue, server: &str) -> jetstream::consumer::PullConsumer {
    let js = jetstream::new(flue.nats.client().await);
    let requests = js.get_stream(REQUEST_STREAM).await.expect("requests");
    let queue = subject::request(&tenant(), &id(server));
    let names: Vec<String> = requests
        .consumer_names()
        .map(|n| n.expect("name"))
        .collect()
        .await;
    for name in names {
        let consumer: jetstream::consumer::PullConsumer =
            requests.get_consumer(&name).await.expect("consumer");
        if consumer.cached_info().config.filter_subject == queue {
            return consumer;
        }
    }
    panic!("no consumer delivers {queue}")
}

/// Takes one request off `server`'s queue and keeps it unacknowledged: an agent at work.
async fn hold_in_flight(flue: &Flue, server: &str) -> jetstream::Message {
    let mut batch = consumer_of(flue, server)
        .await
        .fetch()
        .max_messages(1)
        .messages()
        .await
        .expect("pull");
    let held = tokio::time::timeout(WAIT, batch.next())
        .await
        .expect("in time")
        .expect("a request")
        .expect("no error");
    assert!(held.subject.as_str().ends_with(server), "{}", held.subject);
    held
}

/// `subject` and the subject the hub names in its refusal: a domain spelling is mapped by
/// the edge account's imports before the check (`$JS.flue.API.X` to `$JS.API.X`, a KV
/// put's to `$KV.…`).
fn as_refused(subject: &str) -> [String; 2] {
    let mapped = match subject.strip_prefix("$JS.flue.API.") {
        Some(rest) if rest.starts_with("$KV.") => rest.to_owned(),
        Some(rest) => format!("$JS.API.{rest}"),
        None => subject.to_owned(),
    };
    [subject.to_owned(), mapped]
}

#[tokio::test]
async fn a_leaf_link_reaches_only_its_servers_and_its_replies_change_nothing_of_the_others() {
    let (flue, hub, creds, deployments) = hub_with_two_servers().await;
    // Those the broker has: the sealed name the JWT names first; the older one it also
    // names is gone since the move.
    let mut own = own_consumers(&creds);
    let held = consumer_of(&flue, SERVED).await.cached_info().name.clone();
    own.retain(|name| *name == held);
    assert_eq!(
        own.len(),
        1,
        "web1's consumer {held} is not among the leaf user's"
    );
    let mut link = LeafLink::open(&hub, &creds).await;
    let inboxes = format!("{}.>", subject::agent_inbox_prefix(&tenant(), &id(SERVED)));
    link.send(format!("LS+ {inboxes}\r\n").as_bytes()).await;
    // The positive control: the link is admitted and pulls web1's request.
    let mut pulled = None;
    for (n, consumer) in own.iter().enumerate() {
        if let Event::Msg {
            reply: Some(reply),
            payload,
            ..
        } = pull(&mut link, consumer, n).await
            && reply.starts_with(&format!("$JS.ACK.{REQUEST_STREAM}.{consumer}."))
            && !payload.is_empty()
        {
            pulled = Some(reply);
        }
    }
    assert!(
        pulled.is_some(),
        "the link pulled none of web1's requests from {own:?}"
    );
    let mut attack = Attack {
        flue,
        hub,
        creds,
        link,
        own,
        // An attacker's guess at web2's consumer: the name the served server's follows.
        theirs: subject::request_consumer(&tenant(), &id(VICTIM)),
    };
    let mut failures = attack.direct_reach().await;
    failures.extend(attack.reply_injection().await);
    failures.extend(attack.ack_subjects().await);

    // Every record still reads; web2's deployments are still queued.
    let client = attack.flue.client();
    client
        .get_server(&id(VICTIM))
        .await
        .expect("web2's record reads");
    client
        .list_servers()
        .await
        .expect("every server record reads");
    for d in &deployments {
        let record = client
            .get_deployment(d)
            .await
            .expect("the deployment reads");
        assert_eq!(record.status, DeploymentStatus::Queued, "{d}");
    }
    assert!(
        failures.is_empty(),
        "the leaf link reached beyond web1:\n{}",
        failures.join("\n")
    );
}

/// The attack's parts, over one Flue and the link made with `leaf-config --server web1`'s
/// user; each returns what it found reached beyond web1.
struct Attack {
    flue: Flue,
    /// The hub's leaf node port.
    hub: String,
    creds: UserCreds,
    /// The link the allowed subjects are sent on (it must stay up).
    link: LeafLink,
    /// web1's request consumers (the leaf user's pulls).
    own: Vec<String>,
    /// The guessed name of web2's.
    theirs: String,
}

impl Attack {
    /// Waits until the JetStream API has handled what the link sent before: it answers in
    /// order of arrival.
    async fn sync(&mut self, n: usize) {
        let own = self.own[0].clone();
        let _ = pull(&mut self.link, &own, n).await;
    }

    /// a. Direct reach: each of these is refused by the hub on a link of its own (the hub
    /// says so, logs it and closes the link), and changes nothing.
    async fn direct_reach(&mut self) -> Vec<String> {
        let mut failures = Vec::new();
        let (t, served, victim) = (tenant(), id::<ServerId>(SERVED), id::<ServerId>(VICTIM));
        let before = snapshot(&self.flue).await;
        let hub_log_from = self.flue.nats.logs().len();
        let [next, next_domain] = flue_proto::jsapi::consumer_next(REQUEST_STREAM, &self.theirs);
        let [info, info_domain] = flue_proto::jsapi::consumer_info(REQUEST_STREAM, &self.theirs);
        let other: TenantId = id("other");
        let others_consumer = subject::request_consumer(&other, &served);
        let refused = [
            next,
            next_domain,
            info,
            info_domain,
            subject::response(&t, &victim),
            subject::heartbeat(&t, &victim),
            subject::request(&t, &victim),
            format!("$KV.{}.other.st.k", subject::DATA_BUCKET),
            format!("$JS.flue.API.$KV.{}.other.st.k", subject::DATA_BUCKET),
            format!("$KV.{}.{t}.{VICTIM}", subject::SERVERS_BUCKET),
            subject::response(&other, &served),
            subject::heartbeat(&other, &served),
            flue_proto::jsapi::consumer_next(REQUEST_STREAM, &others_consumer)[1].clone(),
            format!("$JS.API.STREAM.DELETE.{REQUEST_STREAM}"),
            format!("$JS.flue.API.STREAM.PURGE.{REQUEST_STREAM}"),
        ];
        for subject in &refused {
            let mut probe = LeafLink::open(&self.hub, &self.creds).await;
            let said = probe.refusal_of(subject).await;
            if !as_refused(subject)
                .iter()
                .any(|n| said.contains(&format!("Permissions Violation for Publish to \"{n}\"")))
            {
                failures.push(format!("{subject} not refused on the link: {said}"));
            }
        }
        let log = self.flue.nats.logs().lines()[hub_log_from..].join("\n");
        for subject in &refused {
            if !as_refused(subject)
                .iter()
                .any(|n| log.contains(&format!("Publish Violation on \"{n}\"")))
            {
                failures.push(format!("the hub's log has no violation for {subject}"));
            }
        }
        self.sync(10).await;
        let after = snapshot(&self.flue).await;
        for change in changes(&before, &after, &self.own) {
            failures.push(format!("direct reach changed {change}"));
        }
        failures
    }

    /// b. Reply injection: every subject the leaf user may publish, with every reply an
    /// attacker can name: each stream's stored and configured subjects, stream purge and
    /// delete, and the ack subjects of the consumers whose names can be guessed (web2's
    /// request consumer, the gateway's answers consumer, the operations consumer) for every
    /// sequence their streams hold. web2's in-flight request is the one an ack would take.
    async fn reply_injection(&mut self) -> Vec<String> {
        let before = snapshot(&self.flue).await;
        let replies = self.replies(&before).await;
        let claims: jwt::Claims<jwt::User> =
            jwt::decode(&self.creds.jwt).expect("the leaf user's jwt");
        assert_eq!(
            claims.nats.allowed_connection_types,
            [jwt::CONNECTION_TYPE_LEAFNODE]
        );
        let publish = claims.nats.publish.allow;
        let mut sent = 0;
        for allowed in &publish {
            let subject = concrete(allowed);
            let body: &[u8] = if subject.contains("MSG.NEXT") {
                br#"{"batch":1,"no_wait":true}"#
            } else if subject.starts_with("$KV.") || subject.contains(".API.$KV.") {
                // A value that, read back by a direct get with an ack reply, terminates.
                b"+TERM"
            } else if subject.starts_with("flue.") {
                b"leaf"
            } else {
                b""
            };
            for reply in &replies {
                self.link.lmsg(&subject, Some(reply), body).await;
                sent += 1;
            }
        }
        self.sync(11).await;
        self.sync(12).await;
        assert!(
            sent >= publish.len() * 100,
            "only {sent} publishes on {} subjects",
            publish.len()
        );
        // The gateway reads what the link wrote on web1's answer subject: its consumer has
        // nothing left once it has.
        let settled = tokio::time::Instant::now() + WAIT;
        let after = loop {
            let now = snapshot(&self.flue).await;
            let busy = now
                .consumers
                .iter()
                .any(|(n, p)| n.contains(&format!("/{RESPONSE_STREAM}/")) && (p.2, p.3) != (0, 0));
            if !busy || tokio::time::Instant::now() > settled {
                break now;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        // The link stayed up through it all: nothing it sent was refused.
        let errors: Vec<String> = self
            .link
            .seen()
            .into_iter()
            .filter(|l| l.starts_with("-ERR"))
            .collect();
        assert!(errors.is_empty(), "the link was refused: {errors:?}");
        changes(&before, &after, &self.own)
            .into_iter()
            .map(|c| format!("reply injection ({sent} LMSGs) changed {c}"))
            .collect()
    }

    /// Every reply [`Attack::reply_injection`] names.
    async fn replies(&self, before: &Snapshot) -> BTreeSet<String> {
        let (t, victim) = (tenant(), id::<ServerId>(VICTIM));
        let mut replies: BTreeSet<String> = BTreeSet::new();
        for (name, (_, _, subjects)) in &before.streams {
            replies.extend(subjects.keys().cloned());
            let stream = name.split_once('/').expect("account/stream").1;
            replies.extend(flue_proto::jsapi::api(&format!("STREAM.PURGE.{stream}")));
            replies.extend(flue_proto::jsapi::api(&format!("STREAM.DELETE.{stream}")));
        }
        let js = jetstream::new(self.flue.nats.client().await);
        for name in stream_names(&js).await {
            let mut stream = js.get_stream(&name).await.expect("stream");
            let info = stream.info().await.expect("info");
            replies.extend(info.config.subjects.iter().map(|s| concrete(s)));
        }
        replies.extend([
            subject::request(&t, &victim),
            subject::response(&t, &victim),
            subject::heartbeat(&t, &victim),
            format!("$KV.{}.{t}.{VICTIM}", subject::SERVERS_BUCKET),
        ]);
        for (stream, consumer) in [
            (REQUEST_STREAM, self.theirs.as_str()),
            (RESPONSE_STREAM, subject::GATEWAY_RESPONSE_CONSUMER),
            (OPERATIONS_STREAM, OPERATIONS_CONSUMER),
        ] {
            let last = before
                .streams
                .get(&format!("state/{stream}"))
                .map_or(0, |s| s.1);
            for seq in 1..=last.max(1) {
                replies.insert(format!("$JS.ACK.{stream}.{consumer}.1.{seq}.{seq}.0.0"));
            }
        }
        replies
    }

    /// c. web2's ack subject itself, sent as a subject: nats-server passes `$JS.ACK.` (and
    /// `_R_.`) on a leaf link without checking the link's permissions (`leafMsgAllowed`),
    /// so what keeps it from web2's requests is its consumer's name. Each sequence of the
    /// request stream as an ack, a termination and a nak, with web2's last request in
    /// flight.
    async fn ack_subjects(&mut self) -> Vec<String> {
        let _held = hold_in_flight(&self.flue, VICTIM).await;
        let before = snapshot(&self.flue).await;
        let last = before
            .streams
            .get(&format!("state/{REQUEST_STREAM}"))
            .map_or(0, |s| s.1);
        for seq in 1..=last {
            let ack = format!("$JS.ACK.{REQUEST_STREAM}.{}.1.{seq}.{seq}.0.0", self.theirs);
            for body in [&b""[..], b"+TERM", b"-NAK"] {
                self.link.lmsg(&ack, None, body).await;
            }
        }
        self.sync(13).await;
        let after = snapshot(&self.flue).await;
        changes(&before, &after, &self.own)
            .into_iter()
            .map(|c| format!("web2's ack subjects changed {c}"))
            .collect()
    }
}
