//! `flue-agent`: the in-server daemon that applies deployments from its request queue.
//!
//! The agent connects *out* to NATS (it never speaks HTTP), looks up the durable pull
//! consumer the gateway created for its server (it never creates one, and waits while it
//! does not exist yet), and pulls one request at a time, in queue order.
//!
//! # Exactly once
//!
//! A local sled ledger at `<state-dir>/ledger` records, per request, `started` (naming the
//! hook's process group) before the hook runs and `done` with the result before the answer
//! is published; each write is flushed to disk before the next step: two flushes per
//! deployment ([`ledger`] says why one before the hook is enough). A request is identified by its tenant, server,
//! deployment id and the time the gateway accepted it ([`ledger::LedgerKey`]), so a
//! redelivery finds its entry while a new request reusing a deployment id (the broker lost
//! its state, or the state dir served another server) runs. For every request:
//!
//! - `done` in the ledger: the recorded answer is published again (same JetStream message
//!   id, so the broker drops the duplicate) and the request is acked; nothing runs.
//! - `started` without a result: the agent died mid-hook; it reports FAILED `interrupted`
//!   and never runs the hook again. Nothing of that hook runs by then: its guard killed
//!   its process group when the agent died, and at start the agent kills any group the
//!   ledger says was still running ([`orphans`]).
//! - unknown: refused with FAILED when it is for another tenant/server, of another
//!   protocol version, or already past `expires_at` (`expired before it was applied`);
//!   otherwise `started` is recorded and announced, the hook runs (the request is touched
//!   every 3 s, [`deploy::PROGRESS_INTERVAL`], well within the 10 s ack wait the gateway
//!   gives the consumer, so the broker does not redeliver it), the result is recorded,
//!   published until the broker acknowledges it, and only then is the request acked.
//!
//! A hook still running at `expires_at` is killed and reported FAILED `timed out`.
//!
//! The ledger is pruned at start and hourly: `done` entries whose hook finished more than
//! `--ledger-retention-days` (default 30) ago are removed, since the gateway's streams keep a
//! request for at most `--stream-max-age-secs` (default 7 days) and it cannot be redelivered
//! later. `started` entries are never removed.
//!
//! # Hooks
//!
//! The heat-config hook protocol: the executable `<hook-dir>/<group>` (first match over the
//! hook dirs) gets the deployment item as JSON on stdin and prints one JSON object with
//! `deploy_stdout`, `deploy_stderr`, `deploy_status_code` and the outputs. The `script`
//! group falls back to a built-in equivalent of `heat-config-script`. `deploy_stdout` and
//! `deploy_stderr` keep their first 1 MiB each ([`hook::MAX_STREAM_BYTES`]), and are
//! shortened further if the whole answer would not fit in one broker message. Every hook
//! runs in its own process group, so a Ctrl-C at the agent's terminal does not reach it and
//! the agent can stop everything it started. The group is led by a guard,
//! `flue-hook-guard` next to the agent's executable, else `flue-agent hook-guard` (hidden),
//! which kills it when the agent dies, however it dies ([`guard`]): a hook never outlives
//! its agent.
//!
//! The item's `config` is the body for the deployment's action ([`item`]), and every hook
//! gets `FLUE_DATA_SOCKET`, `FLUE_STACK_ID`, `FLUE_SERVER_ID`, `FLUE_DEPLOYMENT_ID`,
//! `FLUE_AGENT` and the agent's directory appended to `PATH` ([`hook::env`]).
//!
//! # Live progress
//!
//! Every request pulled is announced at once with a `delivered` message (redeliveries
//! too), unless its hook starts at once: then `started`, milliseconds later, stands for
//! both (the gateway reports the `delivered` it went past). While a hook runs, its output lines go to the gateway as `progress` messages
//! (`deployment.progress` events): both streams of the built-in `script` hook, only stderr
//! of an external hook (its stdout is the JSON result, which may hold hidden outputs).
//! Lines are cut at 4 KiB (`…[truncated]`), batched at most every 200 ms or at 64 KiB, at
//! most 256 KiB per deployment as sent (the last message then says `truncated`), with every
//! hidden input's value and the broker URL's credentials replaced by `<hidden>`; all of them
//! are published before the result, which keeps the full output up to 1 MiB per stream, with
//! the same values and the hook's hidden outputs replaced too. See [`progress`].
//!
//! # Data space
//!
//! While a hook runs, the agent serves `<state-dir>/data.sock` (a 0600 unix socket) so that
//! the hook can `flue-agent data put | get [--wait] | delete` keys of its own stack, stored
//! in the KV bucket the gateway created; see [`data`].
//!
//! # Shutdown (SIGTERM / SIGINT)
//!
//! The agent stops pulling at once. An idle agent exits promptly with status 0. A running
//! hook may finish for up to the shutdown grace period (`--shutdown-grace-secs`, default
//! 30 s) and is reported normally; past that, its process group gets SIGTERM, then SIGKILL
//! 5 s later, and the deployment is recorded and reported FAILED
//! `interrupted: agent shut down`. The answer then gets up to 5 s more to reach the broker
//! (if it cannot, the request stays unacked and its redelivery is answered from the
//! ledger). Finally the agent sends its last heartbeat, `stopping` (the gateway reports the
//! server offline at once), flushes and drains the connection, and exits with status 0.
//!
//! # Presence
//!
//! The agent publishes a heartbeat on `flue.<tenant>.hb.<server>` at start, every
//! `--heartbeat-secs` (default 3, 1 to 60) and right after every reconnection; heartbeats go
//! on during the shutdown grace period. See [`heartbeat`].

// The library's surface: what the binaries (`main.rs`, `flue-hook-guard`) and the tests
// need, every other module the crate's own (`pub(crate)`), held by `tests/it/structure.rs`.
// The binaries take `config`, `data` (its `cli`), `doctor`, `guard` and `upgrade`. The
// tests' simulated agents (`flue_tests::sim`) speak the agent's protocol with its own
// pieces, not copies of them: `answer`, `heartbeat`, `connect`, `rights` and
// `worker::PULL_EXPIRES`; the hook-lifetime tests run real hooks under `process`,
// `guard` and `ledger`, with the agent's binaries; the upgrade tests name `upgrade`'s
// file paths.
pub mod answer;
pub mod config;
pub mod connect;
pub(crate) mod credentials;
pub mod data;
pub(crate) mod deploy;
pub mod doctor;
pub(crate) mod error;
pub mod guard;
pub mod heartbeat;
pub(crate) mod hook;
pub(crate) mod item;
pub mod ledger;
pub(crate) mod metrics;
pub(crate) mod orphans;
pub mod process;
pub(crate) mod progress;
pub mod rights;
pub(crate) mod script;
pub(crate) mod sealing;
mod sys;
pub mod upgrade;
pub mod worker;

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

pub use config::{Config, RunArgs};
pub use error::Error;

/// The agent's retries on the broker (reconnections, consumer look-ups, pulls, answers,
/// acks): 100 ms doubling to 5 s, jittered ([`flue_proto::retry`]). At the crate's root so
/// that every module takes it without importing another.
pub const RETRY: flue_proto::retry::Policy =
    flue_proto::retry::Policy::new(Duration::from_millis(100), Duration::from_secs(5));

/// Longest wait for buffered acks and answers to reach the broker on the way out.
const FLUSH_ON_EXIT: Duration = Duration::from_secs(2);

/// Runs the agent until `shutdown` is cancelled (see the crate docs for what happens to a
/// running hook). Returns an error only when exactly-once cannot be kept (the ledger
/// failed) or the broker URL is unusable.
pub async fn run(config: Config, shutdown: CancellationToken) -> Result<(), Error> {
    // Before anything else: an agent that cannot tell the gateway's requests from
    // anyone else's does not start (secure by default).
    let credentials = credentials::load(&config)?.map(std::sync::Arc::new);
    if credentials.is_none() {
        if !config.insecure_unsigned_requests {
            return Err(Error::NoCredentials);
        }
        warn!(
            "INSECURE: --insecure-unsigned-requests: running requests nobody signed and answering unsigned; anyone who can publish on this server's request subject can run hooks here. Development only."
        );
    }
    if config.insecure_dev_broker && credentials.as_ref().is_none_or(|c| c.user.jwt.is_empty()) {
        warn!(
            "INSECURE: --insecure-dev-broker: connecting to the broker without a broker user; the broker checks nothing this agent does. Development only."
        );
    }
    // The user seed signs every answer; it was checked when the connection was set up.
    let signer = match &credentials {
        Some(c) => Some(std::sync::Arc::new(
            nkeys::KeyPair::from_seed(&c.user.seed).map_err(|e| Error::Credentials {
                path: config.creds_file.clone().unwrap_or_default(),
                reason: format!("the user nkey seed is not valid: {e}"),
            })?,
        )),
        None => None,
    };
    if let Some(key) = &config.release_key {
        flue_proto::upgrade::release_public_key(key)
            .map_err(|e| Error::ReleaseKey(e.to_string()))?;
    }
    std::fs::create_dir_all(&config.state_dir).map_err(|source| Error::StateDir {
        path: config.state_dir.clone(),
        source,
    })?;
    // An upgrade under way: roll back, or give the new build its time to come up.
    upgrade::on_start(&config);
    let ledger = ledger::Ledger::open(&config.ledger_path())?;
    // Before anything is pulled: a request found `started` is reported interrupted only
    // once nothing of its hook runs any more.
    orphans::kill_unfinished_hooks(&ledger).await?;
    // The JWT saved after joining stacks lives in the state directory, made above.
    let rights = match &credentials {
        Some(c) => rights::Rights::load(&config, &c.user)?,
        None => None,
    };
    let broker = connect::connect(&config, credentials.as_deref(), rights.as_ref()).await?;
    info!(
        tenant = %config.tenant,
        server = %config.server_id,
        nats_url = %flue_proto::nats_url::redact(&config.nats_url),
        version = %config.version,
        "agent starting"
    );
    // Heartbeats go on while a hook finishes during the shutdown grace period, so they have
    // a token of their own, cancelled once the worker is done.
    let counters = std::sync::Arc::new(metrics::Counters::default());
    let heartbeats = std::sync::Arc::new(
        heartbeat::Heartbeats::new(
            broker.client.clone(),
            config.tenant.clone(),
            config.server_id.clone(),
            config.heartbeat_interval,
        )
        .with_counters(counters.clone())
        .with_version(&config.version)
        .with_ledger_created_at(ledger.created_at()?)
        // Its JWT names the sealed consumer, looked up first (`connect::request_consumers`).
        .with_sealed_consumer(broker.consumers.len() > 1),
    );
    let stop_heartbeats = CancellationToken::new();
    let heartbeat_task = tokio::spawn({
        let heartbeats = heartbeats.clone();
        let connects = broker.connects.clone();
        let cancel = stop_heartbeats.clone();
        async move { heartbeat::run(&heartbeats, connects, cancel).await }
    });
    let _stop_heartbeats_on_exit = stop_heartbeats.clone().drop_guard();
    let agent = worker::Agent {
        responder: answer::Responder::new(
            broker.js.clone(),
            config.tenant.clone(),
            config.server_id.clone(),
            signer,
        ),
        config,
        credentials,
        rights,
        broker,
        ledger,
        counters,
        shutdown,
        guards: process::Ahead::default(),
    };
    let outcome = worker::run(&agent).await;
    stop_heartbeats.cancel();
    if let Err(e) = heartbeat_task.await {
        debug!(error = %e, "heartbeat task ended abnormally");
    }
    // The agent is about to exit: the gateway reports it offline at once.
    heartbeats.stopping(FLUSH_ON_EXIT).await;
    let client = &agent.broker.client;
    if tokio::time::timeout(FLUSH_ON_EXIT, client.flush())
        .await
        .is_err()
    {
        debug!("flushing the broker connection timed out");
    }
    if let Err(e) = client.drain().await {
        debug!(error = %e, "draining the broker connection failed");
    }
    info!("agent stopped");
    outcome
}

#[cfg(test)]
mod tests {
    /// Tests may spawn the agent on a multi-threaded runtime.
    #[test]
    fn the_run_future_is_send() {
        fn assert_send<T: Send>(_: &T) {}
        let config = crate::Config::new("t".parse().expect("id"), "s".parse().expect("id"));
        let fut = crate::run(config, tokio_util::sync::CancellationToken::new());
        assert_send(&fut);
    }
}
