//! The gateway in-process (`Gateway::start` + `tower::ServiceExt::oneshot`) against a real
//! nats-server: API edge cases, state transitions, the JetStream store.

mod api;
mod deployments;
mod fixture;
mod store;
