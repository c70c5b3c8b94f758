//! Registering a server that connects over NATS (its request consumer, its agent's
//! credentials, its record), rotating its credentials, and deregistering it; each
//! reported as a server event where it is one.

use flue_proto::poll::Transport;
use flue_proto::{
    AgentBootstrap, EventType, RegisterServer, Registration, Server, ServerId, subject,
};
use time::OffsetDateTime;
use tracing::{info, warn};

use super::{ServerError, Servers, record, removable, server_event};
use crate::error::chain;

/// What a registration came to.
#[derive(Debug)]
pub struct Registered {
    /// True when this registration recorded the server (the first one).
    pub created: bool,
    /// What its agent needs; credentials only when `created`.
    pub registration: Registration,
}

impl Servers {
    /// Registers `body`'s server: its request consumer first, so that every recorded
    /// server has its queue (registering again ensures it again), then its record.
    ///
    /// Only the registration that recorded the server hands out the credentials whose
    /// public keys it recorded; a repeated one gets none. A server recorded with the
    /// other transport is [`ServerError::OtherTransport`].
    pub async fn register(&self, body: RegisterServer) -> Result<Registered, ServerError> {
        let tenant = &self.tenant;
        let consumer = self
            .broker
            .ensure_request_consumer(tenant, &body.id)
            .await?;
        let minted = self.minter.mint(&body.id, &[])?;
        let server = Server {
            id: body.id,
            tenant: tenant.clone(),
            name: body.name,
            created_at: OffsetDateTime::now_utc(),
            keys: Some(minted.keys),
            stacks: Vec::new(),
            agent_jwt: None,
            presence: None,
            transport: Transport::Nats,
            poll_secret_sha256: None,
        };
        let (created, server) = record(&self.records, server).await?;
        let mut credentials = None;
        if created {
            credentials = Some(minted.text);
            // A server registered again after a deregistration has new keys.
            self.signers.forget(tenant, &server.id);
            info!(server.id = %server.id, consumer, "server registered");
            self.events
                .emit(&server_event(&server, EventType::ServerRegistered))
                .await;
        }
        self.presence
            .note_registered(tenant, &server.id, &server.name);
        let agent = self.bootstrap(&server.id, consumer);
        Ok(Registered {
            created,
            registration: Registration {
                server: server.public(),
                agent: Some(agent),
                poll: None,
                credentials,
            },
        })
    }

    /// Mints new keys for `old`, a registered server, records their public halves in
    /// place of the old ones (compare-and-set) and returns the new credentials, once.
    /// From then on answers signed with the old key are refused, and the old broker user
    /// is revoked.
    pub async fn rotate(&self, old: Server) -> Result<Registration, ServerError> {
        let (tenant, id) = (&self.tenant, &old.id);
        let minted = self.minter.mint(id, &old.stacks)?;
        let server = self
            .records
            .replace_keys(tenant, id, &minted.keys)
            .await?
            .ok_or_else(|| ServerError::NotFound(id.clone()))?;
        self.signers.forget(tenant, id);
        // The old user is revoked only once the new keys are recorded: a failure before
        // leaves the agent running with the keys the gateway still trusts.
        self.revoke_user(&old).await?;
        info!(server.id = %id, "server credentials rotated");
        let consumer = self.broker.request_consumer_name(tenant, id).await?;
        let agent = self.bootstrap(id, consumer);
        Ok(Registration {
            server: server.public(),
            agent: Some(agent),
            poll: None,
            credentials: Some(minted.text),
        })
    }

    /// Removes server `id`, its request queue and its broker user (its deployment records
    /// stay); [`ServerError::Busy`] while it has QUEUED or IN_PROGRESS deployments.
    /// Registering it again later starts afresh (a new `created_at`, an empty queue).
    ///
    /// The server record goes last, so a removal interrupted half-way can be repeated.
    pub async fn deregister(&self, id: &ServerId) -> Result<(), ServerError> {
        let tenant = &self.tenant;
        let server = removable((&self.records, &self.deployments), tenant, id).await?;
        self.broker.remove_request_queue(tenant, id).await?;
        // Revoked before the record goes: an interrupted removal is repeated with the key
        // still known (revoking twice is harmless).
        self.revoke_user(&server).await?;
        self.records.delete(tenant, id).await?;
        self.presence.forget(tenant, id).await;
        info!(server.id = %id, "server deregistered");
        self.events
            .emit(&server_event(&server, EventType::ServerDeregistered))
            .await;
        Ok(())
    }

    /// What the agent of server `id` needs to reach its queue through `consumer`.
    fn bootstrap(&self, id: &ServerId, consumer: String) -> AgentBootstrap {
        let tenant = &self.tenant;
        AgentBootstrap {
            nats_url: self.agent_nats_url.clone(),
            tenant: tenant.clone(),
            server_id: id.clone(),
            request_stream: subject::REQUEST_STREAM.to_owned(),
            request_consumer: consumer,
            response_subject: subject::response(tenant, id),
            inbox_prefix: subject::agent_inbox_prefix(tenant, id),
        }
    }

    /// Revokes `server`'s broker user (its agent is disconnected and its credentials
    /// refused by the broker from now on); nothing to do with `--insecure-dev-broker` or
    /// for a server recorded without keys.
    async fn revoke_user(&self, server: &Server) -> Result<(), ServerError> {
        let (Some(users), Some(keys)) = (&self.users, &server.keys) else {
            return Ok(());
        };
        users.revoke_agent(&keys.signing).await.map_err(|e| {
            warn!(server.id = %server.id, error = %chain(&e), "cannot revoke a server's broker user");
            ServerError::Revocation(server.id.clone())
        })?;
        info!(server.id = %server.id, "server's broker user revoked");
        Ok(())
    }
}
