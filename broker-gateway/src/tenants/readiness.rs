//! Whether a tenant's state streams can take writes now: probed in the background every
//! [`PROBE_INTERVAL`], so that `/readyz` tells the truth (a full store, a cluster without
//! quorum) at the cost of no broker call per probe request.
//!
//! A probe writes nothing. It asks the broker for the account's JetStream info (answered
//! only while JetStream runs and, in a cluster, has a metadata leader), then publishes an
//! empty message to each state stream with a `Nats-TTL` header no server accepts. While
//! the last probe found the streams ready, only every [`STREAMS_EVERY`]th probe publishes
//! to them (every 10 s; the account info every 2 s): 4.4 broker requests per 2 s instead
//! of 18, what a tenant costs the broker at idle (issue 24, point 7); a store that fills
//! is then told by `/readyz` within 10 s (its writes answer 507 at once all the same).
//! nats-server 2.15 checks a write against its storage limits (the server's
//! `max_file_store`, the account's storage limit) *before* it reads that header, both on
//! a single server and on a cluster's stream leader before proposing, so the answer says
//! "full" (a storage refusal) or "would take it" (the TTL refusal), and the message is
//! never stored. A stream without a leader (no quorum) does not answer at all.
//!
//! What the probe cannot see: a disk that fills before `max_file_store` is reached. A
//! write then fails inside nats-server ("no space left on device"), unanswered, and the
//! stream that failed can keep that error until nats-server is restarted, while refusals
//! before the store (this probe's) are still answered. nats-server's own health check says
//! so; [`super::broker_health`] asks it. Hence `docs/broker.md`: keep `max_file_store`
//! below the disk's free space, so that a full store is a refusal the gateway reports.

use std::time::Duration;

use async_nats::jetstream::{self, context::AccountErrorKind, context::PublishErrorKind};
use flue_proto::operation::{OPERATIONS_BUCKET, OPERATIONS_STREAM};
use flue_proto::subject::{self, RESPONSE_STREAM};
use flue_proto::{NotReady, NotReadyCode, TenantId};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::broker::{StorageRefusal, jetstream_code};
use crate::link::BrokerLink;

/// How often a tenant's readiness is probed.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(2);

/// While the streams were found ready, one probe in this many publishes to them (the
/// others ask the account info only); every probe does while they are not.
pub const STREAMS_EVERY: u32 = 5;

/// The header value of a probe: a per-message TTL nats-server refuses ("invalid
/// per-message TTL", or "per-message TTL is disabled" on a stream without TTLs), after
/// checking the write against its storage limits.
const PROBE_TTL: &str = "not-a-ttl";

/// The last token of a probe's subject: `~` is in no id the API accepts, so no server,
/// stack or key of the tenant's is ever named by it.
const PROBE_TOKEN: &str = "~readiness";

/// The tenant's KV buckets (each the stream `KV_<bucket>`).
const BUCKETS: [&str; 14] = [
    subject::CONFIGS_BUCKET,
    subject::SERVERS_BUCKET,
    subject::DEPLOYMENTS_BUCKET,
    subject::SERVER_DEPLOYMENTS_BUCKET,
    subject::STACKS_BUCKET,
    subject::STACK_UNITS_BUCKET,
    subject::PENDING_BUCKET,
    subject::SERVER_ORDER_BUCKET,
    subject::PRESENCE_BUCKET,
    subject::WEBHOOKS_BUCKET,
    subject::DATA_BUCKET,
    subject::REVOKED_TOKENS_BUCKET,
    flue_proto::upgrade::BUILDS_BUCKET,
    OPERATIONS_BUCKET,
];

/// What the last probe of one tenant found: `None` while its state streams take writes.
/// Cheap to clone.
#[derive(Debug, Clone)]
pub struct Readiness {
    found: watch::Receiver<Option<NotReady>>,
}

impl Readiness {
    /// Why the tenant's state streams could not take writes at the last probe, if so.
    pub fn not_ready(&self) -> Option<NotReady> {
        self.found.borrow().clone()
    }
}

/// One stream a probe writes to, and the subject it writes on.
#[derive(Debug, Clone)]
struct Target {
    stream: String,
    subject: String,
}

/// Probes a tenant's state streams through its state account's JetStream context.
#[derive(Debug, Clone)]
pub struct Probe {
    js: jetstream::Context,
    targets: Vec<Target>,
    /// Whether the broker is a cluster (a stream that does not answer has no leader).
    clustered: bool,
}

impl Probe {
    /// A probe of `tenant`'s state streams over `js` (the tenant account's context, whose
    /// timeout, the broker deadline, bounds each call).
    pub fn new(js: jetstream::Context, tenant: &TenantId) -> Self {
        // `flue.<tenant>.<kind>.<token>`: in the stream of that kind, no id's subject.
        let prefix = format!("flue.{tenant}");
        let mut targets: Vec<Target> = BUCKETS
            .iter()
            .map(|bucket| Target {
                stream: format!("KV_{bucket}"),
                subject: flue_proto::jsapi::kv_watch(bucket, PROBE_TOKEN),
            })
            .collect();
        for (stream, kind) in [
            (subject::REQUEST_STREAM, "req"),
            (RESPONSE_STREAM, "resp"),
            (OPERATIONS_STREAM, "ops"),
        ] {
            targets.push(Target {
                stream: stream.to_owned(),
                subject: format!("{prefix}.{kind}.{PROBE_TOKEN}"),
            });
        }
        let clustered = js.client().server_info().cluster.is_some();
        Self {
            js,
            targets,
            clustered,
        }
    }

    /// Probes once: `None` when the account info is answered and, with `streams`, every
    /// state stream would take a write.
    pub async fn once(&self, streams: bool) -> Option<NotReady> {
        if let Err(e) = self.js.query_account().await {
            return Some(self.account_verdict(&e.kind()));
        }
        if !streams {
            return None;
        }
        let answers = futures_util::future::join_all(
            self.targets.iter().map(|target| self.write_probe(target)),
        )
        .await;
        answers.into_iter().flatten().next()
    }

    /// Publishes one probe to `target` and says what its answer means.
    async fn write_probe(&self, target: &Target) -> Option<NotReady> {
        let message = jetstream::message::PublishMessage::build()
            .payload(bytes::Bytes::new())
            .header("Nats-TTL", PROBE_TTL);
        let answer = match self.js.send_publish(target.subject.clone(), message).await {
            Ok(ack) => ack.await.map(|_| ()),
            Err(e) => Err(e),
        };
        match answer {
            Ok(()) => {
                // No nats-server the gateway supports stores it; one that did would
                // hold an empty message under a subject no id names.
                warn!(stream = %target.stream, "a readiness probe was stored by the broker");
                None
            }
            Err(e) => self.publish_verdict(&target.stream, e.kind(), &e),
        }
    }

    /// What a refused or unanswered probe of `stream` means (`None`: it would take writes).
    fn publish_verdict(
        &self,
        stream: &str,
        kind: PublishErrorKind,
        error: &(dyn std::error::Error + 'static),
    ) -> Option<NotReady> {
        if let Some(refusal) = StorageRefusal::of(error) {
            return Some(store_full(stream, refusal));
        }
        match kind {
            PublishErrorKind::TimedOut
            | PublishErrorKind::StreamNotFound
            | PublishErrorKind::BrokenPipe => Some(self.unanswered(&format!("stream {stream}"))),
            _ if jetstream_code(error) == Some(jetstream::ErrorCode::CLUSTER_NOT_AVAILABLE) => {
                Some(no_meta_leader())
            }
            // Any other refusal (the probe's TTL, as meant) came after the storage check.
            _ => None,
        }
    }

    /// What a failed account info request means.
    fn account_verdict(&self, kind: &AccountErrorKind) -> NotReady {
        match kind {
            AccountErrorKind::JetStream(e)
                if e.error_code() == jetstream::ErrorCode::CLUSTER_NOT_AVAILABLE =>
            {
                no_meta_leader()
            }
            AccountErrorKind::JetStream(e)
                if e.error_code() == jetstream::ErrorCode::JETSTREAM_NOT_ENABLED
                    || e.error_code()
                        == jetstream::ErrorCode::JETSTREAM_NOT_ENABLED_FOR_ACCOUNT =>
            {
                NotReady {
                    code: NotReadyCode::JetstreamUnavailable,
                    message:
                        "JetStream is not enabled on the broker (or for this gateway's account); \
                              if nats-server logged \"JetStream out of space, will be DISABLED\", \
                              restart it once its disk has room"
                            .to_owned(),
                }
            }
            _ => self.unanswered("the broker's JetStream"),
        }
    }

    /// What a call `what` got no answer to means: on a cluster, no leader (too few nodes
    /// for a quorum); on one server, a JetStream that does not answer.
    fn unanswered(&self, what: &str) -> NotReady {
        if self.clustered {
            return NotReady {
                code: NotReadyCode::NoQuorum,
                message: format!(
                    "{what} did not answer within the broker deadline: it has no leader (too few \
                     of its cluster's nodes are up for a quorum); writes answer 503 until they return"
                ),
            };
        }
        NotReady {
            code: NotReadyCode::JetstreamUnavailable,
            message: format!(
                "{what} did not answer within the broker deadline: the broker is overloaded, its disk \
                 is full (nats-server logs \"no space left on device\"), or its JetStream is disabled \
                 (\"will be DISABLED\" in its log: restart it once there is room)"
            ),
        }
    }
}

/// The verdict for a stream the broker refuses writes to for lack of storage.
fn store_full(stream: &str, refusal: StorageRefusal) -> NotReady {
    NotReady {
        code: NotReadyCode::StoreFull,
        message: format!(
            "{refusal}: stream {stream} refuses writes; they answer 507 insufficient_storage and \
             resume by themselves once the broker has room (free JetStream storage, or raise its \
             max_file_store or the account's storage limit)"
        ),
    }
}

/// The verdict when the JetStream cluster has no metadata leader.
fn no_meta_leader() -> NotReady {
    NotReady {
        code: NotReadyCode::NoQuorum,
        message: "the JetStream cluster has no metadata leader (too few of its nodes are up for a \
                  quorum); writes answer 503 until they return"
            .to_owned(),
    }
}

/// Starts nothing: the [`Readiness`] a [`run`] with the returned sender keeps current.
pub fn channel() -> (watch::Sender<Option<NotReady>>, Readiness) {
    let (tx, found) = watch::channel(None);
    (tx, Readiness { found })
}

/// Probes every [`PROBE_INTERVAL`] while `link` is up (a link that is down is reported by
/// `/readyz` itself), keeping `found` current and logging each change, until `shutdown`.
pub async fn run(
    probe: Probe,
    link: BrokerLink,
    found: watch::Sender<Option<NotReady>>,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(PROBE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Probes since the streams were last probed; the first probe probes them.
    let mut since_streams = STREAMS_EVERY;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        if !link.is_connected() {
            continue;
        }
        let before = found.borrow().clone();
        let streams = before.is_some() || since_streams >= STREAMS_EVERY;
        let verdict = tokio::select! {
            () = shutdown.cancelled() => return,
            verdict = probe.once(streams) => verdict,
        };
        // An account-only probe that passes keeps the streams' last verdict (none).
        since_streams = if streams { 1 } else { since_streams + 1 };
        if before.as_ref().map(|r| r.code) != verdict.as_ref().map(|r| r.code) {
            match &verdict {
                Some(reason) => {
                    warn!(code = ?reason.code, reason = %reason.message, "the state streams cannot take writes; /readyz answers 503")
                }
                None => info!("the state streams take writes again; /readyz answers 200"),
            }
        }
        found.send_replace(verdict);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_store_names_the_stream_and_what_gives_room_but_no_tenant() {
        let reason = store_full("KV_flue_deployments", StorageRefusal::Server);
        assert_eq!(reason.code, NotReadyCode::StoreFull);
        for said in ["KV_flue_deployments", "max_file_store", "507", "resume"] {
            assert!(reason.message.contains(said), "{said:?} in {reason:?}");
        }
        let body = serde_json::to_value(&reason).expect("json");
        assert_eq!(body["code"], "store_full");
    }

    #[test]
    fn probe_subjects_name_no_id_the_api_accepts() {
        assert!(flue_proto::ServerId::new(PROBE_TOKEN).is_err());
        assert!(flue_proto::StackId::new(PROBE_TOKEN).is_err());
    }
}
