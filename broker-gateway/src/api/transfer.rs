//! `GET /v1/stacks/{id}/export`, `POST /v1/stacks/{id}/abandon`, `POST /v1/stacks/{id}/adopt`:
//! taking a stack out of Flue and bringing it back, without running anything
//! ([`crate::stacks::transfer`] says how). The work of an abandon or adopt runs on its own
//! task, so a client hanging up cannot stop it half-way.

use axum::Json;
use axum::extract::{Extension, State};
use axum::http::StatusCode;
use flue_proto::stack_export::{AbandonStack, StackExport};
use flue_proto::{Stack, StackId};

use super::error::ApiError;
use super::extract::{JsonBody, PathId};
use crate::operations::Operations;
use crate::service::Service;

/// `GET /v1/stacks/{id}/export` (engine, admin): the stack's whole record, the configs
/// and deployments its units name, and its data space; hidden values in export
/// envelopes. 404 when there is no such stack.
#[utoipa::path(
    get,
    operation_id = "export_stack",
    path = "/v1/stacks/{id}/export",
    tag = "stacks",
    summary = "A stack's whole record, hidden values sealed (engine, admin)",
    params(("id" = flue_proto::StackId, Path, description = "The stack's id.")),
    responses(
        (status = 200, description = "The record (`flue.stack-export/1`).", body = flue_proto::stack_export::StackExport),
        (status = 404, description = "No such stack.", body = flue_proto::ErrorBody),
    )
)]
pub async fn export(
    State(service): State<Service>,
    PathId(id): PathId<StackId>,
) -> Result<Json<StackExport>, ApiError> {
    Ok(Json(service.stacks.export(&id).await?))
}

/// `POST /v1/stacks/{id}/abandon` (engine, admin) `{expected_revision}`: forgets the
/// stack without running any hook: its record, its units and its data space go, its
/// servers lose the rights to its data keys and keep running what they run; reported as
/// `stack.abandoned`. 204; 404 when there is no such stack; 409 while an operation is
/// queued or running on it, or the stack is `…_IN_PROGRESS`; 409 `revision_mismatch`
/// when it is no longer at `expected_revision` (export it again).
#[utoipa::path(
    post,
    operation_id = "abandon_stack",
    path = "/v1/stacks/{id}/abandon",
    tag = "stacks",
    summary = "Forget a stack without running any hook (engine, admin)",
    params(("id" = flue_proto::StackId, Path, description = "The stack's id.")),
    request_body = flue_proto::stack_export::AbandonStack,
    responses(
        (status = 204, description = "Forgotten: record, units and data space gone; `stack.abandoned` reported."),
        (status = 404, description = "No such stack.", body = flue_proto::ErrorBody),
        (status = 409, description = "An operation is queued or running, the stack is `…_IN_PROGRESS`, or it is no longer at `expected_revision`.", body = flue_proto::ErrorBody),
    )
)]
pub async fn abandon(
    State(service): State<Service>,
    Extension(operations): Extension<Operations>,
    PathId(id): PathId<StackId>,
    JsonBody(body): JsonBody<AbandonStack>,
) -> Result<StatusCode, ApiError> {
    let tasks = service.tasks.clone();
    tasks
        .spawn(async move {
            service
                .stacks
                .abandon(&operations, &id, body.expected_revision)
                .await
        })
        .await??;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /v1/stacks/{id}/adopt` (engine, admin) with a [`StackExport`]: recreates the
/// stack without running anything: its configs and deployments where this gateway does
/// not have them, its data space, then its record; reported as `stack.adopted`. 201
/// with the stack. 409 when the stack exists, or a config or deployment of the same id
/// differs; 422 naming the field when the record is not one this gateway can take (other
/// stack, format, unregistered server, work in flight, a hidden value of another tenant
/// or another gateway).
#[utoipa::path(
    post,
    operation_id = "adopt_stack",
    path = "/v1/stacks/{id}/adopt",
    tag = "stacks",
    summary = "Recreate a stack from an exported record, running nothing (engine, admin)",
    params(("id" = flue_proto::StackId, Path, description = "The stack's id.")),
    request_body = flue_proto::stack_export::StackExport,
    responses(
        (status = 201, description = "The adopted stack; `stack.adopted` reported.", body = flue_proto::Stack),
        (status = 409, description = "The stack exists, or a config or deployment of the same id differs.", body = flue_proto::ErrorBody),
        (status = 413, description = "The request is larger than the gateway's body limit.", body = flue_proto::ErrorBody),
        (status = 422, description = "The record is not one this gateway can take (the message names the field).", body = flue_proto::ErrorBody),
    )
)]
pub async fn adopt(
    State(service): State<Service>,
    PathId(id): PathId<StackId>,
    JsonBody(body): JsonBody<StackExport>,
) -> Result<(StatusCode, Json<Stack>), ApiError> {
    let tasks = service.tasks.clone();
    let stack = tasks
        .spawn(async move { service.stacks.adopt(&id, body).await })
        .await??;
    Ok((StatusCode::CREATED, Json(stack)))
}
