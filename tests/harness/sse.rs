//! A raw `text/event-stream` reader of `GET /v1/events`, independent of the `flue` CLI's:
//! the SSE tests read the wire with it, and the security tests compare what a user reads
//! before and after an attack.

use flue_proto::CloudEvent;

use crate::{Flue, WAIT};

/// One SSE block as read from the wire.
#[derive(Debug, Default)]
pub struct SseBlock {
    /// `event:`.
    pub event: Option<String>,
    /// `id:`.
    pub id: Option<String>,
    /// `retry:`.
    pub retry: Option<String>,
    /// `data:` (one line per event).
    pub data: Option<String>,
}

/// A response of `GET /v1/events`, read block by block.
pub struct Sse {
    response: reqwest::Response,
    buf: String,
    /// Everything read so far, as text.
    pub raw: String,
    /// The gateway said a replay caught up (`event: flue-end`).
    caught_up: bool,
}

impl Sse {
    /// Opens `GET /v1/events?{query}` (with `Last-Event-ID` when given) as the harness's
    /// client, asserting a 200 `text/event-stream` answer.
    pub async fn open(env: &Flue, query: &str, last_event_id: Option<u64>) -> Sse {
        let mut request = env
            .http()
            .get(format!("{}/v1/events?{query}", env.gateway.url()));
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id.to_string());
        }
        let response = request.send().await.expect("GET /v1/events");
        assert_eq!(response.status(), 200, "{query}");
        let kind = response.headers()["content-type"]
            .to_str()
            .expect("ascii")
            .to_owned();
        assert!(kind.starts_with("text/event-stream"), "{kind}");
        Sse {
            response,
            buf: String::new(),
            raw: String::new(),
            caught_up: false,
        }
    }

    /// The next block; `None` once the gateway ended the response.
    pub async fn block(&mut self) -> Option<SseBlock> {
        let mut block = SseBlock::default();
        let mut any = false;
        loop {
            while let Some(end) = self.buf.find('\n') {
                let line: String = self.buf.drain(..=end).collect();
                let line = line.trim_end_matches('\n');
                if line.is_empty() {
                    if any {
                        return Some(block);
                    }
                    continue;
                }
                if line.starts_with(':') {
                    continue;
                }
                any = true;
                let (field, value) = line.split_once(": ").expect("`field: value`");
                let value = Some(value.to_owned());
                match field {
                    "event" => block.event = value,
                    "id" => block.id = value,
                    "retry" => block.retry = value,
                    "data" => {
                        assert!(block.data.is_none(), "one data line per event: {line}");
                        block.data = value;
                    }
                    other => panic!("unexpected field {other}"),
                }
            }
            let chunk = tokio::time::timeout(WAIT, self.response.chunk())
                .await
                .expect("an SSE block within the bound")
                .expect("read the body")?;
            let text = std::str::from_utf8(&chunk).expect("utf-8").to_owned();
            self.raw.push_str(&text);
            self.buf.push_str(&text);
        }
    }

    /// The next event (skipping blocks without data), with its sequence.
    pub async fn event(&mut self) -> Option<(u64, CloudEvent)> {
        loop {
            let block = self.block().await?;
            let Some(data) = block.data else { continue };
            if block.event.as_deref() == Some("flue-end") {
                assert!(!self.caught_up, "one flue-end");
                assert_eq!(data, r#"{"code":"caught_up"}"#);
                // The body ends right after it.
                self.caught_up = true;
                continue;
            }
            assert_eq!(block.event, None, "events have no `event:` field");
            let seq = block
                .id
                .expect("every event has an id")
                .parse()
                .expect("a sequence");
            return Some((seq, serde_json::from_str(&data).expect("a CloudEvent")));
        }
    }

    /// Every event until the gateway ends the response (a `follow=false` replay).
    pub async fn rest(&mut self) -> Vec<(u64, CloudEvent)> {
        let mut events = Vec::new();
        while let Some(e) = self.event().await {
            events.push(e);
        }
        assert!(self.caught_up, "a replay that caught up ends with flue-end");
        events
    }

    /// A whole replay of what `env`'s gateway keeps (`from=start&follow=false`): each
    /// event's sequence and id, in the order read.
    pub async fn replay(env: &Flue) -> Vec<(u64, String)> {
        let mut sse = Sse::open(env, "from=start&follow=false", None).await;
        sse.rest()
            .await
            .into_iter()
            .map(|(seq, e)| (seq, e.id))
            .collect()
    }
}
