//! Lifecycle events end to end: the stream, presence, progress, SSE, webhooks, the CLI
//! and the dashboard, against a real broker, gateway and agents.

mod cli;
pub(crate) mod dashboard;
mod dashboard_states;
mod dashboard_views;
mod deployments;
mod presence;
mod progress;
mod python;
mod sse;
mod stacks;
pub(crate) mod webhooks;
