//! The test's webhook receiver: an axum server on 127.0.0.1 that records every request
//! and answers as told, and the signature check a real receiver would make.

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use flue_proto::CloudEvent;
use flue_proto::webhook::{
    ATTEMPT_HEADER, EVENT_ID_HEADER, SIGNATURE_HEADER, STANDARD_ID_HEADER,
    STANDARD_SIGNATURE_HEADER, STANDARD_TIMESTAMP_HEADER, TIMESTAMP_HEADER, WEBHOOK_ID_HEADER,
};
use flue_tests::WAIT;
use tokio::sync::Notify;

/// How the receiver answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// 204.
    Ok,
    /// 503.
    Fail,
    /// 500 to the first two attempts of each event, then 204.
    FailTwice,
    /// Never answers its first request; 204 to the others.
    HangFirst,
}

/// One request the receiver got.
#[derive(Debug, Clone)]
pub struct Received {
    /// `flue-webhook-id`.
    pub webhook_id: String,
    /// `flue-event-id`.
    pub event_id: String,
    /// `flue-attempt`.
    pub attempt: u32,
    /// `webhook-id` (Standard Webhooks' message id), empty when absent.
    pub message_id: String,
    /// `webhook-timestamp`, or `flue-timestamp` when that is absent.
    pub timestamp: String,
    /// `webhook-signature`, or `flue-signature` when that is absent.
    pub signature: String,
    /// Whether it carried `flue-signature` or `flue-timestamp`.
    pub flue_v1_headers: bool,
    /// `content-type`.
    pub content_type: String,
    /// The body as received.
    pub body: Bytes,
    /// What it answered; `None` when it never did.
    pub status: Option<u16>,
}

#[derive(Default)]
struct Inner {
    mode: Mutex<Option<Mode>>,
    received: Mutex<Vec<Received>>,
    changed: Notify,
}

/// A webhook receiver on 127.0.0.1.
#[derive(Clone)]
pub struct Receiver {
    /// Where it listens: `http://127.0.0.1:<port>/hook`.
    pub url: String,
    inner: Arc<Inner>,
}

impl Receiver {
    /// Starts serving, answering as `mode` says.
    pub async fn start(mode: Mode) -> Receiver {
        let inner = Arc::new(Inner::default());
        *inner.mode.lock().expect("lock") = Some(mode);
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(receive))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind receiver");
        let addr = listener.local_addr().expect("receiver address");
        tokio::spawn(async move { axum::serve(listener, app).await });
        Receiver {
            url: format!("http://{addr}/hook"),
            inner,
        }
    }

    /// Changes how it answers from now on.
    pub fn set_mode(&self, mode: Mode) {
        *self.inner.mode.lock().expect("lock") = Some(mode);
    }

    /// Every request so far, in the order they came.
    pub fn received(&self) -> Vec<Received> {
        self.inner.received.lock().expect("lock").clone()
    }

    /// Event ids answered with a 2xx, in the order they came.
    pub fn delivered(&self) -> Vec<String> {
        self.received()
            .into_iter()
            .filter(|r| r.status.is_some_and(|s| (200..300).contains(&s)))
            .map(|r| r.event_id)
            .collect()
    }

    /// Waits until `check` holds for the requests received so far.
    pub async fn wait_for(&self, what: &str, check: impl Fn(&[Received]) -> bool) {
        let fut = async {
            loop {
                let notified = self.inner.changed.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if check(&self.received()) {
                    return;
                }
                notified.await;
            }
        };
        if tokio::time::timeout(WAIT, fut).await.is_err() {
            panic!(
                "receiver: no {what} within {WAIT:?}; got {:#?}",
                self.received()
                    .iter()
                    .map(|r| format!("{} #{} -> {:?}", r.event_id, r.attempt, r.status))
                    .collect::<Vec<_>>()
            );
        }
    }

    /// Waits until `event_id` was answered with a 2xx.
    pub async fn wait_delivered(&self, event_id: &str) {
        self.wait_for(&format!("delivery of {event_id}"), |got| {
            got.iter()
                .any(|r| r.event_id == event_id && r.status.is_some_and(|s| s < 300))
        })
        .await;
    }
}

async fn receive(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let mode = inner.mode.lock().expect("lock").expect("mode set");
    let either = |standard: &str, flue_v1: &str| {
        Some(header(standard))
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| header(flue_v1))
    };
    let mut request = Received {
        webhook_id: header(WEBHOOK_ID_HEADER),
        event_id: header(EVENT_ID_HEADER),
        attempt: header(ATTEMPT_HEADER).parse().unwrap_or(0),
        message_id: header(STANDARD_ID_HEADER),
        timestamp: either(STANDARD_TIMESTAMP_HEADER, TIMESTAMP_HEADER),
        signature: either(STANDARD_SIGNATURE_HEADER, SIGNATURE_HEADER),
        flue_v1_headers: headers.contains_key(SIGNATURE_HEADER)
            || headers.contains_key(TIMESTAMP_HEADER),
        content_type: header("content-type"),
        body,
        status: None,
    };
    let (index, earlier) = {
        let got = inner.received.lock().expect("lock");
        let earlier = got
            .iter()
            .filter(|r| r.event_id == request.event_id)
            .count();
        (got.len(), earlier)
    };
    let status = match mode {
        Mode::Ok => StatusCode::NO_CONTENT,
        Mode::Fail => StatusCode::SERVICE_UNAVAILABLE,
        Mode::FailTwice if earlier < 2 => StatusCode::INTERNAL_SERVER_ERROR,
        Mode::FailTwice => StatusCode::NO_CONTENT,
        Mode::HangFirst if index == 0 => {
            inner.received.lock().expect("lock").push(request);
            inner.changed.notify_waiters();
            // Never answers: the gateway's attempt timeout has to end it.
            std::future::pending::<()>().await;
            unreachable!("pending never resolves")
        }
        Mode::HangFirst => StatusCode::NO_CONTENT,
    };
    request.status = Some(status.as_u16());
    inner.received.lock().expect("lock").push(request);
    inner.changed.notify_waiters();
    status
}

/// Checks a request's Standard Webhooks signature the way a receiver would:
/// HMAC-SHA256, under the key `secret` (`whsec_<base64>`) holds, of
/// `"<webhook-id>.<webhook-timestamp>.<body>"`, base64, after `v1,`; the message id is
/// the event's id. (The official verifier checks them too, in `standard.rs`.)
pub fn assert_signed(r: &Received, secret: &str) {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    assert!(!r.flue_v1_headers, "flue-v1 headers on a standard delivery");
    assert_eq!(r.message_id, r.event_id, "webhook-id is the event id");
    let tag = r
        .signature
        .strip_prefix("v1,")
        .unwrap_or_else(|| panic!("signature {:?} has no v1, prefix", r.signature));
    let tag = b64.decode(tag).expect("base64 signature");
    let key = secret.strip_prefix("whsec_").expect("a whsec_ secret");
    let key = b64.decode(key).expect("base64 key");
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &key);
    let mut signed = format!("{}.{}.", r.message_id, r.timestamp).into_bytes();
    signed.extend_from_slice(&r.body);
    ring::hmac::verify(&key, &signed, &tag)
        .unwrap_or_else(|_| panic!("bad signature on {} attempt {}", r.event_id, r.attempt));
    assert_fresh_cloudevent(r);
}

/// Checks a request's `flue-v1` signature the way a receiver would: HMAC-SHA256 under
/// the secret of `"<timestamp>.<body>"`, hex, after `v1=`.
pub fn assert_flue_v1_signed(r: &Received, secret: &str) {
    assert!(r.message_id.is_empty(), "webhook-id on a flue-v1 delivery");
    let hex = r
        .signature
        .strip_prefix("v1=")
        .unwrap_or_else(|| panic!("signature {:?} has no v1= prefix", r.signature));
    let tag: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex signature"))
        .collect();
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    let mut signed = format!("{}.", r.timestamp).into_bytes();
    signed.extend_from_slice(&r.body);
    ring::hmac::verify(&key, &signed, &tag)
        .unwrap_or_else(|_| panic!("bad signature on {} attempt {}", r.event_id, r.attempt));
    assert_fresh_cloudevent(r);
}

/// The timestamp is now and the body is the CloudEvent the headers name.
fn assert_fresh_cloudevent(r: &Received) {
    let ts: i64 = r.timestamp.parse().expect("unix seconds");
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    assert!((now - ts).abs() < 600, "timestamp {ts} is not now ({now})");
    assert_eq!(r.content_type, "application/cloudevents+json");
    let event: CloudEvent = serde_json::from_slice(&r.body).expect("body is a CloudEvent");
    assert_eq!(event.id, r.event_id);
}
