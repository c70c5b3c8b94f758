//! Where a deployment may take values from: the rule that keeps a hidden value inside
//! its stack.
//!
//! `inputs_from`, `input_refs` and `skip_if_unchanged_from` let the gateway use another
//! deployment's values, hidden ones included, without a client reading them. Without a
//! rule, a client that may create deployments could send a hidden value to a hook of its
//! own (a server it controls) or confirm a guess of one (`skip_if_unchanged_from`
//! compares hidden values). So:
//!
//! - every referenced deployment belongs to the new deployment's own stack (a deployment
//!   outside any stack references only deployments outside any stack);
//! - `inputs_from` stays on the referenced deployment's server (it re-runs that server's
//!   inputs);
//! - `input_refs` of a stack deployment go only to a server of that stack: its record
//!   (`flue_stacks`, written by the engine before any of its deployments) lists the server.
//!
//! `skip_if_unchanged_from` needs nothing more: it never matches on another server.

use flue_proto::{CreateDeployment, Deployment, TenantId};

use super::AcceptError;
use crate::store::Stacks;

/// Checks that the new deployment `body` of `tenant` may use `from`'s values through
/// `field`; `stacks` tells which servers a stack has.
pub async fn check(
    (tenant, stacks): (&TenantId, &Stacks),
    body: &CreateDeployment,
    field: &str,
    from: &Deployment,
) -> Result<(), AcceptError> {
    if from.stack_id != body.stack_id {
        let theirs = match &from.stack_id {
            Some(stack) => format!("stack {:?}", stack.as_str()),
            None => "no stack".to_owned(),
        };
        let ours = match &body.stack_id {
            Some(stack) => format!("stack {:?}", stack.as_str()),
            None => "no stack".to_owned(),
        };
        return Err(AcceptError::Invalid(format!(
            "{field}: deployment {:?} belongs to {theirs}, this one to {ours}; a deployment may only take values from deployments of its own stack",
            from.id.as_str()
        )));
    }
    if field == "inputs_from" && from.server_id != body.server_id {
        return Err(AcceptError::Invalid(format!(
            "inputs_from: deployment {:?} is of server {:?}, not {:?}; inputs are re-used on their own server only",
            from.id.as_str(),
            from.server_id.as_str(),
            body.server_id.as_str()
        )));
    }
    if field.starts_with("input_refs")
        && let Some(stack) = &body.stack_id
    {
        let record = stacks.get(tenant, stack).await?;
        let member = record.is_some_and(|s| {
            s.state
                .units
                .values()
                .any(|unit| unit.server_id == body.server_id)
        });
        if !member {
            return Err(AcceptError::Invalid(format!(
                "{field}: server {:?} is not a server of stack {:?}; a stack's outputs go only to its own servers",
                body.server_id.as_str(),
                stack.as_str()
            )));
        }
    }
    Ok(())
}
