//! Minting an agent's credentials: its NATS user key (which also signs its answers) and its
//! sealing key, bundled with the gateway's public keys into the credentials file text.
//!
//! The gateway keeps only the public halves ([`ServerKeys`]); the file is handed out once.

use flue_proto::ServerId;
use flue_proto::ServerKeys;
use flue_proto::creds::{AgentCredentials, AgentSettings, UserCreds};
use nkeys::{KeyPair, XKey};

use crate::api::ApiError;
use crate::service::Service;

/// Freshly minted credentials for one server.
pub struct Minted {
    /// The public keys to record.
    pub keys: ServerKeys,
    /// The credentials file text for its agent (a secret).
    pub text: String,
}

/// Mints new keys for `server` of the service's tenant.
///
/// In operator mode the NATS user JWT is signed by the tenant account for the new user
/// key (the agent's permissions, [`crate::natsauth::perms::agent`]); with
/// `--insecure-dev-broker` it is left empty (the broker checks no user).
pub fn mint(service: &Service, server: &ServerId) -> Result<Minted, ApiError> {
    let user = KeyPair::new_user();
    let xkey = XKey::new();
    let seed = user
        .seed()
        .map_err(|e| ApiError::Internal(format!("cannot encode a new user key: {e}")))?;
    let xkey_seed = xkey
        .seed()
        .map_err(|e| ApiError::Internal(format!("cannot encode a new sealing key: {e}")))?;
    let keys = ServerKeys {
        signing: user.public_key(),
        sealing: xkey.public_key(),
    };
    let jwt = match &service.users {
        Some(users) => users
            .agent_jwt(server, &user.public_key())
            .map_err(|e| ApiError::Internal(format!("cannot sign the agent's broker user: {e}")))?,
        None => String::new(),
    };
    let js_domain = service
        .users
        .as_ref()
        .map(|_| flue_proto::subject::JETSTREAM_DOMAIN.to_owned());
    let bundle = AgentCredentials {
        user: UserCreds { jwt, seed },
        settings: AgentSettings {
            tenant: service.config.tenant.clone(),
            server: server.clone(),
            gateway_key: service.keys.signing.public_key(),
            gateway_xkey: service.keys.sealing.public_key(),
            xkey_seed,
            js_domain,
        },
    };
    Ok(Minted {
        keys,
        text: bundle.to_text(),
    })
}
