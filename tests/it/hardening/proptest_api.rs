//! A property test against a real gateway process: generated hostile requests over real
//! HTTP never get a 5xx, never go unanswered, every 4xx carries the JSON error body, and
//! a normal deployment to a real agent completes afterwards.
//!
//! The cases come from a fixed seed, so a run is repeatable; `PROPTEST_CASES` changes how
//! many (default 1500). A failing case is shrunk a bounded number of times and printed.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flue_proto::{DeploymentStatus, ErrorBody};
use flue_tests::Flue;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};
use reqwest::Method;

use super::hostile::{self, HostileRequest};

/// Longest a request may go unanswered (a long poll in the cases waits at most 2 s).
const ANSWER_WITHIN: Duration = Duration::from_secs(10);
/// Shrinking stops after this many steps: each step is a few real requests.
const MAX_SHRINK_ITERS: u32 = 64;
/// Cases in a run without `PROPTEST_CASES`: about 15 s on a shared 2-core machine.
const DEFAULT_CASES: u32 = 1500;
/// The seed of every run (any fixed 32 bytes).
const SEED: [u8; 32] = *b"flue hardening: hostile requests";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_requests_never_get_a_5xx_or_a_hang_and_deployments_still_complete() {
    let flue = Flue::start().await;
    flue.register(hostile::SERVER).await;
    let _agent = flue.agent(hostile::SERVER, &[]).await;
    flue.script_config("c1", "#!/bin/sh\necho ok\n", &[], &[])
        .await;
    let base = flue.gateway.url().to_owned();
    let http = flue.gateway.http_with(
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            // A fresh connection per request: a hostile request must not leave a pooled
            // connection behind that the next request would fail on through no fault of its own.
            .pool_max_idle_per_host(0)
            .build()
            .expect("http client"),
    );

    let runtime = tokio::runtime::Handle::current();
    // How often each status came back, to show what the cases reached.
    let seen = Arc::new(Mutex::new(BTreeMap::<u16, u32>::new()));
    let counts = Arc::clone(&seen);
    let started = Instant::now();
    let (cases, outcome) = tokio::task::spawn_blocking(move || {
        let config = Config {
            cases: cases_from_env(),
            max_shrink_iters: MAX_SHRINK_ITERS,
            failure_persistence: None,
            ..Config::default()
        };
        let cases = config.cases;
        let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &SEED);
        let mut runner = TestRunner::new_with_rng(config, rng);
        let outcome = runner.run(&hostile::case(), |(first, then)| {
            runtime.block_on(async {
                answer(&http, &base, &first, &counts).await?;
                answer(&http, &base, &then, &counts).await
            })
        });
        (cases, outcome)
    })
    .await
    .expect("the property runner");
    match outcome {
        Ok(()) => {}
        Err(TestError::Fail(reason, (first, then))) => {
            panic!("{reason}\nminimal case: {first:?}\nthen: {then:?}")
        }
        Err(TestError::Abort(reason)) => panic!("aborted: {reason}"),
    }
    eprintln!(
        "{cases} hostile cases answered in {:?}; statuses: {:?}",
        started.elapsed(),
        seen.lock().expect("counts")
    );

    let deployment = flue.deploy("c1", hostile::SERVER, &[]).await;
    let done = flue.finished(&deployment.id).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
}

/// `PROPTEST_CASES`, or [`DEFAULT_CASES`].
fn cases_from_env() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES)
}

/// Sends `request` and checks its answer: in time, no 5xx, a 4xx with an `ErrorBody`.
async fn answer(
    http: &flue_tests::Http,
    base: &str,
    request: &HostileRequest,
    seen: &Mutex<BTreeMap<u16, u32>>,
) -> Result<(), TestCaseError> {
    let method = Method::from_bytes(request.method.as_bytes())
        .map_err(|e| TestCaseError::reject(format!("not a method: {e}")))?;
    let head = method == Method::HEAD;
    let mut builder = http
        .request(method, format!("{base}{}", request.target))
        .body(request.body.clone());
    if let Some(ct) = &request.content_type {
        builder = builder.header(reqwest::header::CONTENT_TYPE, ct);
    }
    let exchange = async {
        let response = builder.send().await?;
        let status = response.status();
        // A 2xx may be an event stream that never ends: its head is the answer.
        if status.is_success() {
            return Ok((status, None));
        }
        let body = response.bytes().await?;
        Ok::<_, reqwest::Error>((status, Some(body)))
    };
    let (status, body) = tokio::time::timeout(ANSWER_WITHIN, exchange)
        .await
        .map_err(|_| TestCaseError::fail(format!("no answer within {ANSWER_WITHIN:?}")))?
        .map_err(|e| TestCaseError::fail(format!("the exchange failed: {e}")))?;
    *seen
        .lock()
        .expect("counts")
        .entry(status.as_u16())
        .or_default() += 1;
    let text = || String::from_utf8_lossy(body.as_deref().unwrap_or_default()).into_owned();
    if status.is_server_error() {
        return Err(TestCaseError::fail(format!(
            "answered {status}: {}",
            text()
        )));
    }
    // A HEAD answer has no body, by HTTP's rules.
    if status.is_client_error() && !head {
        let error: ErrorBody = serde_json::from_slice(body.as_deref().unwrap_or_default())
            .map_err(|e| {
                TestCaseError::fail(format!(
                    "{status} without a JSON error body ({e}): {}",
                    text()
                ))
            })?;
        if error.error.code.is_empty() || error.error.message.is_empty() {
            return Err(TestCaseError::fail(format!(
                "{status} with an empty error: {error:?}"
            )));
        }
    }
    if !status.is_success() && !status.is_client_error() {
        return Err(TestCaseError::fail(format!(
            "unexpected status {status}: {}",
            text()
        )));
    }
    Ok(())
}
