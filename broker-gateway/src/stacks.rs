//! Stack records as the engine keeps them while it drives a stack, written with
//! compare-and-set on their revision, each unit apart from the stack's head
//! ([`crate::store`]); deleting one also clears its data space. Each write is reported
//! as stack and group events ([`crate::stack_events`]) from the units it touched.
//!
//! - [`Stacks::put`] / [`Stacks::delete`]: `PUT` / `DELETE /v1/stacks/{id}`;
//! - [`transfer`]: taking a stack out of Flue and bringing it back
//!   ([`Stacks::export`], [`Stacks::abandon`], [`Stacks::adopt`]).

pub mod transfer;

use std::collections::BTreeMap;
use std::sync::Arc;

use flue_proto::{PutStack, PutStackError, Stack, StackId, StackState, TenantId, Unit};
use nkeys::XKey;
use time::OffsetDateTime;
use tracing::info;

use crate::broker::{Broker, TooLarge};
use crate::events::Events;
use crate::rights::StackRights;
use crate::sealing::SealFailure;
use crate::stack_events::{deleted_stack_events, stack_events};
use crate::store::{self, StackChange, StackWrite, StoreError, UnitChanges, Written};

/// The handles the stack operations need; cheap to clone.
#[derive(Debug, Clone)]
pub struct Stacks {
    /// The tenant.
    pub tenant: TenantId,
    /// Stack heads and units.
    pub stacks: store::Stacks,
    /// Stacks' data spaces (exported, adopted, purged with their stack).
    pub data: store::Data,
    /// The configs an export reads and an adopt writes.
    pub configs: store::Configs,
    /// The deployments an export reads and an adopt writes.
    pub deployments: store::Deployments,
    /// The servers an adopt checks.
    pub servers: store::Servers,
    /// What the broker takes (records' size checks).
    pub broker: Broker,
    /// Stack and group events.
    pub events: Events,
    /// Servers' rights to a stack's data space (a deleted stack's servers leave it).
    pub rights: StackRights,
    /// The gateway's sealing key (hidden values in exports and adopts).
    pub sealing: Arc<XKey>,
}

/// Why a stack operation was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum StackError {
    /// The body of a `PUT` is refused (the message names the field).
    #[error(transparent)]
    Invalid(#[from] PutStackError),
    /// There is no such stack.
    #[error("stack {:?} not found", .0.as_str())]
    NotFound(StackId),
    /// The stack exists (a create, an adopt).
    #[error("stack {:?} exists", .0.as_str())]
    Exists(StackId),
    /// The stack is no longer at the revision the write expected.
    #[error(
        "stack {:?} is at revision {current}, not {}; {again}",
        .stack.as_str(),
        .expected.map_or_else(|| "absent".to_owned(), |e| e.to_string())
    )]
    Mismatch {
        /// The stack.
        stack: StackId,
        /// Its revision.
        current: u64,
        /// The revision the write expected (`None`: none, a create).
        expected: Option<u64>,
        /// What the caller does next (`read it again`, `export it again`).
        again: &'static str,
    },
    /// An adopt's record is not one this gateway can take (the message names the field).
    #[error("{0}")]
    Refused(String),
    /// The stack cannot be abandoned now (an operation queued or running on it, or
    /// `…_IN_PROGRESS`), a config or deployment of an adopt's record is here with
    /// another content, or an export's hidden value cannot be opened; the message says
    /// which.
    #[error("{0}")]
    Conflict(String),
    /// Hidden values could not be sealed or opened.
    #[error(transparent)]
    Seal(#[from] SealFailure),
    /// A record would not fit in one broker message.
    #[error(transparent)]
    TooLarge(#[from] TooLarge),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Something the gateway itself should have done failed (logged, not sent).
    #[error("{0}")]
    Internal(String),
}

impl Stacks {
    /// Stores `body` as stack `id` (created without `expected_revision`, else updated
    /// with compare-and-set) and reports its events; answers the stack as stored (with
    /// `changed_units`, only those units).
    pub async fn put(&self, id: StackId, body: PutStack) -> Result<Stack, StackError> {
        body.validate()?;
        let tenant = &self.tenant;
        let now = OffsetDateTime::now_utc();
        let PutStack {
            expected_revision,
            status,
            mut state,
            changed_units,
        } = body;
        let units = std::mem::take(&mut state.units);
        // The head as it will be stored, the widest revision standing in for the real one.
        let head = Stack {
            id: id.clone(),
            tenant: tenant.clone(),
            revision: u64::MAX,
            created_at: now,
            updated_at: now,
            status,
            state,
        };
        self.broker.fits_json("stack record", &head)?;
        let written_units = units
            .values()
            .chain(changed_units.iter().flat_map(|c| c.values().flatten()));
        for unit in written_units {
            self.broker.fits_json("stack unit", unit)?;
        }
        // The old form's answer holds every unit, as it did.
        let whole = changed_units.is_none().then(|| units.clone());
        let written = match expected_revision {
            None => {
                let mut all: BTreeMap<String, Unit> = units;
                all.extend(
                    changed_units
                        .into_iter()
                        .flatten()
                        .filter_map(|(k, u)| Some((k, u?))),
                );
                let stack = Stack {
                    revision: 0,
                    state: StackState {
                        units: all,
                        ..head.state
                    },
                    ..head
                };
                self.stacks.create(&stack).await?
            }
            Some(expected) => {
                let change = StackChange {
                    updated_at: now,
                    status: head.status,
                    head: head.state,
                    units: match changed_units {
                        Some(changes) => UnitChanges::Some(changes),
                        None => UnitChanges::All(units),
                    },
                };
                self.stacks.update(tenant, &id, expected, change).await?
            }
        };
        let written = written_or_refused(&id, expected_revision, written)?;
        let mut stack = written.stack;
        info!(stack.id = %id, revision = stack.revision, status = %stack.status, units = stack.state.units.len(), "stack stored");
        for event in stack_events(tenant, written.before.as_ref(), &stack) {
            self.events.emit(&event).await;
        }
        if let Some(whole) = whole {
            stack.state.units = whole;
        }
        Ok(stack)
    }

    /// Removes stack `id` (if still at `expected`) and every key of its data space; its
    /// live group members are reported leaving, and a delete operation in progress
    /// completed.
    ///
    /// The record goes first, then the data. A stack found missing still has its data
    /// purged, so that repeating a delete whose purge failed finishes it.
    pub async fn delete(&self, id: StackId, expected: Option<u64>) -> Result<(), StackError> {
        let tenant = &self.tenant;
        let written = self.stacks.delete(tenant, &id, expected).await?;
        if let StackWrite::Mismatch { .. } = written {
            return written_or_refused(&id, expected, written).map(drop);
        }
        if let StackWrite::Missing = written {
            // A delete that stopped before its units went: finish it.
            self.stacks.purge_units(tenant, &id).await?;
        }
        let purged = self.data.purge_stack(tenant, &id).await?;
        let stack = written_or_refused(&id, expected, written)?.stack;
        info!(stack.id = %id, data_keys_purged = purged, "stack deleted");
        let servers = stack.state.units.values().map(|unit| &unit.server_id);
        self.rights.leave(&id, servers).await;
        for event in deleted_stack_events(tenant, &stack) {
            self.events.emit(&event).await;
        }
        Ok(())
    }
}

/// The write done, or why the write (which expected the stack at revision `expected`)
/// was refused.
fn written_or_refused(
    id: &StackId,
    expected: Option<u64>,
    written: StackWrite,
) -> Result<Written, StackError> {
    match written {
        StackWrite::Written(written) => Ok(*written),
        StackWrite::Exists => Err(StackError::Exists(id.clone())),
        StackWrite::Missing => Err(StackError::NotFound(id.clone())),
        StackWrite::Mismatch { current } => Err(StackError::Mismatch {
            stack: id.clone(),
            current,
            expected,
            again: "read it again",
        }),
    }
}
