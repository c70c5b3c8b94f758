//! What only a test in the gateway's own process does to it, and no operator can: serve a
//! tenant from a second broker in development mode (a stand-in for a tenant account of its
//! own, `tests/it/security/tenants.rs`) and stop one tenant's runtime while the gateway
//! goes on, through [`crate::Gateway::tenants`]. Every other test drives the gateway as its
//! users do: the HTTP API, the CLIs and the broker.

pub use crate::tenants::connector::connect;
pub use crate::tenants::{Stopped, TenantConnections, TenantError, TenantRuntime, Tenants};
