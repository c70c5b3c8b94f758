//! Reading deployments' histories back from the event stream `FLUE_EVT`, as a listener
//! would: every event of the stream up to its last one, then per deployment the order of
//! its lifecycle events and whether any event id came twice.

use std::collections::HashMap;
use std::time::Duration;

use async_nats::jetstream;
use flue_proto::event::{EVENT_STREAM, EventType};
use flue_proto::{CloudEvent, DeploymentId, subject};
use flue_tests::{EventTap, WAIT};

/// Waits (a bounded poll of the broker's own view: nothing else announces it) until the
/// gateways' response consumer holds nothing: every agent answer applied and acknowledged,
/// so every event it gives is in the stream.
pub async fn answers_settled(client: &async_nats::Client) {
    let js = jetstream::new(client.clone());
    let name = flue_tests::consumers::response_consumer(&js).await;
    let settled = async {
        loop {
            let stream = js
                .get_stream_no_info(subject::RESPONSE_STREAM)
                .await
                .expect("response stream");
            let info = stream.consumer_info(&name).await;
            if let Ok(info) = info
                && info.num_pending == 0
                && info.num_ack_pending == 0
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await; // poll interval
        }
    };
    tokio::time::timeout(WAIT, settled)
        .await
        .expect("every agent answer applied and acknowledged");
}

/// Every event of `FLUE_EVT` from the first to the last one at the time of the call, in
/// stream order.
pub async fn all_events(events_client: &async_nats::Client) -> Vec<(u64, CloudEvent)> {
    let mut stream = jetstream::new(events_client.clone())
        .get_stream(EVENT_STREAM)
        .await
        .expect("event stream");
    let last_seq = stream
        .info()
        .await
        .expect("stream info")
        .state
        .last_sequence;
    let last = stream
        .get_raw_message(last_seq)
        .await
        .expect("the stream's last event");
    let last: CloudEvent = serde_json::from_slice(&last.payload).expect("an event");
    let mut tap = EventTap::from_start(events_client).await;
    tap.wait_for("the stream's last event", WAIT, |e| e.id == last.id)
        .await;
    tap.seen().to_vec()
}

/// What is wrong with the histories of `ids` in `events` (stream order): an event id seen
/// twice; a deployment without exactly one `queued`, one `started` and one terminal
/// event, or with them out of that order; with `delivered`, also exactly one
/// `deployment.delivered` between `queued` and `started` (else at most one, there: an
/// agent that cannot publish its `delivered` carries on without it). Empty when all is
/// well.
pub fn problems(
    events: &[(u64, CloudEvent)],
    ids: &[DeploymentId],
    delivered: bool,
) -> Vec<String> {
    let mut found = Vec::new();
    let mut seen_ids: HashMap<&str, usize> = HashMap::new();
    for (_, event) in events {
        *seen_ids.entry(event.id.as_str()).or_insert(0) += 1;
    }
    let mut twice: Vec<_> = seen_ids.iter().filter(|(_, n)| **n > 1).collect();
    twice.sort();
    for (id, n) in twice {
        found.push(format!("event id {id} in the stream {n} times"));
    }
    let mut of: HashMap<&DeploymentId, Vec<(u64, EventType)>> = HashMap::new();
    for (seq, event) in events {
        if let Some(d) = &event.deployment {
            of.entry(d).or_default().push((*seq, event.ty));
        }
    }
    for id in ids {
        let history: Vec<EventType> = of
            .get(id)
            .map(|h| {
                h.iter()
                    .map(|(_, ty)| *ty)
                    .filter(|ty| *ty != EventType::DeploymentProgress)
                    .collect()
            })
            .unwrap_or_default();
        let mut rest: &[EventType] = &history;
        let mut in_order = rest.first() == Some(&EventType::DeploymentQueued);
        rest = rest.get(1..).unwrap_or_default();
        match rest.first() {
            Some(EventType::DeploymentDelivered) => rest = &rest[1..],
            _ => in_order &= !delivered,
        }
        in_order &= rest.first() == Some(&EventType::DeploymentStarted);
        rest = rest.get(1..).unwrap_or_default();
        let ends = in_order
            && matches!(
                rest,
                [EventType::DeploymentCompleted
                    | EventType::DeploymentFailed
                    | EventType::DeploymentTimedOut]
            );
        if !ends {
            found.push(format!("{id}: {history:?}"));
        }
    }
    found
}
