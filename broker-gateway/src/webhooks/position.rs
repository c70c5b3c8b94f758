//! Where a webhook's consumer starts in the gateway's copy of the event stream, given
//! a position in `FLUE_EVT`, and moving a consumer left on `FLUE_EVT` by an older
//! gateway.
//!
//! Webhook consumers read `FLUE_EVT_GW`, which the broker fills by copying `FLUE_EVT`
//! (a stream source), so its sequences are its own. What the API shows and takes (a
//! subscription's `last_seq`, `start: {seq: N}`) stays the `FLUE_EVT` sequence, the one
//! SSE ids and every NATS listener see: each copy names it in its `Nats-Stream-Source`
//! header ([`origin`]). Copies keep the order of the originals, so the copy of sequence
//! `N` is found by a binary search ([`copy_position`]); the delivery task then skips
//! any copy whose origin is below where it must start, which also covers an original
//! not copied yet when the search ran.

use async_nats::HeaderMap;
use async_nats::jetstream::context::{ConsumerInfoError, ConsumerInfoErrorKind};
use async_nats::jetstream::{self, consumer, stream};
use flue_proto::event::{EVENT_STREAM, SOURCE_HEADER, origin_sequence};
use flue_proto::webhook::WebhookStart;

use crate::store::Subscription;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The `FLUE_EVT` sequence of a copy in `FLUE_EVT_GW`, from its headers.
pub fn origin(headers: Option<&HeaderMap>) -> Option<u64> {
    origin_sequence(headers?.get(SOURCE_HEADER)?.as_str())
}

/// The first `FLUE_EVT` sequence `sub` may be delivered: after the last event it was
/// delivered, else the one it asked to start at; `None` for `new` and `all`, which
/// need no sequence.
pub fn floor(sub: &Subscription) -> Option<u64> {
    match (sub.last_seq, sub.start) {
        (Some(seq), _) => Some(seq.saturating_add(1)),
        (None, WebhookStart::Seq(seq)) => Some(seq.max(1)),
        (None, WebhookStart::New | WebhookStart::All) => None,
    }
}

/// The sequence in `copy` (`FLUE_EVT_GW`) of the first copy whose origin is `from` or
/// later; the copy stream's next sequence when it holds none yet. Copies are in origin
/// order and nothing deletes one from the middle, so the kept range is searched by
/// halves: some 17 reads for 100,000 events.
pub async fn copy_position(copy: &stream::Stream, from: u64) -> Result<u64, BoxError> {
    let state = copy.get_info().await?.state;
    let (mut low, mut high) = (state.first_sequence.max(1), state.last_sequence + 1);
    while low < high {
        let mid = low + (high - low) / 2;
        let older = match copy.get_raw_message(mid).await {
            Ok(message) => match origin(Some(&message.headers)) {
                Some(seq) => seq < from,
                // Not a copy of FLUE_EVT: cannot happen on a stream only the broker
                // writes; start at the oldest, the delivery task skips what is before.
                None => return Ok(state.first_sequence.max(1)),
            },
            // Dropped by retention while searching: older than anything kept.
            Err(e) if matches!(e.kind(), stream::LastRawMessageErrorKind::NoMessageFound) => true,
            Err(e) => return Err(e.into()),
        };
        if older {
            low = mid + 1;
        } else {
            high = mid;
        }
    }
    Ok(low)
}

/// How the consumer of a subscription whose delivery starts at `floor` (a `FLUE_EVT`
/// sequence, see [`floor`]) reads `copy`; `start` when there is no floor.
pub async fn deliver_policy(
    copy: &stream::Stream,
    floor: Option<u64>,
    start: WebhookStart,
) -> Result<consumer::DeliverPolicy, BoxError> {
    Ok(match (floor, start) {
        (Some(from), _) => consumer::DeliverPolicy::ByStartSequence {
            start_sequence: copy_position(copy, from).await?,
        },
        (None, WebhookStart::All | WebhookStart::Seq(_)) => consumer::DeliverPolicy::All,
        (None, WebhookStart::New) => consumer::DeliverPolicy::New,
    })
}

/// Where the consumer named `name` that an older gateway made on `FLUE_EVT` got to: the
/// first sequence it had not had acknowledged. `None` when there is no such consumer.
/// Everything below it was delivered (acknowledged only after a 2xx); the one event
/// it may have had in flight comes again, as it would have from that consumer.
pub async fn legacy_floor(js: &jetstream::Context, name: &str) -> Result<Option<u64>, BoxError> {
    let stream = js.get_stream(EVENT_STREAM).await?;
    match stream.consumer_info(name).await {
        Ok(info) => Ok(Some(info.ack_floor.stream_sequence.saturating_add(1))),
        Err(e) if is_consumer_not_found(&e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Deletes the consumer `name` on `FLUE_EVT`, if it is there.
pub async fn delete_legacy(js: &jetstream::Context, name: &str) -> Result<(), BoxError> {
    let stream = js.get_stream(EVENT_STREAM).await?;
    match stream.delete_consumer(name).await {
        Ok(_) => Ok(()),
        Err(e) if super::is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Whether `e` says the consumer does not exist.
pub fn is_consumer_not_found(e: &ConsumerInfoError) -> bool {
    matches!(e.kind(), ConsumerInfoErrorKind::NotFound)
}
