//! Servers that poll instead of listening on the broker: Heat's `POLL_TEMP_URL` shape.
//!
//! A polling server runs the stock os-collect-config (`request` collector), which reads a
//! secret **metadata URL**: the gateway serves there the server's pending deployments as
//! Heat puts them into a server's metadata (`{"deployments": [...], "os-collect-config":
//! {...}}`). Each deployment item carries a secret **signal URL** (`deploy_signal_id`,
//! `deploy_signal_verb: PUT`, `deploy_signal_transport: TEMP_URL_SIGNAL`) where
//! `heat-config-notify` puts the hook's result ([`SignalBody`]). The secret in each URL
//! is its only credential.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ids::{DeploymentId, ServerId, TenantId};

/// `deploy_signal_transport` of a polled deployment's item (Heat's name for a signal
/// URL the server puts its result to).
pub const TEMP_URL_SIGNAL: &str = "TEMP_URL_SIGNAL";
/// `deploy_signal_verb` of a polled deployment's item.
pub const SIGNAL_VERB: &str = "PUT";
/// The key under which os-collect-config finds the deployments (its `deployment-key`).
pub const DEPLOYMENTS_KEY: &str = "deployments";
/// Bytes of randomness in a metadata URL's secret.
pub const SECRET_BYTES: usize = 32;
/// Path prefix of every secret URL; nothing under it takes a bearer token.
pub const PATH_PREFIX: &str = "/heat/";

/// How a server gets its deployments.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// Its flue-agent pulls them from its request queue on the broker (the default).
    #[default]
    Nats,
    /// Stock os-collect-config polls its metadata URL; results come back as signals.
    Poll,
}

impl Transport {
    /// True for the default (so records and bodies leave it out).
    pub fn is_default(&self) -> bool {
        *self == Self::Nats
    }

    /// The name used in the API and on the command line.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Nats => "nats",
            Self::Poll => "poll",
        }
    }
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a polling server's registration (or credential rotation) hands out, once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PollAccess {
    /// The secret metadata URL: whoever holds it reads the server's deployments, hidden
    /// values included. Never stored in the clear by the gateway and never shown again.
    pub metadata_url: String,
    /// The os-collect-config configuration that polls it (`/etc/os-collect-config.conf`).
    pub os_collect_config: String,
}

impl PollAccess {
    /// The access for `metadata_url`, with its os-collect-config snippet.
    pub fn new(metadata_url: String) -> Self {
        let os_collect_config = format!(
            "[DEFAULT]\ncommand = os-refresh-config\ncollectors = request\n\n[request]\nmetadata_url = {metadata_url}\n"
        );
        Self {
            metadata_url,
            os_collect_config,
        }
    }
}

impl std::fmt::Debug for PollSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PollSecret(<hidden>)")
    }
}

/// A secret taken from a URL path: never printed (its `Debug` hides it).
#[derive(Clone, PartialEq, Eq)]
pub struct PollSecret(pub String);

/// Path of server `server`'s metadata URL.
pub fn metadata_path(tenant: &TenantId, server: &ServerId, secret: &str) -> String {
    format!("{PATH_PREFIX}{tenant}/servers/{server}/metadata/{secret}")
}

/// Path of deployment `deployment`'s signal URL.
pub fn signal_path(tenant: &TenantId, deployment: &DeploymentId, secret: &str) -> String {
    format!("{PATH_PREFIX}{tenant}/deployments/{deployment}/signal/{secret}")
}

/// The tenant a secret-URL path names (`/heat/<tenant>/…`), if it is one.
pub fn tenant_of_path(path: &str) -> Option<TenantId> {
    let rest = path.strip_prefix(PATH_PREFIX)?;
    let tenant = rest.split('/').next()?;
    TenantId::new(tenant).ok()
}

/// A path with the secret of a secret URL replaced, for logs.
pub fn redact_path(path: &str) -> std::borrow::Cow<'_, str> {
    if !path.starts_with(PATH_PREFIX) {
        return path.into();
    }
    match path.rfind('/') {
        Some(i) if i + 1 < path.len() => format!("{}/<secret>", &path[..i]).into(),
        _ => path.into(),
    }
}

/// A polling server's metadata, as Heat puts it on a server and os-collect-config reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Metadata {
    /// The pending deployments, oldest first.
    pub deployments: Vec<HeatItem>,
    /// Heat's own section, rendered by os-apply-config into `/etc/os-collect-config.conf`.
    #[serde(rename = "os-collect-config")]
    pub os_collect_config: OsCollectConfig,
}

/// The `os-collect-config` section of [`Metadata`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OsCollectConfig {
    /// Collectors to run.
    pub collectors: Vec<String>,
    /// The `request` collector's settings.
    pub request: RequestCollector,
}

/// The `request` collector's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RequestCollector {
    /// The metadata URL (the one being read).
    pub metadata_url: String,
}

/// One deployment as Heat's dispatcher (`55-heat-config`) reads it from a server's
/// metadata, and as a hook gets it on stdin (the agent builds the same shape).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HeatItem {
    /// Deployment id (`55-heat-config` keeps `deployed/<id>.json` and never runs it again).
    pub id: String,
    /// Deployment name.
    pub name: String,
    /// Hook group.
    pub group: String,
    /// RFC 3339 time the deployment was accepted.
    pub creation_time: String,
    /// The body for the deployment's action.
    pub config: Value,
    /// Hook options, always an object.
    pub options: Value,
    /// Input values, declared ones first, then extra values, then derived ones.
    pub inputs: Vec<HeatInput>,
    /// Declared outputs.
    pub outputs: Vec<HeatOutput>,
}

/// One input of a [`HeatItem`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HeatInput {
    /// Name.
    pub name: String,
    /// Heat type (`String`, `Number`, `Json`, …).
    #[serde(rename = "type")]
    pub kind: String,
    /// The declared default, typed as declared, as Heat's item carries it (absent when
    /// none is declared, and on every undeclared or derived input).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
    /// Value, typed as declared (in a hook's item, a `String` input's value already as
    /// the text the dispatcher makes of it); null when it has none, as in Heat's.
    pub value: Value,
    /// Description, as Heat gives its derived inputs one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// One output of a [`HeatItem`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HeatOutput {
    /// Name.
    pub name: String,
    /// Heat type.
    #[serde(rename = "type")]
    pub kind: String,
    /// A value of this output fails the deployment.
    pub error_output: bool,
    /// Description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// What `heat-config-notify` puts to a signal URL: the dispatcher's `signal_data`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SignalBody {
    /// The hook's stdout.
    #[serde(default)]
    pub deploy_stdout: Option<Value>,
    /// The hook's stderr.
    #[serde(default)]
    pub deploy_stderr: Option<Value>,
    /// The hook's status code (a number or a string; Heat compares `str(code) != '0'`).
    #[serde(default)]
    pub deploy_status_code: Option<Value>,
    /// Everything else: the outputs the hook produced, by name.
    #[serde(flatten)]
    pub outputs: BTreeMap<String, Value>,
}

/// The answer to an accepted signal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SignalAck {
    /// The deployment signalled.
    pub deployment_id: DeploymentId,
    /// Its status after the signal (`COMPLETE` / `FAILED`).
    pub status: crate::DeploymentStatus,
    /// False when this signal was a repeat: the deployment had already ended with it.
    pub applied: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_never_shows_in_a_redacted_path_or_debug_output() {
        let t = TenantId::new("acme").expect("id");
        let s = ServerId::new("web1").expect("id");
        let path = metadata_path(&t, &s, "s3cr3t");
        assert_eq!(tenant_of_path(&path), Some(t.clone()));
        assert!(!redact_path(&path).contains("s3cr3t"));
        assert!(!format!("{:?}", PollSecret("s3cr3t".into())).contains("s3cr3t"));
        assert_eq!(redact_path("/v1/servers"), "/v1/servers");
    }

    #[test]
    fn a_signal_body_keeps_its_outputs_apart_from_the_streams() {
        let body: SignalBody = serde_json::from_str(
            r#"{"deploy_stdout":"o","deploy_stderr":"e","deploy_status_code":0,"result":"x"}"#,
        )
        .expect("body");
        assert_eq!(body.deploy_status_code, Some(Value::from(0)));
        assert_eq!(body.outputs.get("result"), Some(&Value::from("x")));
        assert_eq!(body.outputs.len(), 1);
    }
}
