//! Reading the event stream for one listener (an SSE client): an ordered consumer on
//! `FLUE_EVT` starting where the listener asks, narrowed by its filter, and deleted when
//! the listener goes away.
//!
//! `FLUE_EVT` has no stream-level consumer limit: the bounds on consumers are applied by
//! the gateway to NATS listeners' consumers alone ([`crate::natsauth::creates`]), so
//! listeners never refuse an SSE client, and none can pull from an SSE client's
//! consumer (no listener right names it).
//!
//! Where to start is resolved against the stream's state at open time ([`Listener::open`]):
//! a start before the oldest kept event is reported ([`Notice::TooFarBehind`]) and the
//! listener goes on from the oldest; a replay ([`Mode::Replay`]) ends once it has passed
//! the stream's last sequence of that moment. Every event carries its stream sequence,
//! which a listener hands back (`Last-Event-ID`) to resume exactly after it.

use async_nats::jetstream::consumer::DeliverPolicy;
use async_nats::jetstream::consumer::pull::{Ordered, OrderedConfig};
use async_nats::jetstream::{self, Message};
use flue_proto::event::EVENT_STREAM;
use flue_proto::{CloudEvent, EventFilter, TenantId};
use futures_util::StreamExt;
use time::OffsetDateTime;
use tracing::{debug, warn};

use crate::broker::BrokerError;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What the name of every SSE client's consumer starts with (one the client library
/// makes again is named `<name>_<n>`).
pub const SSE_CONSUMER_PREFIX: &str = "flue-sse-";

/// Where a listener starts reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// Only events published from now on.
    New,
    /// Every event the stream still keeps.
    All,
    /// Events whose stream sequence is greater than this one.
    After(u64),
    /// Events the stream received at or after this time.
    Since(OffsetDateTime),
}

/// Whether a listener keeps waiting for new events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Deliver events as they come, until the listener goes away.
    Follow,
    /// End once caught up with the stream's last event at open time.
    Replay,
}

/// Something the listener must be told before its events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notice {
    /// Events after `requested_after` were dropped (retention, purge); delivery goes on
    /// from `oldest_available`.
    TooFarBehind {
        /// The sequence the listener asked to resume after.
        requested_after: u64,
        /// The first sequence it will get.
        oldest_available: u64,
    },
    /// The sequence asked for was never in the stream (the stream was recreated):
    /// delivery starts again from the oldest kept event.
    StreamReset {
        /// The sequence the listener asked to resume after.
        requested_after: u64,
        /// The stream's last sequence.
        last_sequence: u64,
    },
}

/// One event read for a listener.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivered {
    /// Its stream sequence: the SSE `id`.
    pub seq: u64,
    /// The event.
    pub event: CloudEvent,
}

/// An opened listener; drop it to delete its consumer.
pub struct Listener {
    messages: Ordered,
    filter: EventFilter,
    /// Events below this sequence are skipped (a consumer recreated by the client
    /// library may start over from the beginning).
    first: u64,
    /// Only events the stream received at or after this time.
    since: Option<OffsetDateTime>,
    /// The last sequence handed out: never hand out one twice.
    last_sent: u64,
    /// In a replay, the stream's last sequence at open time.
    end: Option<u64>,
    done: bool,
    cleanup: Cleanup,
}

/// What [`Listener::open`] found.
pub struct Opened {
    /// The listener.
    pub listener: Listener,
    /// Told to the client before any event.
    pub notice: Option<Notice>,
    /// The sequence delivery starts after, when known before the first event (not for
    /// [`Start::Since`]): a client resuming from it misses nothing.
    pub position: Option<u64>,
}

impl Listener {
    /// Creates an ordered consumer for `tenant`'s events that pass `filter`, from `start`.
    pub async fn open(
        js: &jetstream::Context,
        tenant: &TenantId,
        filter: EventFilter,
        start: Start,
        mode: Mode,
    ) -> Result<Opened, BrokerError> {
        let stream_err = |e: BoxError| BrokerError::Stream {
            stream: EVENT_STREAM,
            source: e,
        };
        let stream = js
            .get_stream(EVENT_STREAM)
            .await
            .map_err(|e| stream_err(e.into()))?;
        let state = &stream.cached_info().state;
        let plan = plan(start, state.first_sequence, state.last_sequence);

        let name = format!("{SSE_CONSUMER_PREFIX}{}", uuid::Uuid::new_v4().simple());
        let consumer_err = |e: BoxError| BrokerError::Consumer {
            stream: EVENT_STREAM,
            consumer: name.clone(),
            source: e,
        };
        let consumer = stream
            .create_consumer(OrderedConfig {
                name: Some(name.clone()),
                filter_subject: filter.subject_filter(tenant),
                deliver_policy: plan.policy,
                ..Default::default()
            })
            .await
            .map_err(|e| consumer_err(e.into()))?;
        let cleanup = Cleanup {
            js: js.clone(),
            names: vec![name.clone()],
        };
        let nothing_pending = consumer.cached_info().num_pending == 0;
        let messages = consumer
            .messages()
            .await
            .map_err(|e| consumer_err(e.into()))?;
        debug!(consumer = %name, first = plan.first, "event listener opened");
        let end = match mode {
            Mode::Follow => None,
            Mode::Replay => Some(state.last_sequence),
        };
        let listener = Listener {
            messages,
            filter,
            first: plan.first,
            since: match start {
                Start::Since(at) => Some(at),
                _ => None,
            },
            last_sent: 0,
            end,
            done: end.is_some() && nothing_pending,
            cleanup,
        };
        Ok(Opened {
            listener,
            notice: plan.notice,
            position: plan.position,
        })
    }

    /// The next event passing the filter; `None` once a replay is caught up (or the
    /// consumer ended).
    pub async fn next(&mut self) -> Result<Option<Delivered>, BrokerError> {
        while !self.done {
            let Some(message) = self.messages.next().await else {
                return Ok(None);
            };
            let message = message.map_err(|e| self.read_error(e.into()))?;
            if let Some(delivered) = self.accept(&message).map_err(|e| self.read_error(e))? {
                self.last_sent = delivered.seq;
                return Ok(Some(delivered));
            }
        }
        Ok(None)
    }

    /// Checks one message: bookkeeping, the end of a replay, and whether it is handed out.
    fn accept(&mut self, message: &Message) -> Result<Option<Delivered>, BoxError> {
        let info = message.info()?;
        let seq = info.stream_sequence;
        if !self.cleanup.names.iter().any(|n| n == info.consumer) {
            // The client library recreated the consumer under a new name.
            self.cleanup.names.push(info.consumer.to_owned());
        }
        if self.end.is_some_and(|end| seq >= end) || (self.end.is_some() && info.pending == 0) {
            self.done = true;
        }
        if seq < self.first
            || seq <= self.last_sent
            || self.since.is_some_and(|at| info.published < at)
        {
            return Ok(None);
        }
        let event: CloudEvent = match serde_json::from_slice(&message.payload) {
            Ok(event) => event,
            Err(e) => {
                warn!(error = %e, seq, subject = %message.subject, "undecodable event skipped");
                return Ok(None);
            }
        };
        Ok(self
            .filter
            .matches(&event)
            .then_some(Delivered { seq, event }))
    }

    fn read_error(&self, source: BoxError) -> BrokerError {
        BrokerError::Consumer {
            stream: EVENT_STREAM,
            consumer: self.cleanup.names[0].clone(),
            source,
        }
    }
}

/// How [`Listener::open`] starts the consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Plan {
    policy: DeliverPolicy,
    first: u64,
    notice: Option<Notice>,
    position: Option<u64>,
}

/// Resolves `start` against the stream's first and last sequence. A stream with no
/// event left has `first = last + 1` (after a purge or expiry) or `first = 0` (never
/// written).
fn plan(start: Start, first: u64, last: u64) -> Plan {
    let from = |seq: u64, notice| Plan {
        policy: DeliverPolicy::ByStartSequence {
            start_sequence: seq,
        },
        first: seq,
        notice,
        position: Some(seq - 1),
    };
    let oldest = first.max(1);
    match start {
        // Resolved to a sequence (not `DeliverPolicy::New`) so that an event published
        // between this read and the consumer's creation is not lost.
        Start::New => from(last + 1, None),
        Start::All => from(oldest, None),
        Start::After(after) if after > last => from(
            oldest,
            Some(Notice::StreamReset {
                requested_after: after,
                last_sequence: last,
            }),
        ),
        Start::After(after) if after + 1 < oldest => from(
            oldest,
            Some(Notice::TooFarBehind {
                requested_after: after,
                oldest_available: oldest,
            }),
        ),
        Start::After(after) => from(after + 1, None),
        Start::Since(at) => Plan {
            policy: DeliverPolicy::ByStartTime { start_time: at },
            first: 0,
            notice: None,
            position: None,
        },
    }
}

/// Deletes a listener's consumers when it is dropped (the client went away). Ordered
/// consumers are ephemeral and the server would remove them after 30 s of inactivity;
/// deleting them at once keeps many short-lived SSE clients from piling up consumers
/// (SSE clients are bounded by the API's `--max-connections`, not by a consumer limit).
struct Cleanup {
    js: jetstream::Context,
    names: Vec<String>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let js = self.js.clone();
        let names = std::mem::take(&mut self.names);
        runtime.spawn(async move {
            for name in names {
                match js.delete_consumer_from_stream(&name, EVENT_STREAM).await {
                    Ok(_) => debug!(consumer = %name, "event listener consumer deleted"),
                    Err(e) => debug!(consumer = %name, error = %e, "cannot delete an event listener consumer"),
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_resolve_against_the_kept_range() {
        // Stream keeps 5..=9.
        let p = plan(Start::After(6), 5, 9);
        assert_eq!((p.first, p.notice, p.position), (7, None, Some(6)));
        // Exactly at the edge: 4 was the last one dropped, nothing missed.
        let p = plan(Start::After(4), 5, 9);
        assert_eq!((p.first, p.notice), (5, None));
        let p = plan(Start::After(2), 5, 9);
        assert_eq!(
            (p.first, p.notice),
            (
                5,
                Some(Notice::TooFarBehind {
                    requested_after: 2,
                    oldest_available: 5
                })
            )
        );
        let p = plan(Start::After(12), 5, 9);
        assert!(matches!(p.notice, Some(Notice::StreamReset { .. })));
        assert_eq!(plan(Start::New, 5, 9).first, 10);
        assert_eq!(plan(Start::All, 5, 9).position, Some(4));
    }

    #[test]
    fn empty_streams_start_at_one_or_after_the_purge() {
        // Never written.
        assert_eq!(plan(Start::All, 0, 0).first, 1);
        assert_eq!(plan(Start::After(0), 0, 0).notice, None);
        assert_eq!(plan(Start::New, 0, 0).first, 1);
        // Purged after 9: first = 10.
        let p = plan(Start::After(3), 10, 9);
        assert_eq!(p.first, 10);
        assert!(matches!(p.notice, Some(Notice::TooFarBehind { .. })));
        assert_eq!(plan(Start::After(9), 10, 9).notice, None);
    }
}
