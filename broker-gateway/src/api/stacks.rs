//! `/v1/stacks`: the records an engine keeps while it drives a stack, written with
//! compare-and-set on their revision; deleting one also clears its data space. Each
//! write is reported as stack and group events ([`crate::stack_events`]).

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use flue_proto::{PutStack, Stack, StackId};
use serde::Deserialize;
use time::OffsetDateTime;
use tracing::info;

use super::error::ApiError;
use super::extract::{JsonBody, PathId, inner_text};
use super::listing::Listed;
use crate::service::Service;
use crate::stack_events::{deleted_stack_events, stack_events};
use crate::store::StackWrite;

/// `GET /v1/stacks`: every stack of the tenant, sorted by id (undecodable records left
/// out and counted in the `flue-skipped-records` header).
pub async fn list(State(service): State<Service>) -> Result<Listed<Stack>, ApiError> {
    let listing = service.store.stacks(&service.config.tenant).await?;
    Ok(Listed {
        items: listing.items,
        skipped: listing.skipped,
    })
}

/// `GET /v1/stacks/{id}`.
pub async fn get(
    State(service): State<Service>,
    PathId(id): PathId<StackId>,
) -> Result<Json<Stack>, ApiError> {
    service
        .store
        .stack(&service.config.tenant, &id)
        .await?
        .map(Json)
        .ok_or_else(|| not_found(&id))
}

/// `PUT /v1/stacks/{id}`: without `expected_revision`, creates the stack (409
/// `conflict` when it exists); with it, replaces the stack's status and state if its
/// revision is still that one (404 when it is gone, 409 `revision_mismatch` when it
/// moved on). A `state` nested deeper than [`flue_proto::limits::MAX_STATE_DEPTH`] is a
/// 422 `invalid_input`; a record that would not fit in one broker message a 413
/// `too_large`. Answers 200 with the stack as stored, new revision included, once the
/// events reporting the change ([`stack_events`]) are out.
///
/// The work runs on its own task, so a client hanging up cannot separate a write from
/// its events.
pub async fn put(
    State(service): State<Service>,
    PathId(id): PathId<StackId>,
    JsonBody(body): JsonBody<PutStack>,
) -> Result<Json<Stack>, ApiError> {
    let tasks = service.tasks.clone();
    let stack = tasks.spawn(store_and_report(service, id, body)).await??;
    Ok(Json(stack))
}

async fn store_and_report(
    service: Service,
    id: StackId,
    body: PutStack,
) -> Result<Stack, ApiError> {
    body.validate()?;
    let tenant = &service.config.tenant;
    let now = OffsetDateTime::now_utc();
    // The record as it will be stored, the widest revision standing in for the real one.
    let measured = Stack {
        id: id.clone(),
        tenant: tenant.clone(),
        revision: u64::MAX,
        created_at: now,
        updated_at: now,
        status: body.status,
        state: body.state,
    };
    service.broker.fits_json("stack record", &measured)?;
    let Stack { status, state, .. } = measured;
    let body = PutStack {
        status,
        state,
        ..body
    };
    let mut replaced = None;
    let written = match body.expected_revision {
        None => {
            let stack = Stack {
                id: id.clone(),
                tenant: tenant.clone(),
                revision: 0,
                created_at: now,
                updated_at: now,
                status: body.status,
                state: body.state,
            };
            service.store.create_stack(&stack).await?
        }
        Some(expected) => {
            service
                .store
                .update_stack(tenant, &id, expected, |stack| {
                    replaced = Some(stack.clone());
                    stack.updated_at = now;
                    stack.status = body.status;
                    stack.state = body.state;
                })
                .await?
        }
    };
    let stack = written_or_refused(&id, body.expected_revision, written)?;
    info!(stack.id = %id, revision = stack.revision, status = %stack.status, "stack stored");
    for event in stack_events(tenant, replaced.as_ref(), &stack) {
        service.events.emit(&event).await;
    }
    Ok(stack)
}

/// Query of `DELETE /v1/stacks/{id}`.
#[derive(Debug, Deserialize)]
pub struct DeleteQuery {
    /// Delete only if the stack is still at this revision.
    pub expected_revision: Option<u64>,
}

/// `DELETE /v1/stacks/{id}[?expected_revision=N]`: removes the stack and every key of
/// its data space; 204, 404 when there is no such stack, 409 `revision_mismatch`. Its
/// live group members are reported leaving, and a delete operation in progress
/// completed.
///
/// The record goes first, then the data. A stack found missing still has its data
/// purged, so that repeating a delete whose purge failed finishes it. The work runs
/// on its own task, so a client hanging up cannot stop it half-way.
pub async fn delete(
    State(service): State<Service>,
    PathId(id): PathId<StackId>,
    query: Result<Query<DeleteQuery>, QueryRejection>,
) -> Result<StatusCode, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::InvalidInput(inner_text(&e)))?;
    let tasks = service.tasks.clone();
    tasks
        .spawn(delete_with_data(service, id, query.expected_revision))
        .await??;
    Ok(StatusCode::NO_CONTENT)
}

async fn delete_with_data(
    service: Service,
    id: StackId,
    expected: Option<u64>,
) -> Result<(), ApiError> {
    let tenant = &service.config.tenant;
    let written = service.store.delete_stack(tenant, &id, expected).await?;
    if let StackWrite::Mismatch { .. } = written {
        return written_or_refused(&id, expected, written).map(drop);
    }
    let purged = service.store.purge_stack_data(tenant, &id).await?;
    let stack = written_or_refused(&id, expected, written)?;
    info!(stack.id = %id, data_keys_purged = purged, "stack deleted");
    let servers = stack.state.units.values().map(|unit| &unit.server_id);
    crate::rights::leave_stack(&service, &id, servers).await;
    for event in deleted_stack_events(tenant, &stack) {
        service.events.emit(&event).await;
    }
    Ok(())
}

/// The stored stack, or the API error saying why the write (which expected the stack
/// at revision `expected`) was refused.
fn written_or_refused(
    id: &StackId,
    expected: Option<u64>,
    written: StackWrite,
) -> Result<Stack, ApiError> {
    match written {
        StackWrite::Written(stack) => Ok(*stack),
        StackWrite::Exists => Err(ApiError::Conflict(format!(
            "stack {:?} exists",
            id.as_str()
        ))),
        StackWrite::Missing => Err(not_found(id)),
        StackWrite::Mismatch { current } => Err(ApiError::RevisionMismatch(format!(
            "stack {:?} is at revision {current}, not {}; read it again",
            id.as_str(),
            expected.map_or_else(|| "absent".to_owned(), |e| e.to_string())
        ))),
    }
}

fn not_found(id: &StackId) -> ApiError {
    ApiError::NotFound(format!("stack {:?} not found", id.as_str()))
}
