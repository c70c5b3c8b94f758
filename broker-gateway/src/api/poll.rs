//! Polling servers over HTTP (see [`crate::poll`]): their registration and rotation
//! (called from [`super::servers`]), and the two secret URLs, which take no bearer
//! token: `GET /heat/{tenant}/servers/{id}/metadata/{secret}` (os-collect-config's
//! `request` collector, HEAD included) and `PUT /heat/{tenant}/deployments/{id}/signal/
//! {secret}` (`heat-config-notify`).
//!
//! Every refusal of a secret URL is the same 404, whatever was wrong (tenant, id, secret,
//! a server that does not poll), so that nothing confirms what exists. The secrets never
//! reach a log: request spans show these paths with the secret cut off
//! ([`flue_proto::poll::redact_path`]).

use std::collections::{BTreeMap, HashMap, HashSet};

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use flue_proto::poll::{
    self, Metadata, OsCollectConfig, RequestCollector, SignalAck, SignalBody, Transport,
};
use flue_proto::{
    AgentMessage, Config as StoredConfig, ConfigId, DeploymentId, PROTOCOL_VERSION, RegisterServer,
    Registration, Server, ServerId,
};
use time::OffsetDateTime;
use tracing::{info, warn};

use super::error::ApiError;
use super::extract::JsonBody;
use crate::error::chain;
use crate::poll::{item, secret_matches, signal, signal_matches};
use crate::record::DeploymentRecord;
use crate::responses::apply_polled;
use crate::sealing::{self, seal_at_rest};
use crate::service::Service;

/// The one answer to a secret URL that is wrong in any way.
fn not_found() -> ApiError {
    ApiError::NotFound("not found".to_owned())
}

/// Where servers reach this gateway: `--public-url`, else the scheme this gateway serves
/// and the `Host` the caller used.
fn base_url(service: &Service, headers: &HeaderMap) -> Result<String, ApiError> {
    if let Some(url) = &service.config.public_url {
        return Ok(url.trim_end_matches('/').to_owned());
    }
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| !h.is_empty() && !h.contains(['/', ' ', '@']))
        .ok_or_else(|| {
            ApiError::InvalidInput(
                "no usable Host header to build the metadata URL from; start the gateway with --public-url".to_owned(),
            )
        })?;
    let scheme = if service.config.tls_cert.is_some() {
        "https"
    } else {
        "http"
    };
    Ok(format!("{scheme}://{host}"))
}

/// `POST /v1/servers` with `"transport": "poll"`: records the server with the hash of a
/// new metadata URL secret and hands the URL out, once (201). Registering it again
/// answers 200 with the record and no URL; a server registered with the other transport
/// is a 409. See [`crate::servers::Servers::register_polled`].
pub async fn register(
    service: &Service,
    body: RegisterServer,
    headers: &HeaderMap,
) -> Result<(StatusCode, Json<Registration>), ApiError> {
    let base = base_url(service, headers)?;
    let registered = service.servers.register_polled(body, &base).await?;
    let status = match registered.created {
        true => StatusCode::CREATED,
        false => StatusCode::OK,
    };
    Ok((status, Json(registered.registration)))
}

/// The 409 for registering `stored` again with the other transport.
pub fn other_transport(stored: &Server) -> ApiError {
    ApiError::Conflict(format!(
        "server {:?} is registered with transport {:?}; deregister it first to change it",
        stored.id.as_str(),
        stored.transport.as_str()
    ))
}

/// `POST /v1/servers/{id}/credentials` of a polling server: a new metadata URL secret
/// replaces the old one (compare-and-set), which stops working at once. Pending signal
/// URLs stay valid: they do not depend on it.
pub async fn rotate(
    service: &Service,
    id: &ServerId,
    headers: &HeaderMap,
) -> Result<Json<Registration>, ApiError> {
    let base = base_url(service, headers)?;
    Ok(Json(service.servers.rotate_polled(id, &base).await?))
}

/// `GET /heat/{tenant}/servers/{id}/metadata/{secret}`: the server's deployments that
/// wait for it (published, not ended), oldest first, as Heat metadata; hidden values
/// opened, for this URL only. The first read of a deployment reports it `delivered`.
#[utoipa::path(
    get,
    operation_id = "heat_metadata",
    path = "/heat/{tenant}/servers/{id}/metadata/{secret}",
    tag = "heat",
    summary = "A polling server's deployments, as Heat metadata",
    params(("tenant" = flue_proto::TenantId, Path, description = "The tenant."), ("id" = flue_proto::ServerId, Path, description = "The server's id."), ("secret" = String, Path, description = "The URL's secret, from the registration.")),
    responses(
        (status = 200, description = "The deployments waiting for the server, oldest first, hidden values opened for this URL only.", body = flue_proto::poll::Metadata, headers(("Cache-Control" = String, description = "`no-store`."))),
        (status = 404, description = "Not a valid metadata URL.", body = flue_proto::ErrorBody),
    )
)]
pub async fn metadata(
    State(service): State<Service>,
    Path((_tenant, id, secret)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let tenant = &service.config.tenant;
    let id: ServerId = id.parse().map_err(|_| not_found())?;
    let server = service
        .store
        .servers
        .get(tenant, &id)
        .await?
        .filter(|s| s.transport == Transport::Poll)
        .filter(|s| secret_matches(s.poll_secret_sha256.as_deref(), &secret))
        .ok_or_else(not_found)?;
    let base = base_url(&service, &headers)?;
    // Only deployments still pending can be waiting: the pending index keeps a poll's
    // record reads to those, however long the server's history.
    let pending: HashSet<DeploymentId> = service
        .store
        .deployments
        .pending_ids(tenant)
        .await?
        .into_iter()
        .collect();
    let records = service
        .store
        .deployments
        .of_server_among(tenant, &server.id, |id| pending.contains(id))
        .await?
        .items;
    let mut configs: HashMap<ConfigId, StoredConfig> = HashMap::new();
    let mut deployments = Vec::new();
    for record in records.iter().filter(|r| waiting(r)) {
        let d = &record.deployment;
        let config = match configs.get(&d.config_id) {
            Some(config) => config,
            None => {
                let Some(config) = service.store.configs.get(tenant, &d.config_id).await? else {
                    warn!(deployment.id = %d.id, config.id = %d.config_id, "polled deployment's config is missing; left out");
                    continue;
                };
                configs
                    .entry(d.config_id.clone())
                    .or_insert(without_hidden_defaults(config))
            }
        };
        let values = opened(&service, record)?;
        let signal_url = format!(
            "{base}{}",
            poll::signal_path(tenant, &d.id, &signal_secret(&service, &d.id))
        );
        deployments.push(item::item(d, config, &values, &signal_url));
        if d.delivered_at.is_none() {
            delivered(&service, &server.id, record).await;
        }
    }
    let body = Metadata {
        deployments,
        os_collect_config: OsCollectConfig {
            collectors: vec!["request".to_owned()],
            request: RequestCollector {
                metadata_url: format!("{base}{}", poll::metadata_path(tenant, &id, &secret)),
            },
        },
    };
    let mut response = Json(body).into_response();
    // It carries hidden values: no cache may keep it.
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

/// Whether a polled deployment is for its server to run now.
fn waiting(record: &DeploymentRecord) -> bool {
    record.polled && record.request_published && !record.deployment.status.is_terminal()
}

/// A config as an item shows it: a hidden input's default is among the deployment's
/// values already (sealed, see [`sealing::for_server`]).
fn without_hidden_defaults(mut config: StoredConfig) -> StoredConfig {
    for input in config.inputs.iter_mut().filter(|i| i.hidden) {
        input.default = None;
    }
    config
}

fn opened(
    service: &Service,
    record: &DeploymentRecord,
) -> Result<BTreeMap<String, serde_json::Value>, ApiError> {
    sealing::opened_inputs(record, &service.keys.sealing).map_err(|e| {
        // Never the value: the failure names the input only.
        ApiError::Internal(format!(
            "cannot open a hidden input of deployment {}: {}",
            record.deployment.id,
            chain(&e)
        ))
    })
}

fn signal_secret(service: &Service, id: &DeploymentId) -> String {
    crate::poll::signal_secret(&service.keys.token_secret, &service.config.tenant, id)
}

/// Reports that the server read `record` (once: later reads change nothing). A failure
/// only loses the `delivered` step; the metadata is served all the same.
async fn delivered(service: &Service, server: &ServerId, record: &DeploymentRecord) {
    let d = &record.deployment;
    let message = AgentMessage::Delivered {
        v: PROTOCOL_VERSION,
        deployment_id: d.id.clone(),
        at: OffsetDateTime::now_utc(),
        request_digest: record.request_digest.clone(),
    };
    if let Err(e) = apply_polled(&service.answers, (&service.config.tenant, server), &message).await
    {
        warn!(error = %chain(&e), deployment.id = %d.id, "cannot record that a polling server read its deployment");
    }
}

/// `PUT` (or `POST`) `/heat/{tenant}/deployments/{id}/signal/{secret}`: the result of a
/// polled deployment, applied through the agents' answer path, exactly once. 200 with
/// the status; 409 when the deployment had already ended (nothing changes, no event);
/// 404 for anything but a valid signal URL of a polled deployment.
#[utoipa::path(
    method(put, post),
    operation_id = "heat_signal",
    path = "/heat/{tenant}/deployments/{id}/signal/{secret}",
    tag = "heat",
    summary = "A polled deployment's result (PUT or POST)",
    params(("tenant" = flue_proto::TenantId, Path, description = "The tenant."), ("id" = flue_proto::DeploymentId, Path, description = "The deployment's id."), ("secret" = String, Path, description = "The URL's secret, from the metadata.")),
    request_body = flue_proto::poll::SignalBody,
    responses(
        (status = 200, description = "Applied, exactly once.", body = flue_proto::poll::SignalAck),
        (status = 404, description = "Not a valid signal URL of a polled deployment.", body = flue_proto::ErrorBody),
        (status = 409, description = "The deployment had already ended (nothing changes).", body = flue_proto::ErrorBody),
    )
)]
pub async fn signal(
    State(service): State<Service>,
    Path((_tenant, id, secret)): Path<(String, String, String)>,
    JsonBody(body): JsonBody<SignalBody>,
) -> Result<(StatusCode, Json<SignalAck>), ApiError> {
    let tenant = &service.config.tenant;
    let id: DeploymentId = id.parse().map_err(|_| not_found())?;
    if !signal_matches(&service.keys.token_secret, tenant, &id, &secret) {
        return Err(not_found());
    }
    let record = service
        .store
        .deployments
        .get(tenant, &id)
        .await?
        .filter(|r| r.polled)
        .ok_or_else(not_found)?;
    let d = &record.deployment;
    if d.status.is_terminal() {
        return Err(ApiError::Conflict(format!(
            "deployment {:?} already ended ({}); this signal was ignored",
            id.as_str(),
            d.status
        )));
    }
    let config = service
        .store
        .configs
        .get(tenant, &d.config_id)
        .await?
        .ok_or_else(|| {
            ApiError::Internal(format!("config {} of a deployment is missing", d.config_id))
        })?;
    let mut result = signal::result(body, &config, OffsetDateTime::now_utc());
    seal_at_rest(
        &mut result.outputs,
        &record.hidden_outputs,
        &service.keys.sealing,
    )?;
    let finished_at = result.finished_at;
    let message = AgentMessage::Finished {
        v: PROTOCOL_VERSION,
        deployment_id: id.clone(),
        result,
        request_digest: record.request_digest.clone(),
    };
    apply_polled(&service.answers, (tenant, &d.server_id), &message)
        .await
        .map_err(|e| {
            warn!(error = %chain(&e), deployment.id = %id, "cannot record a polling server's signal; it will be retried");
            ApiError::Unavailable("the signal could not be recorded; retry".to_owned())
        })?;
    let after = service
        .store
        .deployments
        .get(tenant, &id)
        .await?
        .ok_or_else(not_found)?;
    let applied = after.deployment.finished_at == Some(finished_at);
    if !applied {
        return Err(ApiError::Conflict(format!(
            "deployment {:?} already ended ({}); this signal was ignored",
            id.as_str(),
            after.deployment.status
        )));
    }
    info!(deployment.id = %id, status = %after.deployment.status, "polling server signalled");
    Ok((
        StatusCode::OK,
        Json(SignalAck {
            deployment_id: id,
            status: after.deployment.status,
            applied,
        }),
    ))
}
