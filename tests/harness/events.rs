//! Reading the event stream in tests: every event published since the tap started (or
//! since the stream began), waited for with a bound, never with a sleep.

use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use flue_proto::CloudEvent;
use flue_proto::event::EVENT_STREAM;
use futures_util::StreamExt;

/// An ordered consumer on `FLUE_EVT`, decoding every event it gets.
pub struct EventTap {
    messages: consumer::pull::Ordered,
    seen: Vec<(u64, CloudEvent)>,
}

impl EventTap {
    /// Reads the whole stream from its first event (the gateway must have created it).
    pub async fn from_start(client: &async_nats::Client) -> EventTap {
        EventTap::with_policy(client, consumer::DeliverPolicy::All).await
    }

    /// Reads events from `seq` on.
    pub async fn from_seq(client: &async_nats::Client, seq: u64) -> EventTap {
        EventTap::with_policy(
            client,
            consumer::DeliverPolicy::ByStartSequence {
                start_sequence: seq,
            },
        )
        .await
    }

    async fn with_policy(client: &async_nats::Client, policy: consumer::DeliverPolicy) -> EventTap {
        let js = jetstream::new(client.clone());
        let stream = js
            .get_stream(EVENT_STREAM)
            .await
            .expect("the gateway created the event stream");
        let messages = stream
            .create_consumer(consumer::pull::OrderedConfig {
                deliver_policy: policy,
                ..Default::default()
            })
            .await
            .expect("ordered consumer")
            .messages()
            .await
            .expect("messages");
        EventTap {
            messages,
            seen: Vec::new(),
        }
    }

    /// Every event read so far with its stream sequence, in stream order.
    pub fn seen(&self) -> &[(u64, CloudEvent)] {
        &self.seen
    }

    /// Every event read so far, in stream order.
    pub fn events(&self) -> Vec<CloudEvent> {
        self.seen.iter().map(|(_, e)| e.clone()).collect()
    }

    /// Reads until an event passes `check` (looking at those already read first, and
    /// removing nothing); panics after `limit` naming `what`.
    pub async fn wait_for(
        &mut self,
        what: &str,
        limit: Duration,
        check: impl Fn(&CloudEvent) -> bool,
    ) -> CloudEvent {
        if let Some((_, e)) = self.seen.iter().find(|(_, e)| check(e)) {
            return e.clone();
        }
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let next = tokio::time::timeout_at(deadline, self.messages.next())
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "no event {what} within {limit:?}; seen: {:#?}",
                        self.seen
                            .iter()
                            .map(|(s, e)| format!("{s} {} {}", e.ty, e.id))
                            .collect::<Vec<_>>()
                    )
                })
                .expect("event stream open")
                .expect("event message");
            let seq = next.info().expect("jetstream message").stream_sequence;
            let event: CloudEvent =
                serde_json::from_slice(&next.payload).expect("every event is a CloudEvent");
            let hit = check(&event);
            self.seen.push((seq, event.clone()));
            if hit {
                return event;
            }
        }
    }
}
