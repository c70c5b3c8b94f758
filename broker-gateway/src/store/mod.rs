//! Gateway state in JetStream KV buckets, so that several gateways can share one broker.
//!
//! One store per aggregate, each owning its buckets and every function on them:
//!
//! | store | bucket | key | value |
//! |---|---|---|---|
//! | [`Configs`] | `flue_configs` | `<tenant>.<config>` | [`flue_proto::Config`] JSON |
//! | [`Servers`] | `flue_servers` | `<tenant>.<server>` | [`flue_proto::Server`] JSON |
//! | | `flue_server_order` | `<tenant>.<server>` | empty: servers in registration order ([`paging`]) |
//! | [`Deployments`] | `flue_deployments` | `<tenant>.<deployment>` | [`DeploymentRecord`] JSON |
//! | | `flue_server_deployments` | `<tenant>.<server>.<deployment>` | empty (listing index) |
//! | | `flue_pending` | `<tenant>.<deployment>` | empty: the deployment is not terminal ([`pending`]) |
//! | [`Stacks`] | `flue_stacks` | `<tenant>.<stack>` | [`flue_proto::Stack`] JSON, its head (no units) |
//! | | `flue_stack_units` | `<tenant>.<stack>.<unit token>` | [`flue_proto::Unit`] JSON ([`flue_proto::stack::unit_token`]) |
//! | [`Data`] | `flue_data` | `<tenant>.<stack>.<key>` | a hook's value (written by agents) |
//! | [`Builds`] | `flue_builds` | `<tenant>.<sha256>.<n>` | a chunk of an agent build |
//! | [`Operations`] | `flue_ops` | `<tenant>.<stack>.<op>` | [`flue_proto::operation::StackOperation`] JSON |
//! | | | `<tenant>.<stack>` | the id of the stack's active operation (its claim) |
//! | [`Webhooks`] | `flue_webhooks` | `<tenant>.<webhook>` | [`Subscription`] JSON (with its secret) |
//!
//! Not stores, though the broker keeps them too: the operations' work queue (stream
//! `FLUE_OPS`, in `crate::operations`) and the request, response and event streams
//! (`crate::broker`, `crate::events`) are message queues, not an aggregate's record: a
//! message is taken and acknowledged, never read back by key, changed or
//! compared-and-set. The webhooks' delivery consumers are positions in the event stream
//! (`crate::webhooks`). Two buckets outside the aggregates stay beside the module that
//! keeps them: servers' presence (`flue_presence`, `crate::presence`: online / offline,
//! written on transitions) and revoked tokens (`flue_revoked_tokens`, `crate::auth`,
//! watched into memory).
//!
//! Tenants are no store: there is no tenant bucket, and none is made up here. Which
//! tenants exist is their NATS accounts' to say (keys and JWTs in the gateway's state
//! directory, `crate::natsauth`; one default tenant with `--insecure-dev-broker`); what
//! the gateway adds, a tenant's name and creation time, is a file
//! `<state-dir>/tenants/<id>.json` (`crate::tenants`' book), read at start and written
//! when a tenant is created (or first served without one). Each tenant's buckets live in its own account, so a
//! [`Store`] is one tenant runtime's.
//!
//! [`Store`] holds them all (each a few pointers: cheap to clone), so that the wiring
//! hands every domain operation the ones it needs. Each holds its buckets as
//! `Arc<dyn` [`Kv`]`>`: [`Bucket`] on the broker, and in unit tests the in-memory double
//! (`memory::Memory`, [`Store::in_memory`]), so that the domain rules run without one.
//!
//! Every bucket keeps one revision per key. Configs, servers, deployments and webhook
//! subscriptions are created with `create` (refused when the key exists; a
//! deregistered server's key can be created again); records change through
//! [`cas::compare_and_set`], the one compare-and-set loop on a key's revision (a stack's
//! claim by an operation too); stack changes name the revision they replace
//! ([`Stacks::update`]), and so does an operation's worker ([`Operations::update`]: the
//! revision it last read or wrote, held across its run). The gateway only creates the data bucket and purges a
//! deleted stack's keys from it.

mod bucket;
mod builds;
pub mod cas;
mod configs;
mod data;
mod deployments;
mod error;
pub mod kv;
#[cfg(test)]
pub(crate) mod memory;
mod operations;
pub mod paging;
pub mod pending;
mod race;
mod recent;
mod servers;
mod stacks;
mod webhooks;

use async_nats::jetstream;
use bytes::Bytes;
use flue_proto::{DeploymentId, TenantId, subject};

pub(crate) use bucket::bucket as open_bucket;
pub use builds::Builds;
pub use configs::Configs;
pub use data::Data;
pub use deployments::{Deployments, Updated};
pub use error::StoreError;
pub use kv::{Bucket, Kv};
pub use operations::{Claim, History, Operations};
pub use servers::Servers;
pub use stacks::{StackChange, StackWrite, Stacks, UnitChanges, Written};
pub use webhooks::{Secret, Subscription, SubscriptionChange, Webhooks, webhook_key};

use crate::record::DeploymentRecord;
use bucket::decode;
pub use race::lost_race;

// The buckets' names are the wire vocabulary's (`flue_proto::subject`).
pub use flue_proto::operation::OPERATIONS_BUCKET;
pub use flue_proto::subject::{
    CONFIGS_BUCKET, DEPLOYMENTS_BUCKET, PENDING_BUCKET, SERVER_DEPLOYMENTS_BUCKET,
    SERVER_ORDER_BUCKET, SERVERS_BUCKET, STACK_UNITS_BUCKET, STACKS_BUCKET, WEBHOOKS_BUCKET,
};

/// Every aggregate store of a tenant runtime; cheap to clone.
#[derive(Debug, Clone)]
pub struct Store {
    /// Configs.
    pub configs: Configs,
    /// Servers and their registration order.
    pub servers: Servers,
    /// Deployment records, their listing index and the pending index.
    pub deployments: Deployments,
    /// Stack heads and units.
    pub stacks: Stacks,
    /// Stacks' data spaces.
    pub data: Data,
    /// Agent builds' chunks.
    pub builds: Builds,
    /// Stack operations' records and claims.
    pub operations: Operations,
    /// Webhook subscriptions.
    pub webhooks: Webhooks,
}

impl Store {
    /// Creates the buckets if they do not exist yet and opens them.
    pub async fn open(js: &jetstream::Context) -> Result<Self, StoreError> {
        Self::open_with(js, 1).await
    }

    /// [`Store::open`], creating missing buckets with `replicas` copies (`--replicas`).
    pub async fn open_with(js: &jetstream::Context, replicas: usize) -> Result<Self, StoreError> {
        // On the heap: twelve bucket opens side by side in one future would take a debug-built
        // test thread's whole stack (a `#[tokio::test]` keeps its future there).
        Box::pin(Self::open_buckets(js, replicas)).await
    }

    async fn open_buckets(js: &jetstream::Context, replicas: usize) -> Result<Self, StoreError> {
        // Whether the buckets are replicated (`--replicas` above 1): a read missing a key
        // then asks the stream's leader again ([`Kv::get`]).
        let replicated = replicas > 1;
        let open = async |name: &'static str| -> Result<std::sync::Arc<dyn Kv>, StoreError> {
            let store = bucket::bucket(js, name, replicas).await?;
            Ok(Bucket::new(store, js.client(), name, replicated).shared())
        };
        let index = open(SERVER_DEPLOYMENTS_BUCKET).await?;
        Ok(Self::with(Buckets {
            configs: open(CONFIGS_BUCKET).await?,
            servers: open(SERVERS_BUCKET).await?,
            deployments: open(DEPLOYMENTS_BUCKET).await?,
            index,
            stacks: open(STACKS_BUCKET).await?,
            stack_units: open(STACK_UNITS_BUCKET).await?,
            // Agents read and write it but never create anything: it must exist first.
            data: open(subject::DATA_BUCKET).await?,
            pending: open(PENDING_BUCKET).await?,
            server_order: open(SERVER_ORDER_BUCKET).await?,
            // Agents read builds but never create anything: it must exist first.
            builds: open(flue_proto::upgrade::BUILDS_BUCKET).await?,
            operations: open(OPERATIONS_BUCKET).await?,
            webhooks: open(WEBHOOKS_BUCKET).await?,
        }))
    }

    /// Every store on in-memory buckets (unit tests).
    #[cfg(test)]
    pub(crate) fn in_memory() -> Self {
        let m = memory::Memory::shared;
        Self::with(Buckets {
            configs: m(CONFIGS_BUCKET),
            servers: m(SERVERS_BUCKET),
            deployments: m(DEPLOYMENTS_BUCKET),
            index: m(SERVER_DEPLOYMENTS_BUCKET),
            stacks: m(STACKS_BUCKET),
            stack_units: m(STACK_UNITS_BUCKET),
            data: m(subject::DATA_BUCKET),
            pending: m(PENDING_BUCKET),
            server_order: m(SERVER_ORDER_BUCKET),
            builds: m(flue_proto::upgrade::BUILDS_BUCKET),
            operations: m(OPERATIONS_BUCKET),
            webhooks: m(WEBHOOKS_BUCKET),
        })
    }

    fn with(b: Buckets) -> Self {
        Self {
            configs: Configs::new(b.configs),
            servers: Servers::new(b.servers, b.server_order, b.index.clone()),
            deployments: Deployments::new(b.deployments, b.index, b.pending),
            stacks: Stacks::new(b.stacks, b.stack_units),
            data: Data::new(b.data),
            builds: Builds::new(b.builds),
            operations: Operations::new(b.operations),
            webhooks: Webhooks::new(b.webhooks),
        }
    }
}

/// The buckets the stores are made of.
struct Buckets {
    configs: std::sync::Arc<dyn Kv>,
    servers: std::sync::Arc<dyn Kv>,
    deployments: std::sync::Arc<dyn Kv>,
    index: std::sync::Arc<dyn Kv>,
    stacks: std::sync::Arc<dyn Kv>,
    stack_units: std::sync::Arc<dyn Kv>,
    data: std::sync::Arc<dyn Kv>,
    pending: std::sync::Arc<dyn Kv>,
    server_order: std::sync::Arc<dyn Kv>,
    builds: std::sync::Arc<dyn Kv>,
    operations: std::sync::Arc<dyn Kv>,
    webhooks: std::sync::Arc<dyn Kv>,
}

/// What a listing read: the records, and how many it left out because they cannot be
/// decoded (each logged once per listing).
#[derive(Debug, Clone)]
pub struct Listing<T> {
    /// The records read.
    pub items: Vec<T>,
    /// Records left out as undecodable.
    pub skipped: usize,
}

impl<T> Default for Listing<T> {
    fn default() -> Self {
        Self {
            items: Vec::new(),
            skipped: 0,
        }
    }
}

impl<T> Listing<T> {
    /// The value of a read; `None` (counted and logged) when the stored value cannot be
    /// decoded; any other failure is the listing's.
    pub fn skip_undecodable<R>(
        &mut self,
        read: Result<Option<R>, StoreError>,
    ) -> Result<Option<R>, StoreError> {
        match read {
            Err(StoreError::Decode {
                bucket,
                key,
                source,
            }) => {
                tracing::warn!(bucket, key, error = %source, "stored record cannot be decoded; left out of the listing");
                self.skipped += 1;
                Ok(None)
            }
            other => other,
        }
    }
}

/// The KV key of deployment `id` of `tenant`, as [`DeploymentChange::key`] names it.
pub fn deployment_key(tenant: &TenantId, id: &DeploymentId) -> String {
    key2(tenant, id)
}

/// One write to the deployments bucket, decoded only by whoever wants it.
#[derive(Debug, Clone)]
pub struct DeploymentChange {
    /// The key written ([`deployment_key`]).
    pub key: String,
    /// The KV revision of the write; later writes have larger ones.
    pub revision: u64,
    value: Bytes,
}

impl DeploymentChange {
    /// The record written.
    pub fn record(&self) -> Result<DeploymentRecord, StoreError> {
        decode(DEPLOYMENTS_BUCKET, &self.key, &self.value)
    }
}

/// `<tenant>.<id>`.
fn key2(tenant: &TenantId, id: &impl std::fmt::Display) -> String {
    format!("{tenant}.{id}")
}
