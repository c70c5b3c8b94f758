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
pub mod history;
pub mod submit;
pub mod worker;

use std::time::Duration;

use async_nats::jetstream::{self, consumer, kv, stream};
use bytes::Bytes;
use flue_proto::operation::{
    OPERATIONS_BUCKET, OPERATIONS_CONSUMER, OPERATIONS_STREAM, OPERATIONS_SUBJECTS, OperationState,
    QueuedOperation, StackOperation, operation_subject,
};
use flue_proto::{StackId, TenantId};
use time::OffsetDateTime;
use tracing::warn;

use crate::store::StoreError;
use crate::store::cas::{Absent, Attempts, Change, Outcome, Text, compare_and_set};

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

/// The tenant's operation queue and records; cheap to clone.
#[derive(Debug, Clone)]
pub struct Operations {
    js: jetstream::Context,
    records: kv::Store,
    /// The same bucket, for the compare-and-set ([`crate::store::cas::compare_and_set`]).
    bucket: crate::store::Bucket,
    tenant: TenantId,
    lease: Duration,
}

/// What became of a claim on a stack ([`Operations::claim`]).
#[derive(Debug)]
pub enum Claim {
    /// The stack is this operation's now.
    Claimed,
    /// Another operation is queued or running on it.
    Busy(String),
}

impl Operations {
    /// Opens (creating when missing) the stream, its shared consumer and the records
    /// bucket, each with `replicas` copies.
    pub async fn open(
        js: &jetstream::Context,
        tenant: TenantId,
        replicas: usize,
        lease: Duration,
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
        stream
            .get_or_create_consumer(
                OPERATIONS_CONSUMER,
                consumer::pull::Config {
                    durable_name: Some(OPERATIONS_CONSUMER.to_owned()),
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
        let records = crate::store::open_bucket(js, OPERATIONS_BUCKET, replicas).await?;
        Ok(Self {
            js: js.clone(),
            bucket: crate::store::Bucket::new(records.clone(), OPERATIONS_BUCKET, false),
            records,
            tenant,
            lease,
        })
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

    fn active_key(&self, stack: &StackId) -> String {
        format!("{}.{stack}", self.tenant)
    }

    fn record_key(&self, stack: &StackId, op: &str) -> String {
        format!("{}.{stack}.{op}", self.tenant)
    }

    /// Makes `op` the stack's active operation unless another one is, still
    /// unfinished. A marker left by an operation that ended is taken over.
    pub async fn claim(&self, stack: &StackId, op: &str) -> Result<Claim, OperationsError> {
        let key = self.active_key(stack);
        // Until claimed or found busy: each lost race is another claim or release that
        // got through, and is looked at again.
        let outcome = compare_and_set::<String, Text, OperationsError, _, _>(
            &self.bucket,
            &key,
            Absent::Create,
            Attempts::Unbounded,
            |holder| async move {
                if let Some(held) = &holder
                    && self.unfinished(stack, held).await?
                {
                    return Ok(Change::Keep(holder));
                }
                Ok(Change::Write(op.to_owned()))
            },
        )
        .await?;
        Ok(match outcome {
            Outcome::Kept(Some(holder)) => Claim::Busy(holder),
            _ => Claim::Claimed,
        })
    }

    /// The stack's unfinished operation, if it has one (a read: nothing is claimed).
    pub async fn busy(&self, stack: &StackId) -> Result<Option<String>, OperationsError> {
        let key = self.active_key(stack);
        let Some(entry) = self
            .records
            .entry(&key)
            .await
            .map_err(|e| read_error(&key, e.into()))?
            .filter(|e| e.operation == kv::Operation::Put)
        else {
            return Ok(None);
        };
        let holder = String::from_utf8_lossy(&entry.value).into_owned();
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
        let Some((mut record, revision)) = self.get_entry(stack, op).await? else {
            return Ok(None);
        };
        let now = OffsetDateTime::now_utc();
        if record.state != OperationState::Queued
            || now - record.submitted_at < QUEUE_GRACE
            || self.in_queue(stack, op).await?
        {
            return Ok(Some(record));
        }
        record.state = OperationState::Failed;
        record.reason = Some(
            "never queued: the gateway that accepted it stopped before queuing it; submit it again"
                .to_owned(),
        );
        record.finished_at = Some(now);
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
        let key = self.active_key(stack);
        let entry = self
            .records
            .entry(&key)
            .await
            .map_err(|e| read_error(&key, e.into()))?;
        let Some(entry) = entry.filter(|e| e.value.as_ref() == op.as_bytes()) else {
            return Ok(());
        };
        match self
            .records
            .delete_expect_revision(&key, Some(entry.revision))
            .await
        {
            Ok(()) => Ok(()),
            // Claimed by another operation meanwhile (after this one was found finished).
            Err(e) if crate::store::lost_delete_race(&e) => Ok(()),
            Err(e) => Err(write_error(&key, e.into())),
        }
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
        let key = self.record_key(stack, op);
        let Some(entry) = self
            .records
            .entry(&key)
            .await
            .map_err(|e| read_error(&key, e.into()))?
            .filter(|e| e.operation == kv::Operation::Put)
        else {
            return Ok(None);
        };
        let record = serde_json::from_slice(&entry.value).map_err(|source| StoreError::Decode {
            bucket: OPERATIONS_BUCKET,
            key,
            source,
        })?;
        Ok(Some((record, entry.revision)))
    }

    /// Writes a new operation's record (its submitter, before queuing it).
    pub async fn put(&self, record: &StackOperation) -> Result<(), OperationsError> {
        let key = self.record_key(&record.stack, &record.id);
        let bytes = serde_json::to_vec(record).expect("operation records always serialise");
        self.records
            .put(&key, Bytes::from(bytes))
            .await
            .map_err(|e| write_error(&key, e.into()))?;
        Ok(())
    }

    /// Writes `record` over the revision its writer last read or wrote; the new
    /// revision, or `None` when someone else wrote it since. That is how a worker
    /// learns it lost its lease (stalled past it while another took the operation
    /// over): it must then stop, never write over the new holder's record.
    pub async fn update(
        &self,
        record: &StackOperation,
        revision: u64,
    ) -> Result<Option<u64>, OperationsError> {
        let key = self.record_key(&record.stack, &record.id);
        let bytes = serde_json::to_vec(record).expect("operation records always serialise");
        match self
            .records
            .update(&key, Bytes::from(bytes), revision)
            .await
        {
            Ok(revision) => Ok(Some(revision)),
            Err(e) if crate::store::lost_race(&e) => Ok(None),
            Err(e) => Err(write_error(&key, e.into())),
        }
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

fn read_error(key: &str, source: BoxError) -> OperationsError {
    StoreError::Read {
        bucket: OPERATIONS_BUCKET,
        key: key.to_owned(),
        source,
    }
    .into()
}

fn write_error(key: &str, source: BoxError) -> OperationsError {
    StoreError::Write {
        bucket: OPERATIONS_BUCKET,
        key: key.to_owned(),
        source,
    }
    .into()
}
