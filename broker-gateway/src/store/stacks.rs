//! Stacks: each stack's head in `flue_stacks`, each of its units under a key of its
//! own in `flue_stack_units`, and the stack-scoped data space (`flue_data`).
//!
//! A stack's revision is its head's KV revision: every write but the first names the
//! revision it replaces, so two engine processes driving one stack never overwrite
//! each other unnoticed. A write stores the head first (compare-and-set: the writer
//! still holds the stack), then only the units it changes, each compare-and-set on the
//! revision read before; so an operation on a group of N members writes O(N) bytes, not
//! the whole stack N times. The `revision` field inside the stored JSON is not read
//! back; reads fill it from the entry.
//!
//! Upgrade: a head written before units were stored apart holds them inline. Reads
//! take them from there (a unit key wins), and the first write copies them to their
//! own keys before it stores the head without them.

use std::collections::BTreeMap;

use std::sync::Arc;

use flue_proto::{Stack, StackId, StackState, StackStatus, TenantId, Unit};
use futures_util::StreamExt;
use time::OffsetDateTime;

use super::bucket::{encode, get, keys, purge_key, write_error};
use super::kv::{Kv, KvError};
use super::{Listing, StoreError, key2};

mod units;

/// How many unit reads or writes of one request are in flight at once.
const UNIT_IO_IN_FLIGHT: usize = 32;

/// Outcome of a conditional write of a stack.
#[derive(Debug, Clone, PartialEq)]
pub enum StackWrite {
    /// Done.
    Written(Box<Written>),
    /// A create found the stack already there.
    Exists,
    /// An update or delete found no stack.
    Missing,
    /// An update or delete found the stack at another revision (or one of the units it
    /// changes written meanwhile).
    Mismatch {
        /// The stack's current revision.
        current: u64,
    },
}

/// A write done: the stack's head before and after it, each with the units the write
/// touched (all of them for a delete), which is what its events are derived from.
#[derive(Debug, Clone, PartialEq)]
pub struct Written {
    /// Before the write (`None` for a create), with the old versions of the touched
    /// units (those that existed).
    pub before: Option<Stack>,
    /// As stored now, new revision included, with the touched units that remain (for a
    /// delete: the stack as it was, every unit).
    pub stack: Stack,
}

/// Which units a write changes.
#[derive(Debug, Clone, PartialEq)]
pub enum UnitChanges {
    /// Only these: a unit to store, or `None` for one that leaves the stack.
    Some(BTreeMap<String, Option<Unit>>),
    /// The whole set: every stored unit not in it leaves the stack.
    All(BTreeMap<String, Unit>),
}

/// What an update of a stack stores.
#[derive(Debug, Clone, PartialEq)]
pub struct StackChange {
    /// When.
    pub updated_at: OffsetDateTime,
    /// The new status.
    pub status: StackStatus,
    /// The new head (its `units` are ignored).
    pub head: StackState,
    /// The units it changes.
    pub units: UnitChanges,
}

/// The stacks' buckets; cheap to clone.
#[derive(Debug, Clone)]
pub struct Stacks {
    /// `flue_stacks`: the heads.
    heads: Arc<dyn Kv>,
    /// `flue_stack_units`.
    units: Arc<dyn Kv>,
}

impl Stacks {
    pub(super) fn new(heads: Arc<dyn Kv>, units: Arc<dyn Kv>) -> Self {
        Self { heads, units }
    }

    /// The stack `id` of `tenant` with all its units, if it exists.
    pub async fn get(&self, tenant: &TenantId, id: &StackId) -> Result<Option<Stack>, StoreError> {
        let Some(mut stack) = self.head(tenant, id).await? else {
            return Ok(None);
        };
        let stored = self.all_units(tenant, id).await?;
        // A legacy head's inline units, overridden by the keys of their own.
        stack.state.units.extend(stored);
        Ok(Some(stack))
    }

    /// The head of stack `id`: everything but its units (a head stored before units
    /// were kept apart still has them inline).
    pub async fn head(&self, tenant: &TenantId, id: &StackId) -> Result<Option<Stack>, StoreError> {
        self.head_by_key(key2(tenant, id)).await
    }

    async fn head_by_key(&self, key: String) -> Result<Option<Stack>, StoreError> {
        Ok(get::<Stack>(&*self.heads, &key)
            .await?
            .map(|(mut stack, revision)| {
                stack.revision = revision;
                stack
            }))
    }

    /// Up to `limit` heads of `tenant`'s stacks after id `after` (from the first when
    /// `None`), sorted by id, and whether there are more; undecodable records counted
    /// and left out. Reads the bucket's key list (one request, no values) and `limit`
    /// heads.
    pub async fn heads_page(
        &self,
        tenant: &TenantId,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Listing<Stack>, bool), StoreError> {
        let mut ids: Vec<String> = keys(&*self.heads, &format!("{tenant}.*"))
            .await?
            .into_iter()
            .filter_map(|k| k.split_once('.').map(|(_, id)| id.to_owned()))
            .filter(|id| after.is_none_or(|a| id.as_str() > a))
            .collect();
        ids.sort();
        let more = ids.len() > limit;
        ids.truncate(limit);
        let reads: Vec<_> = ids
            .into_iter()
            .map(|id| self.head_by_key(format!("{tenant}.{id}")))
            .collect();
        let reads: Vec<_> = futures_util::stream::iter(reads)
            .buffered(UNIT_IO_IN_FLIGHT)
            .collect()
            .await;
        let mut listing = Listing::default();
        for read in reads {
            // A deleted stack leaves a marker, listed but read as absent.
            if let Some(mut stack) = listing.skip_undecodable(read)? {
                // A listing shows heads: a legacy record's inline units are not shown.
                stack.state.units.clear();
                listing.items.push(stack);
            }
        }
        Ok((listing, more))
    }

    /// Up to `limit` units of stack `id` after key `after`, sorted by key, and whether
    /// there are more. Reads the stack's key list (one request, no values) and `limit`
    /// units.
    pub async fn units_page(
        &self,
        tenant: &TenantId,
        id: &StackId,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Option<(Vec<(String, Unit)>, bool)>, StoreError> {
        let Some(head) = self.head(tenant, id).await? else {
            return Ok(None);
        };
        let mut all: BTreeMap<String, Option<Unit>> = head
            .state
            .units
            .into_iter()
            .map(|(k, u)| (k, Some(u)))
            .collect();
        for key in self.unit_keys(tenant, id).await? {
            all.insert(key, None);
        }
        let after = |k: &String| after.is_none_or(|a| k.as_str() > a);
        let mut page: Vec<(String, Option<Unit>)> =
            all.into_iter().filter(|(k, _)| after(k)).collect();
        let more = page.len() > limit;
        page.truncate(limit);
        let reads: Vec<_> = page
            .into_iter()
            .map(|(key, inline)| async move {
                let stored = self.stored_unit(tenant, id, &key).await?;
                Ok::<_, StoreError>(stored.unit.or(inline).map(|u| (key, u)))
            })
            .collect();
        let reads: Vec<_> = futures_util::stream::iter(reads)
            .buffered(UNIT_IO_IN_FLIGHT)
            .collect()
            .await;
        let mut units = Vec::new();
        for read in reads {
            units.extend(read?);
        }
        Ok(Some((units, more)))
    }

    /// Stores a new stack (its units apart from its head): [`StackWrite::Written`] with
    /// its revision, or [`StackWrite::Exists`] when the id is taken.
    pub async fn create(&self, stack: &Stack) -> Result<StackWrite, StoreError> {
        let key = key2(&stack.tenant, &stack.id);
        let mut head = stack.clone();
        let units = std::mem::take(&mut head.state.units);
        let revision = match self.heads.create(&key, encode(&head)).await {
            Ok(revision) => revision,
            Err(KvError::Exists) => return Ok(StackWrite::Exists),
            Err(e) => return Err(write_error(self.heads.name(), &key, e)),
        };
        // Units a delete that stopped half-way left behind belong to no stack: only the
        // creator gets here, before it stores any unit.
        self.purge_units(&stack.tenant, &stack.id).await?;
        let changes = units.into_iter().map(|(k, u)| (k, Some(u))).collect();
        let before = BTreeMap::new();
        if !self
            .write_units(&stack.tenant, &stack.id, &before, &changes)
            .await?
        {
            return Ok(StackWrite::Mismatch { current: revision });
        }
        Ok(StackWrite::Written(Box::new(Written {
            before: None,
            stack: Stack {
                revision,
                ..stack.clone()
            },
        })))
    }

    /// Stores `change` in stack `id`, only if its revision is still `expected`.
    pub async fn update(
        &self,
        tenant: &TenantId,
        id: &StackId,
        expected: u64,
        change: StackChange,
    ) -> Result<StackWrite, StoreError> {
        let key = key2(tenant, id);
        let Some(mut old) = self.head_by_key(key.clone()).await? else {
            return Ok(StackWrite::Missing);
        };
        // Checked here, not only by the broker: revision 0 would mean "create".
        if old.revision != expected {
            return Ok(StackWrite::Mismatch {
                current: old.revision,
            });
        }
        let legacy = std::mem::take(&mut old.state.units);
        let changes = match change.units {
            UnitChanges::Some(changes) => changes,
            UnitChanges::All(all) => {
                let mut current = legacy.clone();
                current.extend(self.all_units(tenant, id).await?);
                let mut changes: BTreeMap<String, Option<Unit>> = current
                    .iter()
                    .filter(|(k, _)| !all.contains_key(*k))
                    .map(|(k, _)| (k.clone(), None))
                    .collect();
                for (k, unit) in all {
                    if current.get(&k) != Some(&unit) {
                        changes.insert(k, Some(unit));
                    }
                }
                changes
            }
        };
        let before = self.stored_units(tenant, id, changes.keys()).await?;
        if !legacy.is_empty() {
            self.move_out_inline(tenant, id, &legacy, &before).await?;
        }
        let mut stack = old.clone();
        stack.updated_at = change.updated_at;
        stack.status = change.status;
        stack.state = StackState {
            units: BTreeMap::new(),
            ..change.head
        };
        let revision = match self.heads.update(&key, encode(&stack), expected).await {
            Ok(revision) => revision,
            Err(KvError::Conflict) => return self.lost_race(key).await,
            Err(e) => return Err(write_error(self.heads.name(), &key, e)),
        };
        stack.revision = revision;
        if !self.write_units(tenant, id, &before, &changes).await? {
            return Ok(StackWrite::Mismatch { current: revision });
        }
        old.state.units = before
            .into_iter()
            .filter_map(|(k, s)| Some((k.clone(), s.unit.or_else(|| legacy.get(&k).cloned())?)))
            .collect();
        stack.state.units = changes
            .into_iter()
            .filter_map(|(k, u)| Some((k, u?)))
            .collect();
        Ok(StackWrite::Written(Box::new(Written {
            before: Some(old),
            stack,
        })))
    }

    /// Removes stack `id`, head then units; with `expected`, only if its revision is
    /// still that one. [`StackWrite::Written`] holds the stack as it was, every unit.
    ///
    /// Its data space is left alone: see [`super::Data::purge_stack`]. A delete that
    /// stopped before the units went is finished by [`Stacks::purge_units`] (the
    /// API's delete of a missing stack, or the next create of that id).
    pub async fn delete(
        &self,
        tenant: &TenantId,
        id: &StackId,
        expected: Option<u64>,
    ) -> Result<StackWrite, StoreError> {
        let key = key2(tenant, id);
        let Some(stack) = self.get(tenant, id).await? else {
            return Ok(StackWrite::Missing);
        };
        if expected.is_some_and(|e| e != stack.revision) {
            return Ok(StackWrite::Mismatch {
                current: stack.revision,
            });
        }
        match self.heads.purge(&key, expected).await {
            Ok(()) => {}
            Err(KvError::Conflict) => return self.lost_race(key).await,
            Err(e) => return Err(write_error(self.heads.name(), &key, e)),
        }
        self.purge_units(tenant, id).await?;
        Ok(StackWrite::Written(Box::new(Written {
            before: None,
            stack,
        })))
    }

    /// Removes every unit key of stack `id` (one stream purge, no tombstones).
    pub async fn purge_units(&self, tenant: &TenantId, id: &StackId) -> Result<(), StoreError> {
        purge_key(&*self.units, &format!("{tenant}.{id}.*"))
            .await
            .map(drop)
    }

    /// What a write refused for its revision ran into: the stack was changed or removed.
    async fn lost_race(&self, key: String) -> Result<StackWrite, StoreError> {
        Ok(match self.head_by_key(key).await? {
            Some(current) => StackWrite::Mismatch {
                current: current.revision,
            },
            None => StackWrite::Missing,
        })
    }
}
