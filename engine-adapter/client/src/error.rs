//! Why a call to the gateway failed.

use std::time::Duration;

use flue_proto::DeploymentId;

/// Every way a [`crate::Client`] call can fail, so callers can `match` on the cause.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// TLS cannot be set up (an unreadable CA file, no trusted roots).
    #[error("cannot set up TLS with {what}: {reason}")]
    Tls {
        /// What was being used: the CA file, the system's roots.
        what: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The base URL given to [`crate::Client::new`] is not a usable `http://` or
    /// `https://` URL.
    #[error("invalid gateway url {url:?}: {reason}")]
    InvalidUrl {
        /// The refused URL.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The gateway answered with an error body (`{"error": {"code", "message"}}`).
    #[error("gateway answered {status} {code}: {message}")]
    Api {
        /// HTTP status code.
        status: u16,
        /// The error's machine-readable code (`not_found`, `conflict`, …).
        code: String,
        /// The gateway's explanation.
        message: String,
    },
    /// Nothing answered at the gateway's address (connection refused, unreachable host).
    #[error("cannot reach the gateway at {url}")]
    Unreachable {
        /// The URL that was requested.
        url: String,
        /// The underlying transport error.
        #[source]
        source: reqwest::Error,
    },
    /// The request failed in transport after connecting (reset, timed out, bad HTTP).
    #[error("request to {url} failed")]
    Http {
        /// The URL that was requested.
        url: String,
        /// The underlying transport error.
        #[source]
        source: reqwest::Error,
    },
    /// The gateway's answer was not the JSON this client expects.
    #[error("cannot decode the gateway's answer from {url}")]
    Decode {
        /// The URL that was requested.
        url: String,
        /// What serde found wrong.
        #[source]
        source: serde_json::Error,
    },
    /// A deployment was still not terminal when the caller's overall wait ran out.
    #[error("deployment {id} is not finished after waiting {}s", waited.as_secs())]
    Timeout {
        /// The deployment waited for.
        id: DeploymentId,
        /// How long the client waited in total.
        waited: Duration,
    },
}

impl ClientError {
    /// Builds the transport variant for `url`: [`ClientError::Unreachable`] for
    /// connection failures, [`ClientError::Http`] for everything else.
    pub(crate) fn transport(url: &reqwest::Url, source: reqwest::Error) -> Self {
        let url = url.to_string();
        if source.is_connect() {
            Self::Unreachable { url, source }
        } else {
            Self::Http { url, source }
        }
    }

    /// The HTTP status of an [`ClientError::Api`] error, if that is what this is.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The gateway's error code of an [`ClientError::Api`] error (`not_found`,
    /// `conflict`, `revision_mismatch`, …), if that is what this is.
    pub fn code(&self) -> Option<&str> {
        match self {
            Self::Api { code, .. } => Some(code),
            _ => None,
        }
    }

    /// True when the gateway said the object does not exist (404).
    pub fn is_not_found(&self) -> bool {
        self.status() == Some(404)
    }
}
