//! `/v1/stacks`: the records an engine keeps while it drives a stack; reads here, writes
//! and deletes by [`crate::stacks::Stacks`].

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use flue_proto::{PutStack, Stack, StackId, StackUnit};
use serde::Deserialize;

use super::error::ApiError;
use super::extract::{JsonBody, PathId, inner_text};
use super::listing::{Listed, Paged, Pages, page_limit};
use crate::service::Service;
use crate::stacks::StackError;

/// Query of the paginated stack listings.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    /// Page size (1–1000, default 100).
    #[param(value_type = Option<u32>, minimum = 1, maximum = 1000)]
    pub limit: Option<String>,
    /// Where the page starts: the `flue-next-cursor` header of the previous page.
    pub cursor: Option<String>,
}

/// `GET /v1/stacks[?limit=N&cursor=C]`: one page of the tenant's stacks sorted by id,
/// each its head (status, operation, parameters, outputs, …; `state.units` empty: see
/// [`units`]); the cursor of the next page in the `flue-next-cursor` header, absent on
/// the last. Undecodable records are left out and counted in `flue-skipped-records`.
#[utoipa::path(
    get,
    operation_id = "list_stacks",
    path = "/v1/stacks",
    tag = "stacks",
    summary = "One page of stacks, by id",
    params(PageQuery),
    responses(
        (status = 200, description = "Each stack's head (`state.units` empty: see `/v1/stacks/{id}/units`).", body = Vec<flue_proto::Stack>, headers(("flue-next-cursor" = String, description = "The next page's cursor; absent on the last page."))),
    )
)]
pub async fn list(
    State(service): State<Service>,
    query: Result<Query<PageQuery>, QueryRejection>,
) -> Result<Paged<Stack>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::InvalidQuery(inner_text(&e)))?;
    let limit = page_limit(query.limit.as_deref())?;
    let tenant = &service.config.tenant;
    let after = Pages::Stacks.after(tenant, query.cursor.as_deref())?;
    let (listing, more) = service
        .store
        .stacks
        .heads_page(tenant, after.as_deref(), limit)
        .await?;
    let next = listing
        .items
        .last()
        .filter(|_| more)
        .map(|s| Pages::Stacks.cursor_after(tenant, s.id.as_str()));
    Ok(Paged {
        listed: Listed {
            items: listing.items,
            skipped: listing.skipped,
        },
        next,
    })
}

/// `GET /v1/stacks/{id}`: the whole stack, every unit included.
#[utoipa::path(
    get,
    operation_id = "get_stack",
    path = "/v1/stacks/{id}",
    tag = "stacks",
    summary = "Read a whole stack, every unit included",
    params(("id" = flue_proto::StackId, Path, description = "The stack's id.")),
    responses(
        (status = 200, description = "The stack.", body = flue_proto::Stack),
        (status = 404, description = "No such stack.", body = flue_proto::ErrorBody),
    )
)]
pub async fn get(
    State(service): State<Service>,
    PathId(id): PathId<StackId>,
) -> Result<Json<Stack>, ApiError> {
    service
        .store
        .stacks
        .get(&service.config.tenant, &id)
        .await?
        .map(Json)
        .ok_or_else(|| not_found(&id))
}

/// `GET /v1/stacks/{id}/units[?limit=N&cursor=C]`: one page of the stack's units
/// sorted by key, each `{key, unit}`; the cursor of the next page in the
/// `flue-next-cursor` header. 404 when there is no such stack.
#[utoipa::path(
    get,
    operation_id = "list_stack_units",
    path = "/v1/stacks/{id}/units",
    tag = "stacks",
    summary = "One page of a stack's units, by key",
    params(("id" = flue_proto::StackId, Path, description = "The stack's id."), PageQuery),
    responses(
        (status = 200, description = "Each `{key, unit}`.", body = Vec<flue_proto::StackUnit>, headers(("flue-next-cursor" = String, description = "The next page's cursor; absent on the last page."))),
        (status = 404, description = "No such stack.", body = flue_proto::ErrorBody),
    )
)]
pub async fn units(
    State(service): State<Service>,
    PathId(id): PathId<StackId>,
    query: Result<Query<PageQuery>, QueryRejection>,
) -> Result<Paged<StackUnit>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::InvalidQuery(inner_text(&e)))?;
    let limit = page_limit(query.limit.as_deref())?;
    let tenant = &service.config.tenant;
    let after = Pages::StackUnits.after(tenant, query.cursor.as_deref())?;
    let (page, more) = service
        .store
        .stacks
        .units_page(tenant, &id, after.as_deref(), limit)
        .await?
        .ok_or_else(|| not_found(&id))?;
    let next = page
        .last()
        .filter(|_| more)
        .map(|(key, _)| Pages::StackUnits.cursor_after(tenant, key));
    let items = page
        .into_iter()
        .map(|(key, unit)| StackUnit { key, unit })
        .collect();
    Ok(Paged {
        listed: Listed { items, skipped: 0 },
        next,
    })
}

/// `PUT /v1/stacks/{id}`: without `expected_revision`, creates the stack (409
/// `conflict` when it exists); with it, replaces the stack's status and head and the
/// units named in `changed_units` (or, without that, the whole unit set given in
/// `state.units`) if its revision is still that one (404 when it is gone, 409
/// `revision_mismatch` when it moved on). A `state` nested deeper than
/// [`flue_proto::limits::MAX_STATE_DEPTH`] or units given both ways is a 422
/// `invalid_input`; a head or a unit that would not fit in one broker message a 413
/// `too_large`. Answers 200 with the stack as stored, new revision included, with the
/// units of `changed_units` (or all of `state.units`), once the events reporting the
/// change ([`stack_events`]) are out.
///
/// The work runs on its own task, so a client hanging up cannot separate a write from
/// its events.
#[utoipa::path(
    put,
    operation_id = "put_stack",
    path = "/v1/stacks/{id}",
    tag = "stacks",
    summary = "Store a stack's status and state (engine)",
    params(("id" = flue_proto::StackId, Path, description = "The stack's id.")),
    request_body = flue_proto::PutStack,
    responses(
        (status = 200, description = "The stack as stored (with `changed_units`, only those units).", body = flue_proto::Stack),
        (status = 404, description = "`expected_revision` given and no such stack.", body = flue_proto::ErrorBody),
        (status = 409, description = "The stack exists (create), or is no longer at `expected_revision`.", body = flue_proto::ErrorBody),
        (status = 413, description = "The record would not fit in one broker message.", body = flue_proto::ErrorBody),
        (status = 422, description = "A field is refused (the message names it).", body = flue_proto::ErrorBody),
    )
)]
pub async fn put(
    State(service): State<Service>,
    PathId(id): PathId<StackId>,
    JsonBody(body): JsonBody<PutStack>,
) -> Result<Json<Stack>, ApiError> {
    let tasks = service.tasks.clone();
    let stack = tasks
        .spawn(async move { service.stacks.put(id, body).await })
        .await??;
    Ok(Json(stack))
}

/// Query of `DELETE /v1/stacks/{id}`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
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
#[utoipa::path(
    delete,
    operation_id = "delete_stack",
    path = "/v1/stacks/{id}",
    tag = "stacks",
    summary = "Remove a stack and its data space (engine)",
    params(("id" = flue_proto::StackId, Path, description = "The stack's id."), DeleteQuery),
    responses(
        (status = 204, description = "Removed; its live group members are reported leaving."),
        (status = 404, description = "No such stack.", body = flue_proto::ErrorBody),
        (status = 409, description = "The stack is no longer at `expected_revision`.", body = flue_proto::ErrorBody),
        (status = 422, description = "`expected_revision` is not a whole number.", body = flue_proto::ErrorBody),
    )
)]
pub async fn delete(
    State(service): State<Service>,
    PathId(id): PathId<StackId>,
    query: Result<Query<DeleteQuery>, QueryRejection>,
) -> Result<StatusCode, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::InvalidInput(inner_text(&e)))?;
    let tasks = service.tasks.clone();
    tasks
        .spawn(async move { service.stacks.delete(id, query.expected_revision).await })
        .await??;
    Ok(StatusCode::NO_CONTENT)
}

fn not_found(id: &StackId) -> ApiError {
    StackError::NotFound(id.clone()).into()
}
