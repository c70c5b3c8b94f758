//! One tenant's broker users: minting and revoking its agents' and listeners' users.

use flue_proto::creds::UserCreds;
use flue_proto::{ServerId, StackId, TenantId};

use super::{AccountKind, NatsAuth, NatsAuthError};

/// Mints and revokes one tenant's broker users: what registration, rotation,
/// deregistration and listener credentials need of the broker's keys. Cheap to clone.
#[derive(Debug, Clone)]
pub struct BrokerUsers {
    tenant: TenantId,
    auth: NatsAuth,
    system: async_nats::Client,
}

impl BrokerUsers {
    /// `tenant`'s users, minted with `auth`'s keys; revocations are pushed over
    /// `system` (the system account's connection).
    pub fn new(tenant: TenantId, auth: NatsAuth, system: async_nats::Client) -> Self {
        Self {
            tenant,
            auth,
            system,
        }
    }

    /// The user JWT of `server`'s agent for its user key `user_pub`.
    pub fn agent_jwt(&self, server: &ServerId, user_pub: &str) -> Result<String, NatsAuthError> {
        self.auth.agent_jwt(&self.tenant, server, user_pub, &[])
    }

    /// The user JWT of `server`'s agent for its user key `user_pub`, with the data-space
    /// rights of `stacks` (the stacks' data spaces).
    pub fn agent_jwt_in(
        &self,
        server: &ServerId,
        user_pub: &str,
        stacks: &[StackId],
    ) -> Result<String, NatsAuthError> {
        self.auth.agent_jwt(&self.tenant, server, user_pub, stacks)
    }

    /// Revokes the agent user `user_pub` at the broker: its connections are closed and its
    /// JWTs refused from now on. Agents are users of the edge account; one whose
    /// credentials were minted before the edge account existed is a user of the tenant
    /// account until it is rotated, so the key is revoked in both.
    pub async fn revoke_agent(&self, user_pub: &str) -> Result<(), NatsAuthError> {
        for kind in [AccountKind::Edge, AccountKind::Tenant] {
            self.auth
                .revoke_user(&self.tenant, kind, user_pub, &self.system)
                .await?;
        }
        Ok(())
    }

    /// The tenant's sealed consumer names ([`crate::consumer_names`]).
    pub fn consumer_names(&self) -> Result<crate::consumer_names::ConsumerNames, NatsAuthError> {
        self.auth.consumer_names(&self.tenant)
    }

    /// A new listener user of the tenant's events account, with its listener id.
    pub fn listener_creds(&self) -> Result<(String, UserCreds), NatsAuthError> {
        self.auth.listener_creds(&self.tenant)
    }
}
