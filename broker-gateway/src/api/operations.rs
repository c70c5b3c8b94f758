//! `/v1/stacks/{id}/operations`: stack operations submitted over HTTP and run by the
//! engine workers ([`crate::operations`]).

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use flue_proto::operation::{StackOperation, SubmitOperation};
use flue_proto::{DeploymentId, StackId};

use super::error::ApiError;
use super::extract::{JsonBody, PathId, inner_text};
use super::listing::{Listed, Paged, Pages, page_limit};
use crate::operations::{Operations, submit};
use crate::service::Service;

/// `POST /v1/stacks/{id}/operations`: checks the operation as `flue stack validate`
/// does (422 `invalid_input` naming the field), claims the stack (409 while another
/// operation is queued or running on it) and queues it: 202 with the operation and its
/// `Location`. Delete, suspend, resume and action need the stack to exist (404).
///
/// The work runs on its own task, so a client hanging up cannot leave a claim without
/// its queued message.
#[utoipa::path(
    post,
    operation_id = "submit_stack_operation",
    path = "/v1/stacks/{id}/operations",
    tag = "operations",
    summary = "Queue a stack operation for the engine workers (engine, admin)",
    params(("id" = flue_proto::StackId, Path, description = "The stack's id.")),
    request_body = flue_proto::operation::SubmitOperation,
    responses(
        (status = 202, description = "Queued.", body = flue_proto::operation::StackOperation, headers(("Location" = String, description = "Where the operation can be read."))),
        (status = 404, description = "No such stack (for an operation other than create).", body = flue_proto::ErrorBody),
        (status = 409, description = "Another operation is queued or running on the stack, or the stack exists (create).", body = flue_proto::ErrorBody),
        (status = 413, description = "The operation would not fit in one broker message.", body = flue_proto::ErrorBody),
        (status = 422, description = "A field is refused (the message names it).", body = flue_proto::ErrorBody),
    )
)]
pub async fn submit(
    State(service): State<Service>,
    Extension(operations): Extension<Operations>,
    PathId(id): PathId<StackId>,
    JsonBody(body): JsonBody<SubmitOperation>,
) -> Result<Response, ApiError> {
    let tasks = service.tasks.clone();
    let record = tasks
        .spawn(async move {
            let stack = service
                .store
                .stacks
                .get(&service.config.tenant, &id)
                .await?;
            let queued = submit::submit(
                &operations,
                &service.broker,
                &service.keys.sealing,
                &id,
                stack.as_ref(),
                body,
                None,
            )
            .await?;
            Ok::<_, ApiError>(queued)
        })
        .await??;
    let location = format!("/v1/stacks/{}/operations/{}", record.stack, record.id);
    Ok((
        StatusCode::ACCEPTED,
        [(header::LOCATION, location)],
        Json(record),
    )
        .into_response())
}

/// `GET /v1/stacks/{id}/operations/{op}`: where the operation stands (queued, running
/// with its worker and lease expiry, succeeded, failed with the reason).
#[utoipa::path(
    get,
    operation_id = "get_stack_operation",
    path = "/v1/stacks/{id}/operations/{op}",
    tag = "operations",
    summary = "Where an operation stands",
    params(("id" = flue_proto::StackId, Path, description = "The stack's id."), ("op" = flue_proto::DeploymentId, Path, description = "The operation's id.")),
    responses(
        (status = 200, description = "Queued, running (worker, lease expiry), succeeded, or failed with the reason.", body = flue_proto::operation::StackOperation),
        (status = 404, description = "No such operation of this stack.", body = flue_proto::ErrorBody),
    )
)]
pub async fn get(
    Extension(operations): Extension<Operations>,
    Path((id, op)): Path<(String, String)>,
) -> Result<Json<StackOperation>, ApiError> {
    let stack: StackId = id
        .parse()
        .map_err(|e: flue_proto::IdError| ApiError::InvalidId {
            what: "stack id",
            value: id.clone(),
            reason: e.to_string(),
        })?;
    // Operation ids are made like deployment ids: the same rule keeps them subject-safe.
    let op_id: DeploymentId = op
        .parse()
        .map_err(|e: flue_proto::IdError| ApiError::InvalidId {
            what: "operation id",
            value: op.clone(),
            reason: e.to_string(),
        })?;
    operations
        .settled(&stack, op_id.as_str())
        .await?
        .map(Json)
        .ok_or_else(|| {
            ApiError::NotFound(format!(
                "operation {:?} of stack {:?} not found",
                op_id.as_str(),
                stack.as_str()
            ))
        })
}

/// The query of `GET /v1/stacks/{id}/operations` (text, so a bad value is a 400 naming it).
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Operations per page (1..=1000, default 100).
    #[param(value_type = Option<u32>, minimum = 1, maximum = 1000)]
    pub limit: Option<String>,
    /// Where the page starts: the previous page's `flue-next-cursor` header.
    pub cursor: Option<String>,
}

/// `GET /v1/stacks/{id}/operations[?limit=N&cursor=C]`: one page of the stack's
/// operations, newest first (each as `GET …/operations/{op}` reads it); the cursor of
/// the next page is in the `flue-next-cursor` header. A stack with no operation (or none
/// at all) lists nothing: operations outlive the stacks they deleted.
#[utoipa::path(
    get,
    operation_id = "list_stack_operations",
    path = "/v1/stacks/{id}/operations",
    tag = "operations",
    summary = "One page of a stack's operations, newest first",
    params(("id" = flue_proto::StackId, Path, description = "The stack's id."), ListQuery),
    responses(
        (status = 200, description = "The page (empty for a stack with none).", body = Vec<flue_proto::operation::StackOperation>, headers(("flue-next-cursor" = String, description = "The next page's cursor; absent on the last page."))),
    )
)]
pub async fn list(
    Extension(operations): Extension<Operations>,
    PathId(id): PathId<StackId>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Paged<StackOperation>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::InvalidQuery(inner_text(&e)))?;
    let limit = page_limit(query.limit.as_deref())?;
    let tenant = operations.tenant().clone();
    // The cursor is the submission time the next page is older than; none is "now".
    let older_than = match query.cursor.as_deref().filter(|c| !c.is_empty()) {
        None => u64::MAX,
        cursor => Pages::Operations.start(&tenant, cursor)?,
    };
    let history = operations.history(&id).await?;
    let mut items: Vec<StackOperation> = history
        .operations
        .into_iter()
        .filter(|op| submitted_nanos(op) < older_than)
        .take(limit + 1)
        .collect();
    let next = if items.len() > limit {
        items.truncate(limit);
        items
            .last()
            .map(|last| Pages::Operations.cursor(&tenant, submitted_nanos(last)))
    } else {
        None
    };
    Ok(Paged {
        listed: Listed {
            items,
            skipped: history.skipped,
        },
        next,
    })
}

/// When `op` was submitted, in nanoseconds since the epoch (0 before it, never after
/// the year 2554).
fn submitted_nanos(op: &StackOperation) -> u64 {
    u64::try_from(op.submitted_at.unix_timestamp_nanos()).unwrap_or(0)
}
