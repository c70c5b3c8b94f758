//! Security (issue 10): tenant isolation and every refusal, proven against real processes.

mod broker_tls;
mod credentials;
mod http_auth;
mod http_ops;
mod http_roles;
mod http_tickets;
mod netns;
mod references;
mod signing;
mod tenants;
mod tls;
mod webhook_targets;
