//! The pull loop: one request at a time, in queue order, surviving broker restarts, and
//! pruning the ledger at start and then hourly between requests.

use std::time::Duration;

use futures_util::StreamExt;
use time::OffsetDateTime;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::answer::Responder;
use crate::config::Config;
use crate::connect::{self, Broker};
use crate::deploy;
use crate::error::Error;
use crate::ledger::Ledger;

/// How long one pull request waits at the broker for a message before it is renewed.
pub const PULL_EXPIRES: Duration = Duration::from_secs(30);

/// How often the ledger is pruned while the agent runs, besides once at start.
pub const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// Everything the loop and the request handler share.
#[derive(Debug)]
pub struct Agent {
    /// The configuration.
    pub config: Config,
    /// The credentials file's contents (`--creds`): the keys that verify requests, sign
    /// answers and open sealed values.
    pub credentials: Option<std::sync::Arc<flue_proto::creds::AgentCredentials>>,
    /// The NATS user JWT its connection authenticates with, replaced when its server
    /// joins a stack; `None` when the broker connection uses no JWT.
    pub rights: Option<crate::rights::Rights>,
    /// The broker connection.
    pub broker: Broker,
    /// The exactly-once ledger.
    pub ledger: Ledger,
    /// What the heartbeats report ([`crate::metrics`]).
    pub counters: std::sync::Arc<crate::metrics::Counters>,
    /// Cancelled on SIGTERM/SIGINT.
    pub shutdown: CancellationToken,
    /// Publishes answers on `flue.<tenant>.resp.<server>`.
    pub responder: Responder,
    /// The hook guard started ahead of the next request's hook.
    pub guards: crate::process::Ahead,
}

/// Pulls and handles requests until `agent.shutdown` is cancelled.
///
/// Each pull asks for one message and is dropped (its inbox unsubscribed) before the
/// message is handled, so nothing else is ever delivered to the agent while it works and
/// nothing is left in flight when it stops.
///
/// A hook guard is started ahead before the first pull and after each request
/// ([`crate::process::Ahead`]).
///
/// The ledger is pruned before the first pull and then every [`PRUNE_EVERY`], between two
/// requests: never while one is handled, and with no task of its own. An idle agent prunes
/// at most [`PULL_EXPIRES`] late; one running a long hook prunes when the hook is done.
pub async fn run(agent: &Agent) -> Result<(), Error> {
    let shutdown = &agent.shutdown;
    prune_ledger(agent).await?;
    agent.guards.refill();
    let mut next_prune = Instant::now() + PRUNE_EVERY;
    let mut connects = agent.broker.connects.clone();
    let mut delays = crate::RETRY.delays();
    'lookup: loop {
        let Some(consumer) = connect::find_consumer(&agent.broker, &mut connects, shutdown).await
        else {
            return Ok(());
        };
        info!(
            tenant = %agent.config.tenant,
            server = %agent.config.server_id,
            consumer = %consumer.cached_info().name,
            "agent ready"
        );
        // A new build on trial has come up: it replaces the old one.
        crate::upgrade::commit(&agent.config)?;
        // Shutdown is checked first everywhere: once it is requested, no new request starts.
        while !shutdown.is_cancelled() {
            if Instant::now() >= next_prune {
                prune_ledger(agent).await?;
                next_prune = Instant::now() + PRUNE_EVERY;
            }
            // A reconnection while the last request was handled (the broker restarted,
            // maybe with its store lost) is only seen here: look the consumer up again,
            // as after any reconnection, rather than pull from what may be gone.
            if connects.has_changed().unwrap_or(false) {
                debug!("reconnected to the broker while busy, looking the consumer up again");
                continue 'lookup;
            }
            let pull = consumer
                .batch()
                .max_messages(1)
                .expires(PULL_EXPIRES)
                .messages();
            let mut batch = tokio::select! {
                biased;
                _ = shutdown.cancelled() => return Ok(()),
                batch = pull => match batch {
                    Ok(batch) => batch,
                    Err(e) => {
                        warn!(error = %e, "pull request failed, looking the consumer up again");
                        if !connect::pause(&mut delays, shutdown).await {
                            return Ok(());
                        }
                        continue 'lookup;
                    }
                },
            };
            let next = tokio::select! {
                biased;
                _ = shutdown.cancelled() => return Ok(()),
                _ = connect::reconnected(&mut connects) => {
                    debug!("reconnected to the broker, pulling again");
                    continue 'lookup;
                }
                next = batch.next() => next,
            };
            drop(batch);
            match next {
                // The pull expired with nothing to do.
                None => debug!("pull ended without a message"),
                Some(Err(e)) => {
                    warn!(error = %e, "pulling requests failed, looking the consumer up again");
                    if !connect::pause(&mut delays, shutdown).await {
                        return Ok(());
                    }
                    continue 'lookup;
                }
                Some(Ok(msg)) => {
                    delays.reset();
                    deploy::handle(agent, msg).await?;
                    // Its answer is out: the next hook's guard starts while the agent
                    // waits for the next request (not as the hook ends: spawning it
                    // holds this thread up to the guard's `exec`, which the result
                    // would then wait for).
                    agent.guards.refill();
                }
            }
        }
        return Ok(());
    }
}

/// Removes the ledger's `done` entries that finished more than the configured retention ago
/// (see [`Config::ledger_retention`] for why that is safe); `started` entries always stay.
pub async fn prune_ledger(agent: &Agent) -> Result<(), Error> {
    let retention = agent.config.ledger_retention;
    // A retention reaching back past what `OffsetDateTime` can hold leaves nothing to prune.
    let Some(cutoff) = time::Duration::try_from(retention)
        .ok()
        .and_then(|r| OffsetDateTime::now_utc().checked_sub(r))
    else {
        return Ok(());
    };
    let pruned = agent.ledger.prune_done_before(cutoff).await?;
    if pruned > 0 {
        info!(
            pruned,
            retention_days = retention.as_secs() / (24 * 3600),
            "pruned finished deployments from the ledger"
        );
    } else {
        debug!("nothing to prune in the ledger");
    }
    Ok(())
}
