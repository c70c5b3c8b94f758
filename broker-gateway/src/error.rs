//! Errors of the gateway library (start-up and serving), and error-chain formatting.

use std::net::SocketAddr;

use crate::broker::BrokerError;
use crate::store::StoreError;

/// Why the gateway could not start or stopped serving.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The broker could not be reached.
    #[error("cannot connect to the broker at {url}")]
    Connect {
        /// The URL as configured, passwords replaced by `***` ([`flue_proto::nats_url::redact`]).
        url: String,
        /// Cause.
        #[source]
        source: async_nats::ConnectError,
    },
    /// Streams or consumers could not be set up.
    #[error("cannot set up the broker")]
    Broker(#[from] BrokerError),
    /// A stream or bucket cannot have the replica count `--replicas` asks for.
    #[error("cannot give the broker's streams their replicas")]
    Replicas(#[from] crate::replicas::ReplicasError),
    /// The KV state could not be opened or read.
    #[error("cannot read the gateway state")]
    Store(#[from] StoreError),
    /// The stack operations queue could not be set up.
    #[error("cannot set up the stack operations queue")]
    Operations(#[from] crate::operations::OperationsError),
    /// The state directory or the gateway's keys could not be used.
    #[error("cannot use the state directory")]
    State(#[from] crate::state::StateError),
    /// The listener could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The configured address.
        addr: SocketAddr,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The HTTPS certificate or key cannot be used.
    #[error("cannot serve HTTPS")]
    Tls(#[from] crate::tls::TlsError),
    /// The broker connection's TLS files cannot be used.
    #[error("cannot set up TLS for the broker connection")]
    NatsTls(#[from] flue_proto::nats_tls::NatsTlsError),
    /// Operator mode is the default and the state directory has no operator.
    #[error(
        "{} holds no broker keys: run `flue-gateway init --state-dir {}` first and start nats-server with the configuration it writes (or, for development only, give --insecure-dev-broker to use an anonymous broker)",
        .0.display(), .0.display()
    )]
    NoOperator(std::path::PathBuf),
    /// The broker's keys in the state directory cannot be used.
    #[error("cannot use the broker's keys")]
    BrokerAuth(#[from] crate::natsauth::NatsAuthError),
    /// A tenant's runtime could not be started.
    #[error("cannot serve a tenant")]
    Tenant(#[from] Box<crate::tenants::TenantError>),
    /// `--request-consumer-storage` or `--request-consumer-replicas` that do not fit the
    /// request stream's `--replicas`.
    #[error(transparent)]
    RequestConsumers(#[from] crate::request_consumers::RequestConsumersError),
    /// Writing the "listening" line to standard output failed.
    #[error("cannot write to standard output")]
    Stdout(#[source] std::io::Error),
}

/// An error and all its causes, joined by `": "`, for logs.
///
/// Some errors (async-nats's among them) already print their cause; a cause whose text
/// is already there is not repeated.
pub fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("wrapper: {0}")]
    struct Repeats(#[source] std::io::Error);

    #[test]
    fn chain_joins_causes_once() {
        let io = || std::io::Error::other("disk full");
        assert_eq!(chain(&Outer(io())), "outer: disk full");
        assert_eq!(chain(&Repeats(io())), "wrapper: disk full");
    }
}
