//! The broker's throughput ceiling for deployments, measured on the broker Flue uses with no
//! Flue code at all: what the least JetStream work a durable deployment needs costs this
//! machine, pipelined as far as JetStream lets it be. Flue's own throughput is read against
//! it (`throughput.rs`).
//!
//! One *raw deployment*:
//!
//! 1. a producer (standing for the gateway's accept path) writes a 1 KiB record into a KV
//!    bucket and publishes a 1 KiB request into a file stream, on the agent's own subject,
//!    waiting for both acknowledgements (accepted durably);
//! 2. the agent (its own connection and durable pull consumer, filtered on its subject)
//!    takes it, publishes a 512-byte answer into a second file stream, waits for that
//!    acknowledgement and acks the request;
//! 3. a collector (standing for the gateway's answer path; one pull consumer, 256 answers
//!    in hand at once) writes the answer into the record's key and acks the answer.
//!
//! With `events`, also the four lifecycle events a deployment must have at least, each an
//! acknowledged publish into a third file stream: `queued` (producer), `delivered` and
//! `started` (agent), `completed` (collector).
//!
//! Nothing is signed, sealed, validated or indexed, there is no HTTP and no hook: a floor
//! for Flue's design, not a design. Streams and bucket are deleted afterwards.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::pull, kv, stream};
use flue_tests::Nats;
use futures_util::StreamExt;

/// Answers the collector holds at once (applying them side by side).
const COLLECTOR_IN_FLIGHT: usize = 256;
/// Longest wait, after the window, for every accepted raw deployment to be answered.
const DRAIN_LIMIT: Duration = Duration::from_secs(300);

/// What one window of raw deployments did, counted until every one accepted in it was
/// answered.
pub struct Ceiling {
    /// Raw deployments accepted (record and request acknowledged) in the window.
    pub accepted: u64,
    /// The window, in seconds.
    pub window_secs: f64,
    /// From the window's start until every accepted one was answered, in seconds.
    pub drained_secs: f64,
    /// Broker CPU seconds, window start → drained.
    pub broker_cpu: f64,
    /// This process's CPU seconds (producers, agents, collector), window start → drained.
    pub bench_cpu: f64,
}

/// Runs raw deployments for `window` with `agents` agents (each its own connection and
/// consumer) and `producers` producers, each producing `in_flight` deployments side by
/// side and then the next ones, to the agents in turn. `cpu` reads a process's CPU
/// seconds.
pub async fn raw_throughput(
    nats: &Nats,
    agents: usize,
    producers: usize,
    in_flight: usize,
    window: Duration,
    events: bool,
    cpu: fn(u32) -> f64,
) -> Ceiling {
    let js = jetstream::new(nats.client().await);
    let mut streams = vec![("RAWTREQ", "rawt.req.*"), ("RAWTRESP", "rawt.resp")];
    if events {
        streams.push(("RAWTEVT", "rawt.evt.>"));
    }
    let records = raw_storage(&js, &streams, "RAWTREC").await;

    // The agents.
    let mut running = tokio::task::JoinSet::new();
    for i in 0..agents {
        let js = jetstream::new(nats.client().await);
        let consumer = js
            .get_stream("RAWTREQ")
            .await
            .expect("request stream")
            .create_consumer(pull::Config {
                durable_name: Some(format!("agent{i}")),
                filter_subject: format!("rawt.req.{i}"),
                ..Default::default()
            })
            .await
            .expect("agent consumer");
        running.spawn(async move {
            let mut requests = consumer.messages().await.expect("agent pull");
            let answer = bytes::Bytes::from(vec![b'a'; 512]);
            while let Some(Ok(m)) = requests.next().await {
                let id = String::from_utf8_lossy(&m.payload[..16]).into_owned();
                if events {
                    for what in ["delivered", "started"] {
                        acked(&js, format!("rawt.evt.{id}.{what}"), answer.clone()).await;
                    }
                }
                let mut reply = answer.to_vec();
                reply[..16].copy_from_slice(&m.payload[..16]);
                acked(&js, "rawt.resp".to_owned(), reply.into()).await;
                m.ack().await.expect("agent ack");
            }
        });
    }

    // The collector.
    let answered = Arc::new(AtomicU64::new(0));
    {
        let consumer = js
            .get_stream("RAWTRESP")
            .await
            .expect("answer stream")
            .create_consumer(pull::Config {
                durable_name: Some("collector".into()),
                max_ack_pending: 100_000,
                ..Default::default()
            })
            .await
            .expect("collector consumer");
        let (js, records, answered) = (js.clone(), records.clone(), answered.clone());
        running.spawn(async move {
            let answers = consumer.messages().await.expect("collector pull");
            answers
                .for_each_concurrent(COLLECTOR_IN_FLIGHT, |m| {
                    let (js, records, answered) = (js.clone(), records.clone(), answered.clone());
                    async move {
                        let m = m.expect("answer");
                        let id = String::from_utf8_lossy(&m.payload[..16]).into_owned();
                        records
                            .put(&id, m.payload.clone())
                            .await
                            .expect("store answer");
                        if events {
                            acked(&js, format!("rawt.evt.{id}.completed"), m.payload.clone()).await;
                        }
                        m.ack().await.expect("collector ack");
                        answered.fetch_add(1, Ordering::Relaxed);
                    }
                })
                .await;
        });
    }

    // The producers, for the window.
    let broker = nats.pid().expect("broker running");
    let me = std::process::id();
    let cpu_before = (cpu(broker), cpu(me));
    let answered_before = answered.load(Ordering::Relaxed);
    let accepted = Arc::new(AtomicU64::new(0));
    let next = Arc::new(AtomicU64::new(0));
    let t = Instant::now();
    let deadline = tokio::time::Instant::now() + window;
    let mut producing = tokio::task::JoinSet::new();
    for _ in 0..producers {
        let (js, records, accepted, next) =
            (js.clone(), records.clone(), accepted.clone(), next.clone());
        producing.spawn(async move {
            while tokio::time::Instant::now() < deadline {
                let batch = (0..in_flight).map(|_| {
                    let (js, records, accepted) = (&js, &records, &accepted);
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    async move {
                        let id = format!("d{n:015}");
                        let mut body = vec![b'r'; 1024];
                        body[..16].copy_from_slice(id.as_bytes());
                        let body = bytes::Bytes::from(body);
                        records.put(&id, body.clone()).await.expect("record");
                        if events {
                            acked(js, format!("rawt.evt.{id}.queued"), body.clone()).await;
                        }
                        let agent = n % agents as u64;
                        acked(js, format!("rawt.req.{agent}"), body).await;
                        accepted.fetch_add(1, Ordering::Relaxed);
                    }
                });
                futures_util::future::join_all(batch).await;
            }
        });
    }
    tokio::time::sleep_until(deadline).await;
    let window_secs = t.elapsed().as_secs_f64();
    while producing.join_next().await.is_some() {}
    let total = accepted.load(Ordering::Relaxed);
    flue_tests::wait_until("every raw deployment answered", DRAIN_LIMIT, || {
        (answered.load(Ordering::Relaxed) - answered_before >= total).then_some(())
    })
    .await;
    let figures = Ceiling {
        accepted: total,
        window_secs,
        drained_secs: t.elapsed().as_secs_f64(),
        broker_cpu: cpu(broker) - cpu_before.0,
        bench_cpu: cpu(me) - cpu_before.1,
    };
    running.abort_all();
    while running.join_next().await.is_some() {}
    for (name, _) in &streams {
        let _ = js.delete_stream(name).await;
    }
    let _ = js.delete_key_value("RAWTREC").await;
    figures
}

/// Publishes and waits for the stream's acknowledgement.
/// Creates the file streams `streams` (name, subjects) and returns a new file KV bucket
/// `bucket` keeping one value a key: a raw deployment's storage.
pub async fn raw_storage(
    js: &jetstream::Context,
    streams: &[(&str, &str)],
    bucket: &str,
) -> kv::Store {
    for (name, subject) in streams {
        js.create_stream(stream::Config {
            name: (*name).into(),
            subjects: vec![(*subject).into()],
            storage: stream::StorageType::File,
            ..Default::default()
        })
        .await
        .expect("raw stream");
    }
    js.create_key_value(kv::Config {
        bucket: bucket.into(),
        history: 1,
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await
    .expect("raw bucket")
}

/// Publishes and waits for the stream's acknowledgement.
pub async fn acked(js: &jetstream::Context, subject: String, payload: bytes::Bytes) {
    js.publish(subject, payload)
        .await
        .expect("publish")
        .await
        .expect("publish acknowledged");
}
