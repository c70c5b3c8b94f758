//! At start, before anything is pulled: kill what the hooks of a dead agent left running.
//!
//! The [guard](crate::guard) kills a hook's group as soon as its agent dies; this is the
//! second line, for whatever the guard could not stop (the guard itself killed first, a
//! parent-death signal that never came). Every `started` ledger entry without a result
//! names its hook's group leader by pid, start time and boot ([`HookProcess`]); when that
//! very process still runs, its whole group gets SIGKILL and the agent waits until the
//! group is gone. Only then does it pull, and a redelivered request of such an entry is
//! reported `interrupted`, which is then true: nothing of it runs any more.

use tracing::{error, info, warn};

use crate::error::Error;
use crate::ledger::Ledger;
use crate::process::HookProcess;

/// Kills the process group of every unfinished hook in `ledger` that still runs, and
/// waits (bounded, [`crate::process::group::KILL_WAIT`] per group) for each to be gone.
/// Returns how many groups were killed; fails only when the ledger cannot be read.
pub async fn kill_unfinished_hooks(ledger: &Ledger) -> Result<usize, Error> {
    let mut killed = 0;
    for (entry, hook) in ledger.unfinished_hooks()? {
        killed += usize::from(kill(&entry, &hook).await);
    }
    if killed > 0 {
        info!(groups = killed, "hooks of a previous agent killed");
    }
    Ok(killed)
}

/// Kills one hook's group; true if it was still running.
async fn kill(entry: &str, hook: &HookProcess) -> bool {
    match hook.kill_group().await {
        Ok(false) => false,
        Ok(true) => {
            warn!(
                ledger.key = %entry,
                pgid = hook.pid,
                "killed the process group of a hook its dead agent left running"
            );
            true
        }
        Err(left) => {
            error!(
                ledger.key = %entry,
                pgid = hook.pid,
                left = ?left,
                "processes of a dead agent's hook survived SIGKILL"
            );
            true
        }
    }
}
