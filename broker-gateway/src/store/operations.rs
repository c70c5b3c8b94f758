//! Stack operations' records in `flue_ops`: `<tenant>.<stack>.<op>` says where an
//! operation stands, and `<tenant>.<stack>` names the stack's active operation (its
//! claim: one operation per stack at a time).
//!
//! The claim is a compare-and-set ([`cas::compare_and_set`]) that asks its caller
//! whether the holder it finds is still unfinished; a worker's writes of a record name
//! the revision it last read or wrote ([`Operations::update`]), so that one that lost
//! its lease never writes over the new holder's record.

use std::sync::Arc;

use flue_proto::operation::{OPERATIONS_BUCKET, StackOperation};
use flue_proto::{StackId, TenantId};

use super::bucket::{decode, encode, entry, write_error};
use super::cas::{Absent, Attempts, Change, Outcome, Text, compare_and_set};
use super::kv::{Kv, KvError};
use super::{StoreError, key2};

/// What became of a claim on a stack ([`Operations::claim`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Claim {
    /// The stack is this operation's now.
    Claimed,
    /// Another operation is queued or running on it.
    Busy(String),
}

/// A stack's operations, newest first, and how many stored records could not be decoded.
#[derive(Debug, Default)]
pub struct History {
    /// The operations, newest first (ties by id, so the order is stable).
    pub operations: Vec<StackOperation>,
    /// Records left out because they cannot be decoded.
    pub skipped: usize,
}

/// The operations' bucket; cheap to clone.
#[derive(Debug, Clone)]
pub struct Operations {
    records: Arc<dyn Kv>,
}

impl Operations {
    pub(super) fn new(records: Arc<dyn Kv>) -> Self {
        Self { records }
    }

    /// Makes `op` the active operation of `stack` unless `unfinished` says the holder
    /// found there still holds it. A marker left by an operation that ended is taken
    /// over. `unfinished` may run several times: each lost race is another claim or
    /// release that got through, and is looked at again.
    pub async fn claim<E, F, Fut>(
        &self,
        tenant: &TenantId,
        stack: &StackId,
        op: &str,
        unfinished: F,
    ) -> Result<Claim, E>
    where
        E: From<StoreError>,
        F: Fn(String) -> Fut,
        Fut: Future<Output = Result<bool, E>>,
    {
        let key = key2(tenant, stack);
        let unfinished = &unfinished;
        let outcome = compare_and_set::<String, Text, E, _, _>(
            &*self.records,
            &key,
            Absent::Create,
            Attempts::Unbounded,
            move |holder| async move {
                if let Some(held) = &holder
                    && unfinished(held.clone()).await?
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

    /// The operation the stack's marker names, finished or not (a read: nothing is
    /// claimed).
    pub async fn holder(
        &self,
        tenant: &TenantId,
        stack: &StackId,
    ) -> Result<Option<String>, StoreError> {
        let key = key2(tenant, stack);
        Ok(entry(&*self.records, &key)
            .await?
            .map(|e| String::from_utf8_lossy(&e.value).into_owned()))
    }

    /// Ends the stack's claim if `op` still holds it.
    pub async fn release(
        &self,
        tenant: &TenantId,
        stack: &StackId,
        op: &str,
    ) -> Result<(), StoreError> {
        let key = key2(tenant, stack);
        let Some(held) = entry(&*self.records, &key)
            .await?
            .filter(|e| e.value.as_ref() == op.as_bytes())
        else {
            return Ok(());
        };
        match self.records.delete(&key, Some(held.revision)).await {
            // Claimed by another operation meanwhile (after this one was found finished).
            Ok(()) | Err(KvError::Conflict) => Ok(()),
            Err(e) => Err(write_error(OPERATIONS_BUCKET, &key, e)),
        }
    }

    /// Operation `op` of `stack` and the revision to update it from, if there is one.
    pub async fn get(
        &self,
        tenant: &TenantId,
        stack: &StackId,
        op: &str,
    ) -> Result<Option<(StackOperation, u64)>, StoreError> {
        let key = record_key(tenant, stack, op);
        entry(&*self.records, &key)
            .await?
            .map(|e| Ok((decode(OPERATIONS_BUCKET, &key, &e.value)?, e.revision)))
            .transpose()
    }

    /// Writes a new operation's record (its submitter, before queuing it).
    pub async fn put(&self, tenant: &TenantId, record: &StackOperation) -> Result<(), StoreError> {
        let key = record_key(tenant, &record.stack, &record.id);
        self.records
            .put(&key, encode(record))
            .await
            .map(drop)
            .map_err(|source| StoreError::Write {
                bucket: OPERATIONS_BUCKET,
                key,
                source,
            })
    }

    /// Writes `record` over the revision its writer last read or wrote; the new
    /// revision, or `None` when someone else wrote it since. That is how a worker
    /// learns it lost its lease (stalled past it while another took the operation
    /// over): it must then stop, never write over the new holder's record.
    pub async fn update(
        &self,
        tenant: &TenantId,
        record: &StackOperation,
        revision: u64,
    ) -> Result<Option<u64>, StoreError> {
        let key = record_key(tenant, &record.stack, &record.id);
        match self.records.update(&key, encode(record), revision).await {
            Ok(revision) => Ok(Some(revision)),
            Err(KvError::Conflict) => Ok(None),
            Err(e) => Err(write_error(OPERATIONS_BUCKET, &key, e)),
        }
    }

    /// Every operation of `stack`, newest first: the last value of each of its record
    /// keys, read at once, so the cost is the stack's own operations, never the
    /// tenant's.
    pub async fn history(&self, tenant: &TenantId, stack: &StackId) -> Result<History, StoreError> {
        let filter = format!("{tenant}.{stack}.*");
        let values = self
            .records
            .values(&filter)
            .await
            .map_err(|source| StoreError::Read {
                bucket: OPERATIONS_BUCKET,
                key: filter.clone(),
                source,
            })?;
        let mut history = History::default();
        for (_, value) in values {
            match serde_json::from_slice::<StackOperation>(&value) {
                Ok(op) => history.operations.push(op),
                Err(_) => history.skipped += 1,
            }
        }
        history.operations.sort_by(|a, b| {
            b.submitted_at
                .cmp(&a.submitted_at)
                .then_with(|| b.id.cmp(&a.id))
        });
        Ok(history)
    }
}

/// `<tenant>.<stack>.<op>`.
fn record_key(tenant: &TenantId, stack: &StackId, op: &str) -> String {
    format!("{tenant}.{stack}.{op}")
}

#[cfg(test)]
mod tests {
    use flue_proto::operation::{OperationKind, OperationState};
    use time::OffsetDateTime;

    use super::*;
    use crate::store::memory::Memory;

    fn tenant() -> TenantId {
        TenantId::new("t").expect("tenant")
    }

    fn stack() -> StackId {
        StackId::new("s").expect("stack")
    }

    fn record(op: &str, state: OperationState, submitted: i64) -> StackOperation {
        StackOperation {
            id: op.to_owned(),
            stack: stack(),
            tenant: tenant(),
            operation: OperationKind::Update,
            cause: None,
            state,
            worker: None,
            lease_expires_at: None,
            attempts: 0,
            reason: None,
            stack_status: None,
            submitted_at: OffsetDateTime::from_unix_timestamp(submitted).expect("time"),
            finished_at: None,
            progress: Vec::new(),
            progress_dropped: 0,
        }
    }

    fn store() -> Operations {
        Operations::new(Memory::shared(OPERATIONS_BUCKET))
    }

    /// A claim as the service makes it: the holder found still holds the stack while
    /// its record is there and not ended.
    async fn claim(ops: &Operations, op: &str) -> Claim {
        ops.claim::<StoreError, _, _>(&tenant(), &stack(), op, move |held: String| async move {
            Ok(ops
                .get(&tenant(), &stack(), &held)
                .await?
                .is_some_and(|(r, _)| !r.state.is_terminal()))
        })
        .await
        .expect("claim")
    }

    #[tokio::test]
    async fn a_stack_is_claimed_by_one_operation_until_it_ends_or_is_released() {
        let ops = store();
        assert_eq!(claim(&ops, "a").await, Claim::Claimed);
        ops.put(&tenant(), &record("a", OperationState::Queued, 0))
            .await
            .expect("put");
        assert_eq!(claim(&ops, "b").await, Claim::Busy("a".into()));
        assert_eq!(
            ops.holder(&tenant(), &stack()).await.expect("read"),
            Some("a".into())
        );

        // A release by an operation that does not hold the stack changes nothing.
        ops.release(&tenant(), &stack(), "b")
            .await
            .expect("release");
        assert_eq!(claim(&ops, "b").await, Claim::Busy("a".into()));

        // Once the holder ended, its marker is taken over.
        let (mut a, revision) = ops
            .get(&tenant(), &stack(), "a")
            .await
            .expect("read")
            .expect("stored");
        a.state = OperationState::Succeeded;
        ops.update(&tenant(), &a, revision).await.expect("update");
        assert_eq!(claim(&ops, "b").await, Claim::Claimed);
        assert_eq!(
            ops.holder(&tenant(), &stack()).await.expect("read"),
            Some("b".into())
        );

        ops.release(&tenant(), &stack(), "b")
            .await
            .expect("release");
        assert_eq!(ops.holder(&tenant(), &stack()).await.expect("read"), None);
        assert_eq!(claim(&ops, "c").await, Claim::Claimed);
    }

    #[tokio::test]
    async fn a_marker_without_a_record_frees_the_stack() {
        // Its submitter died before writing the record: nothing was queued.
        let ops = store();
        assert_eq!(claim(&ops, "a").await, Claim::Claimed);
        assert_eq!(claim(&ops, "b").await, Claim::Claimed);
    }

    #[tokio::test]
    async fn a_worker_that_lost_its_lease_cannot_write_over_the_new_holders_record() {
        let ops = store();
        ops.put(&tenant(), &record("a", OperationState::Queued, 0))
            .await
            .expect("put");
        let (mut stalled, revision) = ops
            .get(&tenant(), &stack(), "a")
            .await
            .expect("read")
            .expect("stored");
        let mut taker = stalled.clone();
        taker.state = OperationState::Running;
        taker.attempts = 2;
        let taken = ops
            .update(&tenant(), &taker, revision)
            .await
            .expect("update");
        assert!(taken.is_some());

        stalled.state = OperationState::Failed;
        assert_eq!(
            ops.update(&tenant(), &stalled, revision)
                .await
                .expect("update"),
            None,
            "a write at a revision read before the takeover"
        );
        let (now, _) = ops
            .get(&tenant(), &stack(), "a")
            .await
            .expect("read")
            .expect("stored");
        assert_eq!((now.state, now.attempts), (OperationState::Running, 2));
    }

    #[tokio::test]
    async fn a_stacks_history_is_its_own_operations_newest_first_undecodable_counted() {
        let ops = store();
        for r in [
            record("b", OperationState::Succeeded, 20),
            record("a", OperationState::Failed, 10),
            record("c", OperationState::Running, 20),
        ] {
            ops.put(&tenant(), &r).await.expect("put");
        }
        let mut other = record("x", OperationState::Queued, 30);
        other.stack = StackId::new("s2").expect("stack");
        ops.put(&tenant(), &other).await.expect("put");
        // The claim marker is not a record of the stack's.
        claim(&ops, "c").await;
        ops.records
            .put("t.s.bad", bytes::Bytes::from_static(b"{"))
            .await
            .expect("put");

        let history = ops.history(&tenant(), &stack()).await.expect("history");
        let ids: Vec<&str> = history.operations.iter().map(|o| o.id.as_str()).collect();
        assert_eq!(ids, ["c", "b", "a"]);
        assert_eq!(history.skipped, 1);
    }
}
