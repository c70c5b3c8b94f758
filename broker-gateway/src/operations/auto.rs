//! The `converge: auto` policy: when presence finds a server rebuilt under the same id
//! (its agent back on a new, empty ledger: `server.rebuilt`), each of its stacks with that
//! policy gets a converge operation re-applying its units on that server, dependencies
//! first, run by the engine workers like any other (with its `stack.operation_*` events).
//! It follows data as any converge does: units on other servers whose inputs read outputs
//! it changes are re-run after them.
//!
//! A stack busy with another operation is tried again every [`RETRY_EVERY`], for at most
//! [`MAX_TRIES`]; a stack with the `manual` policy (the default) is left alone: the
//! event says what happened, and `flue stack converge` re-applies by hand. With several
//! gateways, only the one whose presence write reported the rebuild submits. The
//! operation's record says why it runs (`StackOperation.cause`).

use std::sync::Arc;
use std::time::Duration;

use flue_proto::operation::{OperationKind, SubmitOperation};
use flue_proto::{ConvergePolicy, ServerId, StackId, TenantId};
use nkeys::XKey;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use super::Operations;
use super::submit::SubmitError;
use crate::broker::Broker;
use crate::store;

/// What the policy reads and submits with; cheap to clone.
#[derive(Debug, Clone)]
pub struct AutoHandles {
    /// The tenant.
    pub tenant: TenantId,
    /// Servers' records (a rebuilt server's stacks).
    pub servers: store::Servers,
    /// Stacks' records (their converge policy and units).
    pub stacks: store::Stacks,
    /// What the broker takes (the operation's size check).
    pub broker: Broker,
    /// The gateways' sealing key (hidden parameters).
    pub sealing: Arc<XKey>,
    /// Tracker of the runtime's tasks.
    pub tasks: TaskTracker,
}

/// How long a busy stack waits before its converge is submitted again.
pub const RETRY_EVERY: Duration = Duration::from_secs(5);
/// How many times a converge is submitted to a busy stack before giving up.
pub const MAX_TRIES: u32 = 120;

/// Converges the `auto` stacks of each server `rebuilt` names, until cancelled.
pub async fn run(
    service: AutoHandles,
    operations: Operations,
    mut rebuilt: UnboundedReceiver<ServerId>,
    cancel: CancellationToken,
) {
    loop {
        let server = tokio::select! {
            () = cancel.cancelled() => return,
            next = rebuilt.recv() => match next {
                Some(server) => server,
                None => return,
            },
        };
        let stacks = match service.servers.get(&service.tenant, &server).await {
            Ok(Some(s)) => s.stacks,
            Ok(None) => continue,
            Err(e) => {
                warn!(server.id = %server, error = %crate::error::chain(&e), "cannot read a rebuilt server; its stacks are not converged");
                continue;
            }
        };
        for stack in stacks {
            let service = service.clone();
            let operations = operations.clone();
            let server = server.clone();
            let cancel = cancel.clone();
            service.tasks.clone().spawn(async move {
                converge_stack(&service, &operations, &stack, &server, &cancel).await;
            });
        }
    }
}

/// Submits a converge of `server`'s units of `stack` if its policy is `auto`, trying
/// again while the stack is busy.
async fn converge_stack(
    service: &AutoHandles,
    operations: &Operations,
    stack: &StackId,
    server: &ServerId,
    cancel: &CancellationToken,
) {
    let tenant = &service.tenant;
    for _ in 0..MAX_TRIES {
        let current = match service.stacks.get(tenant, stack).await {
            Ok(Some(s)) => s,
            Ok(None) => return,
            Err(e) => {
                warn!(stack.id = %stack, error = %crate::error::chain(&e), "cannot read a stack of a rebuilt server");
                return;
            }
        };
        if current.state.converge != ConvergePolicy::Auto {
            return;
        }
        let units: Vec<String> = current
            .state
            .units
            .iter()
            .filter(|(_, u)| &u.server_id == server && (u.baseline.is_some() || u.last.is_some()))
            .map(|(k, _)| k.clone())
            .collect();
        if units.is_empty() {
            return;
        }
        let mut body = SubmitOperation::new(OperationKind::Converge);
        body.units = units.clone();
        match super::submit::submit(
            operations,
            &service.broker,
            &service.sealing,
            stack,
            Some(&current),
            body,
            Some(cause(server, &units)),
        )
        .await
        {
            Ok(op) => {
                info!(stack.id = %stack, server.id = %server, operation.id = %op.id, units = units.len(), "rebuilt server: converge submitted (policy auto)");
                return;
            }
            Err(SubmitError::Busy { .. }) => {}
            Err(e) => {
                warn!(stack.id = %stack, server.id = %server, error = %crate::error::chain(&e), "rebuilt server: converge refused");
                return;
            }
        }
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(RETRY_EVERY) => {}
        }
    }
    warn!(stack.id = %stack, server.id = %server, "rebuilt server: the stack stayed busy; converge it by hand (flue stack converge)");
}

/// Most unit keys a converge's cause names (the rest counted): the record stays small
/// whatever the stack's size.
const CAUSE_UNITS: usize = 20;

/// Why the converge runs, as its operation record says: the rebuilt server and the units
/// it re-applies there.
fn cause(server: &ServerId, units: &[String]) -> String {
    let mut named = units
        .iter()
        .take(CAUSE_UNITS)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if units.len() > CAUSE_UNITS {
        named.push_str(&format!(" and {} more", units.len() - CAUSE_UNITS));
    }
    format!(
        "automatic (converge: auto): server {server} was rebuilt (its agent came back with a new, empty ledger); re-applying its units {named}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_names_the_server_and_at_most_twenty_units() {
        let server: ServerId = "web1".parse().expect("id");
        let few = cause(&server, &["base".to_owned(), "app".to_owned()]);
        assert!(
            few.contains("server web1 was rebuilt") && few.ends_with("units base, app"),
            "{few}"
        );
        let many: Vec<String> = (0..50).map(|i| format!("u{i}")).collect();
        let shown = cause(&server, &many);
        assert!(shown.ends_with("u19 and 30 more"), "{shown}");
        assert!(!shown.contains("u20"), "{shown}");
    }
}
