//! Presence: online / offline derived from agents' heartbeats (work in progress).

use async_nats::jetstream;
use flue_proto::{ServerId, TenantId};
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::service::Service;
use crate::store::StoreError;

/// What the gateway knows of every server's presence; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct PresenceTracker {}

impl PresenceTracker {
    /// Opens the presence state.
    pub async fn open(_js: &jetstream::Context, _config: &Config) -> Result<Self, StoreError> {
        Ok(Self {})
    }

    /// The presence of `server`, for API reads.
    pub fn view(&self, _tenant: &TenantId, _server: &ServerId) -> Option<flue_proto::Presence> {
        None
    }
}

/// Follows heartbeats and emits online / offline until cancelled.
pub async fn run(_service: Service, cancel: CancellationToken) {
    cancel.cancelled().await;
}
