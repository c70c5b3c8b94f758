//! `GET /v1/events`: the event stream as Server-Sent Events.
//!
//! Query: `type` (comma-separated or repeated; `deployment.completed` or
//! `io.flue.deployment.completed`), `server`, `stack`, `deployment`; where to start, one
//! of `after=<seq>`, `since=<RFC 3339>`, `from=start` (default: new events only); the
//! header `Last-Event-ID: <seq>` overrides them (= `after`); `follow=false` ends the
//! response once caught up with the stream's last event at request time.
//!
//! The body opens with `retry: 2000` (plus `id: <seq>`, the sequence delivery starts
//! after, when known, so a browser that reconnects before any event misses nothing);
//! then, for a start before the oldest kept event, an `event: flue-error` block; then
//! one block per event: `id: <stream sequence>` and `data: <CloudEvent JSON>`. A
//! `: keep-alive` comment goes out every 15 s. A replay (`follow=false`) that caught up
//! ends with `event: flue-end` / `data: {"code":"caught_up"}`.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use flue_proto::auth::TICKET_PARAM;
use flue_proto::{EventFilter, EventType, TenantId};
use futures_util::stream::{self, Stream, StreamExt};
use serde_json::json;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use tracing::{debug, warn};

use super::error::ApiError;
use super::extract::inner_text;
use crate::error::chain;
use crate::listen::{Listener, Mode, Notice, Start};
use crate::service::Service;

/// Reconnection delay suggested to clients (`retry:`).
pub const RETRY: Duration = Duration::from_millis(2000);
/// Interval of the `: keep-alive` comment.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// SSE event name of errors told to the client in the stream.
pub const ERROR_EVENT: &str = "flue-error";
/// SSE event name of the last block of a replay (`follow=false`) that caught up; a
/// response that ends without it was cut short.
pub const END_EVENT: &str = "flue-end";

/// What a request asks for, read from its query and headers.
#[derive(Debug, Clone, PartialEq)]
pub struct EventsQuery {
    /// Which events.
    pub filter: EventFilter,
    /// From where.
    pub start: Start,
    /// Until when.
    pub mode: Mode,
}

/// `GET /v1/events`.
#[utoipa::path(
    get,
    operation_id = "stream_events",
    path = "/v1/events",
    tag = "events",
    summary = "Lifecycle events as Server-Sent Events",
    params(("type" = Option<String>, Query, description = "Comma-separated event types, e.g. `deployment.completed,server.online`."), ("server" = Option<flue_proto::ServerId>, Query, description = "Only this server's events."), ("stack" = Option<flue_proto::StackId>, Query, description = "Only this stack's events."), ("deployment" = Option<flue_proto::DeploymentId>, Query, description = "Only this deployment's events."), ("after" = Option<u64>, Query, description = "Start after this event id (stream sequence)."), ("since" = Option<String>, Query, format = DateTime, description = "Start at this RFC 3339 time."), ("from" = Option<String>, Query, description = "`start`: replay from the first event kept."), ("follow" = Option<bool>, Query, description = "`false`: end after the replay (default `true`: follow live events)."), ("ticket" = Option<String>, Query, description = "A ticket from `POST /v1/events/tickets`, in place of the bearer token."), ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event id (what `EventSource` sends on reconnect).")),
    responses(
        (status = 200, description = "CloudEvents, one per SSE message, the event id being the stream sequence. With `follow=false` the stream ends after the replay.", content_type = "text/event-stream", body = String),
    )
)]
pub async fn stream(
    State(service): State<Service>,
    headers: HeaderMap,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let Query(pairs) = query.map_err(|e| ApiError::InvalidQuery(inner_text(&e)))?;
    // An empty header is what a client without an id yet may send: no resume.
    let last_event_id = headers
        .get("last-event-id")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_owned())
        .filter(|v| !v.is_empty());
    let query = parse(&pairs, last_event_id.as_deref())?;
    let tenant = &service.config.tenant;
    let opened = Listener::open(
        service.events.jetstream(),
        tenant,
        query.filter,
        query.start,
        query.mode,
    )
    .await?;
    debug!(start = ?query.start, mode = ?query.mode, "event listener connected");

    let mut head = Event::default().retry(RETRY);
    if let Some(position) = opened.position {
        head = head.id(position.to_string());
    }
    let notice = opened.notice.map(|n| notice_event(tenant, n));
    // Counted in `flue_sse_connections` while the body lives (the guard goes with it).
    let open = service.events.metrics().sse_opened();
    let events = stream::unfold(
        (Some(opened.listener), open),
        |(listener, open)| async move {
            let mut listener = listener?;
            match listener.next().await {
                Ok(Some(delivered)) => {
                    let data = serde_json::to_string(&delivered.event)
                        .expect("an event always serialises");
                    let event = Event::default().id(delivered.seq.to_string()).data(data);
                    Some((Ok(event), (Some(listener), open)))
                }
                // A replay caught up: say so, so that a client can tell it from a cut connection.
                Ok(None) => {
                    let end = Event::default()
                        .event(END_EVENT)
                        .data(json!({"code": "caught_up"}).to_string());
                    Some((Ok(end), (None, open)))
                }
                Err(e) => {
                    // The client reconnects with its Last-Event-ID and misses nothing.
                    warn!(error = %chain(&e), "event listener stopped");
                    None
                }
            }
        },
    );
    let body = stream::iter(std::iter::once(head).chain(notice).map(Ok))
        .chain(events)
        // An open stream would hold the graceful shutdown for its whole grace period.
        .take_until(service.shutdown.clone().cancelled_owned());
    Ok(Sse::new(body).keep_alive(KeepAlive::new().interval(KEEP_ALIVE).text("keep-alive")))
}

/// The `flue-error` block for a notice.
fn notice_event(tenant: &TenantId, notice: Notice) -> Event {
    let data = match notice {
        Notice::TooFarBehind {
            requested_after,
            oldest_available,
        } => json!({
            "code": "too_far_behind",
            "message": format!(
                "events after {requested_after} are no longer kept (retention or purge): some may have been missed; continuing from the oldest kept event, {oldest_available}"
            ),
            "oldest_available": oldest_available,
            "requested_after": requested_after,
        }),
        Notice::StreamReset {
            requested_after,
            last_sequence,
        } => json!({
            "code": "stream_reset",
            "message": format!(
                "event {requested_after} was never in the event stream of tenant {tenant} (its last is {last_sequence}): the stream was recreated; starting again from its oldest event"
            ),
            "last_sequence": last_sequence,
            "requested_after": requested_after,
        }),
    };
    Event::default().event(ERROR_EVENT).data(data.to_string())
}

/// Reads the query pairs and the `Last-Event-ID` header; every refusal names the parameter.
pub fn parse(
    pairs: &[(String, String)],
    last_event_id: Option<&str>,
) -> Result<EventsQuery, ApiError> {
    let mut filter = EventFilter::default();
    let mut starts: Vec<(&str, Start)> = Vec::new();
    let mut mode = Mode::Follow;
    for (name, value) in pairs {
        let bad =
            |reason: String| ApiError::InvalidQuery(format!("query parameter {name:?}: {reason}"));
        let once = |set: bool| {
            if set {
                Err(bad("given twice".to_owned()))
            } else {
                Ok(())
            }
        };
        match name.as_str() {
            "type" => {
                // An empty filter is a mistake (`type=$UNSET`), not "every type".
                if value.split(',').any(|t| t.trim().is_empty()) {
                    return Err(bad(format!(
                        "{value:?} has an empty event type (give one or more, comma separated, e.g. deployment.completed)"
                    )));
                }
                for ty in value.split(',').map(str::trim) {
                    let ty: EventType = ty.parse().map_err(|e| bad(format!("{e}")))?;
                    if !filter.types.contains(&ty) {
                        filter.types.push(ty);
                    }
                }
            }
            "server" => {
                once(filter.server.is_some())?;
                filter.server = Some(
                    value
                        .parse()
                        .map_err(|e| bad(format!("invalid server id {value:?}: {e}")))?,
                );
            }
            "stack" => {
                once(filter.stack.is_some())?;
                filter.stack = Some(
                    value
                        .parse()
                        .map_err(|e| bad(format!("invalid stack id {value:?}: {e}")))?,
                );
            }
            "deployment" => {
                once(filter.deployment.is_some())?;
                filter.deployment = Some(
                    value
                        .parse()
                        .map_err(|e| bad(format!("invalid deployment id {value:?}: {e}")))?,
                );
            }
            "after" => starts.push(("after", Start::After(sequence(value).map_err(bad)?))),
            "since" => {
                let at = OffsetDateTime::parse(value, &Rfc3339).map_err(|e| {
                    bad(format!(
                        "{value:?} is not an RFC 3339 time (2025-01-31T12:00:00Z): {e}"
                    ))
                })?;
                starts.push(("since", Start::Since(at)));
            }
            "from" => match value.as_str() {
                "start" => starts.push(("from", Start::All)),
                _ => {
                    return Err(bad(format!(
                        "{value:?} is not a known start (only `start`)"
                    )));
                }
            },
            "follow" => {
                mode = match value.as_str() {
                    "true" => Mode::Follow,
                    "false" => Mode::Replay,
                    _ => return Err(bad(format!("{value:?} is neither true nor false"))),
                }
            }
            // Read by the authentication middleware, the one place a ticket counts.
            n if n == TICKET_PARAM => {}
            _ => {
                return Err(ApiError::InvalidQuery(format!(
                    "unknown query parameter {name:?} (known: type, server, stack, deployment, after, since, from, follow, ticket)"
                )));
            }
        }
    }
    let start =
        match (last_event_id, starts.as_slice()) {
            // A reconnecting browser repeats the URL it first used: the header wins.
            (Some(id), _) => Start::After(sequence(id).map_err(|reason| {
                ApiError::InvalidQuery(format!("header Last-Event-ID: {reason}"))
            })?),
            (None, []) => Start::New,
            (None, [(_, start)]) => *start,
            (None, [(a, _), (b, _), ..]) => {
                return Err(ApiError::InvalidQuery(format!(
                    "query parameters {a:?} and {b:?}: give only one of after, since, from"
                )));
            }
        };
    Ok(EventsQuery {
        filter,
        start,
        mode,
    })
}

/// A stream sequence: a non-negative integer.
fn sequence(value: &str) -> Result<u64, String> {
    value
        .parse()
        .map_err(|_| format!("{value:?} is not a stream sequence (a non-negative integer)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)], header: Option<&str>) -> Result<EventsQuery, String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect();
        parse(&pairs, header).map_err(|e| {
            assert_eq!(e.status_and_code().0, axum::http::StatusCode::BAD_REQUEST);
            e.to_string()
        })
    }

    #[test]
    fn defaults_are_new_events_followed() {
        let query = q(&[], None).expect("ok");
        assert_eq!(query.start, Start::New);
        assert_eq!(query.mode, Mode::Follow);
        assert_eq!(query.filter, EventFilter::default());
    }

    #[test]
    fn filters_and_starts_parse() {
        let query = q(
            &[
                ("type", "deployment.completed, io.flue.deployment.failed"),
                ("type", "server.online"),
                ("server", "web1"),
                ("stack", "shop"),
                ("deployment", "d1"),
                ("after", "41"),
                ("follow", "false"),
            ],
            None,
        )
        .expect("ok");
        assert_eq!(
            query.filter.types,
            [
                EventType::DeploymentCompleted,
                EventType::DeploymentFailed,
                EventType::ServerOnline
            ]
        );
        assert_eq!(query.filter.server.expect("server").as_str(), "web1");
        assert_eq!(query.start, Start::After(41));
        assert_eq!(query.mode, Mode::Replay);
        assert_eq!(q(&[("from", "start")], None).expect("ok").start, Start::All);
        let since = q(&[("since", "2025-01-31T12:00:00Z")], None).expect("ok");
        assert!(matches!(since.start, Start::Since(_)));
    }

    #[test]
    fn last_event_id_overrides_the_query() {
        let query = q(&[("from", "start")], Some("17")).expect("ok");
        assert_eq!(query.start, Start::After(17));
        let e = q(&[], Some("x")).expect_err("bad header");
        assert!(e.contains("Last-Event-ID"), "{e}");
    }

    #[test]
    fn bad_values_name_the_parameter() {
        let e = q(&[("type", "deployment.done")], None).expect_err("bad type");
        assert!(
            e.contains("\"type\"") && e.contains("unknown event type"),
            "{e}"
        );
        let e = q(&[("server", "a.b")], None).expect_err("bad id");
        assert!(e.contains("invalid server id \"a.b\""), "{e}");
        let e = q(&[("after", "-1")], None).expect_err("bad seq");
        assert!(e.contains("\"after\""), "{e}");
        let e = q(&[("since", "yesterday")], None).expect_err("bad time");
        assert!(e.contains("RFC 3339"), "{e}");
        let e = q(&[("follow", "maybe")], None).expect_err("bad follow");
        assert!(e.contains("\"follow\""), "{e}");
        let e = q(&[("after", "1"), ("from", "start")], None).expect_err("two starts");
        assert!(e.contains("only one"), "{e}");
        let e = q(&[("server_id", "x")], None).expect_err("unknown");
        assert!(e.contains("unknown query parameter \"server_id\""), "{e}");
        let e = q(&[("server", "a"), ("server", "b")], None).expect_err("twice");
        assert!(e.contains("given twice"), "{e}");
    }
}
