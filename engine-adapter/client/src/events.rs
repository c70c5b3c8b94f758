//! Following the gateway's event stream, `GET /v1/events` (Server-Sent Events): the
//! query, the connection, and a parser for the `text/event-stream` blocks.
//!
//! Each event block carries `id: <stream sequence>` and `data: <CloudEvent JSON>`; a
//! block named `flue-error` tells the client something it must know (events it missed);
//! an `id:` without data is the position the stream starts after. A client that keeps
//! the last sequence it saw resumes with [`EventStart::After`] and misses nothing.

use std::time::Duration;

use flue_proto::{CloudEvent, EventFilter};
use reqwest::Url;
use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::{Client, api_error};
use crate::ClientError;

/// With no byte for this long (the gateway sends a keep-alive every 15 s), the
/// connection is taken as dead.
pub const IDLE_LIMIT: Duration = Duration::from_secs(45);

/// Where the stream starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventStart {
    /// Only events published from now on.
    New,
    /// Every event the gateway still keeps.
    All,
    /// Events after this stream sequence (resuming).
    After(u64),
    /// Events received at or after this time.
    Since(OffsetDateTime),
}

/// What to ask `GET /v1/events` for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventQuery {
    /// Which events (types, server, stack, deployment).
    pub filter: EventFilter,
    /// From where.
    pub start: EventStart,
    /// Keep waiting for new events (`false`: end once caught up, `follow=false`).
    pub follow: bool,
}

/// One thing the stream delivered.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamItem {
    /// An event and its stream sequence.
    Event {
        /// Stream sequence (the SSE `id`).
        seq: u64,
        /// The event.
        event: Box<CloudEvent>,
    },
    /// A `flue-error` block, e.g. `too_far_behind`: some events were missed.
    Notice(StreamNotice),
    /// The sequence the stream starts after (an `id:` block without data).
    Position(u64),
    /// A replay (`follow=false`) caught up: the gateway's `flue-end` block.
    End,
}

/// A `flue-error` block.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamNotice {
    /// `too_far_behind`, `stream_reset`, …
    pub code: String,
    /// What happened, for a person.
    pub message: String,
    /// The whole block (`oldest_available`, `requested_after`, …).
    pub data: Value,
}

/// Why reading an open event stream failed.
#[derive(Debug, thiserror::Error)]
pub enum EventStreamError {
    /// The connection broke.
    #[error("the event stream from {url} broke")]
    Transport {
        /// The stream's URL.
        url: String,
        /// The transport error.
        #[source]
        source: reqwest::Error,
    },
    /// Nothing arrived for [`IDLE_LIMIT`], not even a keep-alive.
    #[error("the event stream from {url} sent nothing for {}s", idle.as_secs())]
    Stalled {
        /// The stream's URL.
        url: String,
        /// How long it was silent.
        idle: Duration,
    },
    /// A block is not what the protocol says.
    #[error("malformed event from {url}: {reason}")]
    Malformed {
        /// The stream's URL.
        url: String,
        /// What is wrong.
        reason: String,
    },
}

/// An open event stream; read it with [`EventStream::next`].
#[derive(Debug)]
pub struct EventStream {
    response: reqwest::Response,
    url: Url,
    parser: Parser,
}

impl Client {
    /// `GET /v1/events`: opens the event stream. A refused query is a
    /// [`ClientError::Api`] (400, naming the parameter).
    pub async fn events(&self, query: &EventQuery) -> Result<EventStream, ClientError> {
        let url = self.events_url(query)?;
        tracing::debug!(url = %url, "opening the event stream");
        let response = self
            .request(reqwest::Method::GET, url.clone())
            .header("accept", "text/event-stream")
            .send()
            .await
            .map_err(|e| ClientError::transport(&url, e))?;
        let status = response.status().as_u16();
        if !(200..300).contains(&status) {
            let body = response
                .bytes()
                .await
                .map_err(|e| ClientError::transport(&url, e))?;
            return Err(api_error(status, &body));
        }
        Ok(EventStream {
            response,
            url,
            parser: Parser::default(),
        })
    }

    fn events_url(&self, query: &EventQuery) -> Result<Url, ClientError> {
        let mut url = self.url("v1/events")?;
        {
            let mut pairs = url.query_pairs_mut();
            let filter = &query.filter;
            if !filter.types.is_empty() {
                let types: Vec<String> = filter.types.iter().map(|t| t.short()).collect();
                pairs.append_pair("type", &types.join(","));
            }
            if let Some(server) = &filter.server {
                pairs.append_pair("server", server.as_str());
            }
            if let Some(stack) = &filter.stack {
                pairs.append_pair("stack", stack.as_str());
            }
            if let Some(deployment) = &filter.deployment {
                pairs.append_pair("deployment", deployment.as_str());
            }
            match query.start {
                EventStart::New => {}
                EventStart::All => {
                    pairs.append_pair("from", "start");
                }
                EventStart::After(seq) => {
                    pairs.append_pair("after", &seq.to_string());
                }
                EventStart::Since(at) => {
                    let at = at.format(&Rfc3339).map_err(|e| ClientError::InvalidUrl {
                        url: self.base.to_string(),
                        reason: format!("cannot format {at}: {e}"),
                    })?;
                    pairs.append_pair("since", &at);
                }
            }
            if !query.follow {
                pairs.append_pair("follow", "false");
            }
        }
        Ok(url)
    }
}

impl EventStream {
    /// The next event, notice or position; `None` when the gateway ended the stream
    /// (a replay caught up, or the gateway shutting down).
    pub async fn next(&mut self) -> Result<Option<StreamItem>, EventStreamError> {
        loop {
            while let Some(block) = self.parser.block() {
                if let Some(item) = self.item(block)? {
                    return Ok(Some(item));
                }
            }
            let chunk = tokio::time::timeout(IDLE_LIMIT, self.response.chunk())
                .await
                .map_err(|_| EventStreamError::Stalled {
                    url: self.url.to_string(),
                    idle: IDLE_LIMIT,
                })?
                .map_err(|source| EventStreamError::Transport {
                    url: self.url.to_string(),
                    source,
                })?;
            match chunk {
                Some(bytes) => self.parser.feed(&bytes),
                None => return Ok(None),
            }
        }
    }

    fn item(&self, block: Block) -> Result<Option<StreamItem>, EventStreamError> {
        let malformed = |reason: String| EventStreamError::Malformed {
            url: self.url.to_string(),
            reason,
        };
        let seq = |id: &str| {
            id.parse::<u64>()
                .map_err(|_| malformed(format!("id {id:?} is not a stream sequence")))
        };
        let Some(data) = block.data else {
            return match block.id {
                Some(id) => Ok(Some(StreamItem::Position(seq(&id)?))),
                None => Ok(None),
            };
        };
        match block.event.as_deref() {
            None | Some("message") => {
                let id = block
                    .id
                    .ok_or_else(|| malformed("an event without an id".to_owned()))?;
                let event: CloudEvent = serde_json::from_str(&data)
                    .map_err(|e| malformed(format!("event {id} is not a CloudEvent: {e}")))?;
                Ok(Some(StreamItem::Event {
                    seq: seq(&id)?,
                    event: Box::new(event),
                }))
            }
            Some("flue-error") => {
                let data: Value = serde_json::from_str(&data)
                    .map_err(|e| malformed(format!("flue-error block is not JSON: {e}")))?;
                let text = |key: &str| data.get(key).and_then(Value::as_str).unwrap_or_default();
                Ok(Some(StreamItem::Notice(StreamNotice {
                    code: text("code").to_owned(),
                    message: text("message").to_owned(),
                    data: data.clone(),
                })))
            }
            Some("flue-end") => Ok(Some(StreamItem::End)),
            // A block of a kind this client does not know: newer gateways may add some.
            Some(_) => Ok(None),
        }
    }
}

/// One dispatched SSE block.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Block {
    event: Option<String>,
    data: Option<String>,
    id: Option<String>,
}

/// Splits `text/event-stream` bytes into blocks (fields up to a blank line).
#[derive(Debug, Default)]
struct Parser {
    buf: Vec<u8>,
    current: Block,
}

impl Parser {
    fn feed(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete block, if the bytes so far hold one.
    fn block(&mut self) -> Option<Block> {
        while let Some(end) = self.buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.buf.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                let block = std::mem::take(&mut self.current);
                if block != Block::default() {
                    return Some(block);
                }
                continue;
            }
            if line.starts_with(':') {
                continue; // a comment: the keep-alive
            }
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "event" => self.current.event = Some(value.to_owned()),
                "id" => self.current.id = Some(value.to_owned()),
                "data" => match &mut self.current.data {
                    Some(data) => {
                        data.push('\n');
                        data.push_str(value);
                    }
                    None => self.current.data = Some(value.to_owned()),
                },
                _ => {} // `retry` and unknown fields
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_split_across_chunks_parse() {
        let mut p = Parser::default();
        p.feed(b"retry: 2000\nid: 4\n\n: keep-alive\n\nevent: flue-error\ndata: {\"code\":");
        assert_eq!(
            p.block(),
            Some(Block {
                id: Some("4".into()),
                ..Block::default()
            })
        );
        assert_eq!(p.block(), None);
        p.feed(b"\"x\"}\n\nid: 5\r\ndata: a\ndata: b\n\n");
        let b = p.block().expect("error block");
        assert_eq!(b.event.as_deref(), Some("flue-error"));
        assert_eq!(b.data.as_deref(), Some("{\"code\":\"x\"}"));
        let b = p.block().expect("event block");
        assert_eq!(
            (b.id.as_deref(), b.data.as_deref()),
            (Some("5"), Some("a\nb"))
        );
        assert_eq!(p.block(), None);
    }
}
