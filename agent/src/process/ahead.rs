//! Hook guards started ahead of their hooks: the agent keeps one [`Ready`] while it waits
//! for requests ([`Ahead`]), so that a deployment's path holds no guard `exec` (≈ 1 ms of
//! a no-op deployment's few). The hook's command reaches the guard only with the go
//! ([`crate::guard::HookCommand`]); until then the guard leads its own, empty, process
//! group and holds nothing of any request.

use std::io;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::process::Child;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use super::HookProcess;
use crate::guard::{Guard, READY};

/// How long a guard started ahead may take to say it is ready: its `exec` and a few
/// system calls, with room for a loaded machine.
const READY_WITHIN: Duration = Duration::from_secs(10);

/// A guard started ahead, ready for the go: its process (stdin, stdout and stderr piped,
/// its own process group, killed if dropped unused) and its identity.
#[derive(Debug)]
pub struct Ready {
    child: Child,
    group: Option<HookProcess>,
    /// The guard asked for ([`Guard::current`] then); `child` may run [`Guard::own`]
    /// instead, when that one could not start ahead.
    asked: Guard,
}

impl Ready {
    /// Starts `guard` ahead and waits until it says it is ready ([`READY`]): its signals
    /// taken, the parent-death signal armed, its parent checked.
    ///
    /// A guard that ends without saying so (a `flue-hook-guard` older than this agent,
    /// which does not know `--ahead`) is an error.
    pub async fn start(guard: &Guard) -> io::Result<Self> {
        let mut cmd = guard.ahead();
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = super::spawn(&mut cmd).await?;
        let mut said = [0u8; 1];
        // One byte into a one-byte buffer: nothing of the hook's output is read here.
        let ready = match child.stdout.as_mut() {
            Some(out) => tokio::time::timeout(READY_WITHIN, out.read_exact(&mut said))
                .await
                .is_ok_and(|read| read.is_ok() && said[0] == READY),
            None => false,
        };
        if !ready {
            let _ = child.kill().await;
            return Err(io::Error::other(format!(
                "{} did not say it was ready within {} s (too old to be started ahead?)",
                guard.program().display(),
                READY_WITHIN.as_secs()
            )));
        }
        // Not reaped, and waiting for its go: its /proc entry is there.
        let group = child.id().and_then(HookProcess::of);
        Ok(Self {
            child,
            group,
            asked: guard.clone(),
        })
    }

    /// The group it leads; `None` only if `/proc` could not be read for it.
    pub fn group(&self) -> Option<&HookProcess> {
        self.group.as_ref()
    }

    /// Its process and its group, for [`super::run`].
    pub(super) fn into_parts(self) -> (Child, Option<HookProcess>) {
        (self.child, self.group)
    }

    /// True while it still waits for its go (it has not ended).
    fn waiting(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

/// Set once the warning about a guard that cannot start ahead was logged.
static WARNED: AtomicBool = AtomicBool::new(false);

/// Starts `guard` ahead ([`Ready::start`]); when that guard is the small binary and
/// cannot (one older than this agent), the agent's own `hook-guard` ([`Guard::own`]),
/// which always can, with a warning the first time.
pub async fn start(guard: Guard) -> io::Result<Ready> {
    match Ready::start(&guard).await {
        Ok(ready) => Ok(ready),
        Err(e) if !guard.is_subcommand() => {
            if !WARNED.swap(true, Ordering::Relaxed) {
                warn!(error = %e, guard = %guard.program().display(), "the small hook guard cannot be started ahead; using the agent's own (install the flue-hook-guard of this agent's release)");
            }
            let mut ready = Ready::start(&Guard::own()).await?;
            ready.asked = guard;
            Ok(ready)
        }
        Err(e) => Err(e),
    }
}

/// The agent's guard started ahead: at most one, ready or on its way; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Ahead {
    slot: Arc<Mutex<Option<JoinHandle<io::Result<Ready>>>>>,
}

impl Ahead {
    /// Starts a guard ahead in the background ([`Guard::current`], looked up now), unless
    /// one is ready or on its way. Called while the agent waits for a request.
    pub fn refill(&self) {
        let mut slot = lock(&self.slot);
        if slot.is_none() {
            *slot = Some(tokio::spawn(start(Guard::current())));
        }
    }

    /// The guard started ahead for the next hook (awaited if it is still starting: it
    /// is nearer ready than one started now), if it still waits for its go and is the
    /// one [`Guard::current`] names now (a guard installed or removed since it started
    /// counts from this hook on); `None` otherwise, and the hook's guard starts then.
    pub async fn take(&self) -> Option<Ready> {
        let Some(starting) = lock(&self.slot).take() else {
            debug!("no hook guard started ahead; starting one for this hook");
            return None;
        };
        let mut ready = match starting.await {
            Ok(Ok(ready)) => ready,
            Ok(Err(e)) => {
                // The hook's own start tries again, and reports what fails.
                warn!(error = %e, "cannot start a hook guard ahead");
                return None;
            }
            Err(e) => {
                warn!(error = %e, "starting a hook guard ahead ended abnormally");
                return None;
            }
        };
        // One that is not usable is dropped here (killed, if it still runs).
        (ready.waiting() && ready.asked == Guard::current()).then_some(ready)
    }
}

/// `mutex` locked, also after a panic elsewhere (the slot stays consistent).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
