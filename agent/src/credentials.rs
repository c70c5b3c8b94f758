//! The agent's credentials file (`--creds`): read at start, checked against the server it
//! runs for, and used to authenticate to the broker with the NATS user it holds.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_nats::ConnectOptions;
use flue_proto::creds::{AgentCredentials, UserCreds};

use crate::config::Config;
use crate::error::Error;

/// Reads the credentials file named by the configuration, if any, and checks it was minted
/// for this server of this tenant.
pub fn load(config: &Config) -> Result<Option<AgentCredentials>, Error> {
    let Some(path) = &config.creds_file else {
        return Ok(None);
    };
    let refuse = |reason: String| Error::Credentials {
        path: path.clone(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| refuse(e.to_string()))?;
    let creds = AgentCredentials::parse(&text).map_err(|e| refuse(e.to_string()))?;
    let settings = &creds.settings;
    if settings.server != config.server_id || settings.tenant != config.tenant {
        return Err(refuse(format!(
            "it was minted for server {:?} of tenant {:?}, not server {:?} of tenant {:?}",
            settings.server.as_str(),
            settings.tenant.as_str(),
            config.server_id.as_str(),
            config.tenant.as_str(),
        )));
    }
    if creds.user.jwt.is_empty() && !config.insecure_dev_broker {
        return Err(refuse(
            "it holds no broker user (its gateway runs with --insecure-dev-broker); give --insecure-dev-broker for development, or register the server with a gateway in operator mode".to_owned(),
        ));
    }
    Ok(Some(creds))
}

/// Authenticates with the user's JWT, signing the broker's nonce with its seed.
pub fn authenticate(
    options: ConnectOptions,
    user: &UserCreds,
    path: &Option<PathBuf>,
) -> Result<ConnectOptions, Error> {
    let key = nkeys::KeyPair::from_seed(&user.seed).map_err(|e| Error::Credentials {
        path: path.clone().unwrap_or_else(|| Path::new("-").to_owned()),
        reason: format!("the user nkey seed is not valid: {e}"),
    })?;
    let key = Arc::new(key);
    Ok(options.jwt(user.jwt.clone(), move |nonce| {
        let key = key.clone();
        async move { key.sign(&nonce).map_err(async_nats::AuthError::new) }
    }))
}
