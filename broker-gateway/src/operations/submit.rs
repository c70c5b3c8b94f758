//! Accepting an operation: checked as `flue stack validate` checks it (a bad body is a
//! 422 naming the field, never a queued failure), hidden parameter values sealed to the
//! gateways' key, the stack claimed, the record written, the message queued.

use flue_proto::operation::{
    OperationKind, OperationState, QueuedOperation, StackOperation, SubmitOperation,
};
use flue_proto::seal;
use flue_proto::{DeploymentId, Stack, StackId};
use flue_stack::submitted::{self, Prepared};
use nkeys::XKey;
use serde_json::Value;
use time::OffsetDateTime;
use tracing::info;

use super::{Claim, Operations, OperationsError};
use crate::broker::{Broker, TooLarge};
use crate::sealing::SealFailure;

/// Why an operation was not queued.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The body does not fit the stack (`flue stack validate`'s message, naming the field).
    #[error("{path}: {message}")]
    Invalid {
        /// Where in the body.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The stack does not exist and the operation is not a create.
    #[error("stack {:?} not found", .0.as_str())]
    NotFound(StackId),
    /// Another operation holds the stack.
    #[error(
        "stack {:?} has operation {holder} queued or running; submit again once it has ended",
        .stack.as_str()
    )]
    Busy {
        /// The stack.
        stack: StackId,
        /// The operation holding it.
        holder: String,
    },
    /// A hidden parameter could not be sealed.
    #[error(transparent)]
    Seal(#[from] SealFailure),
    /// The body, sealed, is larger than one broker message.
    #[error(transparent)]
    TooLarge(#[from] TooLarge),
    /// The queue or the records failed.
    #[error(transparent)]
    Operations(#[from] OperationsError),
}

/// Checks `body` against `stack` (as stored, if it exists) and queues it; answers the
/// record as queued. The body is checked first, so a bad one is refused as such
/// whether or not the stack exists.
pub async fn submit(
    operations: &Operations,
    broker: &Broker,
    sealing: &XKey,
    id: &StackId,
    stack: Option<&Stack>,
    body: SubmitOperation,
    cause: Option<String>,
) -> Result<StackOperation, SubmitError> {
    let tenant = operations.tenant().clone();
    let prepared = submitted::prepare(&body, id, tenant.as_str(), stack.map(|s| &s.state))
        .map_err(|e| SubmitError::Invalid {
            path: e.path,
            message: e.message,
        })?;
    // A stack whose create is still queued does not exist yet: it is busy, not missing.
    if let Some(holder) = operations.busy(id).await? {
        return Err(busy(id, &holder));
    }
    if stack.is_none() && body.operation != OperationKind::Create {
        return Err(SubmitError::NotFound(id.clone()));
    }
    let queued_body = sealed_body(body, &prepared, sealing)?;
    let op = DeploymentId::random().to_string();
    let queued = QueuedOperation {
        id: op.clone(),
        stack: id.clone(),
        body: queued_body,
    };
    // Sealed values are larger than given ones: a body within the API's limit may still
    // not fit in one broker message (413, nothing claimed).
    broker.fits_json("stack operation", &queued)?;
    if let Claim::Busy(holder) = operations.claim(id, &op).await? {
        return Err(busy(id, &holder));
    }
    let record = StackOperation {
        id: op.clone(),
        stack: id.clone(),
        tenant,
        operation: prepared.kind,
        cause,
        state: OperationState::Queued,
        worker: None,
        lease_expires_at: None,
        attempts: 0,
        reason: None,
        stack_status: None,
        submitted_at: OffsetDateTime::now_utc(),
        finished_at: None,
        progress: Vec::new(),
        progress_dropped: 0,
    };
    let queued_ok = async {
        operations.put(&record).await?;
        operations.enqueue(&queued).await
    }
    .await;
    if let Err(e) = queued_ok {
        // Nothing will run it: the stack is free again.
        let _ = operations.release(id, &op).await;
        return Err(e.into());
    }
    info!(stack.id = %id, operation.id = %op, operation = %prepared.kind, "stack operation queued");
    Ok(record)
}

fn busy(id: &StackId, holder: &str) -> SubmitError {
    SubmitError::Busy {
        stack: id.clone(),
        holder: holder.to_owned(),
    }
}

/// The body as queued: parameters as text (the environments' merged in), hidden ones
/// sealed to the gateways' key; environments reduced to what holds no value.
fn sealed_body(
    mut body: SubmitOperation,
    prepared: &Prepared,
    sealing: &XKey,
) -> Result<SubmitOperation, SealFailure> {
    let Some(apply) = &prepared.apply else {
        return Ok(body);
    };
    let hidden = apply.hidden();
    body.parameters = apply
        .given
        .iter()
        .map(|(name, text)| {
            let value = Value::String(text.clone());
            if !hidden.contains(name) {
                return Ok((name.clone(), value));
            }
            let sealed =
                seal::seal(&value, sealing, sealing).map_err(|source| SealFailure::Seal {
                    name: name.clone(),
                    source,
                })?;
            Ok((name.clone(), sealed))
        })
        .collect::<Result<_, SealFailure>>()?;
    body.environments = vec![apply.environment_document()];
    Ok(body)
}

/// The queued body with its sealed parameter values opened (only in the worker's
/// memory, for the run).
pub fn opened_body(
    mut body: SubmitOperation,
    sealing: &XKey,
) -> Result<SubmitOperation, SealFailure> {
    for (name, value) in &mut body.parameters {
        if seal::is_sealed(value) {
            *value = seal::open(value, sealing, sealing).map_err(|source| SealFailure::AtRest {
                name: name.clone(),
                source,
            })?;
        }
    }
    Ok(body)
}
