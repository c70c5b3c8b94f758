//! The HTTP API's authentication vocabulary: roles, the claims a bearer token carries,
//! the bodies of the token and ticket endpoints, and the error codes of a refusal.
//!
//! A token is a JWT (HS256, signed with the gateway's `token.key`) whose claims are
//! [`TokenClaims`]; the gateway is the only party that signs or checks one, clients only
//! carry it (`Authorization: Bearer <token>`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::TenantId;

/// Error code of a 401: no token, or one that is malformed, badly signed, expired or revoked.
pub const UNAUTHORIZED: &str = "unauthorized";
/// Error code of a 403: the token's role may not call the route.
pub const FORBIDDEN: &str = "forbidden";
/// Query parameter carrying an event-stream ticket (`GET /v1/events?ticket=…`), for
/// browsers, whose `EventSource` cannot send headers.
pub const TICKET_PARAM: &str = "ticket";
/// Environment variable the `flue` CLI reads its bearer token from.
pub const TOKEN_ENV: &str = "FLUE_TOKEN";
/// Longest lifetime of a token, in seconds (366 days): revocations are kept that long.
pub const MAX_TOKEN_TTL_SECS: u64 = 366 * 24 * 3600;
/// Lifetime of an event-stream ticket, in seconds.
pub const TICKET_TTL_SECS: u64 = 60;

/// What a token's holder may do (the table is `docs/api.md`, the rules `auth::roles` in
/// the gateway).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Creates tenants and mints a tenant's first admin token; nothing inside a tenant.
    Operator,
    /// Tokens, servers and their credentials, listener credentials, and every read.
    Admin,
    /// Configs, deployments and stacks, and every read.
    Engine,
    /// Events (stream, tickets) and webhooks.
    Listener,
    /// Every read and the dashboard.
    Viewer,
}

impl Role {
    /// Every role, in the order the docs list them.
    pub const ALL: [Role; 5] = [
        Role::Operator,
        Role::Admin,
        Role::Engine,
        Role::Listener,
        Role::Viewer,
    ];

    /// The role's name in a token and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Operator => "operator",
            Role::Admin => "admin",
            Role::Engine => "engine",
            Role::Listener => "listener",
            Role::Viewer => "viewer",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A role name that is not one of [`Role::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown role {0:?} (known: operator, admin, engine, listener, viewer)")]
pub struct UnknownRole(pub String);

impl FromStr for Role {
    type Err = UnknownRole;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Role::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| UnknownRole(s.to_owned()))
    }
}

/// The claims of a bearer token or an event-stream ticket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TokenClaims {
    /// A free name for the holder (`ci`, `alice`), shown in logs instead of the token.
    pub sub: String,
    /// The tenant the token acts in; absent for [`Role::Operator`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<TenantId>,
    /// What it may do.
    pub role: Role,
    /// Issued at, seconds since the epoch.
    pub iat: i64,
    /// Expires at, seconds since the epoch.
    pub exp: i64,
    /// The token's id: what `DELETE /v1/tokens/{id}` revokes. A ticket carries the id of
    /// the token it was made from, so revoking a token also ends its tickets.
    pub jti: String,
    /// `true` for an event-stream ticket, accepted only as `?ticket=` on `GET /v1/events`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ticket: bool,
}

/// Body of `POST /v1/tokens` and `POST /v1/tenants/{tenant}/tokens`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateToken {
    /// The new token's role (`POST /v1/tenants/{tenant}/tokens`: `admin` only).
    pub role: Role,
    /// Lifetime in seconds, 1 ..= [`MAX_TOKEN_TTL_SECS`].
    pub ttl_secs: u64,
    /// A name for the holder (the `sub` claim); 1–128 printable characters.
    pub name: String,
}

/// Answer of `POST /v1/tokens`: the token (shown this once) and what identifies it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TokenCreated {
    /// The bearer token; the gateway keeps no copy.
    pub token: String,
    /// Its id (`jti`), for `DELETE /v1/tokens/{id}`.
    pub id: String,
    /// When it stops being accepted.
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
}

impl fmt::Debug for TokenCreated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenCreated")
            .field("token", &"<hidden>")
            .field("id", &self.id)
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

/// Answer of `POST /v1/events/tickets`: a short-lived ticket for `GET /v1/events?ticket=…`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EventTicket {
    /// The ticket, valid for [`TICKET_TTL_SECS`] and only on the event stream.
    pub ticket: String,
    /// When it stops being accepted.
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
}

impl fmt::Debug for EventTicket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventTicket")
            .field("ticket", &"<hidden>")
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_read_back_as_written() {
        for role in Role::ALL {
            assert_eq!(role.as_str().parse::<Role>(), Ok(role));
            let json = serde_json::to_string(&role).expect("json");
            assert_eq!(json, format!("\"{role}\""));
        }
        assert!("root".parse::<Role>().is_err());
    }

    #[test]
    fn a_plain_token_does_not_say_it_is_a_ticket() {
        let claims = TokenClaims {
            sub: "ci".into(),
            tenant: None,
            role: Role::Operator,
            iat: 1,
            exp: 2,
            jti: "x".into(),
            ticket: false,
        };
        let json = serde_json::to_value(&claims).expect("json");
        assert!(
            json.get("ticket").is_none() && json.get("tenant").is_none(),
            "{json}"
        );
    }
}
