//! The gateway in-process (`Gateway::start` + `tower::ServiceExt::oneshot`) against a real
//! nats-server: API edge cases, state transitions, the JetStream store, stack records.

mod api;
mod create_options;
mod deployments;
pub(crate) mod fixture;
mod pending;
mod stack_units;
mod stacks;
mod store;
