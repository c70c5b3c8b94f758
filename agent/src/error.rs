//! Errors that stop the agent; everything else is reported on the response queue.

use std::path::PathBuf;

use crate::ledger::LedgerError;

/// Why [`crate::run`] returned early.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The state directory could not be created.
    #[error("cannot create state dir {path}")]
    StateDir {
        /// The directory.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The ledger could not be opened, read or made durable, so exactly-once cannot be kept.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// The credentials file could not be read, or is not this server's.
    #[error("cannot use the credentials file {path}: {reason}")]
    Credentials {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Neither `--creds` nor `--insecure-unsigned-requests` was given: the agent cannot
    /// tell the gateway's requests from anyone else's, so it does not start.
    #[error(
        "no credentials file: give --creds FILE (from `flue server register ID --creds FILE`), or --insecure-unsigned-requests for development"
    )]
    NoCredentials,
    /// The broker URL or connect options were refused before any connection attempt.
    #[error("cannot connect to {url}")]
    Connect {
        /// The URL given, credentials redacted.
        url: String,
        /// What async-nats said.
        source: async_nats::ConnectError,
    },
    /// The TLS files of the broker connection cannot be used.
    #[error("cannot set up TLS for the broker connection")]
    NatsTls(#[from] flue_proto::nats_tls::NatsTlsError),
    /// `--release-key` is not a release public key.
    #[error("--release-key: {0}")]
    ReleaseKey(String),
    /// Not a failure: the agent stopped to run `exe` in its place (an upgrade or its
    /// rollback); `main` replaces the process with it.
    #[error("restarting as {}", exe.display())]
    Restart {
        /// The executable to run with the same arguments.
        exe: PathBuf,
    },
}
