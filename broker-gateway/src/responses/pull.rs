//! Pulling the response consumer: one gateway at a time (the broker's pin), each
//! deployment's answers in stream order, different deployments' side by side (also of
//! one server: a backlog of few servers drains as fast as one of many), and the pull got
//! back after any failure.

use std::time::Duration;

use async_nats::jetstream::Message;
use async_nats::jetstream::consumer::PullConsumer;
use flue_proto::retry::Policy;
use flue_proto::subject;
use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::Answers;
use super::lanes::Lanes;
use super::takeover::{self, Takeover};
use super::{Owners, handle, parse_subject};
use crate::error::chain;

/// Pauses between two attempts to get the consumer back: 100 ms doubling up to 2 s.
const RETRY: Policy = Policy::new(Duration::from_millis(100), Duration::from_secs(2));
/// Agent messages one gateway holds at once: being handled, or waiting behind an
/// earlier message of the same deployment. Well below the broker's `max_ack_pending`
/// (1,000), so that a takeover's count of answers held elsewhere stays meaningful.
const MAX_HELD: usize = 256;
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
/// stream fails or ends, holding up to [`MAX_HELD`] messages: one at a time per
/// deployment ([`lane`]), in stream order, deployments side by side.
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
            Some(lane) = running.next(), if !running.is_empty() => {
                let lane: String = lane;
                if let Some(next) = lanes.done(&lane) {
                    running.push(handle_in(service, &owners, (lane, next)));
                }
            }
            _ = check.tick(), if lanes.paused() => {
                if takeover.settled(&consumer, lanes.held()).await {
                    for now in lanes.resume() {
                        running.push(handle_in(service, &owners, now));
                    }
                }
            }
            next = messages.next(), if lanes.held() < room => {
                // This message, then whatever else the pull already has in hand, taken
                // in before any starts: a deployment's answers that came together are
                // handled together.
                let mut next = next;
                let ended = loop {
                    match next {
                        Some(Ok(message)) => {
                            take_in(&consumer, takeover, &mut lanes, message).await;
                        }
                        Some(Err(e)) => break Some(Err(chain(&e))),
                        None => break Some(Ok(())),
                    }
                    if lanes.held() >= room {
                        break None;
                    }
                    match messages.next().now_or_never() {
                        Some(more) => next = more,
                        None => break None,
                    }
                };
                for now in lanes.start() {
                    running.push(handle_in(service, &owners, now));
                }
                if let Some(stopped) = ended {
                    break stopped;
                }
            }
        }
    };
    // Finish what was taken, in order; whatever is not acknowledged comes again anyway.
    while let Some(lane) = running.next().await {
        if let Some(next) = lanes.done(&lane) {
            running.push(handle_in(service, &owners, (lane, next)));
        }
    }
    stopped
}

/// Takes `message` into its lane, pausing the lanes first when it shows a takeover
/// whose answers are still held elsewhere ([`takeover`]).
async fn take_in(
    consumer: &PullConsumer,
    takeover: &mut Takeover,
    lanes: &mut Lanes<Message>,
    message: Message,
) {
    takeover.note_pin(message.headers.as_ref());
    let key = lane(message.subject.as_str(), &message.payload);
    let (seq, delivery) = message
        .info()
        .map_or((0, 0), |i| (i.stream_sequence, i.consumer_sequence));
    if takeover.gap_before(delivery)
        && !lanes.paused()
        && takeover.others_hold(consumer, lanes.held() + 1).await
    {
        lanes.pause();
    }
    lanes.admit(key, seq, message);
}

/// Handles the messages of `lane` to their settlement; returns the lane.
async fn handle_in(
    service: &Answers,
    owners: &Owners,
    (lane, messages): (String, Vec<Message>),
) -> String {
    handle(service, owners, messages).await;
    lane
}

/// The lane of an agent message: its deployment on its server (`<subject> <deployment>`),
/// so that one deployment's answers are applied in stream order, which is all its events'
/// order needs. A message naming no deployment (`rejected`, or one that does not parse)
/// has its server's lane, its subject; signatures are checked later, in [`handle`]: a
/// forgery naming a deployment only waits in that deployment's lane, as it waited in its
/// server's.
fn lane(subject: &str, payload: &[u8]) -> String {
    /// The one field a lane needs; the rest of the body is skipped.
    #[derive(serde::Deserialize)]
    struct Named {
        deployment_id: Option<flue_proto::DeploymentId>,
    }
    let named = parse_subject(subject)
        .and_then(|_| serde_json::from_slice::<Named>(payload).ok())
        .and_then(|n| n.deployment_id);
    match named {
        Some(id) => format!("{subject} {id}"),
        None => subject.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::lane;

    #[test]
    fn a_servers_answers_have_a_lane_per_deployment_and_what_names_none_its_servers() {
        let subject = "flue.t1.resp.s1";
        let answer = |id: &str| {
            format!(
                r#"{{"kind":"started","v":1,"deployment_id":"{id}","at":"2026-01-01T00:00:00Z"}}"#
            )
        };
        let d1 = lane(subject, answer("d1").as_bytes());
        assert_eq!(d1, "flue.t1.resp.s1 d1");
        assert_eq!(
            lane(subject, answer("d1").as_bytes()),
            d1,
            "the same lane again"
        );
        assert_ne!(lane(subject, answer("d2").as_bytes()), d1, "side by side");
        assert_ne!(
            lane("flue.t1.resp.s2", answer("d1").as_bytes()),
            d1,
            "another server's message naming the deployment is not in its lane"
        );
        let rejected = br#"{"kind":"rejected","v":1,"stream_seq":4,"reason":"x"}"#;
        assert_eq!(lane(subject, rejected), subject);
        assert_eq!(lane(subject, b"not json"), subject);
        assert_eq!(lane(subject, answer("bad id!").as_bytes()), subject);
    }
}
