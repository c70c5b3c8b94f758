//! [`HookProcess`]: which process group a hook runs in, told apart from any later
//! process that gets the same pid, and killing that group once its agent is gone.
//!
//! The pid alone is not enough to find a hook again after the agent died: pids are reused.
//! So the ledger records the group leader's pid together with its start time (field 22
//! of `/proc/<pid>/stat`, in clock ticks since boot) and the boot id
//! (`/proc/sys/kernel/random/boot_id`). A process is that hook's only if all three match;
//! a leader that is gone means nothing is killed, since the group id may then be anyone's.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::sys;

/// How long [`HookProcess::kill_group`] waits for the group to be gone.
pub const KILL_WAIT: Duration = Duration::from_secs(10);

/// The leader of a hook's process group, identified so that a reused pid never matches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookProcess {
    /// Pid of the group leader, which is also the process group id.
    pub pid: u32,
    /// The leader's start time in clock ticks since boot (`/proc/<pid>/stat`, field 22).
    pub start_time: u64,
    /// The boot it started in: after a reboot, no pid refers to it any more.
    pub boot_id: String,
}

/// What `/proc/<pid>/stat` says about a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// One letter: `R`, `S`, `Z`, ….
    pub state: char,
    /// Its process group (field 5).
    pub pgrp: u32,
    /// Its start time in clock ticks since boot (field 22).
    pub start_time: u64,
}

impl Stat {
    /// Reads `/proc/<pid>/stat`; `None` when the process does not exist (any more).
    pub fn of(pid: u32) -> Option<Self> {
        Self::parse(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
    }

    /// Parses a `stat` line. The command name (field 2) is in parentheses and may itself
    /// hold spaces and parentheses, so fields are counted from its last `)`.
    pub fn parse(line: &str) -> Option<Self> {
        let rest = &line[line.rfind(')')? + 1..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // `fields[0]` is field 3 (state), so field N is `fields[N - 3]`.
        Some(Self {
            state: fields.first()?.chars().next()?,
            pgrp: fields.get(2)?.parse().ok()?,
            start_time: fields.get(19)?.parse().ok()?,
        })
    }

    /// True for a process that has ended and only waits to be reaped.
    pub fn is_zombie(&self) -> bool {
        matches!(self.state, 'Z' | 'X')
    }
}

/// This boot's id.
fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(id.trim().to_owned())
}

impl HookProcess {
    /// Identifies the running process `pid` (a child just spawned, not reaped yet).
    pub fn of(pid: u32) -> Option<Self> {
        Some(Self {
            pid,
            start_time: Stat::of(pid)?.start_time,
            boot_id: boot_id()?,
        })
    }

    /// True while the very process recorded still runs: same boot, same pid, same start
    /// time, and not a zombie.
    pub fn is_running(&self) -> bool {
        if boot_id().as_deref() != Some(self.boot_id.as_str()) {
            return false;
        }
        Stat::of(self.pid).is_some_and(|s| s.start_time == self.start_time && !s.is_zombie())
    }

    /// If the recorded leader still runs, kills its whole group with SIGKILL and waits (up
    /// to [`KILL_WAIT`]) until no live process is left in it. Returns whether it killed
    /// anything; `Err` with the pids still alive when the wait ran out.
    pub async fn kill_group(&self) -> Result<bool, Vec<u32>> {
        if !self.is_running() {
            return Ok(false);
        }
        sys::signal_group(self.pid, libc::SIGKILL);
        let gone = async {
            let mut tick = tokio::time::interval(Duration::from_millis(20));
            loop {
                tick.tick().await;
                if members(self.pid).is_empty() {
                    return;
                }
            }
        };
        match tokio::time::timeout(KILL_WAIT, gone).await {
            Ok(()) => Ok(true),
            Err(_) => Err(members(self.pid)),
        }
    }
}

/// The live (not zombie) processes of process group `pgid`, read from `/proc`.
pub fn members(pgid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir(Path::new("/proc")) else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| Stat::of(pid).is_some_and(|s| s.pgrp == pgid && !s.is_zombie()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_from_the_end_of_the_command_name() {
        let line = "4242 (a (weird) name) S 1 4240 4240 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        let s = Stat::parse(line).expect("parses");
        assert_eq!(s.state, 'S');
        assert_eq!(s.pgrp, 4240);
        assert_eq!(s.start_time, 987654);
        assert!(Stat::parse("4242 (short) S 1").is_none());
    }

    #[tokio::test]
    async fn a_reused_pid_is_never_taken_for_the_recorded_hook() {
        let mut child = tokio::process::Command::new("sleep")
            .arg("60")
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .expect("spawn sleep");
        let pid = child.id().expect("pid");
        let real = HookProcess::of(pid).expect("stat");
        assert!(real.is_running());

        // Same pid, another start time or another boot: someone else's process.
        for other in [
            HookProcess {
                start_time: real.start_time + 1,
                ..real.clone()
            },
            HookProcess {
                boot_id: "another-boot".into(),
                ..real.clone()
            },
        ] {
            assert!(!other.is_running());
            assert_eq!(other.kill_group().await, Ok(false));
        }
        assert!(real.is_running(), "left alone");

        assert_eq!(real.kill_group().await, Ok(true));
        let status = child.wait().await.expect("reaped");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL));
        assert!(!real.is_running());
    }
}
