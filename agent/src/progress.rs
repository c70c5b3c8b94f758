//! Live progress: a running hook's output lines, cut, redacted, batched and bounded, sent
//! to the gateway on the response subject while the hook runs.
//!
//! # What is sent
//!
//! For the built-in `script` hook, the lines of its stdout and stderr; for an external
//! heat-config hook, only those of its stderr (its stdout is the JSON answer, which may
//! hold hidden outputs). Lines keep the order in which the agent read them: within one
//! stream exactly, between stdout and stderr in the order their reads completed (two
//! lines written to different streams close together may swap). A line is sent once its
//! newline is read, or at the end of its stream.
//!
//! # Limits
//!
//! - A line longer than [`MAX_LINE_BYTES`] (4 KiB) is cut and ends with
//!   [`LINE_TRUNCATED_MARKER`] (`…[truncated]`).
//! - A line counts the bytes it takes in a message ([`batch::encoded_size`]): its text as a
//!   JSON string plus 30 bytes for `{"stream":"stdout","text":""},`, so that empty lines
//!   or control characters (`\u0001`) cannot make a deployment send more than its budget.
//! - Lines go out in batches, one message each, at most every [`BATCH_INTERVAL`]
//!   (200 ms), or as soon as a batch holds [`MAX_BATCH_BYTES`] (64 KiB) of lines or
//!   [`MAX_BATCH_LINES`] lines.
//! - At most [`MAX_PROGRESS_BYTES`] (256 KiB) of lines per deployment. The batch that
//!   would go past it is sent without the line that does, marked `truncated: true`, and
//!   nothing follows. Each message adds its envelope (about 0.5 KiB as an event).
//! - Lines wait for the sender in a queue of at most [`QUEUE_BYTES`] (320 KiB: a burst
//!   past the budget loses nothing the budget would have sent) and [`QUEUE_LINES`]
//!   lines. Reading the hook's output never waits for the broker: when the queue is
//!   full, a line is dropped and counted in the next batch's `dropped_lines`.
//! - A hidden value is replaced before the line is cut, so one straddling the cut is
//!   never shown in part.
//! - Every hidden input's value (of at least [`MIN_HIDDEN_BYTES`] bytes; a non-string
//!   value as its JSON text; a multi-line value also line by line) reads [`HIDDEN`], as
//!   do the credentials in the agent's broker URL
//!   ([`NatsUrls::secrets`](flue_proto::nats_url::NatsUrls::secrets), as written and
//!   decoded: a hook could find them in the agent's files or environment).
//! - So they do in the result's `deploy_stdout` / `deploy_stderr`, with the values of
//!   the hidden outputs the hook produced too
//!   ([`Outcome::hiding`](crate::hook::Outcome::hiding)). Those are only known once the
//!   hook has ended: a hook printing a hidden output it generates shows it in progress.
//!
//! # Delivery
//!
//! One task per deployment publishes the batches in order (`seq` 1, 2, …), each with a
//! JetStream message id (`<tenant>.<server>.<deployment>.<request digest>.progress-<seq>`) and waiting
//! for its acknowledgement, so the response stream holds them in `seq` order. The first
//! one waits until the deployment's `started` is in the stream. A batch the broker does
//! not acknowledge (a stream leader being elected, a node down) is published again with
//! backoff until it is, under the same message id, so no `seq` is missing and none is
//! there twice; the hook is never slowed down meanwhile (its lines wait in the queue, and
//! what does not fit is dropped and counted). When the hook ends, what is left is sent
//! before the final result is published (only shutdown cuts it short), so every progress
//! message of a deployment precedes its result. The result's `deploy_stdout` /
//! `deploy_stderr` are the authoritative output.

mod batch;
mod lines;
mod redact;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use flue_proto::event::{OutputStream, ProgressEventData};
use flue_proto::{AgentMessage, DeploymentId, PROTOCOL_VERSION, RequestDigest, ServerId};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::answer::Responder;

pub use batch::{Batch, Batcher};
pub use lines::{LineSplitter, RawLine};
pub use redact::{Redactor, as_text};

/// Longest line sent; the rest of it is replaced by [`LINE_TRUNCATED_MARKER`].
pub const MAX_LINE_BYTES: usize = 4 * 1024;
/// Appended to a line cut at [`MAX_LINE_BYTES`].
pub const LINE_TRUNCATED_MARKER: &str = "…[truncated]";
/// Shortest time between two progress messages of a deployment (unless one is full).
pub const BATCH_INTERVAL: Duration = Duration::from_millis(200);
/// Lines ([`batch::encoded_size`]) that make a batch due at once.
pub const MAX_BATCH_BYTES: usize = 64 * 1024;
/// Lines that make a batch due at once (keeps a message of many short lines small).
pub const MAX_BATCH_LINES: usize = 1024;
/// Lines ([`batch::encoded_size`]) sent per deployment at most.
pub const MAX_PROGRESS_BYTES: usize = 256 * 1024;
/// Line text waiting to be sent at most (each line counts one more byte); more is dropped
/// and counted. More than the budget (a line's text is shorter than its
/// [`batch::encoded_size`]), so that a burst always reaches it and is marked `truncated`.
pub const QUEUE_BYTES: usize = MAX_PROGRESS_BYTES + MAX_BATCH_BYTES;
/// Lines waiting to be sent at most; more are dropped and counted.
pub const QUEUE_LINES: usize = 16 * 1024;
/// What replaces a hidden input's value.
pub const HIDDEN: &str = "<hidden>";
/// Hidden values shorter than this are not replaced.
pub const MIN_HIDDEN_BYTES: usize = 4;

/// Where a hook's output lines go: handed to the hook runner, which makes one
/// [`LineTee`] per stream it reports. The sender stops when every copy is dropped.
#[derive(Debug, Clone)]
pub struct Sink {
    tx: mpsc::Sender<RawLine>,
    queue: Arc<Queue>,
    keep: usize,
}

/// What the tees and the sender share about the queue between them.
#[derive(Debug)]
struct Queue {
    /// Bytes of the lines in it (text plus one per line).
    bytes: AtomicUsize,
    /// Its byte limit.
    max_bytes: usize,
    /// Lines dropped since the last batch.
    dropped: AtomicU64,
}

impl Queue {
    fn size(line: &RawLine) -> usize {
        line.text.len() + 1
    }

    /// Queues `line` unless the queue is full, which drops and counts it; never waits.
    fn offer(&self, tx: &mpsc::Sender<RawLine>, line: RawLine) {
        let size = Self::size(&line);
        let reserved = self
            .bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| {
                (b + size <= self.max_bytes).then_some(b + size)
            })
            .is_ok();
        if !reserved {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        match tx.try_send(line) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.bytes.fetch_sub(size, Ordering::AcqRel);
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
            // The sender is gone (budget spent): nothing to count.
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.bytes.fetch_sub(size, Ordering::AcqRel);
            }
        }
    }

    /// `line` left the queue.
    fn taken(&self, line: &RawLine) {
        self.bytes.fetch_sub(Self::size(line), Ordering::AcqRel);
    }

    /// Lines dropped since the last call.
    fn take_dropped(&self) -> u64 {
        self.dropped.swap(0, Ordering::Relaxed)
    }
}

impl Sink {
    /// A sink queueing up to `lines` lines and `bytes` bytes, each line cut after `keep`.
    fn queue(lines: usize, bytes: usize, keep: usize) -> (Self, mpsc::Receiver<RawLine>) {
        let (tx, rx) = mpsc::channel(lines);
        let queue = Queue {
            bytes: AtomicUsize::new(0),
            max_bytes: bytes,
            dropped: AtomicU64::new(0),
        };
        let sink = Self {
            tx,
            queue: Arc::new(queue),
            keep,
        };
        (sink, rx)
    }

    /// A sink with no sender behind it, and its queue of `lines` lines (for tests).
    #[cfg(test)]
    pub(crate) fn for_test(lines: usize) -> (Self, mpsc::Receiver<RawLine>) {
        Self::queue(lines, QUEUE_BYTES, MAX_LINE_BYTES)
    }

    /// Lines dropped so far because the queue was full and not yet reported.
    #[cfg(test)]
    pub(crate) fn dropped(&self) -> u64 {
        self.queue.dropped.load(Ordering::Relaxed)
    }

    /// A tee for the lines of `stream`.
    pub fn tee(&self, stream: OutputStream) -> LineTee {
        LineTee {
            splitter: LineSplitter::new(stream, self.keep),
            tx: self.tx.clone(),
            queue: self.queue.clone(),
        }
    }
}

/// Splits what one stream prints into lines and queues them without ever waiting.
#[derive(Debug)]
pub struct LineTee {
    splitter: LineSplitter,
    tx: mpsc::Sender<RawLine>,
    queue: Arc<Queue>,
}

impl LineTee {
    /// Reads `bytes` of the stream.
    pub fn feed(&mut self, bytes: &[u8]) {
        // The budget is spent (or the sender gone): nothing more to split.
        if self.tx.is_closed() {
            return;
        }
        let (tx, queue) = (&self.tx, &self.queue);
        self.splitter.push(bytes, |line| queue.offer(tx, line));
    }

    /// The end of the stream.
    pub fn finish(mut self) {
        if self.tx.is_closed() {
            return;
        }
        let (tx, queue) = (&self.tx, &self.queue);
        self.splitter.finish(|line| queue.offer(tx, line));
    }
}

/// The sending task of one deployment.
#[derive(Debug)]
pub struct Sender {
    task: JoinHandle<()>,
}

impl Sender {
    /// Waits for the last batches to be sent once every [`Sink`] is dropped (only
    /// shutdown cuts that short, see [`Responder::publish_finished`]).
    pub async fn finish(self) {
        if let Err(e) = self.task.await {
            warn!(error = %e, "the progress task failed");
        }
    }
}

/// Whose progress it is: a deployment on a server, answering the request message of
/// `request_digest`.
#[derive(Debug, Clone)]
pub struct For {
    /// The deployment.
    pub deployment_id: DeploymentId,
    /// The digest of the request message it answers.
    pub request_digest: RequestDigest,
    /// This agent's server.
    pub server_id: ServerId,
}

/// Starts sending the progress of `of` through `responder`, its first batch once
/// `after_started` resolves (or is dropped); feed it through the returned [`Sink`], then
/// drop every sink and call [`Sender::finish`].
pub fn start(
    responder: Responder,
    of: For,
    after_started: oneshot::Receiver<()>,
    shutdown: CancellationToken,
    redactor: Redactor,
) -> (Sink, Sender) {
    let (sink, rx) = Sink::queue(QUEUE_LINES, QUEUE_BYTES, redactor.keep());
    let queue = sink.queue.clone();
    let publisher = Publisher {
        responder,
        deployment_id: of.deployment_id,
        request_digest: of.request_digest,
        server_id: of.server_id,
        after_started: Some(after_started),
        shutdown,
        failures: 0,
        sent: 0,
    };
    let task = tokio::spawn(publisher.run(rx, queue, redactor));
    (sink, Sender { task })
}

/// Publishes one deployment's batches, one after the other.
struct Publisher {
    responder: Responder,
    deployment_id: DeploymentId,
    request_digest: RequestDigest,
    server_id: ServerId,
    /// Resolves once `started` is in the stream; taken before the first batch.
    after_started: Option<oneshot::Receiver<()>>,
    shutdown: CancellationToken,
    failures: u64,
    sent: u64,
}

impl Publisher {
    async fn run(mut self, mut rx: mpsc::Receiver<RawLine>, queue: Arc<Queue>, redactor: Redactor) {
        let mut batcher = Batcher::default();
        let mut tick = tokio::time::interval(BATCH_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let due = tokio::select! {
                line = rx.recv() => match line {
                    Some(raw) => {
                        queue.taken(&raw);
                        batcher.dropped(queue.take_dropped());
                        batcher.push(redactor.render(&raw))
                    }
                    None => break,
                },
                _ = tick.tick() => {
                    batcher.dropped(queue.take_dropped());
                    batcher.flush()
                }
            };
            if let Some(batch) = due {
                self.send(batch).await;
                if batcher.is_done() {
                    break;
                }
            }
        }
        // Closing the queue tells the tees to stop splitting.
        drop(rx);
        batcher.dropped(queue.take_dropped());
        if let Some(batch) = batcher.flush() {
            self.send(batch).await;
        }
        debug!(
            messages = self.sent,
            failed = self.failures,
            truncated = batcher.is_done(),
            "progress sent"
        );
    }

    async fn send(&mut self, batch: Batch) {
        let seq = batch.seq;
        let msg = AgentMessage::Progress {
            v: PROTOCOL_VERSION,
            deployment_id: self.deployment_id.clone(),
            progress: ProgressEventData {
                deployment_id: self.deployment_id.clone(),
                server_id: self.server_id.clone(),
                seq: batch.seq,
                lines: batch.lines,
                dropped_lines: batch.dropped_lines,
                truncated: batch.truncated,
            },
            request_digest: Some(self.request_digest.clone()),
        };
        if let Some(after_started) = self.after_started.take() {
            // A dropped sender means no `started` will come: nothing to wait for.
            let _ = after_started.await;
        }
        if self.responder.publish_finished(&msg, &self.shutdown).await {
            self.sent += 1;
        } else {
            self.failures += 1;
            warn!(seq, "progress not published before shutdown, dropping it");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_is_bounded_by_bytes_and_frees_room_as_lines_are_taken() {
        let (sink, mut rx) = Sink::queue(100, 10, MAX_LINE_BYTES);
        let mut tee = sink.tee(OutputStream::Stdout);
        tee.feed(b"abcd\nefgh\nijkl\n");
        assert_eq!(sink.queue.take_dropped(), 1, "the third line did not fit");
        let first = rx.try_recv().expect("queued");
        sink.queue.taken(&first);
        tee.feed(b"mnop");
        tee.finish();
        assert_eq!(sink.queue.take_dropped(), 0);
        let texts: Vec<String> = std::iter::from_fn(|| rx.try_recv().ok())
            .map(|l| l.text)
            .collect();
        assert_eq!(texts, ["efgh", "mnop"]);
    }

    #[test]
    fn nothing_is_split_or_counted_once_the_sender_is_gone() {
        let (sink, rx) = Sink::queue(1, 10, MAX_LINE_BYTES);
        drop(rx);
        let mut tee = sink.tee(OutputStream::Stderr);
        tee.feed(b"a\nb\nc\n");
        tee.finish();
        assert_eq!(sink.queue.take_dropped(), 0);
        assert_eq!(sink.queue.bytes.load(Ordering::Acquire), 0);
    }
}
