//! Long polls share one broker watch: 2,000 clients waiting at once cost the broker no
//! consumer each, and every one of them gets the right answer.

use std::collections::BTreeMap;
use std::time::Duration;

use flue_proto::{Deployment, DeploymentId, DeploymentStatus};
use flue_tests::{Flue, WAIT};
use futures_util::future::join_all;

use super::health_until;

const POLLS: usize = 2_000;
const DEPLOYMENTS: usize = 250;
/// Tries a poll answered 503 ("retry later") gets before the test gives up on it.
const RETRIES_503: u32 = 5;

/// A spread of up to `range` ms, derived from the deployment id (no random source needed).
fn rand_ms(id: &DeploymentId, range: u64) -> u64 {
    id.as_str()
        .bytes()
        .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)))
        % range
}

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
    let flue = Flue::start().await;
    flue.script_config("c", "#!/bin/sh\necho done\n", &[], &[])
        .await;
    // Deployments of "runs" complete during the wait (its agent starts once every poll
    // waits); those of "idle" stay QUEUED, so their polls end with the unchanged record.
    flue.register("runs").await;
    flue.register("idle").await;
    let mut expected: BTreeMap<DeploymentId, DeploymentStatus> = BTreeMap::new();
    for i in 0..DEPLOYMENTS {
        let (server, status) = if i % 2 == 0 {
            ("runs", DeploymentStatus::Complete)
        } else {
            ("idle", DeploymentStatus::Queued)
        };
        expected.insert(flue.deploy("c", server, &[]).await.id, status);
    }
    let ids: Vec<DeploymentId> = expected.keys().cloned().collect();
    let base = flue.gateway.url().to_owned();
    let before = deployments_consumers(&flue).await;

    // One connection per poll (HTTP/1.1 holds one request at a time).
    let http = flue.gateway.http_with(
        reqwest::Client::builder()
            .http1_only()
            .pool_max_idle_per_host(0)
            .build()
            .expect("http client"),
    );
    let polls = (0..POLLS).map(|i| {
        let id = ids[i % ids.len()].clone();
        // Long enough for all 2,000 to be waiting at once on a busy machine.
        let wait = if expected[&id] == DeploymentStatus::Complete {
            60
        } else {
            25
        };
        let url = format!("{base}/v1/deployments/{id}?wait_secs={wait}");
        let http = http.clone();
        tokio::spawn(async move {
            // A 503 is the gateway saying "retry later" (a broker call past its deadline
            // while 2,000 polls start on a busy machine): a client polls again, and so
            // does this one, a few times at most.
            let mut attempt = 0;
            loop {
                attempt += 1;
                let resp = http.get(&url).send().await.expect("long poll sent");
                let status = resp.status();
                let text = resp.text().await.expect("long poll body");
                if status == reqwest::StatusCode::SERVICE_UNAVAILABLE && attempt < RETRIES_503 {
                    eprintln!("long poll of {id}: 503 (attempt {attempt}), polling again");
                    // Retry backoff, spread so the retries do not arrive together.
                    let pause = 250 * u64::from(attempt) + rand_ms(&id, 250);
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                    continue;
                }
                assert!(status.is_success(), "long poll of {id}: {status} {text}");
                let d: Deployment = serde_json::from_str(&text).expect("a deployment");
                return (id, d);
            }
        })
    });
    let started = std::time::Instant::now();
    let polls: Vec<_> = polls.collect();

    let health_client = flue.http();
    health_until(
        &health_client,
        &base,
        "/readyz",
        "every long poll to wait",
        WAIT,
        |_, h| h.long_polls == POLLS,
    )
    .await;
    let during = deployments_consumers(&flue).await;
    eprintln!(
        "{POLLS} long polls waiting after {:?}; consumers on the deployments stream: {before} before, {during} during",
        started.elapsed()
    );
    assert!(
        during <= before.max(1) + 1,
        "{during} consumers on the deployments stream while {POLLS} clients wait ({before} before)"
    );

    let _agent = flue.agent("runs", &[]).await;
    let answers = tokio::time::timeout(WAIT + Duration::from_secs(30), join_all(polls))
        .await
        .expect("every long poll answers");
    for answer in answers {
        let (id, d) = answer.expect("poll task");
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
