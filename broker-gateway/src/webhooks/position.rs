//! Where a webhook's consumer starts on the event stream, and moving the consumers an
//! older gateway left on its copy of the stream, `FLUE_EVT_GW` (issue 24).
//!
//! Webhook consumers read `FLUE_EVT`, so a subscription's `last_seq` and `start: {seq: N}`
//! are that stream's sequences, as SSE ids and every NATS listener see them.
//!
//! Gateways before issue 24 kept them on `FLUE_EVT_GW`, a stream the broker filled by
//! copying `FLUE_EVT` (a stream source), whose sequences were its own: each copy names
//! its original's in its `Nats-Stream-Source` header ([`origin`]). Where such a consumer
//! got to in `FLUE_EVT` is read from the copy at its acknowledgement floor
//! ([`copy_floor`]); the consumer is then made again on `FLUE_EVT` from there and
//! deleted on the copy ([`super::Webhooks::retire_copy`]).

use async_nats::HeaderMap;
use async_nats::jetstream::context::{ConsumerInfoError, ConsumerInfoErrorKind};
use async_nats::jetstream::{self, consumer, stream};
use flue_proto::event::{GATEWAY_EVENT_STREAM, SOURCE_HEADER, origin_sequence};
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

/// How the consumer of a subscription whose delivery starts at `floor` (see [`floor`])
/// reads `FLUE_EVT`; `start` when there is no floor.
pub fn deliver_policy(floor: Option<u64>, start: WebhookStart) -> consumer::DeliverPolicy {
    match (floor, start) {
        (Some(from), _) => consumer::DeliverPolicy::ByStartSequence {
            start_sequence: from,
        },
        (None, WebhookStart::All | WebhookStart::Seq(_)) => consumer::DeliverPolicy::All,
        (None, WebhookStart::New) => consumer::DeliverPolicy::New,
    }
}

/// What an older gateway's consumer on `FLUE_EVT_GW` says about where delivery goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moved {
    /// There is no such consumer (or no copy at all).
    Absent,
    /// It had every event below this `FLUE_EVT` sequence and none from it on.
    From(u64),
    /// It had every copy the stream holds, and none names its original (the copy is
    /// empty): where it got to in `FLUE_EVT` is not known.
    Unknown,
}

/// Where the consumer `name` on `FLUE_EVT_GW` got to, as a `FLUE_EVT` sequence.
///
/// Its acknowledgement floor `S` (a copy sequence) says it is done with every copy up to
/// `S` (had and acknowledged, or outside its filter, or before where it started; the
/// broker sets the floor to the start less one when it makes a consumer), and with none
/// after it (one event in flight at most, and that one not acknowledged: it comes again,
/// at least once as before). So it goes on at the original of copy `S`, plus one; when
/// copy `S` is gone (no copy yet, or dropped by retention), at the original of the first
/// copy after `S` the stream still holds.
pub async fn copy_floor(js: &jetstream::Context, name: &str) -> Result<Moved, BoxError> {
    let copy = match js.get_stream(GATEWAY_EVENT_STREAM).await {
        Ok(copy) => copy,
        Err(e) if super::stream_not_found(e.kind()) => return Ok(Moved::Absent),
        Err(e) => return Err(e.into()),
    };
    let acked = match copy.consumer_info(name).await {
        Ok(info) => info.ack_floor.stream_sequence,
        Err(e) if is_consumer_not_found(&e) => return Ok(Moved::Absent),
        Err(e) => return Err(e.into()),
    };
    if acked > 0
        && let Some(seq) = copy_origin(&copy, acked).await?
    {
        return Ok(Moved::From(seq.saturating_add(1)));
    }
    let state = copy.get_info().await?.state;
    let next = acked.saturating_add(1).max(state.first_sequence);
    if next > state.last_sequence {
        return Ok(Moved::Unknown);
    }
    Ok(match copy_origin(&copy, next).await? {
        Some(seq) => Moved::From(seq),
        None => Moved::Unknown,
    })
}

/// The `FLUE_EVT` sequence of copy `seq`; `None` when it is gone or names none.
async fn copy_origin(copy: &stream::Stream, seq: u64) -> Result<Option<u64>, BoxError> {
    match copy.get_raw_message(seq).await {
        Ok(message) => Ok(origin(Some(&message.headers))),
        Err(e) if matches!(e.kind(), stream::LastRawMessageErrorKind::NoMessageFound) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Deletes the consumer `name` on `FLUE_EVT_GW`, if both are there.
pub async fn delete_on_copy(js: &jetstream::Context, name: &str) -> Result<(), BoxError> {
    match js
        .delete_consumer_from_stream(name, GATEWAY_EVENT_STREAM)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if super::is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Whether `e` says the consumer does not exist.
pub fn is_consumer_not_found(e: &ConsumerInfoError) -> bool {
    matches!(e.kind(), ConsumerInfoErrorKind::NotFound)
}
