//! The revocation list: token ids in KV `flue_revoked_tokens`, watched into memory so
//! that every request is checked without a broker round trip.
//!
//! A revocation is written to the bucket and added to this gateway's set at once; every
//! other gateway on the broker sees it through its watch within moments. Entries expire
//! with the bucket's max age, which outlives the longest token ([`MAX_TOKEN_TTL_SECS`]),
//! so a revoked token is never accepted again and the list does not grow forever.
//! The set only grows while the gateway runs: a watch that restarts lists the bucket
//! again and adds what it missed.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use flue_proto::TenantId;
use flue_proto::auth::MAX_TOKEN_TTL_SECS;
use flue_proto::subject::REVOKED_TOKENS_BUCKET;
use futures_util::StreamExt as _;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::error::chain;
use crate::store::StoreError;

/// Pause before opening the watch again after it failed.
const RESTART_PAUSE: Duration = Duration::from_millis(500);
/// How long past the longest token lifetime a revocation is kept.
const KEEP_PAST_LONGEST_TOKEN: Duration = Duration::from_secs(24 * 3600);

/// Revoked token ids: the bucket and this gateway's copy of it; cheap to clone.
#[derive(Clone)]
pub struct Revoked {
    kv: kv::Store,
    ids: Arc<RwLock<HashSet<String>>>,
}

impl std::fmt::Debug for Revoked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Revoked").finish_non_exhaustive()
    }
}

impl Revoked {
    /// Opens (creating when missing, with `replicas` copies) the bucket and reads every
    /// revocation in it.
    pub async fn open(js: &jetstream::Context, replicas: usize) -> Result<Self, StoreError> {
        let kv = match js.get_key_value(REVOKED_TOKENS_BUCKET).await {
            Ok(kv) => kv,
            Err(_) => {
                let created = js
                    .create_key_value(kv::Config {
                        bucket: REVOKED_TOKENS_BUCKET.to_owned(),
                        history: 1,
                        max_age: Duration::from_secs(MAX_TOKEN_TTL_SECS) + KEEP_PAST_LONGEST_TOKEN,
                        storage: jetstream::stream::StorageType::File,
                        num_replicas: replicas,
                        ..Default::default()
                    })
                    .await;
                match created {
                    Ok(kv) => kv,
                    // Another gateway may have created it in between.
                    Err(e) => js.get_key_value(REVOKED_TOKENS_BUCKET).await.map_err(|_| {
                        StoreError::Open {
                            bucket: REVOKED_TOKENS_BUCKET,
                            source: e.into(),
                        }
                    })?,
                }
            }
        };
        let revoked = Self {
            kv,
            ids: Arc::default(),
        };
        revoked.reload().await?;
        Ok(revoked)
    }

    /// Whether token `id` is revoked (memory only).
    pub fn contains(&self, id: &str) -> bool {
        self.ids.read().is_ok_and(|ids| ids.contains(id))
    }

    /// Revokes token `id`: written to the bucket (seen by every gateway), then refused here.
    pub async fn revoke(&self, id: &str, at: i64) -> Result<(), StoreError> {
        self.kv
            .put(id, at.to_string().into())
            .await
            .map_err(|e| StoreError::Write {
                bucket: REVOKED_TOKENS_BUCKET,
                key: id.to_owned(),
                source: e.into(),
            })?;
        self.insert(id.to_owned());
        Ok(())
    }

    fn insert(&self, id: String) {
        if let Ok(mut ids) = self.ids.write() {
            ids.insert(id);
        }
    }

    /// Adds every id in the bucket.
    async fn reload(&self) -> Result<(), StoreError> {
        let read_err = |e: Box<dyn std::error::Error + Send + Sync>| StoreError::List {
            bucket: REVOKED_TOKENS_BUCKET,
            source: e,
        };
        let mut keys = self.kv.keys().await.map_err(|e| read_err(e.into()))?;
        while let Some(key) = keys.next().await {
            self.insert(key.map_err(|e| read_err(e.into()))?);
        }
        Ok(())
    }

    /// Follows the bucket until `shutdown`: every revocation another gateway writes is
    /// added here as it comes; after a failure the watch is opened again and the bucket
    /// read again, so nothing written meanwhile is missed.
    pub async fn follow(self, shutdown: CancellationToken) {
        loop {
            let opened = tokio::select! {
                () = shutdown.cancelled() => return,
                opened = self.kv.watch_all() => opened,
            };
            match opened {
                Ok(mut watch) => {
                    // Opened before the read, so a write in between is seen by one of them.
                    if let Err(e) = self.reload().await {
                        warn!(error = %chain(&e), "cannot read the revoked tokens; retrying");
                    } else {
                        debug!("revoked token watch open");
                        loop {
                            let entry = tokio::select! {
                                () = shutdown.cancelled() => return,
                                entry = watch.next() => entry,
                            };
                            match entry {
                                Some(Ok(e)) if e.operation == kv::Operation::Put => {
                                    self.insert(e.key);
                                }
                                Some(Ok(_)) => {}
                                Some(Err(e)) => {
                                    warn!(error = %e, "revoked token watch failed; opening it again");
                                    break;
                                }
                                None => break,
                            }
                        }
                    }
                }
                Err(e) => warn!(error = %e, "cannot watch the revoked tokens; retrying"),
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(RESTART_PAUSE) => {}
            }
        }
    }
}

/// The revocation list of every tenant served, by tenant (each tenant's runtime opens its
/// own bucket, in its own account); cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Revocations(Arc<RwLock<std::collections::HashMap<TenantId, Revoked>>>);

impl Revocations {
    /// Registers `tenant`'s list (its runtime started).
    pub fn insert(&self, tenant: TenantId, revoked: Revoked) {
        self.0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(tenant, revoked);
    }

    /// Forgets `tenant`'s list (its runtime stopped).
    pub fn remove(&self, tenant: &TenantId) {
        self.0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(tenant);
    }

    /// `tenant`'s list, while it is served.
    pub fn get(&self, tenant: &TenantId) -> Option<Revoked> {
        self.0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(tenant)
            .cloned()
    }
}
