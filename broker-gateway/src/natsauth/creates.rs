//! Listeners' consumer creations, made by the gateway (issue 22, [`super::listen`]).
//!
//! A listener's `$JS.API.CONSUMER.CREATE.FLUE_EVT.<name>[.<filter>]` (either spelling)
//! arrives here, in the events account, on
//! [`flue_proto::subject::listener_creates`]`.<name>[.<filter>]`; the listener's
//! permissions already confined `<name>` to its own eight. The gateway makes the consumer
//! with its own user of the events account, and only a configuration [`check`] accepts:
//!
//! - **pull only**: a push consumer delivers inside the events account on a subject its
//!   creator chooses (a stored subject, a JetStream API call, another consumer's ack
//!   subject), so `deliver_subject`, `deliver_group`, flow control, idle heartbeats and
//!   a rate limit are refused;
//! - filters inside `flue.<tenant>.evt.>`;
//! - `max_ack_pending` at most [`MAX_ACK_PENDING`], `max_waiting` at most
//!   [`MAX_WAITING`] (the broker's defaults; `-1`, unlimited, is refused);
//! - every other setting by its exact name from a list: nats-server reads settings
//!   case-insensitively, so an unknown spelling could be one of the above;
//! - `inactive_threshold` at most the listener idle limit (`--listener-idle-secs`): absent
//!   or zero, it is set to it, so that every listener's consumer is deleted once idle that
//!   long.
//!
//! And the tenant's listeners may have `--events-max-consumers` consumers at most
//! ([`Bounds`]): a creation of a consumer not there yet is refused once the consumers on
//! `FLUE_EVT` named with [`LISTENER_CONSUMER_PREFIX`] number that many. These bounds are
//! the gateway's, not the stream's (`FLUE_EVT` has no consumer limit): they count
//! listeners' consumers alone, so listeners never use up the consumers SSE clients and
//! webhooks need. One gateway counts and creates one at a time per tenant, so its own
//! creations never pass the bound; gateways serving the same tenant count apart, and may
//! pass it by at most one consumer per other gateway (each one's creation in flight).
//!
//! The request is sent on as the JSON value read (a key given twice counts once, as the
//! broker would read it) and the broker's answer goes back to the listener unchanged; a
//! refusal is a JetStream API error (code 400) naming what is refused.

use std::time::Duration;

use async_nats::jetstream;
use bytes::Bytes;
use flue_proto::TenantId;
use flue_proto::event::EVENT_STREAM;
use flue_proto::jsapi;
use flue_proto::subject::{LISTENER_CONSUMER_PREFIX, listener_creates, listener_of_consumer};
use futures_util::{StreamExt as _, TryStreamExt as _};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

/// Largest `max_ack_pending` a listener's consumer may have (nats-server's default).
pub const MAX_ACK_PENDING: i64 = 1_000;
/// Largest `max_waiting` (pull requests waiting at once) a listener's consumer may have
/// (nats-server's default).
pub const MAX_WAITING: i64 = 512;
/// Creations handled at once (checked, then counted and made one at a time).
const CONCURRENT: usize = 16;
/// JetStream's "maximum consumers limit reached", given to a creation past the bound.
const MAXIMUM_CONSUMERS_LIMIT: u32 = 10_026;

/// The bounds on a tenant's listeners' consumers (`--events-max-consumers`, capped by the
/// events account's own limit, [`crate::events::listener_bound`]; `--listener-idle-secs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Listener consumers the tenant may have at once.
    pub max_consumers: i32,
    /// The longest idle time a listener's consumer may have (`inactive_threshold`);
    /// zero for no bound.
    pub idle: Duration,
}
/// Queue group of the gateways serving one tenant: one of them answers each creation.
const GROUP: &str = "flue-gateway";

/// Consumer settings a listener may give as it likes (each bounded by the broker or
/// by the stream's consumer limits, none naming a subject).
const FREE: [&str; 22] = [
    "description",
    "deliver_policy",
    "opt_start_seq",
    "opt_start_time",
    "ack_policy",
    "ack_wait",
    "max_deliver",
    "backoff",
    "replay_policy",
    "sample_freq",
    "headers_only",
    "max_batch",
    "max_expires",
    "max_bytes",
    "inactive_threshold",
    "num_replicas",
    "mem_storage",
    "metadata",
    "priority_groups",
    "priority_policy",
    "priority_timeout",
    "pause_until",
];

/// `tenant`'s listeners' consumer creations, taken (a queue subscription on the events
/// account's connection) and not yet answered.
#[derive(Debug)]
pub struct Creations {
    events: async_nats::Client,
    tenant: TenantId,
    bounds: Bounds,
    requests: async_nats::Subscriber,
}

impl Creations {
    /// Subscribes to `tenant`'s listeners' consumer creations on the events account's
    /// connection `events`; the consumers made are held to `bounds`. Returns once the
    /// broker has the subscription, so that a listener's creation right after the gateway
    /// says it is listening finds a responder.
    pub async fn subscribe(
        events: async_nats::Client,
        tenant: TenantId,
        bounds: Bounds,
    ) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        let requests = events
            .queue_subscribe(format!("{}.>", listener_creates(&tenant)), GROUP.to_owned())
            .await?;
        // The subscription goes out with the next flush: wait for the broker's answer to
        // it (a listener asking meanwhile would get "no responders").
        events.flush().await?;
        Ok(Self {
            events,
            tenant,
            bounds,
            requests,
        })
    }

    /// Answers the creations until `shutdown`; each one made waits `timeout` at most for
    /// the broker.
    pub async fn serve(self, timeout: Duration, shutdown: CancellationToken) {
        let Self {
            events,
            tenant,
            bounds,
            requests,
        } = self;
        let prefix = listener_creates(&tenant);
        let one_at_a_time = std::sync::Arc::new(tokio::sync::Mutex::new(()));
        let handled = requests.for_each_concurrent(CONCURRENT, |msg| {
            let events = events.clone();
            let prefix = prefix.clone();
            let tenant = tenant.clone();
            let one_at_a_time = one_at_a_time.clone();
            async move {
                let Some(reply) = msg.reply.clone() else {
                    return;
                };
                let made = Made {
                    events: &events,
                    tenant: &tenant,
                    bounds,
                    one_at_a_time: &one_at_a_time,
                    timeout,
                };
                let answer = made.answer(&prefix, &msg).await;
                if let Err(e) = events.publish(reply, answer).await {
                    debug!(%tenant, error = %e, "cannot answer a listener's consumer creation");
                }
            }
        });
        tokio::select! {
            () = shutdown.cancelled() => {}
            () = handled => {}
        }
    }
}

/// What one creation is made with.
struct Made<'a> {
    events: &'a async_nats::Client,
    tenant: &'a TenantId,
    bounds: Bounds,
    /// Held from counting the tenant's listener consumers to the broker's answer.
    one_at_a_time: &'a tokio::sync::Mutex<()>,
    /// The longest wait for each broker call.
    timeout: Duration,
}

impl Made<'_> {
    async fn answer(&self, prefix: &str, msg: &async_nats::Message) -> Bytes {
        let tenant = self.tenant;
        let (subject, body) = match check(
            tenant,
            prefix,
            &msg.subject,
            &msg.payload,
            self.bounds.idle,
        ) {
            Ok(checked) => checked,
            Err(reason) => {
                debug!(%tenant, subject = %msg.subject, %reason, "listener's consumer creation refused");
                return error(400, &reason);
            }
        };
        let name = consumer_of(prefix, &msg.subject).unwrap_or_default();
        let _counted = self.one_at_a_time.lock().await;
        match self.listener_consumers().await {
            Ok(names) => {
                let count = names.len();
                let max = usize::try_from(self.bounds.max_consumers).unwrap_or(0);
                if count >= max && !names.iter().any(|n| n == name) {
                    debug!(%tenant, consumer = name, count, "listener's consumer creation refused: the tenant's listeners are at their consumer limit");
                    return error_coded(
                        400,
                        MAXIMUM_CONSUMERS_LIMIT,
                        &format!(
                            "maximum consumers limit reached: the tenant's listeners have {count} consumers, the most the gateway allows (--events-max-consumers {max})"
                        ),
                    );
                }
            }
            Err(answer) => return answer,
        }
        match tokio::time::timeout(self.timeout, self.events.request(subject, body.into())).await {
            Ok(Ok(answer)) => answer.payload,
            Ok(Err(e)) => {
                warn!(%tenant, error = %e, "the broker did not answer a listener's consumer creation");
                error(503, "the broker did not answer the consumer creation")
            }
            Err(_) => error(
                503,
                "the broker did not answer the consumer creation in time",
            ),
        }
    }

    /// The names of the listeners' consumers on `FLUE_EVT` (those with
    /// [`LISTENER_CONSUMER_PREFIX`]), read from the broker; the answer to give the
    /// listener when they cannot be read.
    async fn listener_consumers(&self) -> Result<Vec<String>, Bytes> {
        let unreadable = |e: &dyn std::fmt::Display| {
            warn!(tenant = %self.tenant, error = %e, "cannot count the listeners' consumers");
            error(503, "the broker did not answer the consumer count")
        };
        let js = jetstream::ContextBuilder::new()
            .timeout(self.timeout)
            .build(self.events.clone());
        let stream = js
            .get_stream_no_info(EVENT_STREAM)
            .await
            .map_err(|e| unreadable(&e))?;
        stream
            .consumer_names()
            .try_filter(|name| std::future::ready(name.starts_with(LISTENER_CONSUMER_PREFIX)))
            .try_collect()
            .await
            .map_err(|e| unreadable(&e))
    }
}

/// The consumer name in a creation's `subject` (under `prefix`).
fn consumer_of<'s>(prefix: &str, subject: &'s str) -> Option<&'s str> {
    let rest = subject.strip_prefix(prefix)?.strip_prefix('.')?;
    Some(rest.split_once('.').map_or(rest, |(name, _)| name))
}

/// A JetStream API error answer to a consumer creation.
fn error(code: u16, description: &str) -> Bytes {
    error_coded(code, 10_000 + u32::from(code), description)
}

/// The same with JetStream's own `err_code`.
fn error_coded(code: u16, err_code: u32, description: &str) -> Bytes {
    let body = json!({
        "type": "io.nats.jetstream.api.v1.consumer_create_response",
        "error": {"code": code, "err_code": err_code, "description": description},
    });
    Bytes::from(body.to_string())
}

/// The JetStream API subject and body a creation arriving on `subject` (under `prefix`)
/// with `body` is made with, or why a listener may not have that consumer. `idle` is the
/// listener idle limit (zero: none): a consumer's `inactive_threshold` absent or zero is
/// set to it, a longer one refused.
pub fn check(
    tenant: &TenantId,
    prefix: &str,
    subject: &str,
    body: &[u8],
    idle: Duration,
) -> Result<(String, Vec<u8>), String> {
    let rest = subject
        .strip_prefix(prefix)
        .and_then(|r| r.strip_prefix('.'))
        .ok_or("not a consumer creation")?;
    let (name, filter) = match rest.split_once('.') {
        Some((name, filter)) => (name, Some(filter)),
        None => (rest, None),
    };
    if listener_of_consumer(name).is_none() {
        return Err(format!("{name:?} is not a listener consumer's name"));
    }
    if let Some(filter) = filter {
        tenant_filter(tenant, filter)?;
    }
    let mut request: Value =
        serde_json::from_slice(body).map_err(|e| format!("not a consumer creation: {e}"))?;
    let top = request.as_object_mut().ok_or("not a consumer creation")?;
    for (key, value) in top.iter() {
        match key.as_str() {
            "stream_name" if value.as_str() == Some(EVENT_STREAM) => {}
            "action" if matches!(value.as_str(), Some("" | "create" | "update")) => {}
            "pedantic" if value.is_boolean() => {}
            "config" if value.is_object() => {}
            _ => return Err(format!("{key:?} is not taken here")),
        }
    }
    let config = top
        .get_mut("config")
        .and_then(Value::as_object_mut)
        .ok_or("no consumer config")?;
    check_config(tenant, name, config)?;
    bound_idle(config, idle)?;
    let [forward, _] = jsapi::api(&format!("CONSUMER.CREATE.{EVENT_STREAM}.{rest}"));
    let body = serde_json::to_vec(&request).map_err(|e| e.to_string())?;
    Ok((forward, body))
}

fn check_config(tenant: &TenantId, name: &str, config: &Map<String, Value>) -> Result<(), String> {
    let unset = |v: &Value| {
        v.is_null() || v.as_str() == Some("") || v.as_bool() == Some(false) || v.as_i64() == Some(0)
    };
    let bounded =
        |v: &Value, max: i64| v.is_null() || v.as_i64().is_some_and(|n| (0..=max).contains(&n));
    for (key, value) in config {
        let ok = match key.as_str() {
            "name" | "durable_name" => value.is_null() || value.as_str() == Some(name),
            "deliver_subject" | "deliver_group" | "flow_control" | "idle_heartbeat"
            | "rate_limit_bps" => {
                if !unset(value) {
                    return Err(format!(
                        "{key:?}: listeners make pull consumers only (no push consumer)"
                    ));
                }
                true
            }
            "filter_subject" => match value {
                Value::Null => true,
                Value::String(s) if s.is_empty() => true,
                Value::String(s) => tenant_filter(tenant, s).is_ok(),
                _ => false,
            },
            "filter_subjects" => match value {
                Value::Null => true,
                Value::Array(all) => all
                    .iter()
                    .all(|s| s.as_str().is_some_and(|s| tenant_filter(tenant, s).is_ok())),
                _ => false,
            },
            "max_ack_pending" => bounded(value, MAX_ACK_PENDING),
            "max_waiting" => bounded(value, MAX_WAITING),
            other => FREE.contains(&other),
        };
        if !ok {
            return Err(format!(
                "{key:?} is not a setting a listener's consumer may have (as given)"
            ));
        }
    }
    Ok(())
}

/// Gives `config` the idle limit `idle` (nanoseconds in `inactive_threshold`, as the
/// JetStream API takes it) when it sets none or zero; refuses a longer one (or a value
/// that is no duration).
fn bound_idle(config: &mut Map<String, Value>, idle: Duration) -> Result<(), String> {
    if idle.is_zero() {
        return Ok(());
    }
    let limit = i64::try_from(idle.as_nanos()).unwrap_or(i64::MAX);
    let asked = match config.get("inactive_threshold") {
        None | Some(Value::Null) => 0,
        Some(v) => v
            .as_i64()
            .filter(|n| *n >= 0)
            .ok_or("\"inactive_threshold\" is not a duration in nanoseconds")?,
    };
    if asked > limit {
        return Err(format!(
            "\"inactive_threshold\" of {} s is longer than the listener idle limit of {} s (--listener-idle-secs)",
            asked / 1_000_000_000,
            idle.as_secs()
        ));
    }
    if asked == 0 {
        config.insert("inactive_threshold".to_owned(), Value::from(limit));
    }
    Ok(())
}

/// `Ok` when `filter` is a valid subject filter inside `tenant`'s events
/// (`flue.<tenant>.evt.…`).
fn tenant_filter(tenant: &TenantId, filter: &str) -> Result<(), String> {
    let outside = || Err(format!("filter {filter:?} is outside this tenant's events"));
    let tokens: Vec<&str> = filter.split('.').collect();
    let own = flue_proto::event::tenant_events(tenant);
    let own: Vec<&str> = own.split('.').collect();
    // `flue.<tenant>.evt` then at least one token.
    if tokens.len() < own.len() || tokens[..own.len() - 1] != own[..own.len() - 1] {
        return outside();
    }
    let last = tokens.len() - 1;
    let valid = tokens.iter().enumerate().all(|(i, t)| {
        !t.is_empty()
            && (!t.contains('>') || (*t == ">" && i == last))
            && (!t.contains('*') || *t == "*")
            && !t.chars().any(char::is_whitespace)
    });
    if !valid {
        return outside();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREFIX: &str = "flue.acme.lsn.create";
    const NAME: &str = "lsn-0123456789ab-1";

    const IDLE: Duration = Duration::from_secs(60);

    fn run(subject_rest: &str, body: &str) -> Result<(String, Vec<u8>), String> {
        let tenant: TenantId = "acme".parse().expect("id");
        check(
            &tenant,
            PREFIX,
            &format!("{PREFIX}.{subject_rest}"),
            body.as_bytes(),
            IDLE,
        )
    }

    fn config(settings: &str) -> String {
        format!(r#"{{"stream_name":"FLUE_EVT","config":{{"name":"{NAME}"{settings}}}}}"#)
    }

    #[test]
    fn a_pull_consumer_inside_the_tenant_is_forwarded_to_the_jetstream_api() {
        let (subject, body) = run(
            &format!("{NAME}.flue.acme.evt.>"),
            &config(r#","deliver_policy":"all","ack_policy":"none","filter_subject":"flue.acme.evt.>","max_ack_pending":1000,"inactive_threshold":5000000000"#),
        )
        .expect("taken");
        assert_eq!(
            subject,
            format!("$JS.API.CONSUMER.CREATE.FLUE_EVT.{NAME}.flue.acme.evt.>")
        );
        let body: Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(body["config"]["name"], NAME);
        assert_eq!(body["config"]["inactive_threshold"], 5_000_000_000_i64);
        for unset in [
            "",
            r#","inactive_threshold":0"#,
            r#","inactive_threshold":null"#,
        ] {
            let (_, body) = run(NAME, &config(unset)).expect("taken");
            let body: Value = serde_json::from_slice(&body).expect("json");
            assert_eq!(
                body["config"]["inactive_threshold"], 60_000_000_000_i64,
                "{unset}"
            );
        }
        assert_eq!(
            consumer_of(PREFIX, &format!("{PREFIX}.{NAME}.flue.acme.evt.>")),
            Some(NAME)
        );
        assert_eq!(consumer_of(PREFIX, &format!("{PREFIX}.{NAME}")), Some(NAME));
        run(
            NAME,
            &config(r#","deliver_subject":"","flow_control":false"#),
        )
        .expect("unset push fields");
    }

    #[test]
    fn push_consumers_foreign_filters_unbounded_limits_and_unknown_spellings_are_refused() {
        for settings in [
            r#","deliver_subject":"flue.acme.evt.x""#,
            r#","deliver_subject":"$JS.API.STREAM.PURGE.FLUE_EVT""#,
            r#","deliver_subject":"$JS.ACK.FLUE_EVT.webhook-1.1.1.1.0.0""#,
            r#","deliver_group":"g""#,
            r#","idle_heartbeat":1000000000"#,
            r#","flow_control":true"#,
            r#","filter_subject":"flue.other.evt.>""#,
            r#","filter_subject":"flue.*.evt.>""#,
            r#","filter_subject":">""#,
            r#","filter_subjects":["flue.acme.evt.>","flue.other.evt.>"]"#,
            r#","max_ack_pending":-1"#,
            r#","max_ack_pending":1001"#,
            r#","max_waiting":100000"#,
            r#","Deliver_Subject":"$JS.API.STREAM.DELETE.FLUE_EVT""#,
            r#","deliver_ſubject":"$JS.API.STREAM.DELETE.FLUE_EVT""#,
            r#","deliver_subject":"","deliver_subject":"$JS.API.STREAM.DELETE.FLUE_EVT""#,
            r#","durable_name":"lsn-0123456789ab-2""#,
            r#","inactive_threshold":60000000001"#,
            r#","inactive_threshold":-1"#,
            r#","inactive_threshold":"1h""#,
        ] {
            let refused = run(NAME, &config(settings));
            assert!(refused.is_err(), "{settings} taken: {refused:?}");
        }
        for rest in [
            format!("{NAME}.flue.other.evt.>"),
            format!("{NAME}.>"),
            "webhook-1".to_owned(),
            format!("{NAME}.flue.acme.evt.>.x"),
        ] {
            assert!(run(&rest, &config("")).is_err(), "{rest} taken");
        }
        let other_stream = r#"{"stream_name":"FLUE_REQ","config":{}}"#;
        assert!(run(NAME, other_stream).is_err());
        assert!(run(NAME, "not json").is_err());
        let body = error(400, "no").to_vec();
        let body: Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(body["error"]["code"], 400);
    }
}
