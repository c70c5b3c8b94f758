//! Tenants: the bodies of the tenant API (`POST /v1/tenants`, `GET /v1/tenants`).
//!
//! A tenant is one isolated customer of a gateway: its servers, configs, deployments,
//! stacks and events live in its own broker accounts, and the gateway serves it from its
//! own runtime. The id is a subject token ([`TenantId`]), also the account's name.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::ids::TenantId;

/// Longest tenant name accepted, in bytes.
pub const MAX_TENANT_NAME_LEN: usize = 256;

/// What an operator sends to create a tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateTenant {
    /// Tenant id (a subject token: `[A-Za-z0-9_-]`, 1–64 bytes).
    pub id: TenantId,
    /// Human name; the id when empty.
    #[serde(default)]
    pub name: String,
}

/// Why a [`CreateTenant`] is refused (the id is checked by its type).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TenantNameError {
    /// The name is longer than [`MAX_TENANT_NAME_LEN`].
    #[error("tenant name is {len} bytes long; at most {MAX_TENANT_NAME_LEN} are accepted")]
    NameTooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// The name holds a control character (it is shown in tables and logs).
    #[error("tenant name must not contain control characters")]
    ControlCharacter,
}

impl CreateTenant {
    /// Checks what the id's type does not: the name's length and characters.
    pub fn validate(&self) -> Result<(), TenantNameError> {
        if self.name.len() > MAX_TENANT_NAME_LEN {
            return Err(TenantNameError::NameTooLong {
                len: self.name.len(),
            });
        }
        if self.name.chars().any(char::is_control) {
            return Err(TenantNameError::ControlCharacter);
        }
        Ok(())
    }
}

/// A tenant a gateway serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Tenant {
    /// Tenant id.
    pub id: TenantId,
    /// Human name.
    #[serde(default)]
    pub name: String,
    /// When the gateway first knew it.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_bodies_are_checked() {
        let ok: CreateTenant =
            serde_json::from_str(r#"{"id":"acme","name":"Acme Ltd"}"#).expect("valid body");
        assert_eq!(ok.validate(), Ok(()));
        assert!(serde_json::from_str::<CreateTenant>(r#"{"id":"a.b"}"#).is_err());
        assert!(serde_json::from_str::<CreateTenant>(r#"{"id":"a","x":1}"#).is_err());
        let long = CreateTenant {
            id: ok.id.clone(),
            name: "n".repeat(MAX_TENANT_NAME_LEN + 1),
        };
        assert_eq!(
            long.validate(),
            Err(TenantNameError::NameTooLong {
                len: MAX_TENANT_NAME_LEN + 1
            })
        );
        let control = CreateTenant {
            id: ok.id,
            name: "a\nb".into(),
        };
        assert_eq!(control.validate(), Err(TenantNameError::ControlCharacter));
    }
}
