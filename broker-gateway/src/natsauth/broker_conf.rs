//! nats-server configuration files: the hub broker's (operator mode, full resolver,
//! JetStream domain) and a tenant network's leaf node's (full resolver preloaded with that
//! tenant's account only).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use flue_proto::event::EVENT_STREAM;
use flue_proto::jsapi::JS_DOMAIN;
use flue_proto::subject::REQUEST_STREAM;
use serde::{Deserialize, Serialize};

/// A client's CONNECT carries its user JWT, and an agent's grows by about 310 bytes per
/// stack it takes part in: nats-server's default limit of 4 KiB refuses an agent of 10
/// stacks ("maximum control line exceeded"). 64 KiB admits about 200.
const MAX_CONTROL_LINE: &str = "# A CONNECT carries the user JWT; an agent's grows with its stacks (~310 bytes each).\nmax_control_line: 65536\n";

/// TLS files of a listener or of a connection to the hub.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TlsFiles {
    /// The listener's certificate chain (PEM).
    pub cert: Option<PathBuf>,
    /// The listener's private key (PEM).
    pub key: Option<PathBuf>,
    /// The CA that certificates are verified against (PEM).
    pub ca: Option<PathBuf>,
}

impl TlsFiles {
    fn is_empty(&self) -> bool {
        self.cert.is_none() && self.key.is_none() && self.ca.is_none()
    }

    /// A `tls { … }` block, empty when no file is given.
    pub(super) fn block(&self, indent: &str) -> String {
        if self.is_empty() {
            return String::new();
        }
        let mut out = format!("{indent}tls {{\n");
        for (name, file) in [
            ("cert_file", &self.cert),
            ("key_file", &self.key),
            ("ca_file", &self.ca),
        ] {
            if let Some(file) = file {
                let _ = writeln!(out, "{indent}  {name}: {}", quote_path(file));
            }
        }
        let _ = writeln!(out, "{indent}}}");
        out
    }
}

/// How the hub broker listens and stores (kept next to its configuration, so that
/// `flue-gateway tenant create` can write it again).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HubSettings {
    /// Client listener, `host:port`.
    pub listen: String,
    /// JetStream store directory.
    pub store_dir: PathBuf,
    /// Leaf node listener, `host:port`, when tenant networks connect leaf nodes.
    pub leafnode_listen: Option<String>,
    /// TLS of the client and leaf node listeners.
    pub tls: TlsFiles,
}

/// The accounts a configuration names.
#[derive(Debug, Clone)]
pub struct Trust<'a> {
    /// The operator JWT.
    pub operator_jwt: &'a str,
    /// The system account's public key.
    pub system_account: &'a str,
    /// Account JWTs to preload, by public key.
    pub accounts: Vec<(String, String)>,
}

/// The hub broker's configuration: operator mode with the full resolver in
/// `resolver_dir` (account JWTs pushed at run time are kept there), every known account
/// preloaded, JetStream in domain `flue`.
pub fn hub(settings: &HubSettings, trust: &Trust<'_>, resolver_dir: &Path) -> String {
    let mut out = String::from(
        "# Written by `flue-gateway init` (and `flue-gateway tenant create`): re-run it\n\
         # rather than editing this file. Operator mode: every client presents a user JWT\n\
         # signed by an account the operator signed; there are no anonymous connections.\n\n",
    );
    let _ = writeln!(out, "listen: {}", quote(&settings.listen));
    out.push_str(MAX_CONTROL_LINE);
    out.push_str(&settings.tls.block(""));
    let _ = writeln!(out, "\noperator: {}", quote(trust.operator_jwt));
    let _ = writeln!(out, "system_account: {}", quote(trust.system_account));
    let _ = writeln!(
        out,
        "resolver: {{\n  type: full\n  dir: {}\n  allow_delete: false\n  interval: \"2m\"\n}}",
        quote_path(resolver_dir)
    );
    out.push_str(&preload(&trust.accounts));
    let _ = writeln!(
        out,
        "\njetstream {{\n  domain: {JS_DOMAIN}\n  store_dir: {}\n  limits {{\n    \
         # {REQUEST_STREAM} sets its own consumer limit (--max-servers); {EVENT_STREAM} has one\n    \
         # consumer per SSE client and webhook: lift nats-server's default of 1,000.\n    \
         default_max_consumers: -1\n  }}\n}}",
        quote_path(&settings.store_dir)
    );
    if let Some(leaf) = &settings.leafnode_listen {
        let _ = writeln!(out, "\nleafnodes {{\n  listen: {}", quote(leaf));
        out.push_str(&settings.tls.block("  "));
        out.push_str("}\n");
    }
    out
}

/// How a tenant network's leaf node listens and reaches the hub.
#[derive(Debug, Clone)]
pub struct LeafSettings {
    /// Client listener of the leaf node, `host:port` (agents of the network connect here).
    pub listen: String,
    /// The hub's leaf node URL, `nats-leaf://host:port` (or `tls://`).
    pub hub: String,
    /// The leaf user's `.creds` file.
    pub credentials: PathBuf,
    /// The tenant's edge account's public key: local clients are bound to it.
    pub account: String,
    /// CA the hub's certificate is verified against.
    pub hub_ca: Option<PathBuf>,
    /// The leaf's system user's `.creds` file: it may only receive the edge account's
    /// JWT updates from the hub.
    pub system_credentials: PathBuf,
    /// Where the leaf's resolver keeps the account JWTs it holds.
    pub resolver_dir: PathBuf,
}

/// A leaf node's configuration: operator mode with the hub's operator, a full resolver
/// preloaded with only the tenant's edge account, a stub of its state account
/// ([`super::edge::stub_state_jwt`]) and the system account it requires (so only that
/// tenant's users connect), and two remotes to the hub: one bound to the edge account (the
/// tenant's traffic), one bound to the system account whose user may only receive the edge
/// account's JWT updates, so a revocation pushed to the hub reaches the leaf at once.
pub fn leaf(settings: &LeafSettings, trust: &Trust<'_>) -> String {
    let mut out = String::from(
        "# Written by `flue-gateway leaf-config`: a leaf node for one tenant network.\n\
         # Only users of the tenant's account connect; their permissions are checked here\n\
         # and the hub checks the leaf user's.\n\n",
    );
    let _ = writeln!(out, "listen: {}", quote(&settings.listen));
    out.push_str(MAX_CONTROL_LINE);
    let _ = writeln!(out, "\noperator: {}", quote(trust.operator_jwt));
    let _ = writeln!(out, "system_account: {}", quote(trust.system_account));
    // A full resolver, not a memory one: it takes account JWT updates at run time (the
    // cache resolver would drop the preloaded JWTs after its ttl and could not look them
    // up again, its system user may not ask for anything).
    let _ = writeln!(
        out,
        "resolver: {{\n  type: full\n  dir: {}\n  allow_delete: false\n  interval: \"2m\"\n}}",
        quote_path(&settings.resolver_dir)
    );
    out.push_str(&preload(&trust.accounts));
    let tls = TlsFiles {
        ca: settings.hub_ca.clone(),
        ..TlsFiles::default()
    };
    out.push_str("\nleafnodes {\n  remotes: [\n");
    for (credentials, account) in [
        (&settings.credentials, settings.account.as_str()),
        (&settings.system_credentials, trust.system_account),
    ] {
        let _ = writeln!(
            out,
            "    {{\n      url: {}\n      credentials: {}\n      account: {}",
            quote(&settings.hub),
            quote_path(credentials),
            quote(account)
        );
        out.push_str(&tls.block("      "));
        out.push_str("    }\n");
    }
    out.push_str("  ]\n}\n");
    out
}

fn preload(accounts: &[(String, String)]) -> String {
    let mut out = String::from("resolver_preload: {\n");
    for (public, jwt) in accounts {
        let _ = writeln!(out, "  {public}: {}", quote(jwt));
    }
    out.push_str("}\n");
    out
}

/// A double-quoted configuration string.
fn quote(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

fn quote_path(path: &Path) -> String {
    quote(&path.to_string_lossy())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hub_configuration_names_every_part() {
        let trust = Trust {
            operator_jwt: "eyOP",
            system_account: "ASYS",
            accounts: vec![("ASYS".into(), "eySYS".into()), ("AT".into(), "eyT".into())],
        };
        let settings = HubSettings {
            listen: "127.0.0.1:4222".into(),
            store_dir: "/var/lib/a \"b\"".into(),
            leafnode_listen: Some("0.0.0.0:7422".into()),
            tls: TlsFiles::default(),
        };
        let conf = hub(&settings, &trust, Path::new("/s/broker/jwt"));
        for part in [
            "listen: \"127.0.0.1:4222\"",
            "operator: \"eyOP\"",
            "system_account: \"ASYS\"",
            "type: full",
            "allow_delete: false",
            "  AT: \"eyT\"",
            "domain: flue",
            "store_dir: \"/var/lib/a \\\"b\\\"\"",
            "default_max_consumers: -1",
            "listen: \"0.0.0.0:7422\"",
            "max_control_line: 65536",
        ] {
            assert!(conf.contains(part), "{part} missing in\n{conf}");
        }
        assert!(!conf.contains("tls"), "no TLS files, no tls block");
    }
}
