//! Webhook subscriptions and their delivery (work in progress).

use async_nats::jetstream;
use tokio_util::sync::CancellationToken;

use crate::service::Service;
use crate::store::StoreError;

/// Webhook subscriptions; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Webhooks {}

impl Webhooks {
    /// Opens the subscriptions' state.
    pub async fn open(_js: &jetstream::Context) -> Result<Self, StoreError> {
        Ok(Self {})
    }
}

/// Delivers events to every subscription until cancelled.
pub async fn run(_service: Service, cancel: CancellationToken) {
    cancel.cancelled().await;
}
