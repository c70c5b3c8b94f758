//! `flue-stack`: Flue's stack engine. HOT-style templates (parsing, intrinsic functions,
//! the dependency graph) expanded into units and driven as deployments through the
//! gateway's API (`flue-client`).

pub mod driver;
pub mod environment;
pub mod follow;
pub mod functions;
pub mod graph;
pub mod infra;
pub mod progress;
pub mod random;
pub mod resolve;
pub mod submitted;
pub mod template;
pub mod units;
