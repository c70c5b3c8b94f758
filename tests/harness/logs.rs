//! Captured output of a child process, with waits for a line to appear.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::Notify;

/// Lines a child printed, shared with the task reading them.
#[derive(Clone, Default)]
pub struct Logs {
    inner: Arc<(Mutex<Vec<String>>, Notify)>,
}

impl Logs {
    /// Starts a task copying every line of `stream` into the log.
    pub fn capture(&self, stream: impl AsyncRead + Unpin + Send + 'static) {
        let me = self.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stream).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                me.inner.0.lock().expect("logs lock").push(line);
                me.inner.1.notify_waiters();
            }
        });
    }

    /// All lines so far.
    pub fn lines(&self) -> Vec<String> {
        self.inner.0.lock().expect("logs lock").clone()
    }

    /// Number of lines so far.
    pub fn len(&self) -> usize {
        self.inner.0.lock().expect("logs lock").len()
    }

    /// True when nothing was printed yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Waits for a line at index ≥ `from` containing `needle`; returns it.
    pub async fn wait_for_after(&self, from: usize, needle: &str, limit: Duration) -> String {
        let fut = async {
            loop {
                let notified = self.inner.1.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if let Some(l) = self
                    .lines()
                    .into_iter()
                    .skip(from)
                    .find(|l| l.contains(needle))
                {
                    return l;
                }
                notified.await;
            }
        };
        match tokio::time::timeout(limit, fut).await {
            Ok(l) => l,
            Err(_) => panic!(
                "timed out after {limit:?} waiting for a line containing {needle:?}; output was:\n{}",
                self.lines().join("\n")
            ),
        }
    }

    /// Waits for any line containing `needle`.
    pub async fn wait_for(&self, needle: &str, limit: Duration) -> String {
        self.wait_for_after(0, needle, limit).await
    }
}
