//! Pulling the response consumer: one gateway at a time (the broker's pin), each
//! server's answers in stream order, different servers' side by side, and the pull got
//! back after any failure.

use std::time::Duration;

use async_nats::jetstream::Message;
use flue_proto::retry::Policy;
use flue_proto::subject;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::Answers;
use super::lanes::Lanes;
use super::takeover::{self, Takeover};
use super::{Owners, handle};
use crate::error::chain;

/// Pauses between two attempts to get the consumer back: 100 ms doubling up to 2 s.
const RETRY: Policy = Policy::new(Duration::from_millis(100), Duration::from_secs(2));
/// Agent messages one gateway holds at once: being handled, or waiting behind an
/// earlier message of the same server.
const MAX_HELD: usize = 64;
/// Agent messages held while waiting for those another gateway held ([`takeover`]):
/// more than the broker delivers unacknowledged (its default `max_ack_pending`, 1,000).
const MAX_HELD_TAKING_OVER: usize = 4096;
/// How long one pull waits for messages: well below the pin timeout, since a gateway
/// that does not pull again within it loses the pin ([`crate::broker::PIN_TIMEOUT`]).
const PULL_EXPIRES: Duration = Duration::from_secs(2);
/// The broker's idle heartbeat on a pull (a lost connection shows within two).
const PULL_HEARTBEAT: Duration = Duration::from_secs(1);
/// How long a gateway tries to release its pin when its pull ends.
const RELEASE_WAIT: Duration = Duration::from_secs(1);

/// Consumes agent answers until cancelled, getting the consumer back after any failure.
///
/// The pin this gateway held is released when its pull ends (a failure, or the
/// gateway stopping), so that a new pull, this gateway's or another's, takes the answers
/// over at once rather than after the pin timeout.
pub async fn consume(service: Answers, cancel: CancellationToken) {
    let mut delays = RETRY.delays();
    let mut takeover = Takeover::default();
    loop {
        takeover.restart();
        let stopped = tokio::select! {
            () = cancel.cancelled() => None,
            stopped = consume_until_error(&service, &mut takeover) => Some(stopped),
        };
        release_pin(&service, &mut takeover).await;
        match stopped {
            None => return,
            Some(Ok(())) => delays.reset(),
            Some(Err(reason)) => warn!(error = %reason, "response consumer interrupted; resuming"),
        }
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(delays.next_delay()) => {}
        }
    }
}

/// Releases the pin `takeover` noted, if the broker still gives it to this gateway;
/// bounded, since the broker may be what failed.
async fn release_pin(service: &Answers, takeover: &mut Takeover) {
    let Some(pin) = takeover.take_pin() else {
        return;
    };
    let release = service.broker.release_response_pin(&pin);
    match tokio::time::timeout(RELEASE_WAIT, release).await {
        Ok(Ok(released)) => debug!(released, "response consumer pin given up"),
        Ok(Err(e)) => debug!(error = %chain(&e), "cannot release the response consumer pin"),
        Err(_) => debug!("releasing the response consumer pin timed out"),
    }
}

/// Pulls the consumer (in the pinned priority group, see [`takeover`]) until its message
/// stream fails or ends, holding up to [`MAX_HELD`] messages: one at a time per subject,
/// in stream order, subjects side by side.
async fn consume_until_error(service: &Answers, takeover: &mut Takeover) -> Result<(), String> {
    let consumer = service
        .broker
        .response_consumer()
        .await
        .map_err(|e| chain(&e))?;
    let mut messages = consumer
        .stream()
        .group(subject::GATEWAY_RESPONSE_GROUP)
        .expires(PULL_EXPIRES)
        .heartbeat(PULL_HEARTBEAT)
        .messages()
        .await
        .map_err(|e| chain(&e))?;
    debug!("response consumer pulling");
    let owners = Owners::default();
    let mut lanes: Lanes<Message> = Lanes::default();
    let mut check = tokio::time::interval(takeover::CHECK_EVERY);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut running = FuturesUnordered::new();
    let stopped = loop {
        // While waiting out a takeover, take in whatever comes: the answers awaited are
        // among it.
        let room = if lanes.paused() {
            MAX_HELD_TAKING_OVER
        } else {
            MAX_HELD
        };
        tokio::select! {
            Some(subject) = running.next(), if !running.is_empty() => {
                let subject: String = subject;
                if let Some(next) = lanes.done(&subject) {
                    running.push(handle(service, &owners, next));
                }
            }
            _ = check.tick(), if lanes.paused() => {
                if takeover.settled(&consumer, lanes.held()).await {
                    for now in lanes.resume() {
                        running.push(handle(service, &owners, now));
                    }
                }
            }
            next = messages.next(), if lanes.held() < room => match next {
                Some(Ok(message)) => {
                    takeover.note_pin(message.headers.as_ref());
                    let subject = message.subject.to_string();
                    let (seq, delivery) = message
                        .info()
                        .map_or((0, 0), |i| (i.stream_sequence, i.consumer_sequence));
                    if takeover.gap_before(delivery)
                        && !lanes.paused()
                        && takeover.others_hold(&consumer, lanes.held() + 1).await
                    {
                        lanes.pause();
                    }
                    if let Some(now) = lanes.admit(subject, seq, message) {
                        running.push(handle(service, &owners, now));
                    }
                }
                Some(Err(e)) => break Err(chain(&e)),
                None => break Ok(()),
            },
        }
    };
    // Finish what was taken, in order; whatever is not acknowledged comes again anyway.
    while let Some(subject) = running.next().await {
        if let Some(next) = lanes.done(&subject) {
            running.push(handle(service, &owners, next));
        }
    }
    stopped
}
