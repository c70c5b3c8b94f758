//! Taking the answers over from another gateway without reordering a server's answers.
//!
//! The response consumer is pinned to one gateway at a time ([`crate::broker::PIN_TIMEOUT`]).
//! When the pin moves (the pinned gateway died, or lost the broker for longer than the
//! pin timeout), the answers the old holder took and never acknowledged come back only
//! after the consumer's ack wait, while the new holder gets the later ones at once: a
//! server's `finished` could be applied before its `started`, and the `started` event
//! would be lost. So a gateway watches the consumer's delivery sequence: while it holds
//! the pin, its deliveries follow each other one by one; a gap (or its first delivery)
//! means another client was delivered to in between. Then, when the consumer counts more
//! answers delivered and unacknowledged than this gateway holds, it starts nothing new
//! ([`super::lanes::Lanes::pause`]) and keeps taking messages in, each lane in stream
//! order, until the others' answers have come back to it (the counts agree) or the ack
//! wait has passed, and then goes on in stream order.

use std::time::Duration;

use async_nats::jetstream::consumer::PullConsumer;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::broker::ACK_WAIT;

/// How long a gateway waits at most for the answers another one held: they are due
/// again after the ack wait; the rest is the broker's own delay in redelivering.
const MAX_WAIT: Duration = ACK_WAIT.saturating_add(Duration::from_secs(2));
/// How often the consumer's counts are read while waiting.
pub(super) const CHECK_EVERY: Duration = Duration::from_millis(200);

/// What a gateway knows of the consumer's deliveries to it.
#[derive(Debug, Default)]
pub(super) struct Takeover {
    /// Consumer (delivery) sequence of the last message delivered to this gateway.
    last_delivery: Option<u64>,
    /// While waiting for another holder's answers: since when.
    waiting_since: Option<Instant>,
    /// The pin the broker gave this gateway (`Nats-Pin-Id` of the last answer).
    pin: Option<String>,
}

impl Takeover {
    /// A new pull of the consumer: its first delivery is checked whatever came before,
    /// since what the previous pull held and did not settle comes back after the ack
    /// wait. The pin is kept until [`Takeover::take_pin`].
    pub(super) fn restart(&mut self) {
        self.last_delivery = None;
        self.waiting_since = None;
    }

    /// Notes the pin an answer came with (the broker's header is the last one).
    pub(super) fn note_pin(&mut self, headers: Option<&async_nats::HeaderMap>) {
        let pin = headers.and_then(|h| h.get_last(async_nats::header::NATS_PIN_ID));
        if let Some(pin) = pin
            && self.pin.as_deref() != Some(pin.as_str())
        {
            self.pin = Some(pin.as_str().to_owned());
        }
    }

    /// The pin this gateway held, if any, forgotten here (to release it).
    pub(super) fn take_pin(&mut self) -> Option<String> {
        self.pin.take()
    }

    /// Notes delivery `seq`; whether another client may have been delivered to since the
    /// last delivery here (a gap, or the first delivery).
    pub(super) fn gap_before(&mut self, seq: u64) -> bool {
        let gap = self.last_delivery.is_none_or(|last| seq != last + 1);
        self.last_delivery = Some(seq);
        gap
    }

    /// Whether answers are delivered and unacknowledged beyond the `mine` this gateway
    /// holds: another client holds them. A consumer that cannot be read is taken as
    /// holding none (waiting could not end on a count it cannot read either).
    pub(super) async fn others_hold(&mut self, consumer: &PullConsumer, mine: usize) -> bool {
        let pending = match consumer.get_info().await {
            Ok(info) => info.num_ack_pending,
            Err(e) => {
                debug!(error = %e, "cannot read the response consumer's counts");
                return false;
            }
        };
        let others = pending > mine;
        if others {
            info!(
                pending,
                mine, "answers held by another gateway; waiting for them before going on"
            );
            self.waiting_since = Some(Instant::now());
        }
        others
    }

    /// While waiting: whether the others' answers are back (the consumer counts no more
    /// unacknowledged answers than the `mine` held here) or the wait is over.
    pub(super) async fn settled(&mut self, consumer: &PullConsumer, mine: usize) -> bool {
        let Some(since) = self.waiting_since else {
            return true;
        };
        let pending = consumer.get_info().await.map(|info| info.num_ack_pending);
        let back = matches!(pending, Ok(pending) if pending <= mine);
        let waited = since.elapsed();
        if back {
            info!(
                waited_ms = waited.as_millis(),
                mine, "answers taken over; going on in stream order"
            );
        } else if waited >= MAX_WAIT {
            warn!(waited_ms = waited.as_millis(), pending = ?pending.ok(), mine, "answers held by another gateway did not come back in time; going on");
        } else {
            return false;
        }
        self.waiting_since = None;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_consecutive_deliveries_are_not_a_gap() {
        let mut t = Takeover::default();
        assert!(t.gap_before(7), "the first delivery");
        assert!(!t.gap_before(8));
        assert!(!t.gap_before(9));
        assert!(t.gap_before(12), "10 and 11 went elsewhere");
        assert!(!t.gap_before(13));
    }
}
