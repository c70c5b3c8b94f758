//! Registering a server that polls (see [`crate::poll`]) and rotating its metadata URL:
//! no broker consumer and no broker user, since the server never connects; its secret URL
//! is handed out once and only its hash is stored.

use flue_proto::poll::{self, PollAccess, Transport};
use flue_proto::{EventType, RegisterServer, Registration, Server, ServerId};
use time::OffsetDateTime;
use tracing::info;

use super::register::Registered;
use super::{ServerError, Servers, record, server_event};
use crate::poll::{new_secret, secret_hash};

impl Servers {
    /// Records `body`'s polling server with the hash of a new metadata URL secret, and
    /// hands the URL (under `base`, where servers reach this gateway) out, once: only to
    /// the registration that recorded it. A server recorded with the other transport is
    /// [`ServerError::OtherTransport`].
    pub async fn register_polled(
        &self,
        body: RegisterServer,
        base: &str,
    ) -> Result<Registered, ServerError> {
        let secret = new_secret().map_err(|_| ServerError::Random)?;
        let server = Server {
            id: body.id,
            tenant: self.tenant.clone(),
            name: body.name,
            created_at: OffsetDateTime::now_utc(),
            keys: None,
            stacks: Vec::new(),
            agent_jwt: None,
            presence: None,
            transport: Transport::Poll,
            poll_secret_sha256: Some(secret_hash(&secret)),
        };
        let (created, server) = record(&self.records, server).await?;
        let mut poll = None;
        if created {
            info!(server.id = %server.id, "polling server registered");
            self.events
                .emit(&server_event(&server, EventType::ServerRegistered))
                .await;
            poll = Some(self.access(base, &server.id, &secret));
        }
        Ok(Registered {
            created,
            registration: Registration {
                server: server.public(),
                agent: None,
                poll,
                credentials: None,
            },
        })
    }

    /// A new metadata URL secret for polling server `id` replaces the old one
    /// (compare-and-set), which stops working at once; the new URL is under `base`.
    /// Pending signal URLs stay valid: they do not depend on it.
    pub async fn rotate_polled(
        &self,
        id: &ServerId,
        base: &str,
    ) -> Result<Registration, ServerError> {
        let secret = new_secret().map_err(|_| ServerError::Random)?;
        let hash = secret_hash(&secret);
        let server = self
            .records
            .update(&self.tenant, id, |stored| {
                stored.poll_secret_sha256 = Some(hash.clone());
                true
            })
            .await?
            .ok_or_else(|| ServerError::NotFound(id.clone()))?;
        info!(server.id = %id, "polling server's metadata URL rotated");
        Ok(Registration {
            server: server.public(),
            agent: None,
            poll: Some(self.access(base, id, &secret)),
            credentials: None,
        })
    }

    /// The metadata URL of server `id` with `secret`, under `base`.
    fn access(&self, base: &str, id: &ServerId, secret: &str) -> PollAccess {
        let path = poll::metadata_path(&self.tenant, id, secret);
        PollAccess::new(format!("{base}{path}"))
    }
}
