//! The hook guard: a hook's whole process group dies with its agent.
//!
//! The agent never starts a hook itself. It starts `flue-agent hook-guard --agent-pid
//! <its pid> -- <hook> <args…>` in a new process group, so the guard is the group's
//! leader and the hook, its child, is in the same group, with whatever the hook starts
//! in turn. The guard:
//!
//! 1. catches SIGTERM and asks the kernel for SIGTERM when its parent dies
//!    (`PR_SET_PDEATHSIG`), then checks that its parent is still the agent (it may have
//!    died before that);
//! 2. runs the hook with the guard's own stdin, stdout, stderr, environment and working
//!    directory, so the bytes pass straight between agent and hook;
//! 3. on every SIGTERM, looks whether its parent is still the agent. If not, the agent
//!    is gone: it kills its process group (the hook and everything it started, itself
//!    included) with SIGKILL. If it is, the SIGTERM is the agent stopping the hook (sent
//!    to the whole group, so the hook has it too) and the guard waits for the hook;
//! 4. ends the way the hook ended: the same exit status, or killed by the same signal.
//!
//! Why it is reliable: the parent-death signal is sent when the *thread* that forked the
//! guard exits, not the process — the agent's runtime thread, but on any runtime this
//! could be an idle pool thread. The kernel sends it again at every such re-parenting,
//! including the last one when the agent process is gone, and the guard decides from
//! `getppid()`, never from the signal alone, so an early signal changes nothing and the
//! last one is never missed. It only reaches the guard, which is why the guard, not the
//! hook, holds it: a hook's grandchildren (`sleep 25 &`, a pipeline) die with the group.
//!
//! What is left: a process that leaves the group (`setsid`) is not the hook's any more, as
//! before. When the agent is killed with SIGKILL the guard's SIGKILL follows at once; at the
//! next start the agent also kills any group the ledger says was running ([`crate::orphans`]).

use std::ffi::OsString;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use tokio::process::Command;
use tokio::signal::unix::{SignalKind, signal};

use crate::process::group::Stat;
use crate::sys;

/// The hidden subcommand that runs a hook under the guard.
pub const SUBCOMMAND: &str = "hook-guard";

/// Exit status of the guard when the hook could not be started (as `sh` uses for a
/// command that is not found); the reason is on stderr.
pub const CANNOT_RUN: u8 = 127;

/// Arguments of `flue-agent hook-guard` (internal: only the agent starts it).
#[derive(Debug, Clone, clap::Args)]
pub struct GuardArgs {
    /// The agent that started the guard: when it is no longer the guard's parent, the
    /// guard kills its process group.
    #[arg(long)]
    pub agent_pid: u32,
    /// The hook and its arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<OsString>,
}

/// How the agent starts hooks under the guard: its own executable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guard {
    exe: PathBuf,
}

impl Guard {
    /// The guard is this very executable, reached through `/proc/self/exe` (in the child
    /// about to exec, that is the agent's binary): it still works after a package upgrade
    /// replaced the file the agent was started from.
    pub fn current() -> Self {
        Self {
            exe: PathBuf::from("/proc/self/exe"),
        }
    }

    /// `cmd` wrapped in the guard: the same program, arguments, environment changes and
    /// working directory (all a hook command uses), run by `flue-agent hook-guard`.
    pub fn wrap(&self, cmd: &Command) -> Command {
        let inner = cmd.as_std();
        let mut guarded = Command::new(&self.exe);
        guarded
            .arg0("flue-agent")
            .arg(SUBCOMMAND)
            .arg("--agent-pid")
            .arg(std::process::id().to_string())
            .arg("--")
            .arg(inner.get_program())
            .args(inner.get_args());
        for (name, value) in inner.get_envs() {
            match value {
                Some(value) => guarded.env(name, value),
                None => guarded.env_remove(name),
            };
        }
        if let Some(dir) = inner.get_current_dir() {
            guarded.current_dir(dir);
        }
        guarded
    }
}

/// The guard's whole life (see the module docs). Prints nothing but the reason a hook
/// could not be started.
pub async fn run(args: GuardArgs) -> ExitCode {
    let agent = args.agent_pid;
    let me = std::process::id();
    // A guard that does not lead its group would kill someone else's group.
    if Stat::of(me).is_none_or(|s| s.pgrp != me) {
        eprintln!("flue-agent {SUBCOMMAND}: must lead its own process group");
        return ExitCode::from(CANNOT_RUN);
    }
    // Caught before anything else, so that no SIGTERM can end the guard and leave the hook.
    let mut term = match signal(SignalKind::terminate()) {
        Ok(term) => term,
        Err(e) => {
            eprintln!("flue-agent {SUBCOMMAND}: cannot catch SIGTERM: {e}");
            return ExitCode::from(CANNOT_RUN);
        }
    };
    if let Err(e) = sys::set_parent_death_signal(libc::SIGTERM) {
        eprintln!("flue-agent {SUBCOMMAND}: cannot set the parent-death signal: {e}");
        return ExitCode::from(CANNOT_RUN);
    }
    if std::os::unix::process::parent_id() != agent {
        // The agent died before the signal was armed; no hook has started.
        return ExitCode::from(CANNOT_RUN);
    }
    let Some((program, hook_args)) = args.command.split_first() else {
        return ExitCode::from(CANNOT_RUN);
    };
    let mut child = match spawn(program, hook_args).await {
        Ok(child) => child,
        Err(e) => {
            eprintln!("cannot run {}: {e}", PathBuf::from(program).display());
            return ExitCode::from(CANNOT_RUN);
        }
    };
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            _ = term.recv() => {
                if std::os::unix::process::parent_id() != agent {
                    // The agent is gone: nothing may outlive it. This ends the guard too.
                    sys::signal_group(me, libc::SIGKILL);
                }
            }
        }
    };
    match status {
        Ok(status) => match (status.code(), status.signal()) {
            (Some(code), _) => ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX)),
            (None, Some(signal)) => sys::die_of(signal),
            (None, None) => ExitCode::FAILURE,
        },
        Err(e) => {
            eprintln!("flue-agent {SUBCOMMAND}: cannot wait for the hook: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Spawns the hook, retrying while the executable is busy: a script written just before
/// may still be open for writing in a child the agent was forking at the same moment.
async fn spawn(program: &OsString, args: &[OsString]) -> io::Result<tokio::process::Child> {
    let mut tries = 0;
    loop {
        match Command::new(program).args(args).spawn() {
            Err(e) if e.kind() == io::ErrorKind::ExecutableFileBusy && tries < 10 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(20 * tries)).await;
            }
            other => return other,
        }
    }
}
