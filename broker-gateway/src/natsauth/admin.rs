//! `flue-gateway init | cluster-config | tenant create | leaf-config`: the broker's keys and configuration
//! files, made offline from the state directory (running the gateway stays the default).

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use flue_proto::{ServerId, TenantId};

use super::broker_conf::{HubSettings, TlsFiles};
use super::cluster_conf::{ClusterNode, ClusterSettings};
use super::{BROKER_DIR, LeafNetwork, NatsAuth, NatsAuthError};
use crate::state::StateDir;

/// The broker settings `init` used, kept for `tenant create`.
const SETTINGS_FILE: &str = "settings.json";

/// An administration command instead of running the gateway.
#[derive(Debug, Clone, Subcommand)]
pub enum Admin {
    /// Creates the operator, the system account and the first tenant's accounts (keeping
    /// every key that exists) and writes `<state-dir>/broker/nats-server.conf`.
    Init(InitArgs),
    /// Writes one nats-server configuration per node of a NATS cluster (after `init`):
    /// `<out>/<node>/nats-server.conf`, operator mode, full resolver, JetStream, routes.
    ClusterConfig(ClusterArgs),
    /// Tenants' broker accounts.
    #[command(subcommand)]
    Tenant(TenantCommand),
    /// Writes a leaf node configuration (and its credentials) for a tenant network.
    LeafConfig(LeafArgs),
}

/// `flue-gateway init`.
#[derive(Debug, Clone, Args)]
pub struct InitArgs {
    /// The gateway's state directory (made 0700 when missing).
    #[arg(long, env = "FLUE_STATE_DIR")]
    pub state_dir: PathBuf,
    /// The first tenant.
    #[arg(long, default_value = "default")]
    pub tenant: TenantId,
    /// The broker's client listener.
    #[arg(long, default_value = "127.0.0.1:4222")]
    pub broker_listen: String,
    /// The broker's JetStream store (default: `<state-dir>/broker/jetstream`).
    #[arg(long)]
    pub store_dir: Option<PathBuf>,
    /// The broker's leaf node listener (tenant networks' leaf nodes connect to it).
    #[arg(long)]
    pub leafnode_listen: Option<String>,
    /// Certificate (PEM) of the client and leaf node listeners.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// Private key (PEM) of the client and leaf node listeners.
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// CA (PEM) of the listeners' TLS.
    #[arg(long)]
    pub tls_ca: Option<PathBuf>,
}

/// `flue-gateway cluster-config`.
#[derive(Debug, Clone, Args)]
pub struct ClusterArgs {
    /// The gateway's state directory (after `init`).
    #[arg(long, env = "FLUE_STATE_DIR")]
    pub state_dir: PathBuf,
    /// The cluster's name, the same on every node.
    #[arg(long, default_value = "flue")]
    pub name: String,
    /// A node: `NAME,CLIENT_HOST:PORT,ROUTE_HOST:PORT`; at least three, repeated.
    #[arg(long = "node", required = true)]
    pub nodes: Vec<ClusterNode>,
    /// Directory of the nodes' files, `<out>/<node>/` (default `<state-dir>/broker/cluster`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Parent of the nodes' JetStream stores, `<store-root>/<node>` (default `<out>`/<node>/jetstream).
    #[arg(long)]
    pub store_root: Option<PathBuf>,
    /// Certificate (PEM) of the client listeners (valid for every node's host).
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// Private key (PEM) of the client listeners.
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// CA (PEM) of the client listeners' TLS.
    #[arg(long)]
    pub tls_ca: Option<PathBuf>,
    /// Certificate (PEM) of the routes between nodes (valid for every node's route host).
    #[arg(long, requires = "route_tls_key")]
    pub route_tls_cert: Option<PathBuf>,
    /// Private key (PEM) of the routes.
    #[arg(long, requires = "route_tls_cert")]
    pub route_tls_key: Option<PathBuf>,
    /// CA (PEM) the nodes verify each other's route certificates against.
    #[arg(long)]
    pub route_tls_ca: Option<PathBuf>,
}

/// `flue-gateway tenant …`.
#[derive(Debug, Clone, Subcommand)]
pub enum TenantCommand {
    /// Creates a tenant's three accounts and writes the broker configuration again (the
    /// broker preloads them at its next start; a running gateway pushes them itself).
    Create {
        /// The tenant id.
        tenant: TenantId,
        /// The gateway's state directory (after `init`).
        #[arg(long, env = "FLUE_STATE_DIR")]
        state_dir: PathBuf,
    },
}

/// `flue-gateway leaf-config`.
#[derive(Debug, Clone, Args)]
pub struct LeafArgs {
    /// The gateway's state directory (after `init`).
    #[arg(long, env = "FLUE_STATE_DIR")]
    pub state_dir: PathBuf,
    /// The tenant whose network the leaf node serves.
    #[arg(long)]
    pub tenant: TenantId,
    /// A server whose agent connects through this leaf node; at least one, repeated. The
    /// leaf's user may do what these servers' agents need (and use the tenant's data
    /// space), nothing else: for another server, run `leaf-config` again with every server
    /// and restart the leaf node.
    #[arg(long = "server", value_name = "SERVER", required = true)]
    pub servers: Vec<ServerId>,
    /// The hub's leaf node URL, `nats-leaf://HOST:PORT`.
    #[arg(long)]
    pub hub: String,
    /// CA (PEM) the hub's certificate is verified against.
    #[arg(long)]
    pub tls_ca: Option<PathBuf>,
    /// The leaf node's client listener (the tenant network's agents connect here).
    #[arg(long, default_value = "127.0.0.1:4222")]
    pub listen: String,
    /// Directory to write `leaf.conf` and `leaf.creds` into (made 0700).
    #[arg(long)]
    pub out: PathBuf,
}

/// Runs one command; what it wrote is printed on stdout.
pub fn run(admin: Admin) -> Result<(), NatsAuthError> {
    match admin {
        Admin::Init(args) => {
            let auth = NatsAuth::init(&args.state_dir, &args.tenant)?;
            let settings = HubSettings {
                listen: args.broker_listen,
                store_dir: absolute(
                    args.store_dir
                        .unwrap_or_else(|| args.state_dir.join(BROKER_DIR).join("jetstream")),
                ),
                leafnode_listen: args.leafnode_listen,
                tls: TlsFiles {
                    cert: args.tls_cert.map(absolute),
                    key: args.tls_key.map(absolute),
                    ca: args.tls_ca.map(absolute),
                },
            };
            save_settings(&args.state_dir, &settings)?;
            let conf = auth.write_broker_conf(&settings)?;
            println!("operator {}", auth.operator_public_key());
            println!("broker configuration {}", conf.display());
        }
        Admin::ClusterConfig(args) => cluster_config(args)?,
        Admin::Tenant(TenantCommand::Create { tenant, state_dir }) => {
            let auth = NatsAuth::open(&state_dir)?;
            auth.create_tenant_offline(&tenant)?;
            let conf = auth.write_broker_conf(&load_settings(&state_dir)?)?;
            println!("tenant {tenant}");
            println!("broker configuration {}", conf.display());
        }
        Admin::LeafConfig(args) => {
            let auth = NatsAuth::open(&args.state_dir)?;
            let network = LeafNetwork {
                tenant: args.tenant,
                servers: args.servers,
                listen: args.listen,
                hub: args.hub,
                hub_ca: args.tls_ca.map(absolute),
            };
            let conf = auth.write_leaf_conf(&network, &args.out)?;
            let servers: Vec<&str> = network.servers.iter().map(ServerId::as_str).collect();
            println!("leaf node configuration {}", conf.path.display());
            println!("leaf user for the servers {}", servers.join(" "));
            if let Some(user) = conf.revoked {
                println!(
                    "revoked the leaf user these files replace, {user}: the broker refuses it from the gateway's next account push (--account-push-secs) or start; restart the leaf node with the new files"
                );
            }
        }
    }
    Ok(())
}

fn cluster_config(args: ClusterArgs) -> Result<(), NatsAuthError> {
    let auth = NatsAuth::open(&args.state_dir)?;
    let cluster = ClusterSettings::new(
        args.name,
        args.nodes,
        TlsFiles {
            cert: args.route_tls_cert.map(absolute),
            key: args.route_tls_key.map(absolute),
            ca: args.route_tls_ca.map(absolute),
        },
    )?;
    let out = absolute(
        args.out
            .unwrap_or_else(|| args.state_dir.join(BROKER_DIR).join("cluster")),
    );
    let store_root = args.store_root.map(absolute);
    let client_tls = TlsFiles {
        cert: args.tls_cert.map(absolute),
        key: args.tls_key.map(absolute),
        ca: args.tls_ca.map(absolute),
    };
    let written = auth.write_cluster_conf(
        &cluster,
        |node| HubSettings {
            listen: node.listen.clone(),
            store_dir: match &store_root {
                Some(root) => root.join(&node.name),
                None => out.join(&node.name).join("jetstream"),
            },
            leafnode_listen: None,
            tls: client_tls.clone(),
        },
        &out,
    )?;
    println!("operator {}", auth.operator_public_key());
    for (node, conf) in cluster.nodes.iter().zip(&written) {
        println!("node {} configuration {}", node.name, conf.display());
    }
    Ok(())
}

/// `path` made absolute: nats-server reads a relative path in its configuration against its
/// own working directory, not the one `init` ran in.
fn absolute(path: PathBuf) -> PathBuf {
    std::path::absolute(&path).unwrap_or(path)
}

fn save_settings(root: &Path, settings: &HubSettings) -> Result<(), NatsAuthError> {
    let dir = StateDir::open(&root.join(BROKER_DIR))?;
    // Paths and strings always serialise.
    let text = serde_json::to_string_pretty(settings).unwrap_or_default();
    Ok(dir.write_secret(SETTINGS_FILE, &text)?)
}

fn load_settings(root: &Path) -> Result<HubSettings, NatsAuthError> {
    let dir = StateDir::open(&root.join(BROKER_DIR))?;
    let text = dir.load_or_create(SETTINGS_FILE, || {
        Err("missing: run `flue-gateway init` first".to_owned())
    })?;
    serde_json::from_str(&text).map_err(|e| {
        NatsAuthError::State(crate::state::StateError::Invalid {
            path: dir.path().join(SETTINGS_FILE),
            reason: e.to_string(),
        })
    })
}
