//! Software configs: immutable, stored once under their id.

use flue_proto::{Config, TenantId};
use nkeys::XKey;

use crate::broker::{Broker, TooLarge};
use crate::sealing::{SealFailure, seal_config_defaults};
use crate::store::{self, StoreError};

/// What creating a config came to.
#[derive(Debug)]
pub(crate) enum Created {
    /// Stored now: the config as stored (hidden defaults sealed).
    New(Config),
    /// The same body was stored under this id before (a retry): the stored config.
    Same(Config),
}

/// Why a config was not stored.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CreateConfigError {
    /// The id holds a config with a hidden default: bodies are never compared then.
    #[error(
        "config {0:?} already exists; configs with hidden defaults are not compared, use a new id"
    )]
    HiddenDefaults(String),
    /// The id holds another body.
    #[error("config {0:?} already exists with a different body")]
    Different(String),
    /// A hidden default could not be sealed to the gateway.
    #[error(transparent)]
    Seal(#[from] SealFailure),
    /// The stored config would not fit in one broker message.
    #[error(transparent)]
    TooLarge(#[from] TooLarge),
    /// The configs bucket could not be read or written.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Stores `config` in `tenant`'s `configs`, its hidden defaults sealed to the gateway
/// (`sealing`) first; refused when it would not fit in one message of `broker`.
///
/// An id already used gives the stored config when the body is the same (so a client can
/// retry), a conflict when it is not, and always a conflict when the stored config has a
/// hidden default: comparing bodies would let anyone confirm a guessed secret.
pub(crate) async fn create(
    configs: &store::Configs,
    broker: &Broker,
    sealing: &XKey,
    tenant: &TenantId,
    mut config: Config,
) -> Result<Created, CreateConfigError> {
    seal_config_defaults(&mut config, sealing)?;
    broker.fits_json("config", &config)?;
    match configs.create(tenant, &config).await? {
        None => Ok(Created::New(config)),
        Some(stored) => existing(stored, &config).map(Created::Same),
    }
}

/// `stored` when `new` may be answered with it (the same body), else why not.
fn existing(stored: Config, new: &Config) -> Result<Config, CreateConfigError> {
    if has_hidden_default(&stored) {
        return Err(CreateConfigError::HiddenDefaults(
            new.id.as_str().to_owned(),
        ));
    }
    let mut new = new.clone();
    new.created_at = stored.created_at;
    if stored != new {
        return Err(CreateConfigError::Different(new.id.as_str().to_owned()));
    }
    Ok(stored)
}

/// True when the config declares a hidden input with a default (a secret of its own).
fn has_hidden_default(config: &Config) -> bool {
    config
        .inputs
        .iter()
        .any(|i| i.hidden && i.default.is_some())
}

#[cfg(test)]
mod tests {
    use flue_proto::{ConfigId, ConfigSpec};
    use serde_json::json;
    use time::OffsetDateTime;

    use super::*;

    fn config(script: &str, hidden_default: bool, at: i64) -> Config {
        let mut input = json!({"name": "x"});
        if hidden_default {
            input = json!({"name": "x", "hidden": true, "default": "s3cret"});
        }
        let spec: ConfigSpec = serde_json::from_value(json!({
            "group": "script", "config": script, "inputs": [input],
        }))
        .expect("spec");
        spec.into_config(
            ConfigId::new("c1").expect("id"),
            OffsetDateTime::UNIX_EPOCH + time::Duration::seconds(at),
        )
    }

    #[test]
    fn a_config_stored_again_is_the_same_only_with_the_same_body_and_no_hidden_default() {
        // The same body, sent later (another creation time): the stored one.
        let stored = config("echo a", false, 1);
        let same = existing(stored.clone(), &config("echo a", false, 2)).expect("same body");
        assert_eq!(same, stored);
        // Another body.
        assert!(matches!(
            existing(stored, &config("echo b", false, 2)),
            Err(CreateConfigError::Different(id)) if id == "c1"
        ));
        // A hidden default: a conflict even for the same body, or the 200 would confirm a
        // guessed secret.
        let secret = config("echo a", true, 1);
        assert!(matches!(
            existing(secret.clone(), &secret),
            Err(CreateConfigError::HiddenDefaults(_))
        ));
    }
}
