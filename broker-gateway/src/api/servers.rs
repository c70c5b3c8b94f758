//! `/v1/servers`: registration (which creates the server's request consumer and mints its
//! agent's credentials), credential rotation, reads and deregistration; registering and
//! deregistering are reported as server events.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use flue_proto::event::ServerEventData;
use flue_proto::poll::Transport;
use flue_proto::{
    AgentBootstrap, CloudEvent, Deployment, EventType, RegisterServer, Registration, Server,
    ServerId, subject,
};
use futures_util::StreamExt;
use serde::Deserialize;
use time::OffsetDateTime;
use tracing::{info, warn};

use super::error::ApiError;
use super::extract::{JsonBody, PathId, inner_text};
use super::listing::{Listed, Paged, Pages, page_limit};
use crate::credentials;
use crate::service::Service;
use crate::store::Listing;

/// `POST /v1/servers`: 201 on first registration, 200 with the same registration after.
///
/// The consumer is ensured before the server is recorded, so every listed server has
/// its queue; registering again ensures it again.
pub async fn register(
    State(service): State<Service>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<RegisterServer>,
) -> Result<(StatusCode, Json<Registration>), ApiError> {
    if body.transport == Transport::Poll {
        return super::poll::register(&service, body, &headers).await;
    }
    let tenant = &service.config.tenant;
    let consumer = service
        .broker
        .ensure_request_consumer(tenant, &body.id)
        .await?;
    let minted = credentials::mint(&service, &body.id, &[])?;
    let server = Server {
        id: body.id,
        tenant: tenant.clone(),
        name: body.name,
        created_at: OffsetDateTime::now_utc(),
        keys: Some(minted.keys),
        stacks: Vec::new(),
        agent_jwt: None,
        presence: None,
        transport: Transport::Nats,
        poll_secret_sha256: None,
    };
    // Only the registration that recorded the server hands out the credentials whose
    // public keys it recorded; a repeated registration gets none.
    let mut credentials = None;
    let (status, server) = match service.store.create_server(&server).await? {
        None => {
            credentials = Some(minted.text);
            // A server registered again after a deregistration has new keys.
            service.signers.forget(tenant, &server.id);
            info!(server.id = %server.id, consumer, "server registered");
            service
                .events
                .emit(&server_event(&server, EventType::ServerRegistered))
                .await;
            (StatusCode::CREATED, server)
        }
        Some(stored) if stored.transport == Transport::Nats => (StatusCode::OK, stored),
        Some(stored) => return Err(super::poll::other_transport(&stored)),
    };
    service
        .presence
        .note_registered(tenant, &server.id, &server.name);
    let agent = AgentBootstrap {
        nats_url: service.config.agent_nats_url(),
        tenant: tenant.clone(),
        server_id: server.id.clone(),
        request_stream: subject::REQUEST_STREAM.to_owned(),
        request_consumer: consumer,
        response_subject: subject::response(tenant, &server.id),
        inbox_prefix: subject::agent_inbox_prefix(tenant, &server.id),
    };
    Ok((
        status,
        Json(Registration {
            server: server.public(),
            agent: Some(agent),
            poll: None,
            credentials,
        }),
    ))
}

/// `POST /v1/servers/{id}/credentials`: mints new keys for a registered server, records
/// their public halves in place of the old ones (compare-and-set) and returns the new
/// credentials file, once, as `credentials` of a [`Registration`]. From then on answers
/// signed with the old key are refused; the agent must be restarted with the new file.
pub async fn rotate_credentials(
    State(service): State<Service>,
    headers: HeaderMap,
    PathId(id): PathId<ServerId>,
) -> Result<Json<Registration>, ApiError> {
    let tenant = &service.config.tenant;
    let old = known_server(&service, &id).await?;
    if old.transport == Transport::Poll {
        return super::poll::rotate(&service, &id, &headers).await;
    }
    let minted = credentials::mint(&service, &id, &old.stacks)?;
    let server = service
        .store
        .replace_server_keys(tenant, &id, &minted.keys)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("server {:?} not found", id.as_str())))?;
    service.signers.forget(tenant, &id);
    // The old user is revoked only once the new keys are recorded: a failure before
    // leaves the agent running with the keys the gateway still trusts.
    revoke_user(&service, &old).await?;
    info!(server.id = %id, "server credentials rotated");
    let agent = AgentBootstrap {
        nats_url: service.config.agent_nats_url(),
        tenant: tenant.clone(),
        server_id: id.clone(),
        request_stream: subject::REQUEST_STREAM.to_owned(),
        request_consumer: subject::request_consumer(tenant, &id),
        response_subject: subject::response(tenant, &id),
        inbox_prefix: subject::agent_inbox_prefix(tenant, &id),
    };
    Ok(Json(Registration {
        server: server.public(),
        agent: Some(agent),
        poll: None,
        credentials: Some(minted.text),
    }))
}

/// Server records read at once while listing.
const LIST_READS_IN_FLIGHT: usize = 16;

/// Query of `GET /v1/servers`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Servers per page (1..=1000, default 100).
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
pub async fn list(
    State(service): State<Service>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Paged<Server>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::InvalidQuery(inner_text(&e)))?;
    let limit = page_limit(query.limit.as_deref())?;
    let tenant = &service.config.tenant;
    let from = Pages::Servers.start(tenant, query.cursor.as_deref())?;
    let page = service.store.server_page(tenant, from, limit).await?;
    let store = &service.store;
    let reads: Vec<_> = futures_util::stream::iter(page.items)
        .map(|id| async move { store.server(tenant, &id).await })
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
        .deployment_page(tenant, Some(&id), from, limit)
        .await?;
    let reads: Vec<_> = futures_util::stream::iter(page.items)
        .map(|entry| async move { store.deployment(tenant, &entry.id).await })
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
        .server(&service.config.tenant, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("server {:?} not found", id.as_str())))
}

/// `DELETE /v1/servers/{id}`: removes the server, its request queue and its entries in
/// the deployment index (its deployment records stay); 204, 404 when it is not
/// registered, 409 while it has QUEUED or IN_PROGRESS deployments. Registering it again
/// later starts afresh (a new `created_at`, an empty queue).
///
/// The server record goes last, so a removal interrupted half-way can be repeated. The
/// work runs on its own task, so a client hanging up cannot stop it half-way.
pub async fn deregister(
    State(service): State<Service>,
    PathId(id): PathId<ServerId>,
) -> Result<StatusCode, ApiError> {
    let tasks = service.tasks.clone();
    tasks.spawn(remove(service, id)).await??;
    Ok(StatusCode::NO_CONTENT)
}

async fn remove(service: Service, id: ServerId) -> Result<(), ApiError> {
    let tenant = &service.config.tenant;
    let server = known_server(&service, &id).await?;
    let unfinished = service
        .store
        .server_deployments(tenant, &id)
        .await?
        .iter()
        .filter(|r| !r.deployment.status.is_terminal())
        .count();
    if unfinished > 0 {
        return Err(ApiError::Conflict(format!(
            "server {:?} has {unfinished} QUEUED or IN_PROGRESS deployment{}; wait for {} to finish (or time out) first",
            id.as_str(),
            if unfinished == 1 { "" } else { "s" },
            if unfinished == 1 { "it" } else { "them" },
        )));
    }
    service.broker.remove_request_queue(tenant, &id).await?;
    // Revoked before the record goes: an interrupted removal is repeated with the key
    // still known (revoking twice is harmless).
    revoke_user(&service, &server).await?;
    service.store.delete_server(tenant, &id).await?;
    service.presence.forget(tenant, &id).await;
    info!(server.id = %id, "server deregistered");
    service
        .events
        .emit(&server_event(&server, EventType::ServerDeregistered))
        .await;
    Ok(())
}

/// Revokes `server`'s broker user (its agent is disconnected and its credentials refused
/// by the broker from now on); nothing to do with `--insecure-dev-broker` or for a server
/// recorded without keys.
async fn revoke_user(service: &Service, server: &Server) -> Result<(), ApiError> {
    let (Some(users), Some(keys)) = (&service.users, &server.keys) else {
        return Ok(());
    };
    users.revoke_agent(&keys.signing).await.map_err(|e| {
        warn!(server.id = %server.id, error = %crate::error::chain(&e), "cannot revoke a server's broker user");
        ApiError::Unavailable(format!(
            "the broker did not take the revocation of server {:?}'s credentials; retry later",
            server.id.as_str()
        ))
    })?;
    info!(server.id = %server.id, "server's broker user revoked");
    Ok(())
}

/// `server.registered` or `server.deregistered` of one registration of `server`: the
/// id names its `created_at`, so a later registration of the same id is another fact.
pub(crate) fn server_event(server: &Server, ty: EventType) -> CloudEvent {
    let millis = server.created_at.unix_timestamp_nanos() / 1_000_000;
    let data = ServerEventData {
        server_id: server.id.clone(),
        name: server.name.clone(),
        agent_instance: None,
        reason: None,
        last_seen: None,
    };
    CloudEvent::new(
        ty,
        &server.tenant,
        format!("server:{}:{}:{millis}", server.id, ty.name()),
        format!("servers/{}", server.id),
        &data,
    )
    .server(&server.id)
}
