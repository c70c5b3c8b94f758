//! The physical floor of one deployment, shared by the benches (`e2e.rs`,
//! `throughput.rs`): a raw JetStream round trip on the broker Flue uses, and one
//! `fork/exec` of a no-op hook. A Flue deployment cannot be quicker than the two together:
//! the request must reach the agent and the answer come back through the broker, durably,
//! and the hook must run.
//!
//! Beside it, [`durable_write`]: one 4 KiB write made durable (`fsync`) where the agent
//! keeps its ledger. The floor has none, but an agent that keeps exactly-once across an
//! OS crash must make its `started` entry durable before the hook runs: floor + one such
//! write is the *durable floor*.

use std::path::Path;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::pull, stream};
use flue_tests::Nats;
use futures_util::StreamExt;

/// Publish a request into a stream, pull + ack it in a responder, publish a reply into a
/// second stream, pull + ack that: the broker work one Flue deployment needs at least.
/// `n` samples, in order taken.
pub async fn raw_round_trip(nats: &Nats, n: usize) -> Vec<Duration> {
    let client = nats.client().await;
    let js = jetstream::new(client);
    for (name, subj) in [("RAWREQ", "raw.req"), ("RAWRESP", "raw.resp")] {
        js.create_stream(stream::Config {
            name: name.into(),
            subjects: vec![subj.into()],
            ..Default::default()
        })
        .await
        .expect("stream");
    }
    let consumer = |stream_name: &'static str| {
        let js = js.clone();
        async move {
            js.get_stream(stream_name)
                .await
                .expect("stream")
                .create_consumer(pull::Config {
                    durable_name: Some(format!("{stream_name}-c")),
                    ..Default::default()
                })
                .await
                .expect("consumer")
        }
    };
    let req_consumer = consumer("RAWREQ").await;
    let resp_consumer = consumer("RAWRESP").await;
    let responder_js = js.clone();
    let responder = tokio::spawn(async move {
        let mut msgs = req_consumer.messages().await.expect("messages");
        while let Some(Ok(m)) = msgs.next().await {
            m.double_ack().await.expect("ack");
            responder_js
                .publish("raw.resp", m.payload.clone())
                .await
                .expect("publish")
                .await
                .expect("puback");
        }
    });
    let mut replies = resp_consumer.messages().await.expect("messages");
    let payload = bytes::Bytes::from(vec![b'x'; 512]);
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        js.publish("raw.req", payload.clone())
            .await
            .expect("publish")
            .await
            .expect("puback");
        let m = replies.next().await.expect("reply").expect("reply ok");
        m.ack().await.expect("ack");
        out.push(t.elapsed());
    }
    responder.abort();
    out
}

/// `n` runs of `hook` as the agent runs one (spawned, `{}` on stdin, its JSON read from
/// stdout), sorted.
pub async fn hook_spawn(hook: &Path, n: usize) -> Vec<Duration> {
    use tokio::io::AsyncWriteExt;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let mut child = tokio::process::Command::new(hook)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn hook");
        let mut stdin = child.stdin.take().expect("stdin");
        // A hook may exit without reading its stdin (EPIPE); the agent tolerates that too.
        let _ = stdin.write_all(b"{}").await;
        drop(stdin);
        let output = child.wait_with_output().await.expect("hook");
        let _: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
        out.push(t.elapsed());
    }
    out.sort();
    out
}

/// `n` appends of 4 KiB to a file in `dir`, each made durable with `fsync` (`sync_all`,
/// file data and size, as a log such as the agent's ledger needs), sorted. `dir` should be
/// on the filesystem of the agent's state dir.
// `e2e.rs` includes this file too and does not print it.
#[allow(dead_code)]
pub fn durable_write(dir: &Path, n: usize) -> Vec<Duration> {
    use std::io::Write;
    let path = dir.join("floor-fsync");
    let mut file = std::fs::File::create(&path).expect("fsync probe file");
    let block = vec![b'x'; 4096];
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        file.write_all(&block).expect("write");
        file.sync_all().expect("fsync");
        out.push(t.elapsed());
    }
    drop(file);
    let _ = std::fs::remove_file(&path);
    out.sort();
    out
}
