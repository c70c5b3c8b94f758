//! Captured output of a child process, with waits for a line to appear.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::Notify;

/// Lines a child printed, shared with the task reading them.
#[derive(Clone, Default)]
pub struct Logs {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    lines: Mutex<Vec<String>>,
    changed: Notify,
    /// Streams captured and not ended yet. Once a stream was captured and none is open
    /// (the child exited), no line will come: a wait fails at once instead of running
    /// out its time. A count, not a flag: one log may hold a child's stdout and stderr,
    /// and a restarted child's new stream may open before the old one's end is read.
    open: AtomicUsize,
    captured: AtomicBool,
}

impl Logs {
    /// Starts a task copying every line of `stream` into the log.
    pub fn capture(&self, stream: impl AsyncRead + Unpin + Send + 'static) {
        let me = self.clone();
        me.inner.open.fetch_add(1, Ordering::SeqCst);
        me.inner.captured.store(true, Ordering::SeqCst);
        tokio::spawn(async move {
            let mut lines = BufReader::new(stream).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                me.inner.lines.lock().expect("logs lock").push(line);
                me.inner.changed.notify_waiters();
            }
            me.inner.open.fetch_sub(1, Ordering::SeqCst);
            me.inner.changed.notify_waiters();
        });
    }

    /// True once every captured stream has ended (the child exited).
    pub fn is_closed(&self) -> bool {
        self.inner.captured.load(Ordering::SeqCst) && self.inner.open.load(Ordering::SeqCst) == 0
    }

    /// All lines so far.
    pub fn lines(&self) -> Vec<String> {
        self.inner.lines.lock().expect("logs lock").clone()
    }

    /// Number of lines so far.
    pub fn len(&self) -> usize {
        self.inner.lines.lock().expect("logs lock").len()
    }

    /// True when nothing was printed yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Waits for a line at index ≥ `from` containing `needle`; returns it.
    ///
    /// Panics, with everything captured, when `limit` passes or the stream ends first
    /// (a child that exited will never print the line: the wait says so at once).
    pub async fn wait_for_after(&self, from: usize, needle: &str, limit: Duration) -> String {
        match self.try_wait_for_after(from, needle, limit).await {
            Ok(line) => line,
            Err(why) => panic!(
                "{why} waiting for a line containing {needle:?}; output was:\n{}",
                self.lines().join("\n")
            ),
        }
    }

    /// [`Logs::wait_for_after`] that returns why it gave up (`timed out after …`, or
    /// `the output ended …`) instead of panicking, so the caller can add what it knows
    /// (another stream of the same child, the broker's logs) before failing.
    pub async fn try_wait_for_after(
        &self,
        from: usize,
        needle: &str,
        limit: Duration,
    ) -> Result<String, String> {
        let started = tokio::time::Instant::now();
        let fut = async {
            loop {
                let notified = self.inner.changed.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if let Some(l) = self
                    .lines()
                    .into_iter()
                    .skip(from)
                    .find(|l| l.contains(needle))
                {
                    return Ok(l);
                }
                if self.is_closed() {
                    return Err(format!(
                        "the output ended (the process exited) after {:?}",
                        started.elapsed()
                    ));
                }
                notified.await;
            }
        };
        tokio::time::timeout(limit, fut)
            .await
            .unwrap_or_else(|_| Err(format!("timed out after {limit:?}")))
    }

    /// Waits for any line containing `needle`.
    pub async fn wait_for(&self, needle: &str, limit: Duration) -> String {
        self.wait_for_after(0, needle, limit).await
    }
}
