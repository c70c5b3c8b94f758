//! The token endpoints: an admin mints and revokes its tenant's tokens, an operator
//! mints a tenant's admin token, and any event reader gets a short-lived ticket for the
//! browser's `EventSource` (which cannot send headers).

use std::time::Duration;

use axum::Json;
use axum::extract::{Extension, Path};
use axum::http::StatusCode;
use flue_proto::TenantId;
use flue_proto::auth::{CreateToken, EventTicket, Role, TokenClaims, TokenCreated};
use time::OffsetDateTime;
use tracing::info;

use super::ApiError;
use super::authenticate::Verified;
use super::extract::JsonBody;
use crate::auth::token::{self, MintError, NewToken};
use crate::auth::{Auth, Principal};

/// `POST /v1/tokens` (admin): a token of this tenant with any role but `operator`.
#[utoipa::path(
    post,
    operation_id = "create_token",
    path = "/v1/tokens",
    tag = "tokens",
    summary = "A token of the caller's tenant (admin)",
    request_body = flue_proto::auth::CreateToken,
    responses(
        (status = 201, description = "The token, shown once.", body = flue_proto::auth::TokenCreated),
        (status = 422, description = "A field is refused (the message names it), e.g. the `operator` role.", body = flue_proto::ErrorBody),
    )
)]
pub async fn create_token(
    Extension(auth): Extension<Auth>,
    Extension(principal): Extension<Principal>,
    JsonBody(body): JsonBody<CreateToken>,
) -> Result<(StatusCode, Json<TokenCreated>), ApiError> {
    if body.role == Role::Operator {
        return Err(ApiError::InvalidInput(
            "role: an admin mints admin, engine, listener or viewer tokens, not operator ones"
                .to_owned(),
        ));
    }
    let tenant = principal
        .tenant
        .clone()
        .unwrap_or_else(|| auth.tenant().clone());
    let created = mint(&auth, &body, tenant)?;
    info!(token.id = %created.id, role = %body.role, by = %principal.token_id, "token minted");
    Ok((StatusCode::CREATED, Json(created)))
}

/// `POST /v1/tenants/{tenant}/tokens` (operator): an admin token of `tenant`.
#[utoipa::path(
    post,
    operation_id = "create_tenant_token",
    path = "/v1/tenants/{tenant}/tokens",
    tag = "tokens",
    summary = "An admin token of a tenant (operator)",
    params(("tenant" = flue_proto::TenantId, Path, description = "The tenant.")),
    request_body = flue_proto::auth::CreateToken,
    responses(
        (status = 201, description = "The token, shown once.", body = flue_proto::auth::TokenCreated),
        (status = 404, description = "No such tenant.", body = flue_proto::ErrorBody),
        (status = 422, description = "A field is refused (the message names it).", body = flue_proto::ErrorBody),
    )
)]
pub async fn tenant_token(
    Extension(auth): Extension<Auth>,
    Path(tenant): Path<String>,
    JsonBody(body): JsonBody<CreateToken>,
) -> Result<(StatusCode, Json<TokenCreated>), ApiError> {
    let tenant: TenantId = tenant.parse().map_err(|e| ApiError::InvalidId {
        what: "tenant id",
        value: tenant.clone(),
        reason: format!("{e}"),
    })?;
    if auth.revocations().get(&tenant).is_none() {
        return Err(ApiError::NotFound(format!(
            "tenant {:?} not found",
            tenant.as_str()
        )));
    }
    if body.role != Role::Admin {
        return Err(ApiError::InvalidInput(
            "role: an operator mints a tenant's admin token; the admin mints the others".to_owned(),
        ));
    }
    let created = mint(&auth, &body, tenant.clone())?;
    info!(token.id = %created.id, tenant = %tenant, "tenant admin token minted");
    Ok((StatusCode::CREATED, Json(created)))
}

/// `DELETE /v1/tokens/{id}` (admin): every gateway on the broker refuses the token (and
/// its tickets) from now on. A token id names its tenant (a MAC, `token::id_belongs_to`),
/// so another tenant's token, or an id no gateway minted, is a 404; an id minted before
/// ids named their tenant (32 hex digits) is revoked without that check, 204.
#[utoipa::path(
    delete,
    operation_id = "revoke_token",
    path = "/v1/tokens/{id}",
    tag = "tokens",
    summary = "Revoke a token (admin)",
    params(("id" = String, Path, description = "The token's id (its `jti`).")),
    responses(
        (status = 204, description = "Every gateway on the broker refuses the token and its tickets from now on."),
        (status = 404, description = "No token of the caller's tenant has that id.", body = flue_proto::ErrorBody),
    )
)]
pub async fn revoke_token(
    Extension(auth): Extension<Auth>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let valid = !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !valid {
        return Err(ApiError::InvalidId {
            what: "token id",
            value: id,
            reason: "a token id is 1 to 64 characters of [A-Za-z0-9_-]".to_owned(),
        });
    }
    let tenant = principal.tenant.as_ref().unwrap_or(auth.tenant());
    if token::id_belongs_to(auth.secret(), tenant, &id) == token::IdOwner::Other {
        return Err(ApiError::NotFound(format!(
            "no token of this tenant has id {id:?}"
        )));
    }
    let revoked = auth
        .revocations()
        .get(tenant)
        .ok_or_else(|| ApiError::NotFound(format!("tenant {:?} not found", tenant.as_str())))?;
    revoked
        .revoke(&id, OffsetDateTime::now_utc().unix_timestamp())
        .await?;
    info!(token.id = %id, by = %principal.token_id, "token revoked");
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /v1/events/tickets` (any event reader): a ticket for `GET /v1/events?ticket=…`,
/// valid 60 s, carrying the caller's tenant, role and token id.
#[utoipa::path(
    post,
    operation_id = "create_event_ticket",
    path = "/v1/events/tickets",
    tag = "events",
    summary = "A 60-second ticket for the event stream",
    responses(
        (status = 201, description = "A ticket for `GET /v1/events?ticket=…` (for clients such as `EventSource` that cannot send a header).", body = flue_proto::auth::EventTicket),
    )
)]
pub async fn create_ticket(
    Extension(auth): Extension<Auth>,
    Extension(principal): Extension<Principal>,
    verified: Option<Extension<Verified>>,
) -> Result<(StatusCode, Json<EventTicket>), ApiError> {
    let now = OffsetDateTime::now_utc();
    // Without authentication (`--insecure-no-auth`) there are no claims: the ticket
    // stands for the principal the middleware made up.
    let claims = match verified {
        Some(Extension(Verified(claims))) => claims,
        None => TokenClaims {
            sub: principal.token_id.clone(),
            tenant: principal.tenant.clone(),
            role: principal.role,
            iat: now.unix_timestamp(),
            exp: now.unix_timestamp() + 60,
            jti: principal.token_id.clone(),
            ticket: false,
        },
    };
    let minted = token::ticket(auth.secret(), &claims, now).map_err(mint_error)?;
    Ok((
        StatusCode::CREATED,
        Json(EventTicket {
            ticket: minted.token,
            expires_at: at(minted.claims.exp),
        }),
    ))
}

fn mint(auth: &Auth, body: &CreateToken, tenant: TenantId) -> Result<TokenCreated, ApiError> {
    let new = NewToken {
        name: body.name.clone(),
        tenant: Some(tenant),
        role: body.role,
        ttl: Duration::from_secs(body.ttl_secs),
    };
    let minted = token::mint(auth.secret(), &new, OffsetDateTime::now_utc()).map_err(mint_error)?;
    Ok(TokenCreated {
        token: minted.token,
        id: minted.claims.jti,
        expires_at: at(minted.claims.exp),
    })
}

fn mint_error(e: MintError) -> ApiError {
    match e {
        MintError::Ttl(_) => ApiError::InvalidInput(format!("ttl_secs: {e}")),
        MintError::Name => ApiError::InvalidInput(format!("name: {e}")),
        MintError::Tenant(_) => ApiError::InvalidInput(e.to_string()),
        MintError::Sign(_) => ApiError::Internal(e.to_string()),
    }
}

fn at(unix: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(unix).unwrap_or(OffsetDateTime::UNIX_EPOCH)
}
