//! Hidden values in the agent: a request's sealed inputs are opened just before the hook's
//! item is built (in memory only), and the hook's hidden outputs are sealed to the gateway
//! before the result is recorded in the ledger and published.
//!
//! An agent without credentials (`--creds`) holds no key: it refuses every request that
//! carries a hidden value or declares a hidden output, rather than run it in the clear.

use std::collections::BTreeSet;

use flue_proto::creds::AgentCredentials;
use flue_proto::seal::{self, SealError};
use flue_proto::{DeploymentRequest, DeploymentResult, OutputDecl};
use nkeys::XKey;

/// Why a request's hidden values cannot be handled; the deployment fails with it.
#[derive(Debug, thiserror::Error)]
pub enum SealRefusal {
    /// The agent runs without a credentials file.
    #[error(
        "the request has hidden values and this agent has no credentials to open or seal them (start it with --creds)"
    )]
    NoCredentials,
    /// The credentials file's keys are not xkeys.
    #[error("the credentials file's sealing keys are not valid")]
    BadKeys(#[source] SealError),
    /// A hidden input arrived in the clear: the gateway never sends one that way.
    #[error("hidden input {0:?} arrived unsealed; refused")]
    Unsealed(String),
    /// A hidden input was not sealed by the gateway to this server.
    #[error("hidden input {0:?} does not open with this server's key from the gateway")]
    Unopenable(String),
}

/// The two keys sealing needs: this server's (a seed) and the gateway's (public).
pub struct Keys {
    own: XKey,
    gateway: XKey,
}

impl Keys {
    /// The keys in a credentials file; `NoCredentials` without one.
    pub fn of(credentials: Option<&AgentCredentials>) -> Result<Self, SealRefusal> {
        let settings = &credentials.ok_or(SealRefusal::NoCredentials)?.settings;
        Ok(Self {
            own: seal::seed_key(&settings.xkey_seed).map_err(SealRefusal::BadKeys)?,
            gateway: seal::public_key(&settings.gateway_xkey).map_err(SealRefusal::BadKeys)?,
        })
    }
}

/// Names of the hidden inputs of `req` that carry a value.
fn hidden_inputs(req: &DeploymentRequest) -> BTreeSet<&String> {
    let declared = req
        .config
        .inputs
        .iter()
        .filter(|i| i.hidden)
        .map(|i| &i.name);
    declared
        .chain(&req.hidden_inputs)
        .filter(|name| req.input_values.contains_key(*name))
        .collect()
}

/// `req` with every hidden input opened, ready to build the hook's item from; a request
/// with no hidden value and no hidden output is returned as it is, keys or not.
pub fn open_request(
    credentials: Option<&AgentCredentials>,
    req: &DeploymentRequest,
) -> Result<DeploymentRequest, SealRefusal> {
    let hidden = hidden_inputs(req);
    if hidden.is_empty() && !req.config.outputs.iter().any(|o| o.hidden) {
        return Ok(req.clone());
    }
    let keys = Keys::of(credentials)?;
    let mut opened = req.clone();
    for name in hidden {
        let value = &req.input_values[name];
        if !seal::is_sealed(value) {
            return Err(SealRefusal::Unsealed(name.clone()));
        }
        let plain = seal::open(value, &keys.own, &keys.gateway)
            .map_err(|_| SealRefusal::Unopenable(name.clone()))?;
        opened.input_values.insert(name.clone(), plain);
    }
    Ok(opened)
}

/// `result` with the value of every hidden output sealed to the gateway. Without keys
/// (never reached: such a request is refused before it runs) the values are dropped.
pub fn seal_outputs(
    credentials: Option<&AgentCredentials>,
    mut result: DeploymentResult,
    decls: &[OutputDecl],
) -> DeploymentResult {
    let keys = Keys::of(credentials).ok();
    for decl in decls.iter().filter(|d| d.hidden) {
        let Some(value) = result.outputs.remove(&decl.name) else {
            continue;
        };
        let sealed = keys
            .as_ref()
            .and_then(|k| seal::seal(&value, &k.own, &k.gateway).ok());
        if let Some(sealed) = sealed {
            result.outputs.insert(decl.name.clone(), sealed);
        }
    }
    result
}

#[cfg(test)]
mod tests;
