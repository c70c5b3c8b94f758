//! `/v1/servers`: registration (which creates the server's request consumer) and reads.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use flue_proto::{
    AgentBootstrap, Deployment, RegisterServer, Registration, Server, ServerId, subject,
};
use time::OffsetDateTime;
use tracing::info;

use super::error::ApiError;
use super::extract::{JsonBody, PathId};
use crate::service::Service;

/// `POST /v1/servers`: 201 on first registration, 200 with the same registration after.
///
/// The consumer is ensured before the server is recorded, so every listed server has
/// its queue; registering again ensures it again.
pub async fn register(
    State(service): State<Service>,
    JsonBody(body): JsonBody<RegisterServer>,
) -> Result<(StatusCode, Json<Registration>), ApiError> {
    let tenant = &service.config.tenant;
    let consumer = service
        .broker
        .ensure_request_consumer(tenant, &body.id)
        .await?;
    let server = Server {
        id: body.id,
        tenant: tenant.clone(),
        name: body.name,
        created_at: OffsetDateTime::now_utc(),
        presence: None,
    };
    let (status, server) = match service.store.create_server(&server).await? {
        None => {
            info!(server.id = %server.id, consumer, "server registered");
            (StatusCode::CREATED, server)
        }
        Some(stored) => (StatusCode::OK, stored),
    };
    let agent = AgentBootstrap {
        nats_url: service.config.agent_nats_url(),
        tenant: tenant.clone(),
        server_id: server.id.clone(),
        request_stream: subject::REQUEST_STREAM.to_owned(),
        request_consumer: consumer,
        response_subject: subject::response(tenant, &server.id),
        inbox_prefix: subject::agent_inbox_prefix(tenant, &server.id),
    };
    Ok((status, Json(Registration { server, agent })))
}

/// `GET /v1/servers`: every server of the tenant, oldest first.
pub async fn list(State(service): State<Service>) -> Result<Json<Vec<Server>>, ApiError> {
    Ok(Json(service.store.servers(&service.config.tenant).await?))
}

/// `GET /v1/servers/{id}`.
pub async fn get(
    State(service): State<Service>,
    PathId(id): PathId<ServerId>,
) -> Result<Json<Server>, ApiError> {
    Ok(Json(known_server(&service, &id).await?))
}

/// `GET /v1/servers/{id}/deployments`: the server's deployments, oldest first.
pub async fn deployments(
    State(service): State<Service>,
    PathId(id): PathId<ServerId>,
) -> Result<Json<Vec<Deployment>>, ApiError> {
    known_server(&service, &id).await?;
    let records = service
        .store
        .server_deployments(&service.config.tenant, &id)
        .await?;
    Ok(Json(records.iter().map(|r| r.redacted()).collect()))
}

async fn known_server(service: &Service, id: &ServerId) -> Result<Server, ApiError> {
    service
        .store
        .server(&service.config.tenant, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("server {:?} not found", id.as_str())))
}

/// `DELETE /v1/servers/{id}` (work in progress).
pub async fn deregister(
    State(_service): State<Service>,
    PathId(_id): PathId<ServerId>,
) -> Result<StatusCode, ApiError> {
    Err(ApiError::NotFound("not yet".into()))
}
