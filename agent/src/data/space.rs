//! One deployment's view of the data space: its stack's keys in the KV bucket, and the
//! wait for a key that subscribes on core NATS instead of creating a consumer.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::context::{GetStreamError, GetStreamErrorKind, KeyValueError};
use async_nats::jetstream::{self, ErrorCode, kv};
use bytes::Bytes;
use flue_proto::{StackId, TenantId, subject};
use futures_util::StreamExt;
use tokio::sync::{OnceCell, watch};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::wire::{DataRequest, DataResponse};
use super::{MAX_VALUE_BYTES, format_wait};
use crate::connect::{self, Broker};

/// Header the KV sets on a delete or purge; a put carries none.
const KV_OPERATION_HEADER: &str = "KV-Operation";
/// How often a waited-for key is read again. Behind a leaf node nats-server keeps `$KV.>`
/// from crossing the leaf connection (both ways, between JetStream domains), so the
/// subscription never hears a put made through the hub: only reading again finds it.
const REREAD_EVERY: Duration = Duration::from_millis(250);
/// Stands in for a wait too long to add to the clock.
const FOREVER: Duration = Duration::from_secs(365 * 24 * 3600);

/// The data space as the running deployment sees it: its tenant and stack fix the scope.
#[derive(Debug, Clone)]
pub struct DataSpace {
    client: async_nats::Client,
    js: jetstream::Context,
    connects: watch::Receiver<u64>,
    tenant: TenantId,
    stack: Option<StackId>,
    /// The bucket handle, looked up at the first request (a look-up that fails is retried
    /// at the next one).
    store: Arc<OnceCell<kv::Store>>,
}

impl DataSpace {
    /// The space of `stack` (none: the deployment is not part of a stack) of `tenant`.
    pub fn new(broker: &Broker, tenant: TenantId, stack: Option<StackId>) -> Self {
        Self {
            client: broker.client.clone(),
            js: broker.js.clone(),
            connects: broker.connects.clone(),
            tenant,
            stack,
            store: Arc::new(OnceCell::new()),
        }
    }

    /// Answers one request of the running hook.
    pub async fn handle(&self, req: DataRequest) -> DataResponse {
        let Some(stack) = &self.stack else {
            return DataResponse::error("this deployment is not part of a stack");
        };
        let key = match &req {
            DataRequest::Put { key, .. }
            | DataRequest::Get { key, .. }
            | DataRequest::Delete { key } => key,
        };
        if let Err(e) = subject::validate_data_key(key) {
            return DataResponse::error(e.to_string());
        }
        let store = match self.store().await {
            Ok(store) => store,
            Err(message) => return DataResponse::error(message),
        };
        let full_key = subject::data_key(&self.tenant, stack, key);
        match req {
            DataRequest::Put { key, value } => put(store, &full_key, &key, value).await,
            DataRequest::Get { key, wait_ms: None } => match get(store, &full_key).await {
                Ok(Some(value)) => DataResponse::Ok { value: Some(value) },
                Ok(None) => DataResponse::NotFound {
                    message: format!("key {key:?} is not set"),
                },
                Err(message) => DataResponse::error(message),
            },
            DataRequest::Get {
                key,
                wait_ms: Some(ms),
            } => {
                let wait = Duration::from_millis(ms);
                self.wait(store, stack, &full_key, &key, wait).await
            }
            DataRequest::Delete { key } => match store.delete(&full_key).await {
                Ok(()) => {
                    debug!(key = %key, "data key deleted");
                    DataResponse::done()
                }
                Err(e) => DataResponse::error(format!("cannot delete key {key:?}: {e}")),
            },
        }
    }

    /// The bucket, or why it cannot be used.
    async fn store(&self) -> Result<&kv::Store, String> {
        self.store
            .get_or_try_init(|| self.js.get_key_value(subject::DATA_BUCKET))
            .await
            .map_err(|e| {
                if bucket_missing(&e) {
                    format!(
                        "the data space bucket {:?} does not exist on the broker (the gateway creates it when it starts)",
                        subject::DATA_BUCKET
                    )
                } else {
                    format!("the data space is unavailable: {e}")
                }
            })
    }

    /// Reads `full_key`, waiting up to `wait` for a put when it is not set.
    ///
    /// The subscription to the key's subject comes first and the read second, so a put
    /// landing between the two is still seen. Each reconnection reads the key again, since
    /// a put published while the connection was down never reaches the subscription, and so
    /// does every [`REREAD_EVERY`], for puts the subscription cannot hear (leaf nodes).
    async fn wait(
        &self,
        store: &kv::Store,
        stack: &StackId,
        full_key: &str,
        key: &str,
        wait: Duration,
    ) -> DataResponse {
        // A wait too long to represent is as good as forever: the hook's timeout ends it.
        let deadline = Instant::now()
            .checked_add(wait)
            .unwrap_or_else(|| Instant::now() + FOREVER);
        let subject = subject::data_key_subject(&self.tenant, stack, key);
        let mut puts = match self.client.subscribe(subject).await {
            Ok(sub) => sub,
            Err(e) => return DataResponse::error(format!("cannot watch key {key:?}: {e}")),
        };
        let mut connects = self.connects.clone();
        connects.borrow_and_update();
        match get(store, full_key).await {
            Ok(Some(value)) => return DataResponse::Ok { value: Some(value) },
            Ok(None) => {}
            Err(message) => return DataResponse::error(message),
        }
        info!(key = %key, wait = %format_wait(wait), "waiting for a data key");
        let not_set = || DataResponse::NotFound {
            message: format!("key {key:?} was not set within {}", format_wait(wait)),
        };
        let mut reread = tokio::time::interval_at(Instant::now() + REREAD_EVERY, REREAD_EVERY);
        reread.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return not_set(),
                _ = connect::reconnected(&mut connects) => match get(store, full_key).await {
                    Ok(Some(value)) => return DataResponse::Ok { value: Some(value) },
                    Ok(None) => {}
                    Err(message) => warn!(error = %message, "reading a data key after a reconnection failed"),
                },
                _ = reread.tick() => match get(store, full_key).await {
                    Ok(Some(value)) => return DataResponse::Ok { value: Some(value) },
                    Ok(None) => {}
                    Err(message) => debug!(error = %message, "reading a waited-for data key failed"),
                },
                msg = puts.next() => match msg {
                    Some(msg) if is_put(&msg) => {
                        debug!(key = %key, "data key put while waiting");
                        return DataResponse::Ok { value: Some(text(msg.payload)) };
                    }
                    Some(_) => {}
                    None => return DataResponse::error(format!("stopped watching key {key:?}: the connection closed")),
                },
            }
        }
    }
}

/// True for a message the KV stored as a put (deletes and purges carry a header).
fn is_put(msg: &async_nats::Message) -> bool {
    msg.headers
        .as_ref()
        .is_none_or(|h| h.get(KV_OPERATION_HEADER).is_none())
}

async fn put(store: &kv::Store, full_key: &str, key: &str, value: String) -> DataResponse {
    if value.len() > MAX_VALUE_BYTES {
        return DataResponse::error(format!(
            "the value of key {key:?} is {} bytes, more than the limit of {MAX_VALUE_BYTES}",
            value.len()
        ));
    }
    match store.put(full_key, Bytes::from(value)).await {
        Ok(_) => {
            debug!(key = %key, "data key put");
            DataResponse::done()
        }
        Err(e) => DataResponse::error(format!("cannot put key {key:?}: {e}")),
    }
}

async fn get(store: &kv::Store, full_key: &str) -> Result<Option<String>, String> {
    match store.get(full_key).await {
        Ok(value) => Ok(value.map(text)),
        Err(e) => Err(format!("cannot read the data space: {e}")),
    }
}

/// A stored value as text; every writer goes through `flue-agent data`, which stores UTF-8.
fn text(bytes: Bytes) -> String {
    String::from_utf8(bytes.to_vec())
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// True when the look-up failed because the bucket's stream does not exist.
fn bucket_missing(e: &KeyValueError) -> bool {
    std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<GetStreamError>())
        .is_some_and(|g| {
            matches!(g.kind(), GetStreamErrorKind::JetStream(j)
                if j.error_code() == ErrorCode::STREAM_NOT_FOUND)
        })
}
