//! Why the gateway, a tenant's runtime or a tenant's broker connection could not start
//! ([`Error`], [`TenantError`], [`ConnectorError`]): one module, since each can cause
//! another.

use std::net::SocketAddr;

use flue_proto::TenantId;

use crate::broker::BrokerError;
use crate::natsauth::NatsAuthError;
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
    BrokerAuth(#[from] NatsAuthError),
    /// A tenant's runtime could not be started.
    #[error("cannot serve a tenant")]
    Tenant(#[from] Box<TenantError>),
    /// `--request-consumer-storage` or `--request-consumer-replicas` that do not fit the
    /// request stream's `--replicas`.
    #[error(transparent)]
    RequestConsumers(#[from] crate::request_consumers::RequestConsumersError),
    /// Writing the "listening" line to standard output failed.
    #[error("cannot write to standard output")]
    Stdout(#[source] std::io::Error),
}

/// Why a tenant could not be created or started.
#[derive(Debug, thiserror::Error)]
pub enum TenantError {
    /// The body is not acceptable (name too long, …).
    #[error(transparent)]
    Invalid(#[from] flue_proto::tenant::TenantNameError),
    /// The connector cannot provision or reach it.
    #[error(transparent)]
    Connector(#[from] ConnectorError),
    /// A runtime serves it already (a second one would run its tasks twice).
    #[error("tenant {0} is served already")]
    AlreadyServed(TenantId),
    /// Its runtime could not start (broker calls, state directory).
    #[error("cannot start tenant {tenant}")]
    Start {
        /// The tenant.
        tenant: TenantId,
        /// Cause.
        #[source]
        source: Error,
    },
}

/// Why a tenant cannot be provisioned or reached.
#[derive(Debug, thiserror::Error)]
pub enum ConnectorError {
    /// Development mode serves one tenant: the broker connection is anonymous and the
    /// stream names are fixed, so a second tenant would share the first one's state.
    #[error(
        "this gateway runs in development mode (one anonymous broker connection) and serves only tenant {served}; more tenants need broker accounts (operator mode, `flue-gateway init`)"
    )]
    OneTenantOnly {
        /// The tenant served.
        served: TenantId,
    },
    /// The broker could not be reached.
    #[error(transparent)]
    Connect(#[from] Error),
    /// The broker's keys could not be read, or the broker refused an account.
    #[error(transparent)]
    Auth(#[from] NatsAuthError),
    /// A user seed minted here cannot be read back (never expected).
    #[error("a minted NATS user seed cannot be read: {0}")]
    UserSeed(String),
}
