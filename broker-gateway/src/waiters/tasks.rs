//! The two tasks behind the long polls ([`run`]): the one watch of the deployments bucket,
//! and the reader of the keys the slots queue.

use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::Waiters;
use crate::error::chain;
use crate::store::Deployments;

/// Pause before opening the watch again after it failed or could not be opened.
const RESTART_PAUSE: Duration = Duration::from_millis(500);

/// Batches of keys read at once: more polls starting at once make larger batches, not
/// more requests.
const READS_IN_FLIGHT: usize = 2;

/// Most keys read in one broker call: a call that runs out of time fails the first read
/// of every poll of its keys, so a batch is kept small enough for a busy gateway to read in
/// the deadline (at 256, four calls ran out in three of eight runs of 10,000 polls, debug
/// build, loaded VM; at 64, with the second try, none in four).
pub(super) const READ_BATCH: usize = 64;

/// Runs the long polls' one watch of the deployments bucket and their reader until
/// `shutdown`. Each batch of keys read is one broker call bounded by `deadline` (the
/// broker deadline, `--broker-timeout-ms`).
pub async fn run(
    deployments: Deployments,
    waiters: Waiters,
    reconnected: watch::Receiver<u64>,
    deadline: Duration,
    shutdown: CancellationToken,
) {
    tokio::select! {
        () = shutdown.cancelled() => {}
        () = watch_bucket(deployments.clone(), waiters.clone(), reconnected, &shutdown) => {}
        () = read_queued(deployments, waiters, deadline) => {}
    }
}

/// The one watch of the deployments bucket: opens it, has every key waited on read again,
/// hands each write to its waiters; opens it again when it fails or when the broker
/// connection comes back (`reconnected` changes).
async fn watch_bucket(
    deployments: Deployments,
    waiters: Waiters,
    mut reconnected: watch::Receiver<u64>,
    shutdown: &CancellationToken,
) {
    loop {
        waiters.not_watching();
        reconnected.borrow_and_update();
        let mut changes = match deployments.watch().await {
            Ok(changes) => changes,
            Err(e) => {
                warn!(error = %chain(&e), "cannot watch the deployments; retrying");
                pause(shutdown).await;
                continue;
            }
        };
        debug!("deployment watch open");
        waiters.watching();
        loop {
            tokio::select! {
                // The old watch may have lost writes while the connection was down.
                Ok(()) = reconnected.changed() => {
                    debug!("broker reconnected; opening the deployment watch again");
                    break;
                }
                change = changes.next() => match change {
                    Some(Ok(change)) => waiters.deliver(&change),
                    Some(Err(e)) => {
                        warn!(error = %chain(&e), "deployment watch failed; opening it again");
                        waiters.not_watching();
                        pause(shutdown).await;
                        break;
                    }
                    None => {
                        warn!("deployment watch ended; opening it again");
                        waiters.not_watching();
                        pause(shutdown).await;
                        break;
                    }
                },
            }
        }
    }
}

/// Reads the queued keys, up to [`READ_BATCH`] per broker call and [`READS_IN_FLIGHT`]
/// calls at once, and tells their slots what was found. A call that fails is made once
/// more before the waiters are told: on a gateway busy taking in thousands of polls, one
/// that ran out of time rarely does twice, and a broker that is away fails both.
async fn read_queued(deployments: Deployments, waiters: Waiters, deadline: Duration) {
    let mut reads = JoinSet::new();
    loop {
        if reads.len() >= READS_IN_FLIGHT {
            reads.join_next().await;
            continue;
        }
        let keys = waiters.take_queued(READ_BATCH);
        if keys.is_empty() {
            tokio::select! {
                () = waiters.inner.queued.notified() => {}
                Some(_) = reads.join_next() => {}
            }
            continue;
        }
        let (deployments, waiters) = (deployments.clone(), waiters.clone());
        reads.spawn(async move {
            let mut read = deployments.last_writes(&keys, deadline).await;
            if let Err(e) = &read {
                debug!(error = %chain(e), keys = keys.len(), "reading the deployments long polls wait on failed; once more");
                read = deployments.last_writes(&keys, deadline).await;
            }
            waiters.read(&keys, read);
        });
    }
}

async fn pause(shutdown: &CancellationToken) {
    tokio::select! {
        () = shutdown.cancelled() => {}
        () = tokio::time::sleep(RESTART_PAUSE) => {}
    }
}
