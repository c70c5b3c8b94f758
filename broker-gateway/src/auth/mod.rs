//! HTTP API authentication: bearer tokens (JWT, HS256 over the gateway's `token.key`),
//! roles and the revocation list; the middleware every `/v1` request passes
//! (`api::authenticate`) and the token routes (`api::tokens`) use them.
//!
//! - [`token`]: minting and checking tokens and event-stream tickets;
//! - [`roles`]: which role may call which route;
//! - [`revoked`]: revoked token ids, watched into memory;
//! - [`command`]: `flue-gateway token`, minting offline from the state directory.

pub mod command;
pub(crate) mod revoked;
pub mod roles;
pub mod token;

use std::sync::Arc;

use flue_proto::TenantId;
use flue_proto::auth::Role;
use tracing::warn;

pub use revoked::{Revocations, Revoked};

/// Token id a request carries under `--insecure-no-auth`.
pub const INSECURE_TOKEN_ID: &str = "insecure-no-auth";

/// Who is calling: put in the request extensions by `api::authenticate` for every `/v1`
/// request. The gateway dispatches on `tenant`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The caller's tenant; `None` for an operator.
    pub tenant: Option<TenantId>,
    /// The caller's role. Under `--insecure-no-auth` it reads `admin`, but every role
    /// check is skipped (the caller is admin, engine, listener and viewer at once).
    pub role: Role,
    /// The token's id (`jti`); [`INSECURE_TOKEN_ID`] without authentication.
    pub token_id: String,
}

/// What the middleware and the token endpoints need; cheap to clone.
#[derive(Clone)]
pub struct Auth {
    secret: Arc<[u8]>,
    tenant: TenantId,
    revocations: Revocations,
    insecure: bool,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("tenant", &self.tenant)
            .field("insecure", &self.insecure)
            .finish_non_exhaustive()
    }
}

impl Auth {
    /// Every `/v1` request needs a valid token of a role allowed on its route.
    /// `tenant` is the default tenant; each tenant's runtime registers its revocation
    /// list in [`Auth::revocations`] when it starts.
    pub fn tokens(secret: Arc<[u8]>, tenant: TenantId) -> Self {
        Self {
            secret,
            tenant,
            revocations: Revocations::default(),
            insecure: false,
        }
    }

    /// `--insecure-no-auth`: every request is admin, engine, listener and viewer of
    /// `tenant`. Warns loudly, since anyone who reaches the gateway then owns it.
    pub fn insecure(secret: Arc<[u8]>, tenant: TenantId) -> Self {
        warn!(
            tenant = %tenant,
            "--insecure-no-auth: the HTTP API accepts every request without a token; anyone who can reach the gateway is its administrator. Development only"
        );
        Self {
            insecure: true,
            ..Self::tokens(secret, tenant)
        }
    }

    /// The default tenant (`--default-tenant`): the one `--insecure-no-auth` serves.
    pub fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    /// The secret tokens are signed with.
    pub(crate) fn secret(&self) -> &[u8] {
        &self.secret
    }

    /// The revocation lists of the tenants served.
    pub fn revocations(&self) -> &Revocations {
        &self.revocations
    }

    /// Whether a token of `tenant` with id `jti` was revoked.
    pub fn is_revoked(&self, tenant: Option<&TenantId>, jti: &str) -> bool {
        tenant
            .and_then(|t| self.revocations.get(t))
            .is_some_and(|r| r.contains(jti))
    }

    /// Whether authentication is off (`--insecure-no-auth`).
    pub fn is_insecure(&self) -> bool {
        self.insecure
    }
}
