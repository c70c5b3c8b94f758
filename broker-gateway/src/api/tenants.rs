//! `/v1/tenants` (creating and listing tenants) and the hand-over of every other
//! request to the runtime of the caller's tenant.

use axum::Json;
use axum::extract::{FromRequest, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use flue_proto::{CreateTenant, Tenant};
use serde::de::DeserializeOwned;
use tower::ServiceExt as _;
use tracing::error;

use super::error::ApiError;
use super::extract::{JsonBody, map_rejection};
use crate::error::chain;
use crate::tenants::{ConnectorError, Created, TenantError, Tenants, tenant_of};

impl<T: DeserializeOwned> FromRequest<Tenants> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, tenants: &Tenants) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, tenants).await {
            Ok(axum::Json(value)) => Ok(Self(value)),
            Err(rejection) => Err(map_rejection(rejection, tenants.config().max_body_bytes)),
        }
    }
}

/// `POST /v1/tenants`: 201 when the tenant was created (provisioned on the broker and
/// served from now on), 200 with the stored tenant when it exists.
#[utoipa::path(
    post,
    operation_id = "create_tenant",
    path = "/v1/tenants",
    tag = "tenants",
    summary = "Create a tenant (operator)",
    request_body = flue_proto::CreateTenant,
    responses(
        (status = 201, description = "The tenant was created: provisioned on the broker and served from now on.", body = flue_proto::Tenant),
        (status = 200, description = "The tenant already exists: the stored one.", body = flue_proto::Tenant),
        (status = 409, description = "In development mode (`--insecure-dev-broker`): any tenant but the default one.", body = flue_proto::ErrorBody),
        (status = 507, description = "`insufficient_storage`: the broker has no JetStream storage left for the tenant's streams (the message says what to change); nothing is served.", body = flue_proto::ErrorBody),
    )
)]
pub async fn create(
    State(tenants): State<Tenants>,
    JsonBody(body): JsonBody<CreateTenant>,
) -> Result<(StatusCode, Json<Tenant>), ApiError> {
    match tenants.create(body).await {
        Ok((tenant, Created::New)) => Ok((StatusCode::CREATED, Json(tenant))),
        Ok((tenant, Created::Existing)) => Ok((StatusCode::OK, Json(tenant))),
        Err(e) => Err(refusal(e)),
    }
}

/// `GET /v1/tenants`: every tenant this gateway serves, by id.
#[utoipa::path(
    get,
    operation_id = "list_tenants",
    path = "/v1/tenants",
    tag = "tenants",
    summary = "Every tenant this gateway serves (operator)",
    responses(
        (status = 200, description = "The tenants, by id.", body = Vec<flue_proto::Tenant>),
    )
)]
pub async fn list(State(tenants): State<Tenants>) -> Json<Vec<Tenant>> {
    Json(tenants.list())
}

/// Every other request: answered by the runtime of the caller's tenant, 404 when this
/// gateway serves no such tenant (or the caller has none).
pub async fn dispatch(State(tenants): State<Tenants>, request: Request) -> Response {
    let runtime = tenant_of(&request).and_then(|t| tenants.get(&t));
    let Some(runtime) = runtime else {
        // The same answer for every path: it must not tell what exists.
        return ApiError::NotFound("not found".to_owned()).into_response();
    };
    match runtime.router().oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

fn refusal(e: TenantError) -> ApiError {
    match e {
        TenantError::Invalid(e) => ApiError::InvalidInput(e.to_string()),
        TenantError::Connector(e @ ConnectorError::OneTenantOnly { .. }) => {
            ApiError::Conflict(e.to_string())
        }
        e @ TenantError::AlreadyServed(_) => ApiError::Conflict(e.to_string()),
        TenantError::Start { tenant, source } if crate::broker::out_of_storage(&source) => {
            ApiError::OutOfStorage(format!(
                "the broker has no JetStream storage left for tenant {tenant}'s streams: each \
                 tenant reserves its event stream's size (the gateway's --events-max-bytes); \
                 raise the broker's jetstream \
                 max_file_store, or lower --events-max-bytes, then create the tenant again"
            ))
        }
        e @ (TenantError::Connector(
            ConnectorError::Connect(_) | ConnectorError::Auth(_) | ConnectorError::UserSeed(_),
        )
        | TenantError::Start { .. }) => {
            error!(error = %chain(&e), "cannot start a tenant");
            ApiError::Unavailable(
                "the tenant could not be started on the broker; retry later".to_owned(),
            )
        }
    }
}
