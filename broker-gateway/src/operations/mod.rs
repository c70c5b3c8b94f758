//! Stack operations as a service: the work queue (stream `FLUE_OPS`, WorkQueue
//! retention, one durable pull consumer shared by every engine worker of every
//! gateway) and the operation records (KV bucket `flue_ops`).
//!
//! One operation per stack at a time: the key `<tenant>.<stack>` names the stack's
//! active operation, created with compare-and-set when one is submitted and removed
//! when it ends; a second submission meanwhile is refused (409), never queued behind
//! it. The record `<tenant>.<stack>.<op>` says where the operation stands.
//!
//! The lease is the consumer's ack wait: a worker renews it with in-progress acks while
//! it runs; one that dies leaves the message unacknowledged, and the broker hands it to
//! another worker once the lease runs out ([`worker`]).

pub mod auto;
pub mod submit;
pub mod worker;

use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use flue_proto::operation::{
    OPERATIONS_CONSUMER, OPERATIONS_STREAM, OPERATIONS_SUBJECTS, OperationState, QueuedOperation,
    StackOperation, operation_subject,
};
use flue_proto::{StackId, TenantId};
use time::OffsetDateTime;
use tracing::warn;

use crate::store::StoreError;

pub use crate::store::{Claim, History};

/// Deliveries after which an operation that keeps losing its worker ends FAILED: each
/// one is a worker that died or gave it back (a gateway unreachable, say).
pub const MAX_DELIVERIES: u64 = 5;
/// How long a submitter may take between writing an operation's record and queuing its
/// message. A record still queued past it whose message is not in the stream was left
/// by a gateway that died in between: nothing will run it, so it is failed and its
/// stack freed (else the stack would answer 409 for ever).
pub const QUEUE_GRACE: Duration = Duration::from_secs(30);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why the queue or the records failed.
#[derive(Debug, thiserror::Error)]
pub enum OperationsError {
    /// The records bucket failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The stream or its consumer could not be set up.
    #[error("cannot set up the operations queue ({what})")]
    Setup {
        /// Stream or consumer.
        what: &'static str,
        /// Cause.
        #[source]
        source: BoxError,
    },
    /// An operation could not be queued, or its publish was not acknowledged.
    #[error("cannot queue operation {id}")]
    Publish {
        /// Operation id.
        id: String,
        /// Cause.
        #[source]
        source: BoxError,
    },
}

/// The tenant's operation queue, and its records' store; cheap to clone.
#[derive(Debug, Clone)]
pub struct Operations {
    /// The queue's JetStream context (a message queue, not an aggregate's record: it
    /// stays here, out of the store).
    js: jetstream::Context,
    /// The records and claims (`flue_ops`).
    records: crate::store::Operations,
    tenant: TenantId,
    lease: Duration,
    /// The shared consumer's name: sealed in operator mode (issue 22,
    /// `consumer_names::ConsumerNames::gateway`), [`OPERATIONS_CONSUMER`] otherwise.
    consumer: String,
}

impl Operations {
    /// Opens (creating when missing) the stream and its shared consumer, with
    /// `replicas` copies; the records are `records`, the tenant's store's.
    pub async fn open(
        js: &jetstream::Context,
        records: crate::store::Operations,
        tenant: TenantId,
        replicas: usize,
        lease: Duration,
        consumer: String,
    ) -> Result<Self, OperationsError> {
        let setup = |what| move |e: BoxError| OperationsError::Setup { what, source: e };
        let stream = js
            .get_or_create_stream(stream::Config {
                name: OPERATIONS_STREAM.to_owned(),
                subjects: vec![OPERATIONS_SUBJECTS.to_owned()],
                // A message leaves the queue once a worker acknowledges it.
                retention: stream::RetentionPolicy::WorkQueue,
                storage: stream::StorageType::File,
                num_replicas: replicas,
                duplicate_window: Duration::from_secs(120),
                ..Default::default()
            })
            .await
            .map_err(|e| setup("stream")(e.into()))?;
        // The name of gateways before sealed names: on a work queue only one consumer may
        // take a subject, so the older one goes first; what it had not acknowledged is
        // still in the queue, and the new one delivers it again (a worker's lease,
        // recorded, tells it whether to run it).
        if consumer != OPERATIONS_CONSUMER
            && stream.consumer_info(&consumer).await.is_err()
            && stream.consumer_info(OPERATIONS_CONSUMER).await.is_ok()
        {
            warn!(
                consumer = OPERATIONS_CONSUMER,
                "the operations consumer of gateways before sealed consumer names is deleted: its operations are delivered by this one"
            );
            stream
                .delete_consumer(OPERATIONS_CONSUMER)
                .await
                .map_err(|e| setup("consumer")(e.into()))?;
        }
        stream
            .get_or_create_consumer(
                &consumer,
                consumer::pull::Config {
                    durable_name: Some(consumer.clone()),
                    ack_policy: consumer::AckPolicy::Explicit,
                    ack_wait: lease,
                    // Bounded by the workers themselves (`MAX_DELIVERIES`), which
                    // record why they give up; the broker would drop it silently.
                    max_deliver: -1,
                    num_replicas: replicas,
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| setup("consumer")(e.into()))?;
        Ok(Self {
            js: js.clone(),
            records,
            tenant,
            lease,
            consumer,
        })
    }

    /// The shared consumer's name.
    pub(crate) fn consumer(&self) -> &str {
        &self.consumer
    }

    /// The tenant served.
    pub fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    /// How long a worker holds an operation without renewing.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// The JetStream context (for the workers' consumer).
    pub(crate) fn jetstream(&self) -> &jetstream::Context {
        &self.js
    }

    /// Makes `op` the stack's active operation unless another one is, still
    /// unfinished. A marker left by an operation that ended is taken over.
    pub async fn claim(&self, stack: &StackId, op: &str) -> Result<Claim, OperationsError> {
        self.records
            .claim(&self.tenant, stack, op, move |held: String| async move {
                self.unfinished(stack, &held).await
            })
            .await
    }

    /// The stack's unfinished operation, if it has one (a read: nothing is claimed).
    pub async fn busy(&self, stack: &StackId) -> Result<Option<String>, OperationsError> {
        let Some(holder) = self.records.holder(&self.tenant, stack).await? else {
            return Ok(None);
        };
        let unfinished = self.unfinished(stack, &holder).await?;
        Ok(unfinished.then_some(holder))
    }

    /// Whether `op` still holds its stack: it has a record, not ended, and not lost
    /// ([`Operations::settled`]). A marker without a record was left by a submitter
    /// that died before writing it: nothing was queued, the stack is free.
    async fn unfinished(&self, stack: &StackId, op: &str) -> Result<bool, OperationsError> {
        Ok(self
            .settled(stack, op)
            .await?
            .is_some_and(|r| !r.state.is_terminal()))
    }

    /// Operation `op` of `stack` as [`Operations::get`] reads it, except that one lost
    /// between its record and its message (the submitting gateway died in between,
    /// [`QUEUE_GRACE`]) is recorded FAILED first, saying so.
    pub async fn settled(
        &self,
        stack: &StackId,
        op: &str,
    ) -> Result<Option<StackOperation>, OperationsError> {
        let Some((record, revision)) = self.get_entry(stack, op).await? else {
            return Ok(None);
        };
        let now = OffsetDateTime::now_utc();
        if !may_be_lost(&record, now) || self.in_queue(stack, op).await? {
            return Ok(Some(record));
        }
        let record = never_queued(record, now);
        match self.update(&record, revision).await? {
            Some(_) => {
                warn!(stack.id = %stack, operation.id = %op, "operation found never queued; failed");
                Ok(Some(record))
            }
            // Written meanwhile (a worker took it after all): read what it wrote.
            None => self.get(stack, op).await,
        }
    }

    /// Whether the queue holds `op`'s message (queued or running: a message leaves the
    /// queue when a worker acknowledges it). At most one operation per stack is
    /// queued, so the stack's last message is the one to look at.
    async fn in_queue(&self, stack: &StackId, op: &str) -> Result<bool, OperationsError> {
        let queue_error = |source: BoxError| OperationsError::Setup {
            what: "stream",
            source,
        };
        let stream = self
            .js
            .get_stream(OPERATIONS_STREAM)
            .await
            .map_err(|e| queue_error(e.into()))?;
        match stream
            .get_last_raw_message_by_subject(&operation_subject(&self.tenant, stack))
            .await
        {
            Ok(message) => Ok(serde_json::from_slice::<QueuedOperation>(&message.payload)
                .is_ok_and(|q| q.id == op)),
            Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => Ok(false),
            Err(e) => Err(queue_error(e.into())),
        }
    }

    /// Ends the stack's claim if `op` still holds it.
    pub async fn release(&self, stack: &StackId, op: &str) -> Result<(), OperationsError> {
        Ok(self.records.release(&self.tenant, stack, op).await?)
    }

    /// Operation `op` of `stack`, if there is one.
    pub async fn get(
        &self,
        stack: &StackId,
        op: &str,
    ) -> Result<Option<StackOperation>, OperationsError> {
        Ok(self.get_entry(stack, op).await?.map(|(record, _)| record))
    }

    /// Operation `op` of `stack` and the revision to update it from.
    pub async fn get_entry(
        &self,
        stack: &StackId,
        op: &str,
    ) -> Result<Option<(StackOperation, u64)>, OperationsError> {
        Ok(self.records.get(&self.tenant, stack, op).await?)
    }

    /// Writes a new operation's record (its submitter, before queuing it).
    pub async fn put(&self, record: &StackOperation) -> Result<(), OperationsError> {
        Ok(self.records.put(&self.tenant, record).await?)
    }

    /// Writes `record` over the revision its writer last read or wrote
    /// ([`crate::store::Operations::update`]): `None` when someone else wrote it since,
    /// so that a worker that lost its lease stops.
    pub async fn update(
        &self,
        record: &StackOperation,
        revision: u64,
    ) -> Result<Option<u64>, OperationsError> {
        Ok(self.records.update(&self.tenant, record, revision).await?)
    }

    /// Every operation of `stack`, newest first.
    pub async fn history(&self, stack: &StackId) -> Result<History, OperationsError> {
        Ok(self.records.history(&self.tenant, stack).await?)
    }

    /// Queues `queued` (deduplicated by its id) and waits for the broker's acknowledgement.
    pub async fn enqueue(&self, queued: &QueuedOperation) -> Result<(), OperationsError> {
        let err = |source: BoxError| OperationsError::Publish {
            id: queued.id.clone(),
            source,
        };
        let payload = serde_json::to_vec(queued).expect("queued operations always serialise");
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", queued.id.as_str());
        self.js
            .publish_with_headers(
                operation_subject(&self.tenant, &queued.stack),
                headers,
                payload.into(),
            )
            .await
            .map_err(|e| err(e.into()))?
            .await
            .map_err(|e| err(e.into()))?;
        Ok(())
    }
}

/// Whether `record` may have been lost between its record and its message: still
/// queued, [`QUEUE_GRACE`] after it was submitted (whether its message is in the queue
/// decides).
fn may_be_lost(record: &StackOperation, now: OffsetDateTime) -> bool {
    record.state == OperationState::Queued && now - record.submitted_at >= QUEUE_GRACE
}

/// `record`, lost before it was queued, FAILED at `now`, saying so.
fn never_queued(mut record: StackOperation, now: OffsetDateTime) -> StackOperation {
    record.state = OperationState::Failed;
    record.reason = Some(
        "never queued: the gateway that accepted it stopped before queuing it; submit it again"
            .to_owned(),
    );
    record.finished_at = Some(now);
    record
}

/// This gateway's own API address as the engine workers reach it: a wildcard listen
/// address is reached on loopback.
pub fn own_url(addr: std::net::SocketAddr, https: bool) -> String {
    let mut addr = addr;
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr {
            std::net::SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    format!("{}://{addr}", if https { "https" } else { "http" })
}

#[cfg(test)]
mod tests {
    use flue_proto::operation::OperationKind;

    use super::*;

    fn queued_at(submitted: OffsetDateTime) -> StackOperation {
        StackOperation {
            id: "op".into(),
            stack: StackId::new("s").expect("stack"),
            tenant: TenantId::new("t").expect("tenant"),
            operation: OperationKind::Create,
            cause: None,
            state: OperationState::Queued,
            worker: None,
            lease_expires_at: None,
            attempts: 0,
            reason: None,
            stack_status: None,
            submitted_at: submitted,
            finished_at: None,
            progress: Vec::new(),
            progress_dropped: 0,
        }
    }

    #[test]
    fn only_a_queued_record_past_the_grace_may_have_been_lost() {
        let now = OffsetDateTime::UNIX_EPOCH + Duration::from_secs(1000);
        let fresh = queued_at(now - QUEUE_GRACE + Duration::from_secs(1));
        assert!(
            !may_be_lost(&fresh, now),
            "its submitter may still be queuing it"
        );
        let old = queued_at(now - QUEUE_GRACE);
        assert!(may_be_lost(&old, now));
        for state in [
            OperationState::Running,
            OperationState::Succeeded,
            OperationState::Failed,
        ] {
            let taken = StackOperation {
                state,
                ..old.clone()
            };
            assert!(!may_be_lost(&taken, now), "{state}: a worker has it");
        }
    }

    #[test]
    fn a_lost_record_ends_failed_saying_to_submit_again() {
        let now = OffsetDateTime::UNIX_EPOCH + Duration::from_secs(1000);
        let failed = never_queued(queued_at(OffsetDateTime::UNIX_EPOCH), now);
        assert_eq!(failed.state, OperationState::Failed);
        assert!(failed.state.is_terminal(), "its stack is free again");
        assert_eq!(failed.finished_at, Some(now));
        assert!(
            failed
                .reason
                .as_deref()
                .is_some_and(|r| r.contains("submit it again")),
            "{:?}",
            failed.reason
        );
    }
}
