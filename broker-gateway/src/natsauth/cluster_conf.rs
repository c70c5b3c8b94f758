//! A NATS cluster's configuration files (`flue-gateway cluster-config`): one
//! `nats-server.conf` per node, each the hub broker's configuration (operator mode, full
//! resolver preloaded with every account, JetStream in domain `flue`) plus the node's
//! unique `server_name` and a `cluster { … }` block routing to every other node.
//!
//! The full resolvers of the nodes share account JWTs through the system account: an
//! account pushed by the gateway to any node reaches them all.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use super::broker_conf::{self, HubSettings, TlsFiles, Trust};
use super::{BROKER_CONF, NatsAuth, NatsAuthError, RESOLVER_DIR};
use crate::state::StateDir;

/// Fewest nodes a cluster has: JetStream keeps a majority of 2 when one of 3 is lost.
pub const MIN_NODES: usize = 3;

/// One node of the cluster, as `--node NAME,CLIENT_LISTEN,ROUTE_LISTEN` gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterNode {
    /// The node's `server_name`, unique in the cluster (`[A-Za-z0-9_-]`).
    pub name: String,
    /// Its client listener, `host:port` (gateways and agents connect here).
    pub listen: String,
    /// Its route listener, `host:port` (the other nodes connect here).
    pub route: String,
}

/// What is wrong with a `--node` value or a set of them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    /// Not three comma-separated parts.
    #[error("--node {0:?}: expected NAME,CLIENT_HOST:PORT,ROUTE_HOST:PORT")]
    Shape(String),
    /// The name is empty or holds a character other than `[A-Za-z0-9_-]`.
    #[error("--node {0:?}: the name may hold only A-Z, a-z, 0-9, _ and -")]
    Name(String),
    /// An address is not `host:port` with a port number.
    #[error("--node {node:?}: {field} {value:?} is not HOST:PORT")]
    Address {
        /// The whole value given.
        node: String,
        /// `client` or `route`.
        field: &'static str,
        /// The address given.
        value: String,
    },
    /// Fewer nodes than [`MIN_NODES`].
    #[error("a cluster needs at least {MIN_NODES} --node values, got {0}")]
    TooFew(usize),
    /// Two nodes share a name or an address.
    #[error("--node: {0:?} is given twice")]
    Duplicate(String),
    /// The cluster name is empty or holds a character other than `[A-Za-z0-9_-]`.
    #[error("--name {0:?}: the cluster name may hold only A-Z, a-z, 0-9, _ and -")]
    ClusterName(String),
}

fn is_token(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 64
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn is_address(text: &str) -> bool {
    match text.rsplit_once(':') {
        Some((host, port)) => {
            !host.is_empty() && !host.contains(char::is_whitespace) && port.parse::<u16>().is_ok()
        }
        None => false,
    }
}

impl FromStr for ClusterNode {
    type Err = ClusterError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = value.split(',').map(str::trim).collect();
        let [name, listen, route] = parts[..] else {
            return Err(ClusterError::Shape(value.to_owned()));
        };
        if !is_token(name) {
            return Err(ClusterError::Name(value.to_owned()));
        }
        for (field, address) in [("client", listen), ("route", route)] {
            if !is_address(address) {
                return Err(ClusterError::Address {
                    node: value.to_owned(),
                    field,
                    value: address.to_owned(),
                });
            }
        }
        Ok(Self {
            name: name.to_owned(),
            listen: listen.to_owned(),
            route: route.to_owned(),
        })
    }
}

/// The cluster as a whole: its name, its nodes, the TLS of its routes.
#[derive(Debug, Clone)]
pub struct ClusterSettings {
    /// The cluster's name (`cluster { name }`), the same on every node.
    pub name: String,
    /// Every node, at least [`MIN_NODES`], names and addresses unique.
    pub nodes: Vec<ClusterNode>,
    /// TLS of the route connections between nodes (empty: plain routes).
    pub route_tls: TlsFiles,
}

impl ClusterSettings {
    /// Checks the name, the number of nodes and that no name or address repeats.
    pub fn new(
        name: String,
        nodes: Vec<ClusterNode>,
        route_tls: TlsFiles,
    ) -> Result<Self, ClusterError> {
        if !is_token(&name) {
            return Err(ClusterError::ClusterName(name));
        }
        if nodes.len() < MIN_NODES {
            return Err(ClusterError::TooFew(nodes.len()));
        }
        let mut seen = std::collections::HashSet::new();
        for node in &nodes {
            for part in [&node.name, &node.listen, &node.route] {
                if !seen.insert(part.as_str()) {
                    return Err(ClusterError::Duplicate(part.clone()));
                }
            }
        }
        Ok(Self {
            name,
            nodes,
            route_tls,
        })
    }
}

/// Node `me`'s configuration: the hub configuration `hub` (written for its listener and
/// store) with its `server_name` and the routes to every other node.
pub fn node(hub: &str, cluster: &ClusterSettings, me: &ClusterNode) -> String {
    let mut out = format!(
        "# Node {} of NATS cluster {}, written by `flue-gateway cluster-config`.\n",
        me.name, cluster.name
    );
    out.push_str(hub);
    // JetStream clustering needs a name unique in the cluster, stable across restarts.
    let _ = writeln!(out, "\nserver_name: {}", quote(&me.name));
    let _ = writeln!(
        out,
        "\ncluster {{\n  name: {}\n  listen: {}",
        quote(&cluster.name),
        quote(&me.route)
    );
    out.push_str(&cluster.route_tls.block("  "));
    out.push_str("  routes: [\n");
    for other in cluster.nodes.iter().filter(|n| n.name != me.name) {
        let _ = writeln!(
            out,
            "    {}",
            quote(&format!("nats-route://{}", other.route))
        );
    }
    out.push_str("  ]\n}\n");
    out
}

fn quote(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

impl NatsAuth {
    /// Writes `<out>/<node>/nats-server.conf` for every node of `cluster`, each with its
    /// own resolver directory `<out>/<node>/jwt` and the listener, store and TLS that
    /// `settings` gives it; returns the files written.
    pub fn write_cluster_conf(
        &self,
        cluster: &ClusterSettings,
        settings: impl Fn(&ClusterNode) -> HubSettings,
        out: &Path,
    ) -> Result<Vec<PathBuf>, NatsAuthError> {
        let system = self.system.public_key();
        let trust = Trust {
            operator_jwt: &self.operator_jwt,
            system_account: &system,
            accounts: self.account_jwts()?,
        };
        StateDir::open(out)?;
        let mut written = Vec::new();
        for me in &cluster.nodes {
            let dir = StateDir::open(&out.join(&me.name))?;
            let resolver = dir.path().join(RESOLVER_DIR);
            StateDir::open(&resolver)?;
            let hub = broker_conf::hub(&settings(me), &trust, &resolver);
            dir.write_secret(BROKER_CONF, &node(&hub, cluster, me))?;
            written.push(dir.path().join(BROKER_CONF));
        }
        Ok(written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn three() -> Vec<ClusterNode> {
        [
            "n1,127.0.0.1:4222,127.0.0.1:6222",
            "n2,127.0.0.1:4223,127.0.0.1:6223",
            "n3,127.0.0.1:4224,127.0.0.1:6224",
        ]
        .iter()
        .map(|v| v.parse().expect("node"))
        .collect()
    }

    #[test]
    fn a_node_routes_to_every_other_node_and_not_to_itself() {
        let cluster = ClusterSettings::new("flue".into(), three(), TlsFiles::default())
            .expect("valid cluster");
        let conf = node("listen: \"127.0.0.1:4222\"\n", &cluster, &cluster.nodes[0]);
        for part in [
            "server_name: \"n1\"",
            "name: \"flue\"",
            "listen: \"127.0.0.1:6222\"",
            "\"nats-route://127.0.0.1:6223\"",
            "\"nats-route://127.0.0.1:6224\"",
        ] {
            assert!(conf.contains(part), "{part} missing in\n{conf}");
        }
        assert!(!conf.contains("nats-route://127.0.0.1:6222"), "{conf}");
        assert!(!conf.contains("tls"), "no route TLS given");
    }

    #[test]
    fn route_tls_files_go_into_the_cluster_block() {
        let tls = TlsFiles {
            cert: Some("/r.pem".into()),
            key: Some("/r.key".into()),
            ca: Some("/ca.pem".into()),
        };
        let cluster = ClusterSettings::new("flue".into(), three(), tls).expect("valid");
        let conf = node("", &cluster, &cluster.nodes[1]);
        let block = conf.split("cluster {").nth(1).expect("cluster block");
        for part in [
            "cert_file: \"/r.pem\"",
            "key_file: \"/r.key\"",
            "ca_file: \"/ca.pem\"",
        ] {
            assert!(block.contains(part), "{part} missing in\n{conf}");
        }
    }

    #[test]
    fn bad_nodes_are_refused_naming_what_is_wrong() {
        for (value, says) in [
            ("n1,127.0.0.1:4222", "expected NAME"),
            ("n.1,127.0.0.1:4222,127.0.0.1:6222", "the name"),
            ("n1,127.0.0.1,127.0.0.1:6222", "client"),
            ("n1,127.0.0.1:4222,h:port", "route"),
        ] {
            let err = value.parse::<ClusterNode>().expect_err(value);
            assert!(err.to_string().contains(says), "{value}: {err}");
        }
        let mut nodes = three();
        assert_eq!(
            ClusterSettings::new("flue".into(), nodes[..2].to_vec(), TlsFiles::default())
                .expect_err("two nodes"),
            ClusterError::TooFew(2)
        );
        nodes[2].route = nodes[0].route.clone();
        assert!(matches!(
            ClusterSettings::new("flue".into(), nodes, TlsFiles::default()),
            Err(ClusterError::Duplicate(_))
        ));
        assert!(ClusterSettings::new("a b".into(), three(), TlsFiles::default()).is_err());
    }
}
