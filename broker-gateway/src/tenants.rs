//! One gateway, many tenants: the registry of tenant runtimes, and which tenant a
//! request is for.
//!
//! Each tenant is served by its own [`TenantRuntime`] (its service, tasks and router),
//! reached through its own broker connections (the [`Connector`]). [`Tenants`] starts the
//! runtimes of the tenants that exist at start, starts one for a tenant created while
//! serving, dispatches by [`tenant_of`], and stops them all at shutdown. A caller is only
//! ever handed to its own tenant's runtime, so another tenant's objects are simply not
//! found there.

pub mod book;
pub mod broker_health;
pub mod connector;
pub mod readiness;
mod repush;
pub mod runtime;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use axum::extract::Request;
use flue_proto::{CreateTenant, Tenant, TenantId};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

pub use book::TenantBook;
pub use connector::{Connector, TenantConnections};
pub use runtime::{Stopped, TenantRouter, TenantRuntime};

use crate::Config;
use crate::auth::Revocations;
use crate::startup::Error;
pub use crate::startup::{ConnectorError, TenantError};
use crate::state::GatewayKeys;

/// The tenant a request is for: the authenticated caller's (`auth::Principal`, put there
/// by the middleware; `--insecure-no-auth` makes every caller the default tenant's).
/// `None` when the caller has no tenant (an operator) or was not authenticated.
///
/// The one place that decides it.
pub fn tenant_of(request: &Request) -> Option<TenantId> {
    // A polling server's secret URLs carry no token: the path names the tenant, and
    // the secret in it is checked by that tenant's runtime (`api::poll`).
    if let Some(tenant) = flue_proto::poll::tenant_of_path(request.uri().path()) {
        return Some(tenant);
    }
    request
        .extensions()
        .get::<crate::auth::Principal>()
        .and_then(|p| p.tenant.clone())
}

/// How long a gateway's start keeps trying a tenant whose start failed for a reason that
/// passes by itself ([`crate::broker::transient`]). A gateway on a 3-node cluster took
/// over 60 s to create its replicated streams at load 12 on 2 cores.
const START_PATIENCE: std::time::Duration = std::time::Duration::from_secs(120);
/// Pause between two tries of a tenant's start (the broker is busy: give it room).
const START_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether [`Tenants::create`] made the tenant or found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    /// Created now.
    New,
    /// It existed already (its record is returned unchanged).
    Existing,
}

/// The running tenants; cheap to clone.
#[derive(Debug, Clone)]
pub struct Tenants {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: Arc<Config>,
    keys: GatewayKeys,
    connector: Connector,
    /// Each runtime registers its token revocation list here.
    revocations: Revocations,
    /// Builds each runtime's routes.
    router: TenantRouter,
    book: TenantBook,
    /// Never held across an `.await`.
    runtimes: RwLock<BTreeMap<TenantId, Arc<TenantRuntime>>>,
    /// Serialises creations, so that two requests for one new tenant start one runtime.
    creating: tokio::sync::Mutex<()>,
    shutdown: CancellationToken,
    /// What the broker's own health check says of the Flue streams (operator mode only:
    /// it needs the system account), [`broker_health`].
    broker_health: Option<tokio::sync::watch::Receiver<Option<flue_proto::NotReady>>>,
}

impl Tenants {
    /// An empty registry; each runtime serves the routes `router` builds, and they stop
    /// when `shutdown` is cancelled (or by [`Tenants::shutdown`]).
    pub fn new(
        config: Arc<Config>,
        keys: GatewayKeys,
        connector: Connector,
        revocations: Revocations,
        router: TenantRouter,
        shutdown: CancellationToken,
    ) -> Result<Self, Error> {
        let book = TenantBook::open(&config.state_dir)?;
        let broker_health = match &connector {
            Connector::Operator(operator) => {
                let (found, health) = tokio::sync::watch::channel(None);
                tokio::spawn(broker_health::run(
                    operator.system().client.clone(),
                    found,
                    shutdown.child_token(),
                ));
                Some(health)
            }
            Connector::Dev(_) => None,
        };
        Ok(Self {
            inner: Arc::new(Inner {
                config,
                keys,
                connector,
                revocations,
                router,
                book,
                runtimes: RwLock::default(),
                creating: tokio::sync::Mutex::new(()),
                shutdown,
                broker_health,
            }),
        })
    }

    /// A Flue stream the broker holds broken until it is restarted, as its own health
    /// check said at the last probe ([`broker_health`]; never in development mode).
    pub fn broker_not_ready(&self) -> Option<flue_proto::NotReady> {
        self.inner
            .broker_health
            .as_ref()
            .and_then(|health| health.borrow().clone())
    }

    /// The gateway's configuration (`tenant` is the default tenant).
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The tenant served to requests that name none (`--default-tenant`).
    pub fn default_tenant(&self) -> &TenantId {
        &self.inner.config.tenant
    }

    /// Starts the runtime of every tenant the connector knows. A tenant whose creation
    /// failed (marked, [`TenantBook::mark_creating`]) and still cannot start is left out,
    /// logged, rather than keeping every other tenant from being served; any other
    /// tenant's failure stops the start.
    pub async fn start_existing(&self) -> Result<(), TenantError> {
        for id in self.inner.connector.tenants()? {
            match self.start_patiently(&id).await {
                Ok(_) => self.created(&id),
                Err(e) if self.inner.book.is_creating(&id) => error!(
                    tenant = %id,
                    error = %crate::error::chain(&e),
                    "a tenant whose creation failed still cannot start: not served (POST /v1/tenants again once the cause is fixed)"
                ),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Connects to `id`'s accounts and starts its runtime. A start that fails for a
    /// reason that passes by itself ([`crate::broker::transient`]: a replicated stream
    /// whose creation outlasted `--broker-timeout-ms` on a loaded cluster, a cluster
    /// still electing) is tried again on fresh connections, every step being idempotent,
    /// until [`START_PATIENCE`] has passed; then its error stops the start as any other.
    async fn start_patiently(&self, id: &TenantId) -> Result<Arc<TenantRuntime>, TenantError> {
        let until = tokio::time::Instant::now() + START_PATIENCE;
        let mut attempt = 1u32;
        loop {
            let connections = self.inner.connector.connect(id).await?;
            match self.start_runtime(id, "", connections).await {
                Err(e @ TenantError::Start { .. })
                    if crate::broker::transient(&e) && tokio::time::Instant::now() < until =>
                {
                    warn!(
                        tenant = %id,
                        attempt,
                        error = %crate::error::chain(&e),
                        "the broker was too slow for the tenant's start; starting it again"
                    );
                    attempt += 1;
                    tokio::time::sleep(START_RETRY_PAUSE).await;
                }
                done => return done,
            }
        }
    }

    /// Clears `id`'s creation mark now that it is served (a failure is logged: the mark
    /// only makes a later start more lenient with this tenant).
    fn created(&self, id: &TenantId) {
        if let Err(e) = self.inner.book.created(id) {
            warn!(tenant = %id, error = %crate::error::chain(&e), "cannot clear a tenant's creation mark");
        }
    }

    /// Creates a tenant (provisioned on the broker, then served) unless it exists.
    pub async fn create(&self, body: CreateTenant) -> Result<(Tenant, Created), TenantError> {
        body.validate()?;
        if let Some(runtime) = self.get(&body.id) {
            return Ok((runtime.tenant().clone(), Created::Existing));
        }
        let _creating = self.inner.creating.lock().await;
        if let Some(runtime) = self.get(&body.id) {
            return Ok((runtime.tenant().clone(), Created::Existing));
        }
        self.inner
            .book
            .mark_creating(&body.id)
            .map_err(|e| TenantError::Start {
                tenant: body.id.clone(),
                source: e.into(),
            })?;
        let connector = &self.inner.connector;
        connector.provision(&body.id).await?;
        let connections = connector.connect(&body.id).await?;
        let runtime = self
            .start_unlocked(&body.id, &body.name, connections)
            .await?;
        self.created(&body.id);
        info!(tenant = %body.id, "tenant created");
        Ok((runtime.tenant().clone(), Created::New))
    }

    /// Starts and registers the runtime of `id` on `connections` (its record made,
    /// named `name`, when missing); refused when `id` is served already.
    pub async fn start_runtime(
        &self,
        id: &TenantId,
        name: &str,
        connections: TenantConnections,
    ) -> Result<Arc<TenantRuntime>, TenantError> {
        let _creating = self.inner.creating.lock().await;
        self.start_unlocked(id, name, connections).await
    }

    /// [`Tenants::start_runtime`], the caller holding `creating`.
    async fn start_unlocked(
        &self,
        id: &TenantId,
        name: &str,
        connections: TenantConnections,
    ) -> Result<Arc<TenantRuntime>, TenantError> {
        if self.get(id).is_some() {
            connections.drain().await;
            return Err(TenantError::AlreadyServed(id.clone()));
        }
        let start = async {
            let record = self.inner.book.load_or_create(id, name)?;
            // Boxed: the runtime's start is a large future, and a caller's stack (a test's
            // thread) should not have to hold it.
            Box::pin(TenantRuntime::start(
                &self.inner.config,
                record,
                connections.clone(),
                self.inner.keys.clone(),
                &self.inner.revocations,
                &self.inner.shutdown,
                self.inner.router,
            ))
            .await
        };
        let runtime = match start.await {
            Ok(runtime) => {
                // Connections the operator connector made (with broker users): their
                // account's disconnect advisories come over its system connection.
                if connections.users.is_some()
                    && let Some(advisories) = self.inner.connector.advisories(id)
                {
                    runtime.follow_disconnects(advisories);
                }
                Arc::new(runtime)
            }
            Err(source) => {
                // Nothing holds them: a failed start leaves no connection behind.
                connections.drain().await;
                return Err(TenantError::Start {
                    tenant: id.clone(),
                    source,
                });
            }
        };
        self.write().insert(id.clone(), runtime.clone());
        Ok(runtime)
    }

    /// The runtime of `id`, if it is served.
    pub fn get(&self, id: &TenantId) -> Option<Arc<TenantRuntime>> {
        self.read().get(id).cloned()
    }

    /// Every runtime, by tenant id.
    pub fn runtimes(&self) -> Vec<Arc<TenantRuntime>> {
        self.read().values().cloned().collect()
    }

    /// Every tenant served, by id.
    pub fn list(&self) -> Vec<Tenant> {
        self.read().values().map(|r| r.tenant().clone()).collect()
    }

    /// Stops serving `id`: its runtime is forgotten first (its callers get 404 from then
    /// on), then stopped. `None` when it was not served.
    pub async fn stop(&self, id: &TenantId) -> Option<Stopped> {
        let runtime = self.write().remove(id)?;
        self.inner.revocations.remove(id);
        Some(runtime.shutdown().await)
    }

    /// Stops every runtime (side by side) and forgets them; true when all stopped clean.
    pub async fn shutdown(&self) -> bool {
        let runtimes: Vec<_> = std::mem::take(&mut *self.write()).into_values().collect();
        let stopped = futures_util::future::join_all(runtimes.iter().map(|r| r.shutdown())).await;
        self.inner.connector.close().await;
        stopped.iter().all(|s| *s == Stopped::Clean)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<TenantId, Arc<TenantRuntime>>> {
        // A panic while holding the lock leaves the map itself consistent.
        self.inner
            .runtimes
            .read()
            .unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<TenantId, Arc<TenantRuntime>>> {
        self.inner
            .runtimes
            .write()
            .unwrap_or_else(|e| e.into_inner())
    }
}
