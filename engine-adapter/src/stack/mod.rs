//! Stacks from HOT-style templates: parsing, intrinsic functions and the dependency graph.

pub mod driver;
pub mod environment;
pub mod functions;
pub mod graph;
pub mod infra;
pub mod random;
pub mod resolve;
pub mod template;
pub mod units;
