//! Minting an agent's credentials: its NATS user key (which also signs its answers) and its
//! sealing key, bundled with the gateway's public keys into the credentials file text.
//!
//! The gateway keeps only the public halves ([`ServerKeys`]); the file is handed out once.

use flue_proto::ServerKeys;
use flue_proto::creds::{AgentCredentials, AgentSettings, UserCreds};
use flue_proto::{ServerId, StackId, TenantId};
use nkeys::{KeyPair, XKey};

use crate::natsauth::BrokerUsers;
use crate::state::GatewayKeys;

/// Why no credentials could be minted (not expected: the system's random generator or
/// the tenant account's key failed).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct MintError(String);

/// What minting agents' credentials takes: the tenant, its broker users (`None` with
/// `--insecure-dev-broker`) and the gateway's public keys the agent pins; cheap to clone.
#[derive(Debug, Clone)]
pub struct Minter {
    tenant: TenantId,
    users: Option<BrokerUsers>,
    /// The gateway's request-signing public key.
    gateway_key: String,
    /// The gateway's sealing public key.
    gateway_xkey: String,
}

impl Minter {
    /// A minter for `tenant`'s agents, pinning the public halves of `keys`.
    pub fn new(tenant: TenantId, users: Option<BrokerUsers>, keys: &GatewayKeys) -> Self {
        Self {
            tenant,
            users,
            gateway_key: keys.signing.public_key(),
            gateway_xkey: keys.sealing.public_key(),
        }
    }

    /// Mints new keys for `server`, its JWT granting the data keys of `stacks`.
    pub fn mint(&self, server: &ServerId, stacks: &[StackId]) -> Result<Minted, MintError> {
        mint(self, server, stacks)
    }
}

/// Freshly minted credentials for one server.
pub struct Minted {
    /// The public keys to record.
    pub keys: ServerKeys,
    /// The credentials file text for its agent (a secret).
    pub text: String,
}

/// Mints new keys for `server` of the minter's tenant.
///
/// In operator mode the NATS user JWT is signed by the tenant's edge account for the new user
/// key (the agent's permissions, [`crate::natsauth::perms::agent`]); with
/// `--insecure-dev-broker` it is left empty (the broker checks no user). It grants the
/// data-space keys of `stacks`: none at registration, the server's recorded stacks at a
/// rotation (so the agent started with the new file has them at once, `rights`).
fn mint(minter: &Minter, server: &ServerId, stacks: &[StackId]) -> Result<Minted, MintError> {
    let user = KeyPair::new_user();
    let xkey = XKey::new();
    let seed = user
        .seed()
        .map_err(|e| MintError(format!("cannot encode a new user key: {e}")))?;
    let xkey_seed = xkey
        .seed()
        .map_err(|e| MintError(format!("cannot encode a new sealing key: {e}")))?;
    let keys = ServerKeys {
        signing: user.public_key(),
        sealing: xkey.public_key(),
    };
    let jwt = match &minter.users {
        Some(users) => users
            .agent_jwt_in(server, &user.public_key(), stacks)
            .map_err(|e| MintError(format!("cannot sign the agent's broker user: {e}")))?,
        None => String::new(),
    };
    let js_domain = minter
        .users
        .as_ref()
        .map(|_| flue_proto::subject::JETSTREAM_DOMAIN.to_owned());
    let bundle = AgentCredentials {
        user: UserCreds { jwt, seed },
        settings: AgentSettings {
            tenant: minter.tenant.clone(),
            server: server.clone(),
            gateway_key: minter.gateway_key.clone(),
            gateway_xkey: minter.gateway_xkey.clone(),
            xkey_seed,
            js_domain,
        },
    };
    Ok(Minted {
        keys,
        text: bundle.to_text(),
    })
}
