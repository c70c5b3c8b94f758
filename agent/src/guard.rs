//! The hook guard: a hook's whole process group dies with its agent.
//!
//! The agent never starts a hook itself. It starts `flue-hook-guard --agent-pid <its pid>
//! --ahead` (or, when that binary is not installed next to the agent, `flue-agent
//! hook-guard` with the same arguments; see [`Guard::beside`]) in a new process group,
//! so the guard is the group's leader and the hook, its child, is in the same group, with
//! whatever the hook starts in turn. The agent starts it *ahead*, before a request needs
//! it (`crate::process::Ahead`): the guard's own start (an `exec`, ≈ 1 ms) is then off a
//! deployment's path, and the hook's command reaches it only with the go. The guard:
//!
//! 1. blocks SIGTERM and SIGCHLD (it takes them with `sigwaitinfo`, no handler) and asks
//!    the kernel for SIGTERM when its parent dies (`PR_SET_PDEATHSIG`), then checks that
//!    its parent is still the agent (it may have died before that), and says it is ready:
//!    one byte ([`READY`]) on its stdout, which the agent reads before it counts on it (a
//!    guard too old to know `--ahead` says no such thing: the agent then uses its own
//!    binary's);
//! 2. waits for the agent's go: one byte ([`GO`]) on its stdin, read unbuffered, then the
//!    hook's command ([`HookCommand`]: program, arguments, environment changes, working
//!    directory). The agent sends them once the ledger durably names this process group
//!    (see [`crate::ledger`]); end of file instead (the agent died, or could not record
//!    the group) ends the guard with [`CANNOT_RUN`] and the hook never starts;
//! 3. runs the hook with the guard's own stdin (the rest of it: the hook's item), stdout,
//!    stderr and environment, changed as the command says, so the bytes pass straight
//!    between agent and hook;
//! 4. on every SIGTERM, looks whether its parent is still the agent. If not, the agent
//!    is gone: it kills its process group (the hook and everything it started, itself
//!    included) with SIGKILL. If it is, the SIGTERM is the agent stopping the hook (sent
//!    to the whole group, so the hook has it too) and the guard waits for the hook;
//! 5. ends the way the hook ended: the same exit status, or killed by the same signal.
//!
//! The first form, `--agent-pid <pid> -- <hook> <args…>` (the command on the command
//! line, no ready byte, the go alone on stdin), is still taken, from an older agent.
//!
//! It costs a hook one `exec` of a small binary and little else: `flue-hook-guard`
//! (`src/bin/flue-hook-guard.rs`) links only this module, the few system calls of
//! [`crate::sys`] and std, no async runtime, logger or argument parser. The agent's own
//! binary can stand in for it: its `main` hands `hook-guard` to [`main`] before it builds
//! any of those, but its `exec` (loading and relocating 13 MB) costs 0.7–1.4 ms more
//! (docs/benchmarks.md).
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

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitCode};
use std::time::Duration;

use crate::process::group::Stat;
use crate::sys;

mod command;

pub use command::HookCommand;

/// The hidden subcommand that runs a hook under the guard.
pub const SUBCOMMAND: &str = "hook-guard";

/// How the guard names itself in the few lines it prints (either way it is started).
const WHO: &str = "flue hook guard";

/// Exit status of the guard when the hook could not be started (as `sh` uses for a
/// command that is not found); the reason is on stderr.
pub const CANNOT_RUN: u8 = 127;

/// The byte the agent writes first on the guard's stdin to let the hook start.
pub const GO: u8 = b'\n';

/// The byte a guard started `--ahead` writes on its stdout once it is ready for the go.
pub const READY: u8 = b'+';

/// The flag that starts a guard ahead of its hook: the command comes on stdin.
pub const AHEAD: &str = "--ahead";

/// Arguments of the guard (internal: only the agent starts it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardArgs {
    /// The agent that started the guard: when it is no longer the guard's parent, the
    /// guard kills its process group.
    pub agent_pid: u32,
    /// The hook and its arguments (never empty) when given on the command line; `None`
    /// for a guard started [`AHEAD`], which reads its [`HookCommand`] after the go.
    pub command: Option<Vec<OsString>>,
}

impl GuardArgs {
    /// Parses what follows `hook-guard` on the command line, exactly as
    /// [`Guard::ahead`] writes it, `--agent-pid <pid> --ahead`, or as older agents did,
    /// `--agent-pid <pid> -- <hook> [<arg>…]`. Hand-written: the guard runs before (and
    /// without) the agent's argument parser.
    pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Self, String> {
        let mut args = args.into_iter();
        if args.next().as_deref() != Some(OsStr::new("--agent-pid")) {
            return Err("expected --agent-pid <pid> first".to_owned());
        }
        let agent_pid = args
            .next()
            .and_then(|pid| pid.to_str()?.parse::<u32>().ok())
            .ok_or("--agent-pid needs a process id")?;
        match args.next() {
            Some(flag) if flag == AHEAD => match args.next() {
                None => Ok(Self {
                    agent_pid,
                    command: None,
                }),
                Some(_) => Err(format!("nothing may follow {AHEAD}")),
            },
            Some(flag) if flag == "--" => {
                let command: Vec<OsString> = args.collect();
                if command.is_empty() {
                    return Err("no hook given after --".to_owned());
                }
                Ok(Self {
                    agent_pid,
                    command: Some(command),
                })
            }
            _ => Err(format!("expected {AHEAD}, or -- before the hook")),
        }
    }
}

/// The guard's own small binary, installed next to `flue-agent`: only this module and
/// std linked in, so its `exec` costs about half that of the agent's binary.
pub const BINARY: &str = "flue-hook-guard";

/// How the agent starts hooks under the guard: the small [`BINARY`] next to the agent's
/// executable when it is there, otherwise the agent's own executable (`hook-guard`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guard {
    exe: PathBuf,
    /// True for `flue-agent hook-guard` (the subcommand), false for [`BINARY`].
    subcommand: bool,
}

impl Guard {
    /// The guard of this agent: [`Guard::beside`] its own executable. Looked up at every
    /// call (one `readlink` and one `stat`), so a guard installed or removed while the
    /// agent runs is taken into account at the next hook.
    pub fn current() -> Self {
        match std::env::current_exe() {
            Ok(agent) => Self::beside(&agent),
            Err(_) => Self::at(SELF_EXE),
        }
    }

    /// The guard of the agent whose executable is `agent_exe`: [`BINARY`] in the same
    /// directory when it is a regular file that is executable, otherwise this very
    /// executable reached through `/proc/self/exe` (in the child about to exec, that is
    /// the agent's binary), which still works after a package upgrade replaced the file
    /// the agent was started from. A single-binary install keeps working.
    ///
    /// `agent_exe` as `current_exe` gives it after such an upgrade (`…/flue-agent
    /// (deleted)`) still names the right directory.
    pub fn beside(agent_exe: &Path) -> Self {
        match agent_exe.parent().map(|dir| dir.join(BINARY)) {
            Some(small) if is_executable(&small) => Self::binary(small),
            _ => Self::at(SELF_EXE),
        }
    }

    /// The `hook-guard` subcommand of the `flue-agent` binary at `exe` (for a process that
    /// is not the agent, such as a test driving [`crate::process::run`]).
    pub fn at(exe: impl Into<PathBuf>) -> Self {
        Self {
            exe: exe.into(),
            subcommand: true,
        }
    }

    /// This executable's own `hook-guard` subcommand (the agent's binary, whatever became
    /// of its path): always the same build as the agent, so it knows every form.
    pub fn own() -> Self {
        Self::at(SELF_EXE)
    }

    /// The small guard binary ([`BINARY`]) at `exe`.
    pub fn binary(exe: impl Into<PathBuf>) -> Self {
        Self {
            exe: exe.into(),
            subcommand: false,
        }
    }

    /// The executable started for each hook.
    pub fn program(&self) -> &Path {
        &self.exe
    }

    /// True when hooks start as `flue-agent hook-guard` rather than as [`BINARY`].
    pub fn is_subcommand(&self) -> bool {
        self.subcommand
    }

    /// The command that starts this guard [`AHEAD`] of its hook, for this process:
    /// `… --agent-pid <pid> --ahead`, run by `flue-hook-guard` or `flue-agent
    /// hook-guard`, with the same arguments after the name. Its hook's [`HookCommand`]
    /// follows the go on its stdin.
    pub fn ahead(&self) -> tokio::process::Command {
        let mut guard = tokio::process::Command::new(&self.exe);
        if self.subcommand {
            guard.arg0("flue-agent").arg(SUBCOMMAND);
        } else {
            guard.arg0(BINARY);
        }
        guard
            .arg("--agent-pid")
            .arg(std::process::id().to_string())
            .arg(AHEAD);
        guard
    }
}

/// This process's executable, whatever became of its path.
const SELF_EXE: &str = "/proc/self/exe";

/// A regular file (or a link to one) with an execute bit.
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `flue-hook-guard …`, or `flue-agent hook-guard …` called by the agent's `main` before
/// anything else is set up (`args`: what follows the program or the subcommand). Prints
/// nothing but the reason a hook could not be started.
pub fn main(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    match GuardArgs::parse(args) {
        Ok(args) => run(&args),
        Err(e) => {
            eprintln!("{WHO}: {e} (internal: only the agent starts it)");
            ExitCode::from(CANNOT_RUN)
        }
    }
}

/// The guard's whole life (see the module docs); blocking, single-threaded.
pub fn run(args: &GuardArgs) -> ExitCode {
    let agent = args.agent_pid;
    let me = std::process::id();
    // A guard that does not lead its group would kill someone else's group.
    if Stat::of(me).is_none_or(|s| s.pgrp != me) {
        eprintln!("{WHO}: must lead its own process group");
        return ExitCode::from(CANNOT_RUN);
    }
    // Blocked before anything else, so that no SIGTERM can end the guard and leave the
    // hook: a SIGTERM from now on waits until the loop below takes it.
    let signals = match sys::Blocked::block(&[libc::SIGTERM, libc::SIGCHLD]) {
        Ok(signals) => signals,
        Err(e) => {
            eprintln!("{WHO}: cannot block SIGTERM: {e}");
            return ExitCode::from(CANNOT_RUN);
        }
    };
    if let Err(e) = sys::set_parent_death_signal(libc::SIGTERM) {
        eprintln!("{WHO}: cannot set the parent-death signal: {e}");
        return ExitCode::from(CANNOT_RUN);
    }
    if std::os::unix::process::parent_id() != agent {
        // The agent died before the signal was armed; no hook has started.
        return ExitCode::from(CANNOT_RUN);
    }
    // A second descriptor of stdin, read without the buffer `Stdin` has, so that no byte
    // past the go and the command is consumed: the rest is the hook's.
    let mut stdin = match io::stdin().as_fd().try_clone_to_owned() {
        Ok(fd) => File::from(fd),
        Err(e) => {
            eprintln!("{WHO}: cannot read the agent's go: {e}");
            return ExitCode::from(CANNOT_RUN);
        }
    };
    if args.command.is_none()
        && let Err(e) = say_ready()
    {
        // The agent is gone (or not listening): nothing may run.
        eprintln!("{WHO}: cannot tell the agent it is ready: {e}");
        return ExitCode::from(CANNOT_RUN);
    }
    match wait_for_go(&mut stdin) {
        Ok(true) => {}
        // The agent is gone, or did not record this group: the hook must not run.
        Ok(false) => return ExitCode::from(CANNOT_RUN),
        Err(e) => {
            eprintln!("{WHO}: cannot read the agent's go: {e}");
            return ExitCode::from(CANNOT_RUN);
        }
    }
    let hook = match &args.command {
        Some(words) => match words.split_first() {
            Some((program, hook_args)) => HookCommand {
                program: program.clone(),
                args: hook_args.to_vec(),
                ..HookCommand::default()
            },
            None => return ExitCode::from(CANNOT_RUN),
        },
        None => match HookCommand::read(&mut stdin) {
            Ok(hook) => hook,
            Err(e) => {
                eprintln!("{WHO}: cannot read the hook's command: {e}");
                return ExitCode::from(CANNOT_RUN);
            }
        },
    };
    drop(stdin);
    let mut child = match spawn(&hook) {
        Ok(child) => child,
        Err(e) => {
            eprintln!("cannot run {}: {e}", PathBuf::from(&hook.program).display());
            return ExitCode::from(CANNOT_RUN);
        }
    };
    let status = loop {
        // SIGCHLD may come for nothing (a stop), and several exits make one SIGCHLD:
        // whether the hook ended is always asked, never inferred from the signal.
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) => {}
            Err(e) => break Err(e),
        }
        match signals.wait() {
            Ok(libc::SIGTERM) if std::os::unix::process::parent_id() != agent => {
                // The agent is gone: nothing may outlive it. This ends the guard too.
                sys::signal_group(me, libc::SIGKILL);
            }
            Ok(_) => {}
            Err(e) => break Err(e),
        }
    };
    match status {
        Ok(status) => match (status.code(), status.signal()) {
            (Some(code), _) => ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX)),
            (None, Some(signal)) => sys::die_of(signal),
            (None, None) => ExitCode::FAILURE,
        },
        Err(e) => {
            eprintln!("{WHO}: cannot wait for the hook: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Tells the agent this guard is ready for the go: [`READY`] on stdout, written through a
/// second descriptor without the buffer `Stdout` has, so nothing of it is left for the hook.
fn say_ready() -> io::Result<()> {
    let mut stdout = File::from(io::stdout().as_fd().try_clone_to_owned()?);
    stdout.write_all(&[READY])
}

/// Reads the agent's go, one byte and no more (what follows is the hook's command, or
/// its stdin): true for [`GO`], false at end of file or for any other byte.
fn wait_for_go(stdin: &mut File) -> io::Result<bool> {
    let mut byte = [0u8; 1];
    loop {
        match stdin.read(&mut byte) {
            Ok(0) => return Ok(false),
            Ok(_) => return Ok(byte[0] == GO),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Spawns the hook, retrying while the executable is busy: a script written just before
/// may still be open for writing in a child the agent was forking at the same moment.
fn spawn(hook: &HookCommand) -> io::Result<Child> {
    let mut cmd = hook.command();
    let mut tries = 0;
    loop {
        match cmd.spawn() {
            Err(e) if e.kind() == io::ErrorKind::ExecutableFileBusy && tries < 10 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(20 * tries));
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_guard_reads_back_both_forms_of_its_command_line() {
        let parsed = GuardArgs::parse(args(&["--agent-pid", "42", "--", "/hook", "-x", "--"]));
        assert_eq!(
            parsed,
            Ok(GuardArgs {
                agent_pid: 42,
                command: Some(args(&["/hook", "-x", "--"])),
            })
        );
        let parsed = GuardArgs::parse(args(&["--agent-pid", "42", AHEAD]));
        assert_eq!(
            parsed,
            Ok(GuardArgs {
                agent_pid: 42,
                command: None,
            })
        );
    }

    #[test]
    fn the_small_guard_binary_next_to_the_agent_is_chosen_when_it_is_there_and_executable() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let agent = dir.path().join("flue-agent");
        let small = dir.path().join(BINARY);
        let fallback = Guard::at(SELF_EXE);
        assert_eq!(
            Guard::beside(&agent),
            fallback,
            "absent: the agent's subcommand"
        );
        std::fs::write(&small, "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(&small, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        assert_eq!(
            Guard::beside(&agent),
            fallback,
            "not executable: the subcommand"
        );
        std::fs::set_permissions(&small, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let chosen = Guard::beside(&agent);
        assert_eq!(chosen, Guard::binary(&small));
        assert!(!chosen.is_subcommand());
        // After an upgrade replaced the agent's file, its path reads `… (deleted)`.
        let replaced = dir.path().join("flue-agent (deleted)");
        assert_eq!(Guard::beside(&replaced), Guard::binary(&small));
        std::fs::remove_file(&small).expect("rm");
        std::fs::create_dir(&small).expect("mkdir");
        assert_eq!(
            Guard::beside(&agent),
            fallback,
            "a directory: the subcommand"
        );
    }

    #[test]
    fn both_guards_get_the_same_arguments_after_their_name() {
        let words = |guard: &Guard| {
            let cmd = guard.ahead();
            let std = cmd.as_std();
            let args: Vec<OsString> = std.get_args().map(OsString::from).collect();
            (std.get_program().to_owned(), args)
        };
        let pid = std::process::id().to_string();
        let tail = args(&["--agent-pid", &pid, AHEAD]);
        let (program, small_args) = words(&Guard::binary("/opt/flue/flue-hook-guard"));
        assert_eq!(program, OsString::from("/opt/flue/flue-hook-guard"));
        assert_eq!(small_args, tail);
        let (program, sub_args) = words(&Guard::at("/opt/flue/flue-agent"));
        assert_eq!(program, OsString::from("/opt/flue/flue-agent"));
        assert_eq!(sub_args[0], OsString::from(SUBCOMMAND));
        assert_eq!(sub_args[1..], tail[..]);
        assert_eq!(GuardArgs::parse(small_args).map(|a| a.command), Ok(None));
    }

    #[test]
    fn a_malformed_guard_command_line_is_refused_naming_what_is_wrong() {
        for (words, says) in [
            (&[][..], "--agent-pid"),
            (&["--agent-pid"][..], "process id"),
            (&["--agent-pid", "x", "--", "/hook"][..], "process id"),
            (&["--agent-pid", "1", "/hook"][..], "-- before the hook"),
            (&["--agent-pid", "1", "--"][..], "no hook"),
            (
                &["--agent-pid", "1", AHEAD, "/hook"][..],
                "nothing may follow",
            ),
        ] {
            let e = GuardArgs::parse(args(words)).expect_err("refused");
            assert!(e.contains(says), "{words:?}: {e}");
        }
    }
}
