//! The `flue_presence` bucket: opening it, reading a record with its revision.

use async_nats::jetstream::{self, kv};
use flue_proto::{ServerId, TenantId};
use futures_util::StreamExt;
use tracing::warn;

use super::{PRESENCE_BUCKET, Record};
use crate::store::StoreError;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Every record of `tenant` with its server and revision.
pub(super) async fn load(
    kv: &kv::Store,
    tenant: &TenantId,
) -> Result<Vec<(ServerId, Option<Record>, u64)>, StoreError> {
    let list_err = |e: BoxError| StoreError::List {
        bucket: PRESENCE_BUCKET,
        source: e,
    };
    let mut keys = kv.keys().await.map_err(|e| list_err(e.into()))?;
    let prefix = format!("{tenant}.");
    let mut found = Vec::new();
    while let Some(key) = keys.next().await {
        let key = key.map_err(|e| list_err(e.into()))?;
        let Some(server) = key
            .strip_prefix(&prefix)
            .and_then(|s| ServerId::new(s).ok())
        else {
            continue;
        };
        let (record, revision) = read(kv, &key).await?;
        found.push((server, record, revision));
    }
    Ok(found)
}

/// `<tenant>.<server>`.
pub(super) fn key(tenant: &TenantId, server: &ServerId) -> String {
    format!("{tenant}.{server}")
}

/// The record under `key` and the key's revision (0 when it never existed). A deleted or
/// undecodable record reads as none, with the revision to overwrite.
pub(super) async fn read(kv: &kv::Store, key: &str) -> Result<(Option<Record>, u64), StoreError> {
    let entry = kv.entry(key).await.map_err(|e| StoreError::Read {
        bucket: PRESENCE_BUCKET,
        key: key.to_owned(),
        source: e.into(),
    })?;
    let Some(entry) = entry else {
        return Ok((None, 0));
    };
    if entry.operation != kv::Operation::Put {
        return Ok((None, entry.revision));
    }
    match serde_json::from_slice(&entry.value) {
        Ok(record) => Ok((Some(record), entry.revision)),
        Err(e) => {
            warn!(key, error = %e, "presence record cannot be decoded; it will be overwritten");
            Ok((None, entry.revision))
        }
    }
}

/// Opens the presence bucket, creating it (one revision per key, `replicas` copies) if missing.
pub(super) async fn bucket(
    js: &jetstream::Context,
    replicas: usize,
) -> Result<kv::Store, StoreError> {
    crate::store::open_bucket(js, PRESENCE_BUCKET, replicas).await
}
