//! A stack's operations, newest first: the records `<tenant>.<stack>.<op>` of the
//! operations bucket, read with one ordered consumer filtered to that stack (the last
//! value of each key), so the cost is the stack's own operations, never the tenant's.

use async_nats::jetstream::consumer::DeliverPolicy;
use async_nats::jetstream::consumer::pull::OrderedConfig;
use flue_proto::StackId;
use flue_proto::operation::{OPERATIONS_BUCKET, StackOperation};
use futures_util::StreamExt;

use super::{Operations, OperationsError};
use crate::store::StoreError;

/// How long the read of one stack's records may take before it counts as failed.
const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A stack's operations, newest first, and how many stored records could not be decoded.
#[derive(Debug, Default)]
pub struct History {
    /// The operations, newest first (ties by id, so the order is stable).
    pub operations: Vec<StackOperation>,
    /// Records left out because they cannot be decoded.
    pub skipped: usize,
}

impl Operations {
    /// Every operation of `stack`, newest first.
    pub async fn history(&self, stack: &StackId) -> Result<History, OperationsError> {
        let filter = format!("{}.{stack}.*", self.tenant);
        let read = |source: Box<dyn std::error::Error + Send + Sync>| {
            OperationsError::from(StoreError::Read {
                bucket: OPERATIONS_BUCKET,
                key: filter.clone(),
                source,
            })
        };
        let consumer = self
            .records
            .stream
            .create_consumer(OrderedConfig {
                filter_subject: format!("{}{filter}", self.records.prefix),
                // A record is rewritten as its operation goes on: only its last value counts.
                deliver_policy: DeliverPolicy::LastPerSubject,
                ..Default::default()
            })
            .await
            .map_err(|e| read(e.into()))?;
        let mut pending = consumer.cached_info().num_pending;
        let mut history = History::default();
        if pending == 0 {
            return Ok(history);
        }
        let mut messages = consumer.messages().await.map_err(|e| read(e.into()))?;
        while pending > 0 {
            let message = tokio::time::timeout(READ_TIMEOUT, messages.next())
                .await
                .map_err(|e| read(e.into()))?
                .ok_or_else(|| read("the consumer ended early".into()))?
                .map_err(|e| read(e.into()))?;
            pending = message.info().map_err(read)?.pending;
            // Purged or deleted keys carry an empty payload: nothing to list.
            if message.payload.is_empty() {
                continue;
            }
            match serde_json::from_slice::<StackOperation>(&message.payload) {
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
