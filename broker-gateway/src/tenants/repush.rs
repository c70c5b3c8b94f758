//! Pushing every account JWT again, so that a broker which missed an update catches up:
//! after each reconnection of the gateway's system connection (a broker restarted with an
//! empty resolver directory), and every `--account-push-secs` (a tenant's leaf node whose
//! link to the hub was down when a revocation was pushed hears it at the next push: it
//! cannot ask the hub for what it missed, its system user may only receive).
//!
//! nats-server's `$SYS.ACCOUNT.<account>.LEAFNODE.CONNECT` event would say when a leaf
//! (re)links, but nats-server sends it only when gateways (superclusters) are configured
//! (`sendLeafNodeConnect` in its `events.go` returns early otherwise), so a single hub never
//! emits it: the periodic push is the mechanism, not a safety net behind one.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::connector::OperatorConnector;
use crate::error;

/// Why the accounts are pushed this time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trigger {
    /// The system connection was made again.
    Reconnected,
    /// `--account-push-secs` passed.
    Periodic,
}

/// Runs until `shutdown`: pushes every account after each reconnection of the system
/// connection and, when `every` is given, at that interval (the first one `every` after
/// the start, which pushed already).
pub(super) async fn run(
    op: Arc<OperatorConnector>,
    every: Option<Duration>,
    shutdown: CancellationToken,
) {
    let mut reconnected = op.system().reconnected.clone();
    reconnected.borrow_and_update();
    let mut tick = every.map(|every| {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        // A push that took longer than the interval (a broker slow to answer) is not
        // followed by a burst of catch-up pushes.
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        tick
    });
    let mut log = PushLog::default();
    loop {
        let trigger = tokio::select! {
            () = shutdown.cancelled() => return,
            changed = reconnected.changed() => match changed {
                Ok(()) => Trigger::Reconnected,
                Err(_) => return,
            },
            _ = next_tick(tick.as_mut()) => Trigger::Periodic,
        };
        let result = op.push_all().await;
        log.record(trigger, result.map_err(|e| error::chain(&e)));
    }
}

/// The next tick of `tick`, or never when the periodic push is off.
async fn next_tick(tick: Option<&mut tokio::time::Interval>) {
    match tick {
        Some(tick) => {
            tick.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// Logs the outcome of each push without repeating itself: a periodic push is logged at
/// debug; the first failure in a row is a warning and the next ones debug, until a push
/// works again (info). A push after a reconnection is always logged at info or warn.
#[derive(Debug, Default)]
struct PushLog {
    failing: bool,
}

impl PushLog {
    /// Logs `result` of a push for `trigger`; returns the level used, for the tests.
    fn record(&mut self, trigger: Trigger, result: Result<(), String>) -> tracing::Level {
        let was_failing = std::mem::replace(&mut self.failing, result.is_err());
        match (trigger, result) {
            (Trigger::Reconnected, Ok(())) => {
                info!("broker accounts pushed again after a reconnection");
                tracing::Level::INFO
            }
            (Trigger::Reconnected, Err(e)) => {
                warn!(error = %e, "cannot push the broker accounts after a reconnection");
                tracing::Level::WARN
            }
            (Trigger::Periodic, Ok(())) if was_failing => {
                info!("broker accounts pushed again");
                tracing::Level::INFO
            }
            (Trigger::Periodic, Ok(())) => {
                debug!("broker accounts pushed (periodic)");
                tracing::Level::DEBUG
            }
            (Trigger::Periodic, Err(e)) if was_failing => {
                debug!(error = %e, "cannot push the broker accounts (periodic), still");
                tracing::Level::DEBUG
            }
            (Trigger::Periodic, Err(e)) => {
                warn!(error = %e, "cannot push the broker accounts (periodic); retried at the next interval");
                tracing::Level::WARN
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    #[test]
    fn a_failing_periodic_push_warns_once_until_it_works_again() {
        let mut log = PushLog::default();
        let failed = || Err("no answer".to_owned());
        assert_eq!(log.record(Trigger::Periodic, Ok(())), Level::DEBUG);
        assert_eq!(log.record(Trigger::Periodic, failed()), Level::WARN);
        assert_eq!(log.record(Trigger::Periodic, failed()), Level::DEBUG);
        assert_eq!(log.record(Trigger::Periodic, failed()), Level::DEBUG);
        assert_eq!(log.record(Trigger::Periodic, Ok(())), Level::INFO);
        assert_eq!(log.record(Trigger::Periodic, Ok(())), Level::DEBUG);
        assert_eq!(log.record(Trigger::Reconnected, Ok(())), Level::INFO);
        assert_eq!(log.record(Trigger::Reconnected, failed()), Level::WARN);
    }
}
