//! `flue-engine`: a typed Rust client for the Flue gateway HTTP API, and the `flue`
//! command-line tool built on it.
//!
//! - [`Client`]: one async method per gateway endpoint, plus
//!   [`Client::wait_until_terminal`], which follows a deployment by long-polling;
//! - [`ClientError`]: why a call failed (API error, unreachable gateway, …);
//! - [`cli`]: the `flue` command line; `src/main.rs` only parses and calls [`cli::run`].

pub mod cli;
mod client;
mod error;
pub mod stack;
#[cfg(test)]
mod test_support;

pub use client::{Client, MAX_WAIT, Page};
pub use error::ClientError;
