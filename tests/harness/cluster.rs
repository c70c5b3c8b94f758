//! A NATS cluster in operator mode on free loopback ports: `flue-gateway init`, then
//! `flue-gateway cluster-config` writing one configuration per node, then one nats-server
//! per node; the gateways of a test share the state directory `init` wrote (the same keys).

use std::path::PathBuf;
use std::sync::Arc;

use tempfile::TempDir;

use crate::{Flue, Gateway, Nats, START_WAIT, free_ports};

/// The nodes of a running cluster, the first one inside [`Flue`] (agents connect to it
/// and learn the others from the cluster's INFO), and the gateway state directory.
pub struct Cluster {
    /// Broker (node 0), the first gateway, scratch space.
    pub flue: Flue,
    /// Nodes 1…n-1.
    pub others: Vec<Nats>,
    /// Every node's client URL, comma-separated (what gateways connect to).
    urls: String,
    state: Arc<TempDir>,
    /// Every node's route port, in node order.
    route_ports: Vec<u16>,
}

impl Cluster {
    /// `init`, `cluster-config` with `nodes` nodes named `n1…`, every node started and a
    /// JetStream meta leader elected, then a gateway given every node's URL and
    /// `gateway_flags`.
    pub async fn start(nodes: usize, gateway_flags: &[&str]) -> Cluster {
        Cluster::start_with(nodes, &[], gateway_flags).await
    }

    /// [`Cluster::start`] with extra `cluster-config` arguments (`--route-tls-cert …`).
    pub async fn start_with(nodes: usize, config_args: &[&str], gateway_flags: &[&str]) -> Cluster {
        let state = Arc::new(tempfile::tempdir().expect("tempdir"));
        let state_dir = state.path().join("gateway");
        let state_arg = state_dir.display().to_string();
        crate::admin(&["init", "--state-dir", &state_arg]).await;
        let ports: Vec<(u16, u16)> = free_ports(nodes * 2)
            .chunks(2)
            .map(|pair| (pair[0], pair[1]))
            .collect();
        let out = state.path().join("cluster");
        let mut args: Vec<String> = vec![
            "cluster-config".into(),
            "--state-dir".into(),
            state_arg.clone(),
            "--out".into(),
            out.display().to_string(),
        ];
        args.extend(config_args.iter().map(|a| (*a).to_owned()));
        for (i, (client, route)) in ports.iter().enumerate() {
            args.push("--node".into());
            args.push(format!("n{},127.0.0.1:{client},127.0.0.1:{route}", i + 1));
        }
        crate::admin(&args.iter().map(String::as_str).collect::<Vec<_>>()).await;
        let mut started = Vec::new();
        for (i, (client, _)) in ports.iter().enumerate() {
            let config: PathBuf = out.join(format!("n{}", i + 1)).join("nats-server.conf");
            started.push(Nats::start_node(&config, *client).await);
        }
        // JetStream answers nothing until the nodes have elected a meta leader: each node
        // logs the leader it knows ("Self is new JetStream cluster metadata leader", or
        // "JetStream cluster new metadata leader: n1/flue").
        let mut waits = Vec::new();
        for node in &started {
            waits.push(node.logs().wait_for("metadata leader", START_WAIT));
        }
        futures_util::future::join_all(waits).await;
        let urls = ports
            .iter()
            .map(|(client, _)| format!("nats://127.0.0.1:{client}"))
            .collect::<Vec<_>>()
            .join(",");
        let auth = flue_gateway::natsauth::NatsAuth::open(&state_dir).expect("initialised");
        let (tenant, events) = auth
            .gateway_creds(&"default".parse().expect("tenant id"))
            .expect("gateway users of the default tenant");
        for node in &mut started {
            node.connect_as(tenant.clone(), events.clone());
        }
        let mut nodes = started.into_iter();
        let first = nodes.next().expect("at least one node");
        let gateway = Gateway::start_in(&urls, state.clone(), gateway_flags, None).await;
        Cluster {
            flue: Flue::assemble(first, gateway),
            others: nodes.collect(),
            urls,
            state,
            route_ports: ports.iter().map(|(_, route)| *route).collect(),
        }
    }

    /// Another gateway on the same state directory and cluster (both serve every tenant).
    pub async fn another_gateway(&self, gateway_flags: &[&str]) -> Gateway {
        Gateway::start_in(&self.urls, self.state.clone(), gateway_flags, None).await
    }

    /// Another gateway on the same state directory, connected to node `i` only, not
    /// waited for: the test acts on the nodes while it starts, then calls
    /// [`Gateway::listening`].
    pub fn spawn_gateway_on_node(&self, i: usize, gateway_flags: &[&str]) -> Gateway {
        let url = self
            .urls
            .split(',')
            .nth(i)
            .unwrap_or_else(|| panic!("no node {i}"));
        Gateway::spawn_in(url, self.state.clone(), gateway_flags)
    }

    /// Node `i`'s route listener port (0-based).
    pub fn route_port(&self, i: usize) -> u16 {
        self.route_ports[i]
    }

    /// Node `i` (0-based; node 0 is `flue.nats`).
    pub fn node_mut(&mut self, i: usize) -> &mut Nats {
        match i {
            0 => &mut self.flue.nats,
            _ => &mut self.others[i - 1],
        }
    }

    /// Which node is called `name` (`n1` is 0).
    pub fn index_of(name: &str) -> usize {
        name.strip_prefix('n')
            .and_then(|n| n.parse::<usize>().ok())
            .and_then(|n| n.checked_sub(1))
            .unwrap_or_else(|| panic!("{name:?} is not a node name of this harness"))
    }
}
