//! Long polls share one broker watch and read the records they wait on together: 2,000
//! clients waiting at once, on distinct deployments and on the same ones, on default
//! settings, cost the broker no consumer and no read each, none is answered 503, and every
//! one of them gets the right answer.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use flue_proto::{Deployment, DeploymentId, DeploymentStatus};
use flue_tests::{Flue, RecordReads, WAIT};
use futures_util::StreamExt;
use futures_util::future::join_all;

use super::health_until;

const POLLS: usize = 2_000;
/// One poll each (distinct deployments), and [`SHARED`] of them polled by more.
const DEPLOYMENTS: usize = 1_000;
/// The first this many deployments get the polls past [`DEPLOYMENTS`] too (six each).
const SHARED: usize = 200;
/// Every this-many-th deployment runs (its agent starts once every poll waits); the rest
/// stay QUEUED, so their polls end with the unchanged record.
const RUNS_EVERY: usize = 10;

async fn deployments_consumers(flue: &Flue) -> usize {
    let js = async_nats::jetstream::new(flue.nats.client().await);
    let mut stream = js
        .get_stream(format!("KV_{}", flue_proto::subject::DEPLOYMENTS_BUCKET))
        .await
        .expect("deployments stream");
    stream
        .info()
        .await
        .expect("stream info")
        .state
        .consumer_count
}

/// Raises this process's soft open-file limit to `wanted` (at most the hard limit): the
/// test holds 2,000 sockets, and so does the gateway, which inherits the limit.
#[allow(unsafe_code)]
fn raise_open_file_limit(wanted: libc::rlim_t) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: both calls only read or write the one `rlimit` owned here.
    let read = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    assert_eq!(read, 0, "getrlimit(RLIMIT_NOFILE)");
    if limit.rlim_cur >= wanted {
        return;
    }
    limit.rlim_cur = wanted.min(limit.rlim_max);
    // SAFETY: as above.
    let written = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
    assert_eq!(written, 0, "setrlimit(RLIMIT_NOFILE)");
}

#[tokio::test]
async fn two_thousand_long_polls_answer_right_and_cost_the_broker_no_consumer_each() {
    raise_open_file_limit(8192);
    // Default settings: the broker deadline (`--broker-timeout-ms`) is the default 2 s.
    let flue = Flue::start().await;
    flue.script_config("c", "#!/bin/sh\necho done\n", &[], &[])
        .await;
    flue.register("runs").await;
    flue.register("idle").await;
    let created: Vec<(DeploymentId, DeploymentStatus)> = futures_util::stream::iter(0..DEPLOYMENTS)
        .map(|i| {
            let flue = &flue;
            async move {
                let (server, status) = if i % RUNS_EVERY == 0 {
                    ("runs", DeploymentStatus::Complete)
                } else {
                    ("idle", DeploymentStatus::Queued)
                };
                (flue.deploy("c", server, &[]).await.id, status)
            }
        })
        .buffered(16)
        .collect()
        .await;
    let expected: BTreeMap<DeploymentId, DeploymentStatus> = created.iter().cloned().collect();
    let base = flue.gateway.url().to_owned();
    let before = deployments_consumers(&flue).await;
    let reads = RecordReads::count(&flue).await;

    // One connection per poll (HTTP/1.1 holds one request at a time).
    let http = flue.gateway.http_with(
        reqwest::Client::builder()
            .http1_only()
            .pool_max_idle_per_host(0)
            .build()
            .expect("http client"),
    );
    // Polls answered before the agent starts are refusals (counted at the end): the wait
    // below is for every poll to be either waiting or answered.
    let answered = Arc::new(AtomicUsize::new(0));
    let polls = (0..POLLS).map(|i| {
        let id = created[if i < DEPLOYMENTS { i } else { i % SHARED }]
            .0
            .clone();
        // Long enough for all 2,000 to be waiting at once on a busy machine.
        let wait = if expected[&id] == DeploymentStatus::Complete {
            60
        } else {
            25
        };
        let url = format!("{base}/v1/deployments/{id}?wait_secs={wait}");
        let (http, answered) = (http.clone(), answered.clone());
        tokio::spawn(async move {
            let resp = http.get(&url).send().await.expect("long poll sent");
            let status = resp.status();
            let text = resp.text().await.expect("long poll body");
            answered.fetch_add(1, Ordering::SeqCst);
            (id, status, text)
        })
    });
    let started = std::time::Instant::now();
    let polls: Vec<_> = polls.collect();

    let health_client = flue.http();
    health_until(
        &health_client,
        &base,
        "/readyz",
        "every long poll to wait (or be answered)",
        WAIT,
        |_, h| h.long_polls + answered.load(Ordering::SeqCst) == POLLS,
    )
    .await;
    let during = deployments_consumers(&flue).await;
    let reads = reads.so_far();
    eprintln!(
        "{POLLS} long polls waiting after {:?}, {reads} broker reads of their records; consumers on the deployments stream: {before} before, {during} during",
        started.elapsed()
    );
    // One read per poll would be 2,000: a key waited on is read once at most, and keys
    // starting together are read in batches (how many depends on how fast they come).
    assert!(
        reads <= DEPLOYMENTS,
        "{reads} broker reads of deployment records for {POLLS} long polls on {DEPLOYMENTS} deployments"
    );
    assert!(
        during <= before.max(1) + 1,
        "{during} consumers on the deployments stream while {POLLS} clients wait ({before} before)"
    );

    let _agent = flue.agent("runs", &[]).await;
    let answers = tokio::time::timeout(WAIT + Duration::from_secs(30), join_all(polls))
        .await
        .expect("every long poll answers");
    let mut refused = BTreeMap::<u16, usize>::new();
    let mut first_refusal = None;
    let mut bodies = Vec::with_capacity(POLLS);
    for answer in answers {
        let (id, status, text) = answer.expect("poll task");
        if status.is_success() {
            bodies.push((id, text));
        } else {
            *refused.entry(status.as_u16()).or_default() += 1;
            first_refusal.get_or_insert(format!("{id}: {status} {text}"));
        }
    }
    assert!(
        refused.is_empty(),
        "of {POLLS} long polls, refused by status: {refused:?} (first: {first_refusal:?})"
    );
    for (id, text) in bodies {
        let d: Deployment = serde_json::from_str(&text).expect("a deployment");
        assert_eq!(d.id, id);
        assert_eq!(d.status, expected[&id], "{d:?}");
    }
    let after = health_until(
        &health_client,
        &base,
        "/readyz",
        "no waiter left",
        WAIT,
        |_, h| h.long_polls == 0,
    )
    .await;
    assert_eq!(after.long_polls, 0);
    assert!(deployments_consumers(&flue).await <= before.max(1) + 1);
}

#[tokio::test]
async fn a_long_poll_waiting_across_a_broker_restart_still_sees_the_deployment_finish() {
    let mut flue = Flue::start().await;
    flue.script_config("c", "#!/bin/sh\necho done\n", &[], &[])
        .await;
    flue.register("s1").await;
    let d = flue.deploy("c", "s1", &[]).await;
    let base = flue.gateway.url().to_owned();
    let url = format!("{base}/v1/deployments/{}?wait_secs=60", d.id);
    let poller = flue.http();
    let poll = tokio::spawn(async move {
        let resp = poller.get(url).send().await.expect("long poll sent");
        assert!(resp.status().is_success(), "{}", resp.status());
        resp.json::<Deployment>().await.expect("a deployment")
    });
    let http = flue.http();
    health_until(&http, &base, "/readyz", "the poll to wait", WAIT, |_, h| {
        h.long_polls == 1
    })
    .await;

    flue.nats.restart().await;
    health_until(
        &http,
        &base,
        "/readyz",
        "the broker to be back",
        WAIT,
        |s, _| s == 200,
    )
    .await;
    let _agent = flue.agent("s1", &[]).await;
    let answered = tokio::time::timeout(WAIT, poll)
        .await
        .expect("the long poll answers")
        .expect("poll task");
    assert_eq!(answered.status, DeploymentStatus::Complete, "{answered:?}");
}

#[tokio::test]
async fn polls_of_records_and_of_missing_ids_read_together_answer_each_its_own() {
    let flue = Flue::start().await;
    flue.script_config("c", "#!/bin/sh\necho done\n", &[], &[])
        .await;
    flue.register("idle").await;
    let mut ids = Vec::new();
    for _ in 0..40 {
        ids.push(flue.deploy("c", "idle", &[]).await.id);
    }
    let base = flue.gateway.url().to_owned();
    let http = flue.http();
    // Started together, so that the reader's batches mix keys with records and keys
    // without (the broker leaves those out of a batch's answer).
    let polls = (0..80).map(|i| {
        let (http, base) = (http.clone(), base.clone());
        let id = if i % 2 == 0 {
            Some(ids[i / 2].clone())
        } else {
            None
        };
        async move {
            let path = id
                .as_ref()
                .map_or_else(|| format!("missing-{i}"), ToString::to_string);
            let resp = http
                .get(format!("{base}/v1/deployments/{path}?wait_secs=1"))
                .send()
                .await
                .expect("long poll sent");
            let status = resp.status();
            let text = resp.text().await.expect("body");
            (id, status, text)
        }
    });
    let answers = tokio::time::timeout(WAIT, join_all(polls))
        .await
        .expect("every long poll answers");
    for (id, status, text) in answers {
        match id {
            Some(id) => {
                assert_eq!(status, reqwest::StatusCode::OK, "{id}: {text}");
                let d: Deployment = serde_json::from_str(&text).expect("a deployment");
                assert_eq!((d.id, d.status), (id, DeploymentStatus::Queued));
            }
            None => assert_eq!(status, reqwest::StatusCode::NOT_FOUND, "{text}"),
        }
    }
}
