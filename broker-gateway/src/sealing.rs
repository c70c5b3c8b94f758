//! Hidden values sealed with xkeys ([`flue_proto::seal`]): at rest to the gateway's own key
//! (`sealing.xk`), in a request to the server's agent, from an answer back to the gateway.
//!
//! The gateway is the only place where a hidden value is ever in the clear outside the
//! hook: briefly in memory, when a client hands one over (sealed before anything is
//! stored), when a request is built (opened and sealed again to the agent), when an
//! answer's hidden outputs arrive (opened and sealed again to itself, which also proves
//! the server's agent sealed them) and when two deployments' inputs are compared.

use std::collections::{BTreeMap, BTreeSet};

use flue_proto::seal::{self, SealError};
use flue_proto::{Config, DeploymentStatus, ServerId};
use nkeys::XKey;
use serde_json::Value;

use crate::record::DeploymentRecord;

/// Why hidden values could not be sealed for, or received from, a server.
#[derive(Debug, thiserror::Error)]
pub enum SealFailure {
    /// The server's record has no sealing key (registered before keys existed).
    #[error(
        "server {0} has no sealing key (registered before keys existed), so hidden values cannot be sent to it; rotate its credentials"
    )]
    NoServerKey(ServerId),
    /// The server's recorded sealing key is not an xkey.
    #[error("server {0} has an invalid sealing key")]
    BadServerKey(ServerId),
    /// A stored hidden value does not open with the gateway's key.
    #[error(
        "stored hidden value {name:?} cannot be opened with the gateway's sealing key (was the state directory replaced?); give the value again"
    )]
    AtRest {
        /// The input, output or default.
        name: String,
        /// Why.
        #[source]
        source: SealError,
    },
    /// Sealing failed (a key without its private half; not expected).
    #[error("hidden value {name:?} cannot be sealed")]
    Seal {
        /// The value's name.
        name: String,
        /// Why.
        #[source]
        source: SealError,
    },
}

/// The public sealing key of `server`, from its recorded keys.
pub fn server_key(server: &flue_proto::Server) -> Result<XKey, SealFailure> {
    let keys = server
        .keys
        .as_ref()
        .ok_or_else(|| SealFailure::NoServerKey(server.id.clone()))?;
    seal::public_key(&keys.sealing).map_err(|_| SealFailure::BadServerKey(server.id.clone()))
}

/// Seals to the gateway (at rest) the value of every name in `names` present in `values`.
pub fn seal_at_rest<'a>(
    values: &mut BTreeMap<String, Value>,
    names: impl IntoIterator<Item = &'a String>,
    gateway: &XKey,
) -> Result<(), SealFailure> {
    for name in names {
        if let Some(value) = values.get_mut(name) {
            *value = seal::seal(value, gateway, gateway).map_err(|source| SealFailure::Seal {
                name: name.clone(),
                source,
            })?;
        }
    }
    Ok(())
}

/// Seals to the gateway the default of every hidden input `config` declares, before the
/// config is stored.
pub fn seal_config_defaults(config: &mut Config, gateway: &XKey) -> Result<(), SealFailure> {
    for input in config.inputs.iter_mut().filter(|i| i.hidden) {
        if let Some(default) = &mut input.default {
            *default =
                seal::seal(default, gateway, gateway).map_err(|source| SealFailure::Seal {
                    name: input.name.clone(),
                    source,
                })?;
        }
    }
    Ok(())
}

/// The input values of `record` with its hidden ones opened: only to compare two
/// deployments' inputs, never to store or show.
pub fn opened_inputs(
    record: &DeploymentRecord,
    gateway: &XKey,
) -> Result<BTreeMap<String, Value>, SealFailure> {
    opened_values(
        &record.deployment.input_values,
        &record.hidden_inputs,
        gateway,
    )
}

/// `values` with those named in `sealed` (sealed at rest) opened: to check or compare
/// what a hook would get, never to store or show.
pub fn opened_values<'a>(
    values: &BTreeMap<String, Value>,
    sealed: impl IntoIterator<Item = &'a String>,
    gateway: &XKey,
) -> Result<BTreeMap<String, Value>, SealFailure> {
    let mut values = values.clone();
    for name in sealed {
        if let Some(value) = values.get_mut(name) {
            *value = open_at_rest(name, value, gateway)?;
        }
    }
    Ok(values)
}

fn open_at_rest(name: &str, value: &Value, gateway: &XKey) -> Result<Value, SealFailure> {
    seal::open(value, gateway, gateway).map_err(|source| SealFailure::AtRest {
        name: name.to_owned(),
        source,
    })
}

/// The input values and config a request carries to `server`: every hidden value opened
/// and sealed again to the server (the same bytes each time the request is rebuilt), and
/// the hidden defaults left out of the config (the gateway already put them among the
/// values). `server` is needed only when there is a hidden value to send.
pub fn for_server(
    record: &DeploymentRecord,
    config: &Config,
    gateway: &XKey,
    server: Result<XKey, SealFailure>,
) -> Result<(BTreeMap<String, Value>, Config), SealFailure> {
    let d = &record.deployment;
    let mut config = config.clone();
    for input in config.inputs.iter_mut().filter(|i| i.hidden) {
        input.default = None;
    }
    let mut values = d.input_values.clone();
    let hidden: Vec<&String> = record
        .hidden_inputs
        .iter()
        .filter(|name| values.contains_key(*name))
        .collect();
    if hidden.is_empty() {
        return Ok((values, config));
    }
    let server = server?;
    for name in hidden {
        let Some(value) = values.get_mut(name) else {
            continue;
        };
        let plain = open_at_rest(name, value, gateway)?;
        let context = format!("{}.{}.{name}", d.id, d.created_at.unix_timestamp_nanos());
        *value =
            seal::seal_derived(&plain, gateway, &server, context.as_bytes()).map_err(|source| {
                SealFailure::Seal {
                    name: name.clone(),
                    source,
                }
            })?;
    }
    Ok((values, config))
}

/// An answer's outputs as they are stored: each sealed one opened from the server's agent
/// and sealed again to the gateway. Returns the names that did not open (wrong sender,
/// altered, or the server has no key), which [`settle_hidden_outputs`] refuses.
pub fn received_outputs(
    outputs: &mut BTreeMap<String, Value>,
    gateway: &XKey,
    server: &Result<XKey, SealFailure>,
) -> BTreeSet<String> {
    let mut refused = BTreeSet::new();
    for (name, value) in outputs.iter_mut() {
        if !seal::is_sealed(value) {
            continue;
        }
        let resealed = server.as_ref().ok().and_then(|server| {
            let plain = seal::open(value, gateway, server).ok()?;
            seal::seal(&plain, gateway, gateway).ok()
        });
        match resealed {
            Some(sealed) => *value = sealed,
            None => {
                refused.insert(name.clone());
            }
        }
    }
    refused
}

/// After a `finished` answer was applied: a hidden output that came in the clear, or
/// sealed in a way that did not open ([`received_outputs`]), is dropped and the
/// deployment fails saying so, since a value the gateway cannot vouch for must never be
/// handed on (`input_refs`). True if that changed anything.
pub fn settle_hidden_outputs(record: &mut DeploymentRecord, refused: &BTreeSet<String>) -> bool {
    let outputs = &mut record.deployment.outputs;
    let bad: Vec<String> = outputs
        .iter()
        .filter(|(name, value)| {
            refused.contains(*name)
                || (record.hidden_outputs.contains(name) && !seal::is_sealed(value))
        })
        .map(|(name, _)| name.clone())
        .collect();
    let Some(first) = bad.first() else {
        return false;
    };
    let reason = format!(
        "hidden output {first:?} did not arrive sealed to the gateway by the server's agent; dropped"
    );
    for name in &bad {
        outputs.remove(name);
    }
    let d = &mut record.deployment;
    d.status = DeploymentStatus::Failed;
    d.status_reason = Some(reason);
    true
}

#[cfg(test)]
mod tests;
