//! Running one hook process: its own process group (led by the [guard](crate::guard) in the
//! agent), bounded output, and a stop signal that kills the whole group (SIGTERM, then
//! SIGKILL).

use std::future::Future;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use flue_proto::retry::{Policy, Retryable};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use crate::guard::{Guard, HookCommand};
use crate::progress::LineTee;
use crate::sys;

mod ahead;
pub(crate) mod group;

pub use ahead::{Ahead, Ready};
pub use group::HookProcess;

/// Time between SIGTERM and SIGKILL when a hook is stopped.
pub const KILL_AFTER: Duration = Duration::from_secs(5);
/// Pauses of a spawn retried while its executable is busy: 100 ms, then 200 ms.
const SPAWN_RETRY: Policy = Policy::new(Duration::from_millis(100), Duration::from_millis(200));
/// Retries of such a spawn before its error is returned.
const SPAWN_RETRIES: usize = 10;

/// Why a running hook was stopped before it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The deployment's `expires_at` passed.
    TimedOut,
    /// The agent is shutting down and the grace period is over.
    ShutDown,
}

impl StopReason {
    /// The `status_reason` reported for it.
    pub fn status_reason(self) -> &'static str {
        match self {
            Self::TimedOut => "timed out",
            Self::ShutDown => "interrupted: agent shut down",
        }
    }
}

/// Bytes one output stream produced, up to a limit.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Captured {
    /// The first bytes, at most the limit.
    pub bytes: Vec<u8>,
    /// True when more bytes came and were dropped.
    pub truncated: bool,
}

/// What a finished (or stopped) process left behind.
#[derive(Debug, Default)]
pub struct Finished {
    /// Its stdout.
    pub stdout: Captured,
    /// Its stderr.
    pub stderr: Captured,
    /// How it exited; `None` if it could not be reaped in time after being killed.
    pub status: Option<ExitStatus>,
    /// Set when it was stopped rather than left to finish.
    pub stopped: Option<StopReason>,
}

impl Finished {
    /// Heat's convention: the exit code, or minus the signal number that killed it.
    pub fn status_code(&self) -> Option<i64> {
        let s = self.status?;
        s.code()
            .map(i64::from)
            .or_else(|| s.signal().map(|sig| -i64::from(sig)))
    }
}

/// Kills the group with SIGKILL if the hook future is dropped before its child is reaped
/// (`kill_on_drop` alone would only reach the group leader, not what it started).
struct GroupGuard {
    pgid: Option<u32>,
    reaped: Arc<AtomicBool>,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid
            && !self.reaped.load(Ordering::Acquire)
        {
            sys::signal_group(pgid, libc::SIGKILL);
        }
    }
}

/// Where, besides the bounded capture, a process's output goes as it is read: live
/// progress lines (see [`crate::progress`]).
#[derive(Debug, Default)]
pub struct Tees {
    /// Gets every byte of stdout, as read.
    pub stdout: Option<LineTee>,
    /// Gets every byte of stderr, as read.
    pub stderr: Option<LineTee>,
}

/// How [`run`] starts a process, and who learns which process group it got.
#[derive(Debug, Default)]
pub struct Launch {
    /// Runs the process under this guard, which then leads the group; `None` (and no
    /// `ready` guard) runs it directly (nothing then kills the group if the agent dies:
    /// for tests of the hook protocol only).
    pub guard: Option<Guard>,
    /// A guard started ahead ([`Ahead`]), used instead of starting `guard` now.
    pub ready: Option<Ready>,
    /// Gets the group as soon as its leader runs, to be recorded in the ledger. Under a
    /// guard the hook itself starts only when [`Spawned::go`] is sent back; dropped
    /// unsent (or this receiver gone), the guard gets no go and ends without running it.
    pub started: Option<tokio::sync::oneshot::Sender<Spawned>>,
}

/// A hook's process group, spawned under its guard and waiting for the go.
#[derive(Debug)]
pub struct Spawned {
    /// The group leader's identity; `None` only if `/proc` could not be read for it.
    pub group: Option<HookProcess>,
    /// Sending lets the hook start.
    pub go: tokio::sync::oneshot::Sender<()>,
}

/// Spawns `cmd` in its own process group (under `launch`'s guard), feeds it `stdin`, keeps the first `limit` bytes
/// of stdout and of stderr (and hands all of them to `tees` as they are read), and waits
/// for it to exit; when `stop` resolves first, the whole group gets SIGTERM, then SIGKILL
/// [`KILL_AFTER`] later.
///
/// Its own process group means a Ctrl-C at the agent's terminal does not reach the hook
/// (the agent decides what happens to it), and the agent can kill everything it started.
pub async fn run(
    mut cmd: Command,
    stdin: Option<Vec<u8>>,
    limit: usize,
    stop: impl Future<Output = StopReason>,
    tees: Tees,
    launch: Launch,
) -> io::Result<Finished> {
    let under = match (launch.ready, launch.guard) {
        (Some(ready), _) => Some(ready),
        (None, Some(guard)) => Some(ahead::start(guard).await?),
        (None, None) => None,
    };
    let guarded = under.is_some();
    // Under a guard, the hook's command goes to it with the go (its stdin follows).
    let (mut child, group, command) = match under {
        Some(ready) => {
            let command = HookCommand::of(cmd.as_std()).encode().ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "the hook's command holds a NUL byte or is too long",
                )
            })?;
            let (child, group) = ready.into_parts();
            (child, group, Some(command))
        }
        None => {
            cmd.stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
            let child = spawn(&mut cmd).await?;
            // Not reaped yet, so its /proc entry is there.
            let group = child.id().and_then(HookProcess::of);
            (child, group, None)
        }
    };
    let reaped = Arc::new(AtomicBool::new(false));
    let _guard = GroupGuard {
        pgid: child.id(),
        reaped: reaped.clone(),
    };
    let pgid = child.id();
    let gate = launch.started.map(|tx| {
        let (go, went) = tokio::sync::oneshot::channel();
        // A receiver that went away drops `go` with the message: the hook then never
        // starts.
        let _ = tx.send(Spawned { group, go });
        went
    });

    let input = child.stdin.take();
    let feed = async move {
        let Some(mut w) = input else {
            return;
        };
        if guarded {
            if let Some(went) = gate
                && went.await.is_err()
            {
                // Not recorded: closing stdin without the go ends the guard, hook unrun.
                return;
            }
            let mut go = vec![crate::guard::GO];
            go.extend(command.unwrap_or_default());
            if w.write_all(&go).await.is_err() {
                return;
            }
        }
        if let Some(bytes) = stdin {
            // A hook that exits without reading its stdin closes the pipe: not an error.
            let _ = w.write_all(&bytes).await;
        }
    };
    let out = read_bounded(child.stdout.take(), limit, tees.stdout);
    let err = read_bounded(child.stderr.take(), limit, tees.stderr);
    let wait = async {
        let status = child.wait().await;
        reaped.store(true, Ordering::Release);
        status
    };
    let work = async {
        let ((), stdout, stderr, status) = tokio::join!(feed, out, err, wait);
        Ok::<_, io::Error>(Finished {
            stdout,
            stderr,
            status: Some(status?),
            stopped: None,
        })
    };
    tokio::pin!(work);

    let reason = tokio::select! {
        done = &mut work => return done,
        reason = stop => reason,
    };
    let Some(pgid) = pgid else {
        return Ok(Finished {
            stopped: Some(reason),
            ..Finished::default()
        });
    };
    sys::signal_group(pgid, libc::SIGTERM);
    if let Ok(done) = tokio::time::timeout(KILL_AFTER, &mut work).await {
        return done.map(|f| Finished {
            stopped: Some(reason),
            ..f
        });
    }
    sys::signal_group(pgid, libc::SIGKILL);
    // Something outside the group may still hold the pipes open; do not wait for it forever.
    match tokio::time::timeout(KILL_AFTER, &mut work).await {
        Ok(done) => done.map(|f| Finished {
            stopped: Some(reason),
            ..f
        }),
        Err(_) => Ok(Finished {
            stopped: Some(reason),
            ..Finished::default()
        }),
    }
}

/// Spawns, retrying while the executable is busy: a script written just before may still
/// be open for writing in a child that another thread is forking at the same moment.
pub(crate) async fn spawn(cmd: &mut Command) -> io::Result<tokio::process::Child> {
    (|| std::future::ready(cmd.spawn()))
        .retry(SPAWN_RETRY.retry(Some(SPAWN_RETRIES)))
        .when(|e| e.kind() == io::ErrorKind::ExecutableFileBusy)
        .await
}

/// Reads `r` to its end, keeping the first `limit` bytes; the rest is drained and dropped
/// so that the process never blocks on a full pipe. Every byte read also goes to `tee`,
/// which never waits.
pub async fn read_bounded(
    r: Option<impl AsyncRead + Unpin>,
    limit: usize,
    mut tee: Option<LineTee>,
) -> Captured {
    let mut captured = Captured::default();
    let Some(mut r) = r else {
        return captured;
    };
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => {
                if let Some(tee) = tee {
                    tee.finish();
                }
                return captured;
            }
            Ok(n) => {
                let room = limit.saturating_sub(captured.bytes.len());
                captured.bytes.extend_from_slice(&buf[..n.min(room)]);
                captured.truncated |= n > room;
                if let Some(tee) = &mut tee {
                    tee.feed(&buf[..n]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("/bin/sh");
        c.arg("-c").arg(script);
        c
    }

    #[tokio::test]
    async fn captures_bounded_output_and_the_exit_status() {
        let f = run(
            sh("cat; printf 0123456789; echo err >&2; exit 3"),
            Some(b"in:".to_vec()),
            8,
            std::future::pending(),
            Tees::default(),
            Launch::default(),
        )
        .await
        .expect("runs");
        assert_eq!(f.stdout.bytes, b"in:01234");
        assert!(f.stdout.truncated);
        assert_eq!(f.stderr.bytes, b"err\n");
        assert!(!f.stderr.truncated);
        assert_eq!(f.status_code(), Some(3));
        assert_eq!(f.stopped, None);
    }

    #[tokio::test]
    async fn tees_get_every_line_in_order_beyond_the_capture_limit() {
        use flue_proto::event::OutputStream;
        let (sink, mut rx) = crate::progress::Sink::for_test(1000);
        let tees = Tees {
            stdout: Some(sink.tee(OutputStream::Stdout)),
            stderr: Some(sink.tee(OutputStream::Stderr)),
        };
        drop(sink);
        let f = run(
            sh("i=1; while [ $i -le 300 ]; do echo \"line $i\"; i=$((i+1)); done; echo oops >&2; printf tail"),
            None,
            16,
            std::future::pending(),
            tees,
            Launch::default(),
        )
        .await
        .expect("runs");
        assert_eq!(f.stdout.bytes, b"line 1\nline 2\nli");
        let mut lines = Vec::new();
        while let Some(l) = rx.recv().await {
            lines.push((l.stream, l.text));
        }
        let stdout: Vec<String> = lines
            .iter()
            .filter(|(s, _)| *s == OutputStream::Stdout)
            .map(|(_, t)| t.clone())
            .collect();
        let mut expected: Vec<String> = (1..=300).map(|i| format!("line {i}")).collect();
        expected.push("tail".to_owned());
        assert_eq!(stdout, expected);
        assert!(lines.contains(&(OutputStream::Stderr, "oops".to_owned())));
    }

    #[tokio::test]
    async fn a_full_queue_drops_and_counts_lines_without_blocking_the_hook() {
        use flue_proto::event::OutputStream;
        let (sink, mut rx) = crate::progress::Sink::for_test(10);
        let tees = Tees {
            stdout: Some(sink.tee(OutputStream::Stdout)),
            stderr: None,
        };
        let f = run(
            sh("seq 1 5000"),
            None,
            1 << 20,
            std::future::pending(),
            tees,
            Launch::default(),
        )
        .await
        .expect("runs although nobody reads the queue");
        assert_eq!(f.status_code(), Some(0));
        let mut queued = 0;
        while let Ok(l) = rx.try_recv() {
            queued += 1;
            assert_eq!(l.text, queued.to_string(), "the first lines, in order");
        }
        assert_eq!(queued, 10);
        assert_eq!(sink.dropped(), 4990);
    }

    /// True while `pid` is a live (not zombie) process.
    fn alive(pid: &str) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|stat| {
                !stat
                    .rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
            .unwrap_or(false)
    }

    #[tokio::test]
    async fn stop_kills_the_whole_group() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pidfile = dir.path().join("pid");
        // The grandchild keeps stdout open; only killing the group ends the run.
        let script = format!(
            "sleep 60 & echo $! > {}.tmp; mv {0}.tmp {0}; wait",
            pidfile.display()
        );
        let watched = pidfile.clone();
        let stop = async move {
            while !watched.exists() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            StopReason::TimedOut
        };
        let f = tokio::time::timeout(
            Duration::from_secs(30),
            run(
                sh(&script),
                None,
                1024,
                stop,
                Tees::default(),
                Launch::default(),
            ),
        )
        .await
        .expect("bounded")
        .expect("runs");
        assert_eq!(f.stopped, Some(StopReason::TimedOut));
        assert_eq!(f.status_code(), Some(-i64::from(libc::SIGTERM)));
        let pid = std::fs::read_to_string(&pidfile).expect("pid");
        // Its pipes are closed, but the kernel may still be tearing the process down.
        let gone = async {
            while alive(pid.trim()) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(5), gone)
            .await
            .expect("the hook's grandchild was killed with its group");
    }
}
