//! Domain operations on servers, on the handles they need ([`Servers`]): registering a
//! server that connects over NATS, rotating its credentials and deregistering it
//! ([`register`]); registering a polling server and rotating its metadata URL
//! ([`polled`]); moving servers' request consumers to their sealed names as their agents
//! ask ([`sealed`]).

pub mod polled;
pub mod register;
pub mod sealed;

use flue_proto::event::ServerEventData;
use flue_proto::{CloudEvent, EventType, Server, ServerId, TenantId};

use crate::broker::{Broker, BrokerError};
use crate::credentials::{MintError, Minter};
use crate::events::Events;
use crate::natsauth::BrokerUsers;
use crate::presence::PresenceTracker;
use crate::responses::Signers;
use crate::store::{self, StoreError};

/// What registering, rotating and deregistering servers takes; cheap to clone.
#[derive(Debug, Clone)]
pub struct Servers {
    /// The tenant whose servers these are.
    pub tenant: TenantId,
    /// The broker URL handed to agents at registration (`--agent-nats-url`).
    pub agent_nats_url: String,
    /// The server records.
    pub records: store::Servers,
    /// Deployment records (a server with unfinished ones stays).
    pub deployments: store::Deployments,
    /// The servers' request consumers.
    pub broker: Broker,
    /// Where `server.registered` / `server.deregistered` go.
    pub events: Events,
    /// Presence, told of registrations and deregistrations.
    pub presence: PresenceTracker,
    /// Servers' answer-signing keys, forgotten when they change.
    pub signers: Signers,
    /// Mints an agent's credentials.
    pub minter: Minter,
    /// Revokes an agent's broker user (`None` with `--insecure-dev-broker`).
    pub users: Option<BrokerUsers>,
}

/// Why a server operation did not happen.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// No such server is registered.
    #[error("server {:?} not found", .0.as_str())]
    NotFound(ServerId),
    /// The server is registered with the other transport.
    #[error("server {:?} is registered with another transport", .0.id.as_str())]
    OtherTransport(Box<Server>),
    /// The server still has deployments that are not finished.
    #[error(
        "server {:?} has {unfinished} QUEUED or IN_PROGRESS deployment{}; wait for {} to finish (or time out) first",
        id.as_str(),
        if *unfinished == 1 { "" } else { "s" },
        if *unfinished == 1 { "it" } else { "them" },
    )]
    Busy {
        /// The server.
        id: ServerId,
        /// How many of its deployments are QUEUED or IN_PROGRESS.
        unfinished: usize,
    },
    /// The broker did not take the revocation of the server's broker user.
    #[error(
        "the broker did not take the revocation of server {:?}'s credentials; retry later",
        .0.as_str()
    )]
    Revocation(ServerId),
    /// New credentials could not be minted.
    #[error(transparent)]
    Mint(#[from] MintError),
    /// The system's random generator failed (a polling server's secret).
    #[error("the system random generator failed")]
    Random,
    /// The state store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The broker failed (the request consumer).
    #[error(transparent)]
    Broker(#[from] BrokerError),
}

/// Records `server` unless its id is registered: `(true, server)` when this call
/// recorded it, `(false, stored)` when it was registered before with the same transport
/// (the record as it was: its first registration's time and keys), and
/// [`ServerError::OtherTransport`] when with the other one.
pub async fn record(
    records: &store::Servers,
    server: Server,
) -> Result<(bool, Server), ServerError> {
    match records.create(&server).await? {
        None => Ok((true, server)),
        Some(stored) if stored.transport == server.transport => Ok((false, stored)),
        Some(stored) => Err(ServerError::OtherTransport(Box::new(stored))),
    }
}

/// Server `id` of `tenant` as recorded, when it may be removed: not while it has QUEUED
/// or IN_PROGRESS deployments ([`ServerError::Busy`]).
pub async fn removable(
    (records, deployments): (&store::Servers, &store::Deployments),
    tenant: &TenantId,
    id: &ServerId,
) -> Result<Server, ServerError> {
    let server = records
        .get(tenant, id)
        .await?
        .ok_or_else(|| ServerError::NotFound(id.clone()))?;
    let unfinished = deployments
        .of_server(tenant, id)
        .await?
        .iter()
        .filter(|r| !r.deployment.status.is_terminal())
        .count();
    if unfinished > 0 {
        return Err(ServerError::Busy {
            id: id.clone(),
            unfinished,
        });
    }
    Ok(server)
}

/// `server.registered` or `server.deregistered` of one registration of `server`: the
/// id names its `created_at`, so a later registration of the same id is another fact.
pub fn server_event(server: &Server, ty: EventType) -> CloudEvent {
    let millis = server.created_at.unix_timestamp_nanos() / 1_000_000;
    let data = ServerEventData {
        server_id: server.id.clone(),
        name: server.name.clone(),
        agent_instance: None,
        reason: None,
        last_seen: None,
    };
    CloudEvent::new(
        ty,
        &server.tenant,
        format!("server:{}:{}:{millis}", server.id, ty.name()),
        format!("servers/{}", server.id),
        &data,
    )
    .server(&server.id)
}

/// The rules of registering and removing servers on in-memory stores
/// ([`crate::store::Store::in_memory`]).
#[cfg(test)]
mod tests {
    use flue_proto::DeploymentStatus;
    use flue_proto::poll::Transport;
    use serde_json::json;
    use time::OffsetDateTime;

    use super::*;
    use crate::record::tests::record as deployment;
    use crate::store::Store;

    fn tenant() -> TenantId {
        TenantId::new("t").expect("id")
    }

    fn server(id: &str, transport: Transport, at: i64) -> Server {
        let mut server: Server = serde_json::from_value(json!({
            "id": id, "tenant": "t", "name": id, "created_at": "2026-01-01T00:00:00Z",
            "keys": {"signing": format!("U-{id}-{at}"), "sealing": format!("X-{id}-{at}")}
        }))
        .expect("server");
        server.created_at = OffsetDateTime::UNIX_EPOCH + time::Duration::seconds(at);
        server.transport = transport;
        server
    }

    #[tokio::test]
    async fn the_first_registration_records_the_server_in_registration_order() {
        let store = Store::in_memory();
        let (created, stored) = record(&store.servers, server("b", Transport::Nats, 1))
            .await
            .expect("record");
        assert!(created);
        assert_eq!(stored, server("b", Transport::Nats, 1));
        record(&store.servers, server("a", Transport::Nats, 2))
            .await
            .expect("store");
        let page = store.servers.page(&tenant(), 1, 10).await.expect("store");
        let order: Vec<&str> = page.items.iter().map(ServerId::as_str).collect();
        assert_eq!(order, ["b", "a"]);
        assert_eq!(
            store
                .servers
                .get(&tenant(), &ServerId::new("b").expect("id"))
                .await
                .expect("store"),
            Some(server("b", Transport::Nats, 1))
        );
    }

    #[tokio::test]
    async fn a_repeated_registration_gets_the_first_record_not_new_keys() {
        let store = Store::in_memory();
        record(&store.servers, server("s", Transport::Nats, 1))
            .await
            .expect("store");
        let (created, stored) = record(&store.servers, server("s", Transport::Nats, 9))
            .await
            .expect("record");
        assert!(!created);
        assert_eq!(stored, server("s", Transport::Nats, 1));
        assert_eq!(
            store
                .servers
                .page(&tenant(), 1, 10)
                .await
                .expect("store")
                .items
                .len(),
            1
        );
    }

    #[tokio::test]
    async fn a_server_registered_with_the_other_transport_is_refused() {
        let store = Store::in_memory();
        record(&store.servers, server("s", Transport::Poll, 1))
            .await
            .expect("store");
        let err = record(&store.servers, server("s", Transport::Nats, 2))
            .await
            .expect_err("refused");
        assert!(
            matches!(&err, ServerError::OtherTransport(s) if s.transport == Transport::Poll),
            "{err:?}"
        );
        let stored = store
            .servers
            .get(&tenant(), &ServerId::new("s").expect("id"))
            .await
            .expect("store");
        assert_eq!(stored, Some(server("s", Transport::Poll, 1)));
    }

    #[tokio::test]
    async fn rotated_keys_replace_the_recorded_ones_only_of_a_registered_server() {
        let store = Store::in_memory();
        let id = ServerId::new("s").expect("id");
        let keys = server("s", Transport::Nats, 7).keys.expect("value");
        assert_eq!(
            store
                .servers
                .replace_keys(&tenant(), &id, &keys)
                .await
                .expect("store"),
            None
        );
        record(&store.servers, server("s", Transport::Nats, 1))
            .await
            .expect("store");
        let rotated = store
            .servers
            .replace_keys(&tenant(), &id, &keys)
            .await
            .expect("store");
        assert_eq!(rotated.and_then(|s| s.keys), Some(keys.clone()));
        let stored = store
            .servers
            .get(&tenant(), &id)
            .await
            .expect("store")
            .expect("value");
        assert_eq!(stored.keys, Some(keys));
        assert_eq!(
            stored.created_at,
            server("s", Transport::Nats, 1).created_at
        );
    }

    #[tokio::test]
    async fn a_server_with_unfinished_deployments_is_not_removable() {
        let store = Store::in_memory();
        let (t, id) = (tenant(), ServerId::new("s1").expect("id"));
        let removable_now = || removable((&store.servers, &store.deployments), &t, &id);
        assert!(matches!(
            removable_now().await,
            Err(ServerError::NotFound(_))
        ));
        record(&store.servers, server("s1", Transport::Nats, 1))
            .await
            .expect("store");
        assert!(removable_now().await.is_ok());
        let queued = record_of(DeploymentStatus::Queued, "d1");
        store.deployments.create(&queued).await.expect("store");
        store
            .deployments
            .create(&record_of(DeploymentStatus::InProgress, "d2"))
            .await
            .expect("store");
        store
            .deployments
            .create(&record_of(DeploymentStatus::Complete, "d3"))
            .await
            .expect("store");
        let err = removable_now().await.expect_err("refused");
        assert!(
            matches!(err, ServerError::Busy { unfinished: 2, .. }),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .contains("has 2 QUEUED or IN_PROGRESS deployments"),
            "{err}"
        );
        // Finished, it may go; removed, its index entries go with it.
        for d in ["d1", "d2"] {
            let d = flue_proto::DeploymentId::new(d).expect("id");
            store
                .deployments
                .update(&tenant(), &d, |r| {
                    r.deployment.status = DeploymentStatus::Failed;
                    true
                })
                .await
                .expect("store");
        }
        let found = removable_now().await.expect("removable");
        store
            .servers
            .delete(&tenant(), &found.id)
            .await
            .expect("store");
        assert_eq!(
            store.servers.get(&tenant(), &id).await.expect("store"),
            None
        );
        assert!(
            store
                .deployments
                .of_server(&tenant(), &id)
                .await
                .expect("store")
                .is_empty()
        );
        assert!(
            store
                .servers
                .page(&tenant(), 1, 10)
                .await
                .expect("store")
                .items
                .is_empty()
        );
        // The records stay.
        assert_eq!(
            store.deployments.ids(&tenant()).await.expect("store").len(),
            3
        );
    }

    fn record_of(status: DeploymentStatus, id: &str) -> crate::record::DeploymentRecord {
        let mut r = deployment();
        r.deployment.id = flue_proto::DeploymentId::new(id).expect("id");
        r.deployment.status = status;
        r
    }
}
