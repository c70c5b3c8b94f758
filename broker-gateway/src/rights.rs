//! An agent's data-space rights follow the stacks its server takes part in: the broker,
//! not the agent's good will, keeps a hook inside its own stack's keys.
//!
//! The server record lists its stacks and holds the last NATS user JWT minted for its
//! agent with their rights ([`Server::stacks`], [`Server::agent_jwt`]). A deployment in a
//! stack the record does not list yet (the server's first one there) adds the stack and
//! mints a new JWT for every listed stack, under compare-and-set, so that two first
//! deployments in two stacks at once end with one JWT naming both. Every request of a
//! deployment in a stack then carries the server's current JWT: whatever order requests
//! reach the agent in, the one it runs a hook for grants that hook's stack.
//!
//! Nothing secret is stored: a user JWT is public, the user's seed never leaves the
//! agent. A gateway without broker keys (development mode, anonymous broker) mints
//! nothing, and its agents run without broker-enforced rights.

use flue_proto::creds::UserJwtClaims;
use flue_proto::{Server, ServerId, StackId, TenantId};
use tracing::{info, warn};

use crate::error::chain;
use crate::natsauth::BrokerUsers;
use crate::store::{self, StoreError};

/// Why an agent's JWT for a stack could not be had.
#[derive(Debug, thiserror::Error)]
pub enum RightsError {
    /// The tenant account could not sign the agent's user JWT.
    #[error("cannot mint the agent's user JWT: {0}")]
    Mint(String),
    /// The server was deregistered meanwhile.
    #[error("server {:?} not found", .0.as_str())]
    ServerGone(ServerId),
    /// The server record could not be read or written.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What keeping agents' data-space rights takes: the tenant's server records and its
/// broker users (`None` with `--insecure-dev-broker`, where nothing is minted); cheap to
/// clone.
#[derive(Debug, Clone)]
pub struct StackRights {
    /// The tenant whose servers these are.
    pub tenant: TenantId,
    /// Its KV state (the server records).
    pub servers: store::Servers,
    /// Its broker users.
    pub users: Option<BrokerUsers>,
}

impl StackRights {
    /// The JWT a request of `server` in `stack` carries: the server's current one, minted
    /// anew first when it does not grant `stack` yet (or was minted for another user key,
    /// before a credentials rotation). `None` for a deployment outside stacks, or when the
    /// gateway has no broker keys or the server none of its own.
    pub async fn for_stack(
        &self,
        server: &Server,
        stack: Option<&StackId>,
    ) -> Result<Option<String>, RightsError> {
        for_stack(self, server, stack).await
    }
}

async fn for_stack(
    rights: &StackRights,
    server: &Server,
    stack: Option<&StackId>,
) -> Result<Option<String>, RightsError> {
    let (Some(stack), Some(users)) = (stack, &rights.users) else {
        return Ok(None);
    };
    if server.keys.is_none() {
        return Ok(None);
    }
    if grants(server, stack) {
        return Ok(server.agent_jwt.clone());
    }
    let tenant = &rights.tenant;
    let mut failed = None;
    let updated = rights
        .servers
        .update(tenant, &server.id, |stored| {
            if grants(stored, stack) {
                return false;
            }
            let Some(keys) = &stored.keys else {
                return false;
            };
            if !stored.stacks.contains(stack) {
                stored.stacks.push(stack.clone());
            }
            match users.agent_jwt_in(&stored.id, &keys.signing, &stored.stacks) {
                Ok(jwt) => {
                    stored.agent_jwt = Some(jwt);
                    true
                }
                Err(e) => {
                    failed = Some(e);
                    false
                }
            }
        })
        .await?;
    if let Some(e) = failed {
        warn!(error = %chain(&e), server.id = %server.id, stack.id = %stack, "cannot mint the agent's user JWT for a new stack");
        return Err(RightsError::Mint(e.to_string()));
    }
    let Some(updated) = updated else {
        return Err(RightsError::ServerGone(server.id.clone()));
    };
    info!(server.id = %server.id, stack.id = %stack, stacks = updated.stacks.len(), "server joined a stack; its agent gets a new user JWT");
    Ok(updated.agent_jwt)
}

/// True when the server's current JWT grants `stack` and is for its current user key.
fn grants(server: &Server, stack: &StackId) -> bool {
    let (Some(jwt), Some(keys)) = (&server.agent_jwt, &server.keys) else {
        return false;
    };
    server.stacks.contains(stack)
        && UserJwtClaims::verified(jwt).is_ok_and(|claims| claims.subject == keys.signing)
}

impl StackRights {
    /// A deleted stack leaves the records of the servers its units deployed to: the next
    /// JWT minted for each (its next deployment in another stack, or a rotation) no longer
    /// grants it, and its current one is dropped so that the next stack deployment mints
    /// it anew.
    ///
    /// Until its agent takes that JWT, the agent keeps its connection's rights to the
    /// deleted stack's keys (emptied by the delete). Revoking the user at the broker
    /// instead would cut it off with no JWT to reconnect with (it learns of new JWTs only
    /// through its queue), so it is not done here; a credentials rotation does that.
    pub async fn leave(&self, stack: &StackId, servers: impl IntoIterator<Item = &ServerId>) {
        let tenant = &self.tenant;
        let servers: std::collections::BTreeSet<_> = servers.into_iter().collect();
        for id in servers {
            let left = self
                .servers
                .update(tenant, id, |stored| {
                    let before = stored.stacks.len();
                    stored.stacks.retain(|s| s != stack);
                    if stored.stacks.len() == before {
                        return false;
                    }
                    stored.agent_jwt = None;
                    true
                })
                .await;
            if let Err(e) = left {
                warn!(error = %chain(&e), server.id = %id, stack.id = %stack, "cannot record that a server left a deleted stack; its next JWT still grants it");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use flue_proto::ServerKeys;
    use nkeys::KeyPair;
    use time::OffsetDateTime;

    use super::*;
    use crate::natsauth::jwt::{self, Claims, Permissions, User};

    fn server(user: &str, stacks: &[&str], jwt_for: Option<&str>) -> Server {
        let account = KeyPair::new_account();
        let agent_jwt = jwt_for.map(|sub| {
            let mut claims = Claims::new(sub, "agent", User::new(Permissions::default()));
            jwt::encode(&account, &mut claims, 1_900_000_000).expect("jwt")
        });
        Server {
            id: "web1".parse().expect("id"),
            tenant: "acme".parse().expect("id"),
            name: String::new(),
            created_at: OffsetDateTime::UNIX_EPOCH,
            keys: Some(ServerKeys {
                signing: user.to_owned(),
                sealing: "X".to_owned(),
            }),
            stacks: stacks.iter().map(|s| s.parse().expect("id")).collect(),
            agent_jwt,
            presence: None,
            transport: Default::default(),
            poll_secret_sha256: None,
        }
    }

    #[test]
    fn a_jwt_grants_a_stack_only_when_listed_and_for_the_servers_current_user() {
        let user = KeyPair::new_user().public_key();
        let st1: StackId = "st1".parse().expect("id");
        assert!(grants(&server(&user, &["st1"], Some(&user)), &st1));
        // Its first deployment there.
        assert!(!grants(&server(&user, &["st2"], Some(&user)), &st1));
        // Never minted, or dropped when a stack was deleted.
        assert!(!grants(&server(&user, &["st1"], None), &st1));
        // Minted for the user key of before a rotation.
        let old = KeyPair::new_user().public_key();
        assert!(!grants(&server(&user, &["st1"], Some(&old)), &st1));
    }
}
