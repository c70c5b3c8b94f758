//! Webhook subscriptions: the bodies of `/v1/webhooks`.
//!
//! The gateway POSTs each matching event (the CloudEvent JSON, one per request, in stream
//! order) to the subscription's URL, signed with HMAC-SHA256 under its secret: by default
//! as Standard Webhooks (<https://www.standardwebhooks.com/>) sign, or Flue's older
//! `flue-v1` scheme when the subscription asks for it ([`WebhookSignature`]); see
//! `docs/events.md` for the headers and how a receiver verifies them.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::event::EventFilter;
use crate::ids::{TenantId, WebhookId};

/// Standard Webhooks: the message id, the event's id (the same on every attempt).
pub const STANDARD_ID_HEADER: &str = "webhook-id";
/// Standard Webhooks: the signing time, Unix seconds.
pub const STANDARD_TIMESTAMP_HEADER: &str = "webhook-timestamp";
/// Standard Webhooks: `v1,<base64 HMAC-SHA256(key, "<id>.<timestamp>.<body>")>`.
pub const STANDARD_SIGNATURE_HEADER: &str = "webhook-signature";
/// Standard Webhooks: what a secret starts with; the base64 of the key follows.
pub const STANDARD_SECRET_PREFIX: &str = "whsec_";
/// Standard Webhooks: shortest key, in bytes (after base64 decoding), as the standard asks.
pub const STANDARD_MIN_KEY_BYTES: usize = 24;
/// Standard Webhooks: longest key, in bytes (after base64 decoding), as the standard asks.
pub const STANDARD_MAX_KEY_BYTES: usize = 64;
/// `flue-v1`: header carrying the signature,
/// `v1=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>`.
pub const SIGNATURE_HEADER: &str = "flue-signature";
/// `flue-v1`: header carrying the signing time, Unix seconds.
pub const TIMESTAMP_HEADER: &str = "flue-timestamp";
/// Header carrying the event id (the same on every attempt).
pub const EVENT_ID_HEADER: &str = "flue-event-id";
/// Header carrying the attempt number, 1 for the first.
pub const ATTEMPT_HEADER: &str = "flue-attempt";
/// Header carrying the subscription id.
pub const WEBHOOK_ID_HEADER: &str = "flue-webhook-id";
/// `Content-Type` of every delivery: one CloudEvent in structured mode.
pub const CONTENT_TYPE: &str = "application/cloudevents+json";
/// `flue-v1`: version prefix of the signature, `v1=<hex>`.
pub const SIGNATURE_VERSION: &str = "v1";
/// Shortest secret accepted, in bytes.
pub const MIN_SECRET_BYTES: usize = 16;
/// Longest secret accepted, in bytes.
pub const MAX_SECRET_BYTES: usize = 1024;
/// Longest target URL accepted, in bytes.
pub const MAX_URL_BYTES: usize = 2048;

/// Name of the durable pull consumer on the event stream that feeds one subscription.
///
/// Like [`crate::subject::request_consumer`], the tenant's length prefix keeps names of
/// different tenants apart although ids may contain `-`.
pub fn consumer_name(tenant: &TenantId, id: &WebhookId) -> String {
    format!("{CONSUMER_PREFIX}{}-{tenant}-{id}", tenant.as_str().len())
}

/// What every webhook consumer's name starts with ([`consumer_name`]).
pub const CONSUMER_PREFIX: &str = "wh-";

/// `POST /v1/webhooks`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateWebhook {
    /// Where events are POSTed (`http://` or `https://`).
    pub url: String,
    /// Signing secret, 16 to 1024 bytes; never shown again. For `standard` signatures it
    /// is a Standard Webhooks secret, `whsec_` and the base64 of a 24- to 64-byte random
    /// key (what the official libraries' `Webhook(secret)` reads); for `flue-v1` any text.
    pub secret: String,
    /// How deliveries are signed: `standard` (Standard Webhooks, the default) or
    /// `flue-v1` (Flue's older `flue-signature` header).
    #[serde(default)]
    pub signature: WebhookSignature,
    /// Which events; all of the tenant's when empty.
    #[serde(default)]
    pub filter: EventFilter,
    /// Where to start: `new` (events from now on, the default), `all` (everything the
    /// event stream still keeps) or `{"seq": N}` (from the event of `FLUE_EVT` sequence
    /// `N` on, the SSE id a listener last saw plus one).
    #[serde(default)]
    pub start: WebhookStart,
}

/// Where a new subscription starts in the event stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum WebhookStart {
    /// Events published from now on.
    #[default]
    New,
    /// Every event the stream still keeps.
    All,
    /// The events whose sequence in the event stream `FLUE_EVT` is this one or later
    /// (the sequence SSE ids and `last_seq` show); from the oldest kept event when
    /// those before it are gone.
    Seq(u64),
}

/// How a subscription's deliveries are signed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum WebhookSignature {
    /// Standard Webhooks: `webhook-id`, `webhook-timestamp` and
    /// `webhook-signature: v1,<base64 HMAC-SHA256(key, "<id>.<timestamp>.<body>")>`, the
    /// key being the base64-decoded part of the `whsec_` secret.
    #[default]
    #[serde(rename = "standard")]
    Standard,
    /// Flue's older scheme: `flue-timestamp` and
    /// `flue-signature: v1=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>`, the key
    /// being the secret's bytes.
    #[serde(rename = "flue-v1")]
    FlueV1,
}

impl WebhookSignature {
    /// The scheme of subscriptions stored (or shown by gateways) from before the choice
    /// existed: they all signed with `flue-v1`.
    pub fn legacy() -> Self {
        Self::FlueV1
    }
}

/// Delivery state of a subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum WebhookStatus {
    /// Delivering.
    Active,
    /// Stopped after the last attempt failed; `POST /v1/webhooks/{id}/resume` restarts
    /// it at the event that could not be delivered.
    Parked,
}

/// A subscription as the API shows it (never with its secret).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Webhook {
    /// Id (a subject token).
    pub id: crate::ids::WebhookId,
    /// Target URL.
    pub url: String,
    /// How its deliveries are signed.
    #[serde(default = "WebhookSignature::legacy")]
    pub signature: WebhookSignature,
    /// Which events.
    pub filter: EventFilter,
    /// Created at.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// Active or parked.
    pub status: WebhookStatus,
    /// Why it was parked: the event, the number of attempts and the last error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parked_reason: Option<String>,
    /// Events delivered so far.
    #[serde(default)]
    pub delivered: u64,
    /// Id of the last event delivered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_event_id: Option<String>,
    /// The last failed attempt's error, if the last attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consumer_names_never_collide_across_tenants() {
        let t = |s: &str| TenantId::new(s).expect("tenant");
        let w = |s: &str| WebhookId::new(s).expect("webhook");
        assert_ne!(
            consumer_name(&t("a-b"), &w("c")),
            consumer_name(&t("a"), &w("b-c"))
        );
        assert_eq!(consumer_name(&t("default"), &w("x1")), "wh-7-default-x1");
    }

    #[test]
    fn create_body_defaults_and_refuses_unknown_fields() {
        let body: CreateWebhook =
            serde_json::from_str(r#"{"url":"http://h/x","secret":"0123456789abcdef"}"#)
                .expect("minimal body");
        assert_eq!(body.start, WebhookStart::New);
        assert_eq!(body.signature, WebhookSignature::Standard);
        let legacy: CreateWebhook = serde_json::from_str(
            r#"{"url":"http://h/x","secret":"0123456789abcdef","signature":"flue-v1"}"#,
        )
        .expect("the flue-v1 option");
        assert_eq!(legacy.signature, WebhookSignature::FlueV1);
        let from_seq: CreateWebhook = serde_json::from_str(
            r#"{"url":"http://h/x","secret":"0123456789abcdef","start":{"seq":12}}"#,
        )
        .expect("a start sequence");
        assert_eq!(from_seq.start, WebhookStart::Seq(12));
        assert_eq!(
            serde_json::to_string(&WebhookStart::All).expect("serialises"),
            r#""all""#
        );
        assert_eq!(body.filter, EventFilter::default());
        assert!(
            serde_json::from_str::<CreateWebhook>(
                r#"{"url":"http://h/x","secret":"0123456789abcdef","sekret":1}"#
            )
            .is_err()
        );
    }
}
