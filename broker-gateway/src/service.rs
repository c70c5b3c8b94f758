//! Shared state of a running gateway, and publishing deployment requests reliably.
//!
//! A deployment is recorded (QUEUED, `request_published: false`) before its request is
//! published, and marked published only after the broker acknowledged it. Whatever
//! fails in between is retried by [`republish`] and, after a restart, by
//! [`Service::recover`]; the deployment id doubles as the JetStream message id, so a
//! retry that races a lost acknowledgement is dropped by the broker's de-duplication.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flue_proto::{
    Config as StoredConfig, ConfigId, DeploymentId, DeploymentRequest, PROTOCOL_VERSION,
};
use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::Config;
use crate::broker::{Broker, BrokerError};
use crate::error::chain;
use crate::record::{DeploymentRecord, apply_published};
use crate::store::{Store, StoreError};
use crate::timeouts::TimeoutSet;

/// Attempts made by the API before leaving a publish to the background retry.
const PUBLISH_ATTEMPTS: u32 = 3;
/// Pause after the first failed attempt; doubled after each further one.
const PUBLISH_BACKOFF: Duration = Duration::from_millis(100);
/// Interval of the background retry of unpublished requests.
const REPUBLISH_INTERVAL: Duration = Duration::from_secs(1);
/// Deployments read at once during recovery.
const RECOVERY_CONCURRENCY: usize = 32;

/// Why a request could not be published.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The state store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The broker refused or did not acknowledge the publish.
    #[error(transparent)]
    Broker(#[from] BrokerError),
    /// The deployment's config is gone (configs are never deleted by the gateway).
    #[error("config {0} of the deployment is missing")]
    MissingConfig(ConfigId),
}

/// What recovery found at start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Non-terminal deployments now watched for their timeout.
    pub pending: usize,
    /// Requests published again because their first publish was never confirmed.
    pub republished: usize,
}

/// Everything the API handlers and background tasks share; cheap to clone.
#[derive(Debug, Clone)]
pub struct Service {
    /// The gateway's configuration.
    pub config: Arc<Config>,
    /// KV state.
    pub store: Store,
    /// Streams and consumers.
    pub broker: Broker,
    /// Deployments waiting for an answer.
    pub timeouts: TimeoutSet,
    /// Deployments whose request still has to be published.
    unpublished: Arc<Mutex<BTreeSet<DeploymentId>>>,
    /// Cancelled when the gateway shuts down; long polls return early on it.
    pub shutdown: CancellationToken,
    /// Tracker of every task the gateway spawns, waited for at shutdown.
    pub tasks: TaskTracker,
}

impl Service {
    /// Bundles the handles of a started gateway.
    pub fn new(
        config: Arc<Config>,
        store: Store,
        broker: Broker,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            config,
            store,
            broker,
            timeouts: TimeoutSet::default(),
            unpublished: Arc::default(),
            shutdown,
            tasks: TaskTracker::new(),
        }
    }

    /// Publishes a recorded deployment's request, retrying a few times; on failure the
    /// background task takes over, so an accepted deployment is never lost.
    pub async fn publish_or_defer(&self, record: &DeploymentRecord, config: &StoredConfig) {
        let id = &record.deployment.id;
        let mut pause = PUBLISH_BACKOFF;
        for attempt in 1..=PUBLISH_ATTEMPTS {
            match self.publish(record, config).await {
                Ok(()) => return,
                Err(e) => {
                    warn!(error = %chain(&e), deployment.id = %id, attempt, "cannot publish deployment request")
                }
            }
            if attempt < PUBLISH_ATTEMPTS {
                tokio::select! {
                    () = self.shutdown.cancelled() => break,
                    () = tokio::time::sleep(pause) => {}
                }
                pause *= 2;
            }
        }
        self.defer(id.clone());
    }

    /// Indexes, publishes and marks published one recorded deployment.
    async fn publish(
        &self,
        record: &DeploymentRecord,
        config: &StoredConfig,
    ) -> Result<(), PublishError> {
        let d = &record.deployment;
        self.store
            .index_deployment(&d.tenant, &d.server_id, &d.id)
            .await?;
        self.broker
            .publish_request(&request(record, config))
            .await?;
        self.store
            .update_deployment(&d.tenant, &d.id, apply_published)
            .await?;
        debug!(deployment.id = %d.id, server.id = %d.server_id, "deployment request published");
        Ok(())
    }

    /// Reads a deployment and publishes its request if that is still to do.
    async fn publish_stored(&self, id: &DeploymentId) -> Result<bool, PublishError> {
        let tenant = &self.config.tenant;
        let Some(record) = self.store.deployment(tenant, id).await? else {
            return Ok(false);
        };
        if record.request_published || record.deployment.status.is_terminal() {
            return Ok(false);
        }
        let config_id = &record.deployment.config_id;
        let config = self
            .store
            .config(tenant, config_id)
            .await?
            .ok_or_else(|| PublishError::MissingConfig(config_id.clone()))?;
        self.publish(&record, &config).await?;
        Ok(true)
    }

    fn defer(&self, id: DeploymentId) {
        self.unpublished
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id);
    }

    fn take_deferred(&self) -> Vec<DeploymentId> {
        std::mem::take(&mut *self.unpublished.lock().unwrap_or_else(|p| p.into_inner()))
            .into_iter()
            .collect()
    }

    /// Rebuilds the in-memory state from the KV buckets: watches every non-terminal
    /// deployment's timeout and republishes every request never confirmed published.
    pub async fn recover(&self) -> Result<Recovery, StoreError> {
        let tenant = &self.config.tenant;
        let ids = self.store.deployment_ids(tenant).await?;
        let records: Vec<Result<Option<DeploymentRecord>, StoreError>> =
            futures_util::stream::iter(ids)
                .map(|id| async move { self.store.deployment(tenant, &id).await })
                .buffer_unordered(RECOVERY_CONCURRENCY)
                .collect()
                .await;
        let mut recovery = Recovery::default();
        for record in records {
            let Some(record) = record? else { continue };
            let d = &record.deployment;
            if d.status.is_terminal() {
                continue;
            }
            recovery.pending += 1;
            self.timeouts.insert(d.id.clone(), d.expires_at);
            if !record.request_published {
                match self.publish_stored(&d.id).await {
                    Ok(true) => recovery.republished += 1,
                    Ok(false) => {}
                    Err(e) => {
                        warn!(error = %chain(&e), deployment.id = %d.id, "cannot republish deployment request; retrying in the background");
                        self.defer(d.id.clone());
                    }
                }
            }
        }
        info!(
            pending = recovery.pending,
            republished = recovery.republished,
            "deployment state recovered"
        );
        Ok(recovery)
    }
}

/// The request queued for the agent of a recorded deployment.
pub fn request(record: &DeploymentRecord, config: &StoredConfig) -> DeploymentRequest {
    let d = &record.deployment;
    DeploymentRequest {
        v: PROTOCOL_VERSION,
        tenant: d.tenant.clone(),
        server: d.server_id.clone(),
        deployment_id: d.id.clone(),
        name: d.name.clone(),
        action: d.action.clone(),
        config: config.clone(),
        input_values: d.input_values.clone(),
        stack_id: d.stack_id.clone(),
        resource_name: d.resource_name.clone(),
        created_at: d.created_at,
        expires_at: d.expires_at,
    }
}

/// Retries, every second until cancelled, the publishes the API had to give up on.
pub async fn republish(service: Service, cancel: CancellationToken) {
    let mut tick = tokio::time::interval(REPUBLISH_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        for id in service.take_deferred() {
            match service.publish_stored(&id).await {
                Ok(true) => info!(deployment.id = %id, "deferred deployment request published"),
                Ok(false) => {}
                Err(e) => {
                    debug!(error = %chain(&e), deployment.id = %id, "deferred publish failed again");
                    service.defer(id);
                }
            }
        }
    }
}
