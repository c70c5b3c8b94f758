//! `/v1/deployments`: create (queue for the agent) and read, with an optional long poll.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use flue_proto::{
    CreateDeployment, Deployment, DeploymentId, DeploymentStatus, IdError, ServerId, StackId,
};
use futures_util::StreamExt;
use serde::Deserialize;

use super::error::ApiError;
use super::extract::{JsonBody, PathId, PathIdKind, inner_text};
use super::listing::{Listed, Paged, Pages, page_limit};
use crate::config::MAX_WAIT_SECS;
use crate::deployments::{AcceptError, Created};
use crate::error::chain;
use crate::record::DeploymentRecord;
use crate::rights::RightsError;
use crate::service::Service;
use crate::store::{Listing, StoreError, deployment_key};
use crate::waiters::{ReadFailed, Seen, Waiters};

/// `POST /v1/deployments`: records the deployment (QUEUED), publishes its request and
/// answers 202 ([`crate::deployments::Accept::accept`] says what is checked). The work runs on its own task
/// so that a client hanging up half-way cannot leave a recorded deployment unpublished.
///
/// 200 with the `skip_if_unchanged_from` deployment when nothing changed; 422
/// `invalid_input` naming a refused field; 404 for a missing config, server or referenced
/// deployment; 409 for an id taken by a different request; 413 `too_large` when the record
/// or the request would not fit in one broker message; 503 `unavailable` when the record's
/// write is not confirmed (retry with the same id).
#[utoipa::path(
    post,
    operation_id = "create_deployment",
    path = "/v1/deployments",
    tag = "deployments",
    summary = "Deploy a config to a server (engine)",
    request_body = flue_proto::CreateDeployment,
    responses(
        (status = 202, description = "Accepted: queued for the server's agent.", body = flue_proto::Deployment),
        (status = 200, description = "Nothing changed since `skip_if_unchanged_from`: that deployment.", body = flue_proto::Deployment),
        (status = 404, description = "A missing config, server or referenced deployment.", body = flue_proto::ErrorBody),
        (status = 409, description = "The id is taken by a different request.", body = flue_proto::ErrorBody),
        (status = 413, description = "The record or the request would not fit in one broker message.", body = flue_proto::ErrorBody),
        (status = 422, description = "A field is refused (the message names it).", body = flue_proto::ErrorBody),
    )
)]
pub async fn create(
    State(service): State<Service>,
    JsonBody(body): JsonBody<CreateDeployment>,
) -> Result<(StatusCode, Json<Deployment>), ApiError> {
    let accept = service.accept.clone();
    let created = service
        .tasks
        .spawn(async move { accept.accept(body).await })
        .await??;
    Ok(match created {
        Created::Accepted(record) => (StatusCode::ACCEPTED, Json(record.redacted())),
        Created::Unchanged(record) => (StatusCode::OK, Json(record.redacted())),
    })
}

impl From<AcceptError> for ApiError {
    fn from(e: AcceptError) -> Self {
        match e {
            AcceptError::Invalid(text) => Self::InvalidInput(text),
            AcceptError::Limit(e) => Self::Limit(e),
            AcceptError::TooLarge(e) => Self::TooLarge(e),
            AcceptError::NotFound(text) => Self::NotFound(text),
            AcceptError::Conflict(text) => Self::Conflict(text),
            e @ AcceptError::NotConfirmed(_) => Self::Unavailable(e.to_string()),
            AcceptError::Sealing(e) => e.into(),
            AcceptError::Rights(RightsError::Mint(text)) => {
                Self::Internal(format!("cannot mint the agent's user JWT: {text}"))
            }
            AcceptError::Rights(e @ RightsError::ServerGone(_)) => Self::NotFound(e.to_string()),
            AcceptError::Rights(RightsError::Store(e)) | AcceptError::Store(e) => e.into(),
        }
    }
}

/// Query of `GET /v1/deployments/{id}`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct WaitQuery {
    /// Seconds to wait for a change (0..=60).
    #[param(minimum = 0, maximum = 60)]
    pub wait_secs: Option<u64>,
    /// Wait until the status differs from this one (default: until it is terminal).
    pub after_status: Option<DeploymentStatus>,
}

/// `GET /v1/deployments/{id}[?wait_secs=N&after_status=S]`.
///
/// With `wait_secs`, answers as soon as the status differs from `after_status` (or,
/// without it, is terminal), or when the time is up, with the record as it then is.
/// Waiting shares the gateway's one watch of the deployments bucket ([`Waiters`]): the
/// waiter is registered before the record is read, so no change is missed, and a long
/// poll costs the broker nothing while it waits. The read is shared too: polls of a key
/// already waited on read nothing, and the others' keys are read in batches, so polls
/// starting together are never one broker call each (10,000 at once: none answered 503).
#[utoipa::path(
    get,
    operation_id = "get_deployment",
    path = "/v1/deployments/{id}",
    tag = "deployments",
    summary = "Read a deployment, optionally waiting for a change",
    params(("id" = flue_proto::DeploymentId, Path, description = "The deployment's id."), WaitQuery),
    responses(
        (status = 200, description = "The deployment (redacted) as it is, or as it became within `wait_secs`.", body = flue_proto::Deployment),
        (status = 404, description = "No such deployment.", body = flue_proto::ErrorBody),
        (status = 422, description = "`wait_secs` is out of bounds.", body = flue_proto::ErrorBody),
    )
)]
pub async fn get(
    State(service): State<Service>,
    Extension(waiters): Extension<Waiters>,
    PathId(id): PathId<DeploymentId>,
    query: Result<Query<WaitQuery>, QueryRejection>,
) -> Result<Json<Deployment>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::InvalidInput(inner_text(&e)))?;
    let wait = query.wait_secs.unwrap_or(0);
    if wait > MAX_WAIT_SECS {
        return Err(ApiError::InvalidInput(format!(
            "wait_secs must be at most {MAX_WAIT_SECS}, got {wait}"
        )));
    }
    let done = |status: DeploymentStatus| match query.after_status {
        Some(after) => status != after,
        None => status.is_terminal(),
    };
    let tenant = &service.config.tenant;
    let not_found = || ApiError::NotFound(format!("deployment {:?} not found", id.as_str()));
    if wait == 0 {
        let record = service
            .store
            .deployments
            .get(tenant, &id)
            .await?
            .ok_or_else(not_found)?;
        return Ok(Json(record.redacted()));
    }

    let deadline = tokio::time::Instant::now() + Duration::from_secs(wait);
    let mut waiter = waiters.wait_for(deployment_key(tenant, &id));
    let first = tokio::select! {
        biased;
        first = waiter.first() => first.map_err(read_failed)?,
        // The shared reader stops with the runtime: a key it had not read yet is read
        // here, once, so that the poll still ends with the record.
        () = service.shutdown.cancelled() => service
            .store
            .deployments
            .get_at(tenant, &id)
            .await?
            .map(|(record, revision)| Seen { revision, record: Arc::new(record) }),
    };
    let mut latest = first.ok_or_else(not_found)?;
    while !done(latest.record.deployment.status) {
        let seen = tokio::select! {
            () = service.shutdown.cancelled() => break,
            () = tokio::time::sleep_until(deadline) => break,
            seen = waiter.changed() => seen,
        };
        // The slot keeps the newest; a waiter may still see its first read after a write.
        if seen.revision > latest.revision {
            latest = seen;
        }
    }
    Ok(Json(latest.record.redacted()))
}

/// A long poll's first read failed (logged where it did): 503 when the broker call
/// failed or ran out of time, 500 when the record cannot be decoded, as a read of its own.
fn read_failed(e: ReadFailed) -> ApiError {
    match e.cause() {
        StoreError::Decode { .. } => ApiError::Internal(format!(
            "deployment record cannot be decoded: {}",
            chain(&e)
        )),
        _ => ApiError::Unavailable("the broker did not complete the read; retry later".into()),
    }
}

/// Deployment records read at once while listing.
const LIST_READS_IN_FLIGHT: usize = 16;

/// Query of `GET /v1/deployments`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Only this server's deployments (empty: any server).
    #[param(pattern = "^[A-Za-z0-9_-]{0,64}$")]
    pub server: Option<String>,
    /// Only this stack's deployments (empty: any stack).
    #[param(pattern = "^[A-Za-z0-9_-]{0,64}$")]
    pub stack: Option<String>,
    /// Only deployments in this status (`QUEUED`, `IN_PROGRESS`, `COMPLETE`, `FAILED`).
    #[param(pattern = "^(QUEUED|IN_PROGRESS|COMPLETE|FAILED)?$")]
    pub status: Option<String>,
    /// Index entries per page (1..=1000, default 100).
    #[param(value_type = Option<u32>, minimum = 1, maximum = 1000)]
    pub limit: Option<String>,
    /// Where the page starts: the previous page's `flue-next-cursor` header.
    pub cursor: Option<String>,
    /// `output`: whole deployments, with outputs, stdout and stderr.
    #[param(pattern = "^(output)?$")]
    pub include: Option<String>,
}

/// `GET /v1/deployments[?limit=N&cursor=C&server=S&stack=K&status=X&include=output]`:
/// one page of the tenant's deployments in creation order, redacted, as summaries
/// (no outputs, stdout or stderr) unless `include=output`. The cursor of the next page
/// is in the `flue-next-cursor` header, absent on the last page. A bad parameter is a
/// 400 `invalid_query` naming it.
///
/// A page reads `limit` entries of the `flue_server_deployments` index from the
/// cursor on (only `server`'s with `server`) and their records: O(page), whatever the
/// history. `stack` and `status` filter the records read, so such a page may hold fewer
/// than `limit` items, even none, and still have a next one. A record that cannot be
/// decoded is left out (logged), and the number left out is in the
/// `flue-skipped-records` header.
#[utoipa::path(
    get,
    operation_id = "list_deployments",
    path = "/v1/deployments",
    tag = "deployments",
    summary = "One page of deployments, in creation order",
    params(ListQuery),
    responses(
        (status = 200, description = "The page, redacted, as summaries unless `include=output`.", body = Vec<flue_proto::Deployment>, headers(("flue-next-cursor" = String, description = "The next page's cursor; absent on the last page."))),
    )
)]
pub async fn list(
    State(service): State<Service>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Paged<Deployment>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::InvalidQuery(inner_text(&e)))?;
    let limit = page_limit(query.limit.as_deref())?;
    let server = query_id::<ServerId>("server", query.server.as_deref())?;
    let stack = query_id::<StackId>("stack", query.stack.as_deref())?;
    let status = query_status(query.status.as_deref())?;
    let with_output = match query.include.as_deref() {
        None | Some("") => false,
        Some("output") => true,
        Some(other) => {
            return Err(ApiError::InvalidQuery(format!(
                "query parameter \"include\": only \"output\" is known, got {other:?}"
            )));
        }
    };
    let tenant = &service.config.tenant;
    let from = Pages::Deployments.start(tenant, query.cursor.as_deref())?;
    let page = service
        .store
        .deployments
        .page(tenant, server.as_ref(), from, limit)
        .await?;
    let store = &service.store;
    let reads: Vec<_> = futures_util::stream::iter(page.items)
        .map(|entry| async move { store.deployments.get(tenant, &entry.id).await })
        .buffered(LIST_READS_IN_FLIGHT)
        .collect()
        .await;
    let wanted = |r: &DeploymentRecord| {
        stack
            .as_ref()
            .is_none_or(|s| r.deployment.stack_id.as_ref() == Some(s))
            && status.is_none_or(|s| r.deployment.status == s)
    };
    let mut listing = Listing::default();
    for read in reads {
        // A record never written (a create that failed after its index entry) is not there.
        if let Some(record) = listing.skip_undecodable(read)?.filter(wanted) {
            listing.items.push(if with_output {
                record.redacted()
            } else {
                record.summary()
            });
        }
    }
    Ok(Paged {
        listed: Listed {
            items: listing.items,
            skipped: listing.skipped,
        },
        next: page.next.map(|seq| Pages::Deployments.cursor(tenant, seq)),
    })
}

/// The `status` parameter: absent or empty is any status.
fn query_status(value: Option<&str>) -> Result<Option<DeploymentStatus>, ApiError> {
    match value {
        None | Some("") => Ok(None),
        Some(raw) => DeploymentStatus::from_wire(raw).map(Some).ok_or_else(|| {
            ApiError::InvalidQuery(format!(
                "query parameter \"status\": must be QUEUED, IN_PROGRESS, COMPLETE or FAILED, got {raw:?}"
            ))
        }),
    }
}

/// An id given as query parameter `name`: absent or empty is none.
fn query_id<T: PathIdKind>(name: &str, value: Option<&str>) -> Result<Option<T>, ApiError> {
    match value {
        None | Some("") => Ok(None),
        Some(raw) => raw.parse().map(Some).map_err(|e: IdError| {
            ApiError::InvalidQuery(format!(
                "query parameter {name:?}: invalid {} {raw:?}: {e}",
                T::WHAT
            ))
        }),
    }
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;

    #[test]
    fn an_unconfirmed_write_is_a_503_asking_to_retry_with_the_same_id() {
        let id = DeploymentId::new("d1").expect("id");
        let e: ApiError = AcceptError::NotConfirmed(id).into();
        assert_eq!(
            e.status_and_code(),
            (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
        );
        assert_eq!(
            e.to_string(),
            "deployment \"d1\" may or may not have been recorded; retry with the same id"
        );
    }

    #[test]
    fn a_failed_jwt_mint_is_internal_and_a_server_gone_meanwhile_a_404() {
        let mint: ApiError = AcceptError::Rights(RightsError::Mint("no key".into())).into();
        assert_eq!(
            mint.status_and_code(),
            (StatusCode::INTERNAL_SERVER_ERROR, "internal")
        );
        let gone: ApiError =
            AcceptError::Rights(RightsError::ServerGone(ServerId::new("s1").expect("id"))).into();
        assert_eq!(gone.status_and_code(), (StatusCode::NOT_FOUND, "not_found"));
        assert_eq!(gone.to_string(), "server \"s1\" not found");
    }
}
