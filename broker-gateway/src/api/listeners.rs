//! `/v1/listener-credentials`: minting NATS credentials for a tenant's event listeners;
//! `/v1/listener-consumers`: the consumers they hold on the event stream, listed and
//! deleted by the tenant's admin.

use async_nats::jetstream::stream;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use flue_proto::creds::{ListenerConsumer, ListenerConsumers, ListenerCredentials};
use flue_proto::event::EVENT_STREAM;
use flue_proto::subject::{JETSTREAM_DOMAIN, listener_consumers, listener_of_consumer};
use futures_util::StreamExt as _;
use tracing::{info, warn};

use super::error::ApiError;
use crate::broker::BrokerError;
use crate::service::Service;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// `POST /v1/listener-credentials` (admin): 201 with a new listener user of the caller's
/// tenant's events account ([`crate::natsauth::perms::listener`]). Each call mints
/// another user; the gateway keeps none of them. 409 with `--insecure-dev-broker`, whose
/// broker checks no user.
#[utoipa::path(
    post,
    operation_id = "create_listener_credentials",
    path = "/v1/listener-credentials",
    tag = "events",
    summary = "Broker credentials for an event listener (admin)",
    responses(
        (status = 201, description = "A new listener user of the tenant's events account, shown once.", body = flue_proto::creds::ListenerCredentials),
        (status = 409, description = "The broker checks no user (`--insecure-dev-broker`).", body = flue_proto::ErrorBody),
    )
)]
pub async fn create(
    State(service): State<Service>,
) -> Result<(StatusCode, Json<ListenerCredentials>), ApiError> {
    let Some(users) = &service.users else {
        return Err(ApiError::Conflict(
            "this gateway runs with --insecure-dev-broker: the broker checks no user, so there are no listener credentials to mint".to_owned(),
        ));
    };
    let (listener, creds) = users.listener_creds().map_err(|e| {
        warn!(error = %crate::error::chain(&e), "cannot mint listener credentials");
        ApiError::Internal("cannot mint listener credentials".to_owned())
    })?;
    info!(tenant = %service.config.tenant, listener = %listener, "listener credentials minted");
    Ok((
        StatusCode::CREATED,
        Json(ListenerCredentials {
            tenant: service.config.tenant.clone(),
            credentials: creds.to_text(),
            js_domain: JETSTREAM_DOMAIN.to_owned(),
            stream: EVENT_STREAM.to_owned(),
            consumers: listener_consumers(&listener),
            listener,
        }),
    ))
}

/// `GET /v1/listener-consumers` (admin): every consumer on the tenant's event stream but
/// the gateway's own (SSE clients' and webhooks', [`is_gateway_consumer`]), by name, with
/// the listener credential it belongs to (none for a consumer made with listener
/// credentials minted before consumer names were bounded). Listeners cannot name a
/// consumer like the gateway's (their names are their own eight), so nothing can hide
/// there.
#[utoipa::path(
    get,
    operation_id = "list_listener_consumers",
    path = "/v1/listener-consumers",
    tag = "events",
    summary = "NATS listeners' consumers on the event stream (admin)",
    responses(
        (status = 200, description = "The tenant's listener consumers, by name.", body = flue_proto::creds::ListenerConsumers),
    )
)]
pub async fn list_consumers(
    State(service): State<Service>,
) -> Result<Json<ListenerConsumers>, ApiError> {
    let stream = event_stream(&service).await?;
    let mut infos = stream.consumers();
    let mut consumers = Vec::new();
    while let Some(info) = infos.next().await {
        let info = info.map_err(|e| consumer_error("*", e.into()))?;
        if is_gateway_consumer(&info.name) {
            continue;
        }
        consumers.push(ListenerConsumer {
            listener: listener_of_consumer(&info.name).map(str::to_owned),
            created: info.created,
            pending: info.num_pending,
            last_active: info.delivered.last_active,
            idle_limit_secs: info.config.inactive_threshold.as_secs(),
            name: info.name,
        });
    }
    consumers.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Json(ListenerConsumers { consumers }))
}

/// `DELETE /v1/listener-consumers/{name}` (admin): 204 once the listener consumer `name`
/// is gone from the tenant's event stream; 404 when there is none by that name (another
/// tenant's consumers are in another account, never found). A listener using it sees its
/// subscription end; its credentials still work.
#[utoipa::path(
    delete,
    operation_id = "delete_listener_consumer",
    path = "/v1/listener-consumers/{name}",
    tag = "events",
    summary = "Delete a NATS listener's consumer (admin)",
    params(("name" = String, Path, description = "The consumer's name, as listed.")),
    responses(
        (status = 204, description = "The consumer is gone."),
        (status = 400, description = "Not a consumer name.", body = flue_proto::ErrorBody),
        (status = 404, description = "No listener consumer by that name.", body = flue_proto::ErrorBody),
    )
)]
pub async fn delete_consumer(
    State(service): State<Service>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    check_consumer_name(&name)?;
    let not_found = || ApiError::NotFound(format!("no listener consumer named {name:?}"));
    if is_gateway_consumer(&name) {
        return Err(not_found());
    }
    let stream = event_stream(&service).await?;
    match stream.delete_consumer(&name).await {
        Ok(_) => {
            info!(tenant = %service.config.tenant, consumer = %name, "listener consumer deleted");
            Ok(StatusCode::NO_CONTENT)
        }
        Err(e) if is_not_found(&e) => Err(not_found()),
        Err(e) => Err(consumer_error(&name, e.into())),
    }
}

/// The tenant's event stream, `FLUE_EVT`.
async fn event_stream(service: &Service) -> Result<stream::Stream, ApiError> {
    service
        .events
        .jetstream()
        .get_stream(EVENT_STREAM)
        .await
        .map_err(|e| {
            ApiError::from(BrokerError::Stream {
                stream: EVENT_STREAM,
                source: e.into(),
            })
        })
}

fn consumer_error(name: &str, source: BoxError) -> ApiError {
    ApiError::from(BrokerError::Consumer {
        stream: EVENT_STREAM,
        consumer: name.to_owned(),
        source,
    })
}

/// Whether `e` says there is no such consumer.
fn is_not_found(e: &stream::ConsumerError) -> bool {
    matches!(e.kind(), stream::ConsumerErrorKind::JetStream(j)
        if j.error_code() == async_nats::jetstream::ErrorCode::CONSUMER_NOT_FOUND)
}

/// A consumer name as the broker takes one: 1–255 bytes, no `.`, `*`, `>`, path
/// separator, whitespace or control character; a 400 naming the field otherwise.
/// Whether `name` is one of the gateway's own consumers on the event stream: an SSE
/// client's or a webhook's (no listener can make one so named).
fn is_gateway_consumer(name: &str) -> bool {
    name.starts_with(crate::listen::SSE_CONSUMER_PREFIX)
        || name.starts_with(flue_proto::webhook::CONSUMER_PREFIX)
}

fn check_consumer_name(name: &str) -> Result<(), ApiError> {
    let bad = name.is_empty()
        || name.len() > 255
        || name.chars().any(|c| {
            matches!(c, '.' | '*' | '>' | '/' | '\\') || c.is_whitespace() || c.is_control()
        });
    if bad {
        return Err(ApiError::InvalidId {
            what: "consumer name",
            value: name.chars().take(64).collect(),
            reason: "a consumer name is 1-255 bytes without '.', '*', '>', '/', '\\\\', whitespace or control characters".to_owned(),
        });
    }
    Ok(())
}
