//! Agent builds, in chunks ([`flue_proto::upgrade`]).

use std::sync::Arc;

use flue_proto::TenantId;

use super::StoreError;
use super::bucket::put;
use super::kv::Kv;

/// The builds bucket; cheap to clone.
#[derive(Debug, Clone)]
pub struct Builds {
    kv: Arc<dyn Kv>,
}

impl Builds {
    pub(super) fn new(kv: Arc<dyn Kv>) -> Self {
        Self { kv }
    }

    /// Stores chunk `n` of the agent build `sha256` of `tenant` (a put: uploading a
    /// chunk again replaces it).
    pub async fn put_chunk(
        &self,
        tenant: &TenantId,
        sha256: &str,
        n: u64,
        bytes: bytes::Bytes,
    ) -> Result<(), StoreError> {
        let key = flue_proto::upgrade::chunk_key(tenant, sha256, n);
        put(&*self.kv, &key, bytes).await
    }
}
