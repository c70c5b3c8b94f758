//! Stack records (`flue_stacks`) and the stack-scoped data space (`flue_data`).
//!
//! A stack's revision is its KV revision: every write but the first names the
//! revision it replaces, so two engine processes driving one stack never overwrite
//! each other unnoticed. The `revision` field inside the stored JSON is not read back;
//! reads fill it from the entry.

use async_nats::jetstream::kv;
use flue_proto::{Stack, StackId, TenantId, subject};

use super::bucket::{encode, get, keys};
use super::{Listing, STACKS_BUCKET, Store, StoreError, key2};

/// Outcome of a conditional write of a stack record.
#[derive(Debug, Clone, PartialEq)]
pub enum StackWrite {
    /// Done: the stack as now stored with its new revision (for a delete, as it was).
    Written(Box<Stack>),
    /// A create found the stack already there.
    Exists,
    /// An update or delete found no stack.
    Missing,
    /// An update or delete found the stack at another revision.
    Mismatch {
        /// The stack's current revision.
        current: u64,
    },
}

impl Store {
    /// The stack `id` of `tenant`, if it exists.
    pub async fn stack(
        &self,
        tenant: &TenantId,
        id: &StackId,
    ) -> Result<Option<Stack>, StoreError> {
        self.stack_by_key(key2(tenant, id)).await
    }

    async fn stack_by_key(&self, key: String) -> Result<Option<Stack>, StoreError> {
        Ok(get::<Stack>(&self.stacks, STACKS_BUCKET, key)
            .await?
            .map(|(mut stack, revision)| {
                stack.revision = revision;
                stack
            }))
    }

    /// Every stack of `tenant`, sorted by id, undecodable records counted and left out.
    pub async fn stacks(&self, tenant: &TenantId) -> Result<Listing<Stack>, StoreError> {
        let mut listing = Listing::default();
        for key in keys(&self.stacks, STACKS_BUCKET, &format!("{tenant}.*")).await? {
            // A deleted stack leaves a marker, listed but read as absent; an undecodable
            // record is counted and left out.
            if let Some(stack) = listing.skip_undecodable(self.stack_by_key(key).await)? {
                listing.items.push(stack);
            }
        }
        listing.items.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(listing)
    }

    /// Stores a new stack: [`StackWrite::Written`] with its revision, or
    /// [`StackWrite::Exists`] when the id is taken.
    pub async fn create_stack(&self, stack: &Stack) -> Result<StackWrite, StoreError> {
        let key = key2(&stack.tenant, &stack.id);
        match self.stacks.create(&key, encode(stack)).await {
            Ok(revision) => Ok(StackWrite::Written(Box::new(Stack {
                revision,
                ..stack.clone()
            }))),
            Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => Ok(StackWrite::Exists),
            Err(e) => Err(StoreError::Write {
                bucket: STACKS_BUCKET,
                key,
                source: e.into(),
            }),
        }
    }

    /// Replaces stack `id` with what `change` makes of it, only if its revision is
    /// still `expected`.
    pub async fn update_stack(
        &self,
        tenant: &TenantId,
        id: &StackId,
        expected: u64,
        change: impl FnOnce(&mut Stack),
    ) -> Result<StackWrite, StoreError> {
        let key = key2(tenant, id);
        let Some(mut stack) = self.stack_by_key(key.clone()).await? else {
            return Ok(StackWrite::Missing);
        };
        // Checked here, not only by the broker: revision 0 would mean "create".
        if stack.revision != expected {
            return Ok(StackWrite::Mismatch {
                current: stack.revision,
            });
        }
        change(&mut stack);
        match self.stacks.update(&key, encode(&stack), expected).await {
            Ok(revision) => Ok(StackWrite::Written(Box::new(Stack { revision, ..stack }))),
            Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                self.lost_race(key).await
            }
            Err(e) => Err(StoreError::Write {
                bucket: STACKS_BUCKET,
                key,
                source: e.into(),
            }),
        }
    }

    /// Removes stack `id`; with `expected`, only if its revision is still that one.
    ///
    /// Its data space is left alone: see [`Store::purge_stack_data`].
    pub async fn delete_stack(
        &self,
        tenant: &TenantId,
        id: &StackId,
        expected: Option<u64>,
    ) -> Result<StackWrite, StoreError> {
        let key = key2(tenant, id);
        let Some(stack) = self.stack_by_key(key.clone()).await? else {
            return Ok(StackWrite::Missing);
        };
        if expected.is_some_and(|e| e != stack.revision) {
            return Ok(StackWrite::Mismatch {
                current: stack.revision,
            });
        }
        match self.stacks.purge_expect_revision(&key, expected).await {
            Ok(()) => Ok(StackWrite::Written(Box::new(stack))),
            Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                self.lost_race(key).await
            }
            Err(e) => Err(StoreError::Write {
                bucket: STACKS_BUCKET,
                key,
                source: e.into(),
            }),
        }
    }

    /// What a write refused for its revision ran into: the stack was changed or removed.
    async fn lost_race(&self, key: String) -> Result<StackWrite, StoreError> {
        Ok(match self.stack_by_key(key).await? {
            Some(current) => StackWrite::Mismatch {
                current: current.revision,
            },
            None => StackWrite::Missing,
        })
    }

    /// Removes every key of stack `id`'s data space; returns how many messages went.
    ///
    /// A stream purge filtered on the stack's subjects, so it costs one request
    /// whatever the number of keys, and leaves no delete markers behind.
    pub async fn purge_stack_data(
        &self,
        tenant: &TenantId,
        id: &StackId,
    ) -> Result<u64, StoreError> {
        let filter = format!(
            "{}{}",
            self.data.prefix,
            subject::data_stack_filter(tenant, id)
        );
        match self.data.stream.purge().filter(filter.clone()).await {
            Ok(purged) => Ok(purged.purged),
            Err(e) => Err(StoreError::Purge {
                bucket: subject::DATA_BUCKET,
                filter,
                source: e.into(),
            }),
        }
    }
}
