//! How the gateway reaches a tenant's accounts on the broker: the [`Connector`] seam.
//!
//! A tenant's state (request and response streams, KV buckets, heartbeats) lives in its
//! tenant account; its event stream `FLUE_EVT` in its events account. The gateway holds
//! one connection to each per tenant ([`TenantConnections`]). Today there is one way to
//! get them, [`Connector::Dev`]: the configured `--nats-url`, one connection used for
//! both, which can serve a single tenant only (stream and bucket names are fixed, so two
//! tenants in one account would share them); the gateway uses it only when given
//! `--insecure-dev-broker`. [`Connector::Operator`] is how the gateway runs: the state
//! directory holds the broker's keys (`flue-gateway init`), each tenant is reached as its
//! own gateway users (a fresh nkey per connection), and a system-account connection pushes
//! account JWTs (at start, after each reconnection, every `--account-push-secs`, for each
//! new tenant, for revocations).

use std::sync::Arc;
use std::time::Duration;

use flue_proto::TenantId;
use flue_proto::creds::UserCreds;
use flue_proto::nats_tls::NatsTls;
use flue_proto::nats_url::{NatsUrls, redact};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::natsauth::{AccountKind, BrokerUsers, NatsAuth, NatsAuthError};
use crate::presence::Advisories;
use crate::startup::{ConnectorError, Error};

/// Longest wait for a drained connection to close.
const DRAIN_GRACE: Duration = Duration::from_secs(5);

/// One broker connection of the gateway, and the signal of its (re)connections.
#[derive(Debug, Clone)]
pub struct Connection {
    /// The client.
    pub client: async_nats::Client,
    /// Changes each time the connection is made (again).
    pub reconnected: watch::Receiver<u64>,
    /// True once the client closed for good (drained): its state alone still reads
    /// "connected" then.
    closed: watch::Receiver<bool>,
}

impl Connection {
    /// True once the connection is closed for good.
    pub fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    /// Drains the connection (pending publishes flushed, subscriptions closed) and waits,
    /// at most [`DRAIN_GRACE`], until it is closed; false when it did not close in time
    /// or was not connected (the client is dropped with its last handle then).
    pub async fn drain(&self) -> bool {
        // A client reconnecting to a broker that is away handles no command until it is
        // back: there is nothing to flush, and waiting would only delay the stop.
        if self.client.connection_state() != async_nats::connection::State::Connected {
            return false;
        }
        if let Err(e) = self.client.drain().await {
            warn!(error = %e, "cannot drain a broker connection");
        }
        let mut closed = self.closed.clone();
        matches!(
            tokio::time::timeout(DRAIN_GRACE, closed.wait_for(|c| *c)).await,
            Ok(Ok(_))
        )
    }
}

/// The connections one tenant runtime uses.
#[derive(Debug, Clone)]
pub struct TenantConnections {
    /// To the tenant account: streams, consumers, KV buckets, heartbeats.
    pub tenant: Connection,
    /// To the tenant's events account (`FLUE_EVT`); `None` when the events stream is
    /// reached through `tenant` (development mode: one account holds everything).
    pub events: Option<Connection>,
    /// The tenant's broker users (agents', listeners'); `None` in development mode, where
    /// the broker checks no user.
    pub users: Option<BrokerUsers>,
}

impl TenantConnections {
    /// The connection to the event stream.
    pub fn events(&self) -> &Connection {
        self.events.as_ref().unwrap_or(&self.tenant)
    }

    /// Drains every connection and waits (bounded) until they are closed; false when
    /// one did not close in time.
    pub async fn drain(&self) -> bool {
        let mut closed = true;
        for connection in self.all() {
            closed &= connection.drain().await;
        }
        closed
    }

    /// True once every connection is closed for good.
    pub fn is_closed(&self) -> bool {
        self.all().all(Connection::is_closed)
    }

    fn all(&self) -> impl Iterator<Item = &Connection> {
        std::iter::once(&self.tenant).chain(&self.events)
    }
}

/// How tenants are provisioned on the broker and reached; cheap to clone.
#[derive(Debug, Clone)]
pub enum Connector {
    /// One anonymous connection to `--nats-url`, shared by the tenant and its events,
    /// for the one tenant `--default-tenant`.
    Dev(Arc<DevConnector>),
    /// Operator mode: each tenant reached as its own gateway users, minted from the state
    /// directory's keys; accounts pushed over a system-account connection.
    Operator(Arc<OperatorConnector>),
}

/// [`Connector::Operator`]'s settings and its system-account connection. Its `Debug` form
/// hides the passwords in the URL and shows public keys only.
pub struct OperatorConnector {
    nats_url: String,
    tls: NatsTls,
    auth: NatsAuth,
    system: Connection,
}

impl std::fmt::Debug for OperatorConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OperatorConnector")
            .field("nats_url", &redact(&self.nats_url))
            .field("auth", &self.auth)
            .finish()
    }
}

impl OperatorConnector {
    /// The system-account connection.
    pub(super) fn system(&self) -> &Connection {
        &self.system
    }

    /// Pushes every account JWT over the system connection.
    pub(super) async fn push_all(&self) -> Result<(), NatsAuthError> {
        self.auth.push_all(&self.system.client).await
    }

    /// Connects as `user`, named `name`.
    async fn connect_as(&self, user: &UserCreds, name: &str) -> Result<Connection, ConnectorError> {
        connect_as(&self.nats_url, &self.tls, user, name).await
    }
}

/// Connects to `url` as the NATS user `user`, with `tls`, named `name`.
async fn connect_as(
    url: &str,
    tls: &NatsTls,
    user: &UserCreds,
    name: &str,
) -> Result<Connection, ConnectorError> {
    Ok(connect(url, user_options(user, tls)?, name).await?)
}

/// Connect options authenticating as the NATS user `user` (its JWT, the broker's nonce
/// signed with its seed), with `tls` applied.
pub fn user_options(
    user: &UserCreds,
    tls: &NatsTls,
) -> Result<async_nats::ConnectOptions, ConnectorError> {
    let key = nkeys::KeyPair::from_seed(&user.seed)
        .map_err(|e| ConnectorError::UserSeed(e.to_string()))?;
    let key = Arc::new(key);
    let options = async_nats::ConnectOptions::with_jwt(user.jwt.clone(), move |nonce| {
        let key = key.clone();
        async move { key.sign(&nonce).map_err(async_nats::AuthError::new) }
    });
    Ok(tls.apply(options))
}

/// [`Connector::Dev`]'s settings. Its `Debug` form hides the passwords in the URL.
pub struct DevConnector {
    /// The broker URL(s), possibly with credentials (never logged).
    pub nats_url: String,
    /// The one tenant served.
    pub tenant: TenantId,
    /// TLS of the connection (`--nats-ca`, `--nats-cert`, `--nats-key`).
    pub tls: NatsTls,
}

impl std::fmt::Debug for DevConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevConnector")
            .field("nats_url", &redact(&self.nats_url))
            .field("tenant", &self.tenant)
            .finish()
    }
}

impl Connector {
    /// The development connector: `nats_url` for `tenant` only.
    pub fn dev(nats_url: impl Into<String>, tenant: TenantId, tls: NatsTls) -> Self {
        Self::Dev(Arc::new(DevConnector {
            nats_url: nats_url.into(),
            tenant,
            tls,
        }))
    }

    /// The operator-mode connector: opens a system-account connection to `nats_url`,
    /// pushes every account to the broker (one that lost its resolver directory, or
    /// started before a tenant was created offline, learns them), and pushes them again
    /// after each reconnection and every `push_every` (when given: a tenant leaf node
    /// that missed an update learns it) until `shutdown` is cancelled ([`super::repush`]).
    pub async fn operator(
        nats_url: impl Into<String>,
        tls: NatsTls,
        auth: NatsAuth,
        push_every: Option<Duration>,
        shutdown: CancellationToken,
    ) -> Result<Self, ConnectorError> {
        let nats_url = nats_url.into();
        let system = connect_as(
            &nats_url,
            &tls,
            &auth.system_creds()?,
            "flue-gateway system",
        )
        .await?;
        if let Err(e) = auth.push_all(&system.client).await {
            system.drain().await;
            return Err(e.into());
        }
        let operator = Arc::new(OperatorConnector {
            nats_url,
            tls,
            auth,
            system,
        });
        tokio::spawn(super::repush::run(operator.clone(), push_every, shutdown));
        Ok(Self::Operator(operator))
    }

    /// The tenants that exist, served from the start.
    pub fn tenants(&self) -> Result<Vec<TenantId>, ConnectorError> {
        match self {
            Self::Dev(dev) => Ok(vec![dev.tenant.clone()]),
            Self::Operator(op) => Ok(op.auth.tenants()?),
        }
    }

    /// Closes the connector's own connection (operator mode: the system account's).
    pub async fn close(&self) {
        if let Self::Operator(op) = self {
            op.system.drain().await;
        }
    }

    /// Makes `tenant` exist on the broker (its accounts, pushed to the broker); does
    /// nothing for one that exists. Called before [`Connector::connect`] for a tenant
    /// created while serving.
    pub async fn provision(&self, tenant: &TenantId) -> Result<(), ConnectorError> {
        match self {
            Self::Dev(dev) if *tenant == dev.tenant => Ok(()),
            Self::Dev(dev) => Err(ConnectorError::OneTenantOnly {
                served: dev.tenant.clone(),
            }),
            Self::Operator(op) => Ok(op.auth.create_tenant(tenant, &op.system.client).await?),
        }
    }

    /// Where the broker's disconnect advisories of `tenant`'s agents are read (presence):
    /// the system-account connection and the edge and tenant accounts (an agent not yet
    /// rotated after the upgrade to the edge layout is a user of the tenant account), in
    /// operator mode only (development mode has no system account); `None` too when an
    /// account's key cannot be read (logged).
    pub fn advisories(&self, tenant: &TenantId) -> Option<Advisories> {
        let Self::Operator(op) = self else {
            return None;
        };
        let keys = [AccountKind::Edge, AccountKind::Tenant]
            .map(|kind| op.auth.account_public_key(tenant, kind));
        match keys.into_iter().collect::<Result<Vec<_>, _>>() {
            Ok(accounts) => Some(Advisories {
                system: op.system.client.clone(),
                accounts,
            }),
            Err(e) => {
                warn!(error = %e, tenant = %tenant, "cannot read the tenant's account keys; presence follows heartbeats only");
                None
            }
        }
    }

    /// Opens the connections of `tenant`'s runtime.
    pub async fn connect(&self, tenant: &TenantId) -> Result<TenantConnections, ConnectorError> {
        match self {
            Self::Dev(dev) => {
                self.provision(tenant).await?;
                let tenant = connect(
                    &dev.nats_url,
                    dev.tls.apply(async_nats::ConnectOptions::new()),
                    "flue-gateway",
                )
                .await?;
                Ok(TenantConnections {
                    tenant,
                    events: None,
                    users: None,
                })
            }
            Self::Operator(op) => {
                let (tenant_user, events_user) = op.auth.gateway_creds(tenant)?;
                let name = format!("flue-gateway {tenant}");
                let main = op.connect_as(&tenant_user, &name).await?;
                let events = match op.connect_as(&events_user, &format!("{name} events")).await {
                    Ok(events) => events,
                    Err(e) => {
                        main.drain().await;
                        return Err(e);
                    }
                };
                Ok(TenantConnections {
                    tenant: main,
                    events: Some(events),
                    users: Some(BrokerUsers::new(
                        tenant.clone(),
                        op.auth.clone(),
                        op.system.client.clone(),
                    )),
                })
            }
        }
    }
}

/// Connects to the broker at `url` (credentials in it applied over `options`) as `name`.
pub async fn connect(
    url: &str,
    options: async_nats::ConnectOptions,
    name: &str,
) -> Result<Connection, Error> {
    let urls = NatsUrls::parse(url);
    let (connected, reconnected) = watch::channel(0_u64);
    let connected = Arc::new(connected);
    let (closing, closed) = watch::channel(false);
    let closing = Arc::new(closing);
    let client = urls
        .with_credentials(options)
        .name(name)
        .event_callback(move |event| {
            let connected = connected.clone();
            let closing = closing.clone();
            async move {
                match event {
                    async_nats::Event::Connected => {
                        info!("broker connected");
                        connected.send_modify(|n| *n += 1);
                    }
                    async_nats::Event::Disconnected => {
                        warn!("broker connection lost; reconnecting")
                    }
                    async_nats::Event::Draining => debug!("broker connection draining"),
                    async_nats::Event::Closed => {
                        info!("broker connection closed");
                        closing.send_replace(true);
                    }
                    other => warn!(event = %other, "broker event"),
                }
            }
        })
        .connect(urls.servers())
        .await
        .map_err(|source| Error::Connect {
            url: urls.redacted(),
            source,
        })?;
    Ok(Connection {
        client,
        reconnected,
        closed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn connect_errors_hide_passwords() {
        // Nothing listens on port 1, so the connection is refused at once.
        let e = connect(
            "nats://gw:s3cret@127.0.0.1:1",
            async_nats::ConnectOptions::new(),
            "test",
        )
        .await
        .expect_err("nothing listens on port 1");
        let text = crate::error::chain(&e);
        assert!(!text.contains("s3cret"), "{text}");
        assert!(text.contains("nats://gw:***@127.0.0.1:1"), "{text}");
    }

    #[test]
    fn the_connector_never_shows_the_broker_password() {
        let connector = Connector::dev(
            "nats://gw:s3cret@127.0.0.1:4222",
            TenantId::new("default").expect("id"),
            NatsTls::default(),
        );
        let shown = format!("{connector:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("nats://gw:***@127.0.0.1:4222"), "{shown}");
    }

    #[tokio::test]
    async fn development_mode_serves_one_tenant() {
        let served = TenantId::new("default").expect("id");
        let connector = Connector::dev("nats://127.0.0.1:1", served.clone(), NatsTls::default());
        assert_eq!(
            connector.tenants().expect("listed"),
            std::slice::from_ref(&served)
        );
        connector.provision(&served).await.expect("the served one");
        let other = TenantId::new("acme").expect("id");
        let e = connector.provision(&other).await.expect_err("a second one");
        assert!(matches!(e, ConnectorError::OneTenantOnly { .. }), "{e}");
        assert!(e.to_string().contains("serves only tenant default"), "{e}");
        let e = connector
            .connect(&other)
            .await
            .expect_err("never connected");
        assert!(matches!(e, ConnectorError::OneTenantOnly { .. }), "{e}");
    }
}
