//! `/v1/servers`: registration (which creates the server's request consumer and mints its
//! agent's credentials), credential rotation, reads and deregistration; registering and
//! deregistering are reported as server events.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use flue_proto::poll::Transport;
use flue_proto::{Deployment, RegisterServer, Registration, Server, ServerId};
use futures_util::StreamExt;
use serde::Deserialize;

use super::error::ApiError;
use super::extract::{JsonBody, PathId, inner_text};
use super::listing::{Listed, Paged, Pages, page_limit};
use crate::servers::ServerError;
use crate::service::Service;
use crate::store::Listing;

impl From<ServerError> for ApiError {
    fn from(e: ServerError) -> Self {
        match e {
            e @ ServerError::NotFound(_) => Self::NotFound(e.to_string()),
            ServerError::OtherTransport(stored) => super::poll::other_transport(&stored),
            e @ ServerError::Busy { .. } => Self::Conflict(e.to_string()),
            e @ ServerError::Revocation(_) => Self::Unavailable(e.to_string()),
            ServerError::Mint(e) => Self::Internal(e.to_string()),
            e @ ServerError::Random => Self::Internal(e.to_string()),
            ServerError::Store(e) => e.into(),
            ServerError::Broker(e) => e.into(),
        }
    }
}

/// `POST /v1/servers`: 201 on first registration (with the agent's credentials, once),
/// 200 with the same registration after; 409 when the server is registered with the
/// other transport. See [`crate::servers::Servers::register`].
#[utoipa::path(
    post,
    operation_id = "register_server",
    path = "/v1/servers",
    tag = "servers",
    summary = "Register a server (admin)",
    request_body = flue_proto::RegisterServer,
    responses(
        (status = 201, description = "Registered: the agent's credentials (or, for `transport: poll`, its metadata URL), shown once.", body = flue_proto::Registration),
        (status = 200, description = "Already registered: the registration without credentials.", body = flue_proto::Registration),
        (status = 409, description = "The server is registered with the other transport.", body = flue_proto::ErrorBody),
        (status = 422, description = "A field is refused (the message names it).", body = flue_proto::ErrorBody),
        (status = 507, description = "The broker's consumer limit is reached (one request consumer per server).", body = flue_proto::ErrorBody),
    )
)]
pub async fn register(
    State(service): State<Service>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<RegisterServer>,
) -> Result<(StatusCode, Json<Registration>), ApiError> {
    if body.transport == Transport::Poll {
        return super::poll::register(&service, body, &headers).await;
    }
    let registered = service.servers.register(body).await?;
    let status = match registered.created {
        true => StatusCode::CREATED,
        false => StatusCode::OK,
    };
    Ok((status, Json(registered.registration)))
}

/// `POST /v1/servers/{id}/credentials`: mints new keys for a registered server, records
/// their public halves in place of the old ones (compare-and-set) and returns the new
/// credentials file, once, as `credentials` of a [`Registration`]. From then on answers
/// signed with the old key are refused; the agent must be restarted with the new file.
#[utoipa::path(
    post,
    operation_id = "rotate_server_credentials",
    path = "/v1/servers/{id}/credentials",
    tag = "servers",
    summary = "New credentials for a server (admin)",
    params(("id" = flue_proto::ServerId, Path, description = "The server's id.")),
    responses(
        (status = 200, description = "The new credentials (or metadata URL), shown once; the old ones stop working.", body = flue_proto::Registration),
        (status = 404, description = "No such server.", body = flue_proto::ErrorBody),
    )
)]
pub async fn rotate_credentials(
    State(service): State<Service>,
    headers: HeaderMap,
    PathId(id): PathId<ServerId>,
) -> Result<Json<Registration>, ApiError> {
    let old = known_server(&service, &id).await?;
    if old.transport == Transport::Poll {
        return super::poll::rotate(&service, &id, &headers).await;
    }
    Ok(Json(service.servers.rotate(old).await?))
}

/// Server records read at once while listing.
const LIST_READS_IN_FLIGHT: usize = 16;

/// Query of `GET /v1/servers`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Servers per page (1..=1000, default 100).
    #[param(value_type = Option<u32>, minimum = 1, maximum = 1000)]
    pub limit: Option<String>,
    /// Where the page starts: the previous page's `flue-next-cursor` header.
    pub cursor: Option<String>,
}

/// `GET /v1/servers[?limit=N&cursor=C]`: one page of the tenant's servers in
/// registration order, each with its presence; the cursor of the next page is in the
/// `flue-next-cursor` header, absent on the last page.
///
/// A page reads `limit` entries of the `flue_server_order` index from the cursor on and
/// their records: O(page), however many servers are registered. A server deregistered
/// while its entry was read is left out.
#[utoipa::path(
    get,
    operation_id = "list_servers",
    path = "/v1/servers",
    tag = "servers",
    summary = "One page of servers, in registration order",
    params(ListQuery),
    responses(
        (status = 200, description = "The page, each server with its presence.", body = Vec<flue_proto::Server>, headers(("flue-next-cursor" = String, description = "The next page's cursor; absent on the last page."))),
    )
)]
pub async fn list(
    State(service): State<Service>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Paged<Server>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::InvalidQuery(inner_text(&e)))?;
    let limit = page_limit(query.limit.as_deref())?;
    let tenant = &service.config.tenant;
    let from = Pages::Servers.start(tenant, query.cursor.as_deref())?;
    let page = service.store.servers.page(tenant, from, limit).await?;
    let store = &service.store;
    let reads: Vec<_> = futures_util::stream::iter(page.items)
        .map(|id| async move { store.servers.get(tenant, &id).await })
        .buffered(LIST_READS_IN_FLIGHT)
        .collect()
        .await;
    let mut listing = Listing::default();
    for read in reads {
        if let Some(server) = listing.skip_undecodable(read)? {
            // Never the polling secret's hash, as every read.
            let mut server = server.public();
            let presence = service.presence.view(tenant, &server.id);
            server.presence = Some(presence.unwrap_or_else(crate::presence::unknown));
            listing.items.push(server);
        }
    }
    Ok(Paged {
        listed: Listed {
            items: listing.items,
            skipped: listing.skipped,
        },
        next: page.next.map(|seq| Pages::Servers.cursor(tenant, seq)),
    })
}

/// `GET /v1/servers/{id}`.
#[utoipa::path(
    get,
    operation_id = "get_server",
    path = "/v1/servers/{id}",
    tag = "servers",
    summary = "Read a server and its presence",
    params(("id" = flue_proto::ServerId, Path, description = "The server's id.")),
    responses(
        (status = 200, description = "The server.", body = flue_proto::Server),
        (status = 404, description = "No such server.", body = flue_proto::ErrorBody),
    )
)]
pub async fn get(
    State(service): State<Service>,
    PathId(id): PathId<ServerId>,
) -> Result<Json<Server>, ApiError> {
    let mut server = known_server(&service, &id).await?.public();
    let presence = service.presence.view(&service.config.tenant, &id);
    server.presence = Some(presence.unwrap_or_else(crate::presence::unknown));
    Ok(Json(server))
}

/// `GET /v1/servers/{id}/deployments[?limit=N&cursor=C]`: one page of the server's
/// deployments, oldest first, redacted (undecodable records left out and counted in the
/// `flue-skipped-records` header); the cursor of the next page in `flue-next-cursor`.
///
/// A page reads `limit` entries of the server's part of the `flue_server_deployments`
/// index from the cursor on and their records: O(page), whatever the server's history.
#[utoipa::path(
    get,
    operation_id = "list_server_deployments",
    path = "/v1/servers/{id}/deployments",
    tag = "servers",
    summary = "One page of a server's deployments",
    params(("id" = flue_proto::ServerId, Path, description = "The server's id."), ListQuery),
    responses(
        (status = 200, description = "The page, in creation order, as summaries.", body = Vec<flue_proto::Deployment>, headers(("flue-next-cursor" = String, description = "The next page's cursor; absent on the last page."))),
        (status = 404, description = "No such server.", body = flue_proto::ErrorBody),
    )
)]
pub async fn deployments(
    State(service): State<Service>,
    PathId(id): PathId<ServerId>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Paged<Deployment>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::InvalidQuery(inner_text(&e)))?;
    let limit = page_limit(query.limit.as_deref())?;
    known_server(&service, &id).await?;
    let tenant = &service.config.tenant;
    let from = Pages::Deployments.start(tenant, query.cursor.as_deref())?;
    let store = &service.store;
    let page = store
        .deployments
        .page(tenant, Some(&id), from, limit)
        .await?;
    let reads: Vec<_> = futures_util::stream::iter(page.items)
        .map(|entry| async move { store.deployments.get(tenant, &entry.id).await })
        .buffered(LIST_READS_IN_FLIGHT)
        .collect()
        .await;
    let mut listing = Listing::default();
    for read in reads {
        if let Some(record) = listing.skip_undecodable(read)? {
            listing.items.push(record.redacted());
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

async fn known_server(service: &Service, id: &ServerId) -> Result<Server, ApiError> {
    service
        .store
        .servers
        .get(&service.config.tenant, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("server {:?} not found", id.as_str())))
}

/// `DELETE /v1/servers/{id}`: removes the server, its request queue and its entries in
/// the deployment index (its deployment records stay); 204, 404 when it is not
/// registered, 409 while it has QUEUED or IN_PROGRESS deployments. See
/// [`crate::servers::Servers::deregister`].
///
/// The work runs on its own task, so a client hanging up cannot stop it half-way.
#[utoipa::path(
    delete,
    operation_id = "deregister_server",
    path = "/v1/servers/{id}",
    tag = "servers",
    summary = "Deregister a server (admin)",
    params(("id" = flue_proto::ServerId, Path, description = "The server's id.")),
    responses(
        (status = 204, description = "Deregistered: its request consumer and broker user are gone."),
        (status = 404, description = "No such server.", body = flue_proto::ErrorBody),
    )
)]
pub async fn deregister(
    State(service): State<Service>,
    PathId(id): PathId<ServerId>,
) -> Result<StatusCode, ApiError> {
    let servers = service.servers.clone();
    service
        .tasks
        .spawn(async move { servers.deregister(&id).await })
        .await??;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> ServerId {
        ServerId::new("s1").expect("id")
    }

    #[test]
    fn a_server_with_unfinished_deployments_is_a_conflict_saying_how_many_to_wait_for() {
        let one: ApiError = ServerError::Busy {
            id: id(),
            unfinished: 1,
        }
        .into();
        assert_eq!(one.status_and_code(), (StatusCode::CONFLICT, "conflict"));
        assert_eq!(
            one.to_string(),
            "server \"s1\" has 1 QUEUED or IN_PROGRESS deployment; wait for it to finish (or time out) first"
        );
        let two: ApiError = ServerError::Busy {
            id: id(),
            unfinished: 2,
        }
        .into();
        assert!(
            two.to_string()
                .contains("2 QUEUED or IN_PROGRESS deployments; wait for them")
        );
    }

    #[test]
    fn an_unknown_server_is_a_404_and_a_refused_revocation_a_503_asking_to_retry() {
        let missing: ApiError = ServerError::NotFound(id()).into();
        assert_eq!(
            missing.status_and_code(),
            (StatusCode::NOT_FOUND, "not_found")
        );
        assert_eq!(missing.to_string(), "server \"s1\" not found");
        let revocation: ApiError = ServerError::Revocation(id()).into();
        assert_eq!(
            revocation.status_and_code(),
            (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
        );
        assert!(revocation.to_string().contains("retry later"));
    }
}
