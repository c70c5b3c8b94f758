//! Flue across isolated tenant networks, in network namespaces ([`crate::netns`]): a
//! control-plane namespace `cp` with the NATS hub and the gateway, and one namespace per
//! tenant network with its own NATS leaf node and the agents of its servers.
//!
//! In `cp` only the hub's leaf-node port listens beyond loopback: the gateway's HTTP API and
//! the hub's client port are bound to `cp`'s loopback, so no other namespace can address
//! them whatever routes it adds (a packet for 127.0.0.1 coming in on a veth is dropped as a
//! martian). The test driver (the `flue` CLI) runs inside `cp`. A tenant network is linked
//! to `cp` only; its agents connect to their leaf node on the tenant's own loopback.
//!
//! The broker runs the secure way: the hub is written by `flue-gateway init` (operator
//! mode, one account per tenant, TLS on its client and leaf-node ports with a test CA);
//! each tenant network's leaf node by `flue-gateway leaf-config` (that tenant's account
//! only, the hub's certificate verified against the CA); agents hold the credentials their
//! registration minted. A tenant network is named after its tenant: [`TENANTS`].

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use flue_gateway::natsauth::NatsAuth;
use flue_proto::TenantId;
use tempfile::TempDir;

use crate::auth::Tokens;
use crate::netns::{Link, NetLab, Netns, NsProcess};
use crate::{TestCa, WAIT, admin, bin, nats_server_bin, write_secret};

/// The tenants of the topology, made before the hub starts (`flue-gateway init` for the
/// first, `flue-gateway tenant create` for the others); a tenant network takes one's name.
pub const TENANTS: [&str; 2] = ["t1", "t2"];
/// How many tenant networks one topology can hold: the hub's certificate names `cp`'s end
/// of each link (`10.250.<k>.1`), made before any link exists.
const MAX_TENANT_NETWORKS: u8 = 4;
/// What a leaf node prints once its link to the hub is up: TLS verified, its user
/// admitted, the hub's JetStream domain learnt. ("Leafnode connection created" comes
/// before the TLS handshake, so it proves nothing.)
pub const LEAF_LINKED: &str = "JetStream using domains";

/// Where the gateway's HTTP API listens, inside `cp` only.
pub const GATEWAY_LISTEN: &str = "127.0.0.1:8470";
/// The hub's client port, on `cp`'s loopback.
pub const HUB_CLIENT_PORT: u16 = 4222;
/// The hub's leaf-node port, on every address of `cp`: the one way into the control plane.
pub const LEAF_PORT: u16 = 7422;
/// A leaf node's client port inside its tenant namespace.
pub const TENANT_NATS_PORT: u16 = 4222;

/// What one run of the `flue` CLI printed and how it exited.
#[derive(Debug)]
pub struct CliRun {
    /// Exit code (-1 when killed by a signal).
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl std::fmt::Display for CliRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// One tenant network: its namespace, its link to `cp`, its leaf node and agents.
pub struct TenantNet {
    /// Its name, also the namespace's role (`t1`, `t2`…).
    pub name: String,
    /// The namespace.
    pub ns: Netns,
    /// The veth link to `cp`: `a` is `cp`'s end (the leaf node's remote), `b` the tenant's.
    pub link: Link,
    /// The NATS leaf node, listening on [`TENANT_NATS_PORT`].
    pub leaf: NsProcess,
    /// The agents started in it, in order.
    pub agents: Vec<NsProcess>,
}

/// The whole topology; everything is killed and removed on drop.
pub struct TenantNetworks {
    /// The gateway, in `cp`.
    pub gateway: NsProcess,
    /// The NATS hub (JetStream, domain `flue`), in `cp`.
    pub hub: NsProcess,
    /// The tenant networks, in the order they were added.
    pub tenants: Vec<TenantNet>,
    /// The control-plane namespace.
    pub cp: Netns,
    /// The CA the hub's certificate is issued by (and leaf nodes verify it with).
    pub ca: TestCa,
    /// Tokens the gateway accepts, one per role, per tenant of [`TENANTS`].
    tokens: BTreeMap<String, Tokens>,
    /// The gateway's state directory: the broker's keys and configuration too.
    state_dir: PathBuf,
    dir: TempDir,
    // Last: the namespaces go after every process above was killed.
    lab: NetLab,
}

impl TenantNetworks {
    /// Creates `cp` and starts the hub and the gateway in it: `flue-gateway init` for
    /// the first tenant of [`TENANTS`], `tenant create` for the others, the hub from the
    /// configuration they wrote, the gateway on the same state directory.
    pub async fn start() -> TenantNetworks {
        let mut lab = NetLab::new();
        let dir = tempfile::tempdir().expect("tempdir");
        let cp = lab.namespace("cp");
        let ca = TestCa::new();
        let state_dir = dir.path().join("gateway-state");
        let hub = start_hub(&cp, &ca, dir.path(), &state_dir).await;
        // Keys made first, so the CLI gets tokens the gateway accepts.
        let tokens = TENANTS
            .iter()
            .map(|t| {
                let tenant = TenantId::new(*t).expect("tenant id");
                ((*t).to_owned(), Tokens::for_tenant(&state_dir, &tenant))
            })
            .collect();
        let gateway = cp.spawn(
            "flue-gateway",
            bin("flue-gateway"),
            &[
                "--listen",
                GATEWAY_LISTEN,
                "--nats-url",
                &format!("nats://127.0.0.1:{HUB_CLIENT_PORT}"),
                "--nats-ca",
                &ca.ca_file().display().to_string(),
                "--state-dir",
                &state_dir.display().to_string(),
                "--timeout-sweep-ms",
                "100",
            ],
        );
        gateway.wait_for("flue-gateway listening on ").await;
        TenantNetworks {
            gateway,
            hub,
            tenants: Vec::new(),
            cp,
            ca,
            tokens,
            state_dir,
            dir,
            lab,
        }
    }

    /// Adds tenant network `name` (a tenant of [`TENANTS`]): a namespace linked to `cp`
    /// only, with a leaf node from `flue-gateway leaf-config` serving `servers` (the agents
    /// started in it: its link may do what theirs need, nothing else) whose remote is the
    /// hub's leaf port; waits until the leaf is linked ([`LEAF_LINKED`]). Returns its index.
    pub async fn add_tenant_network(&mut self, name: &str, servers: &[&str]) -> usize {
        let ca = self.ca.ca_file();
        let i = self.add_tenant_network_trusting(name, servers, &ca).await;
        self.tenants[i].leaf.wait_for(LEAF_LINKED).await;
        i
    }

    /// [`TenantNetworks::add_tenant_network`] with a leaf node that verifies the hub's
    /// certificate against `ca`, without waiting for the link (it may never come up).
    pub async fn add_tenant_network_trusting(
        &mut self,
        name: &str,
        servers: &[&str],
        ca: &Path,
    ) -> usize {
        assert!(TENANTS.contains(&name), "{name} is not one of {TENANTS:?}");
        let ns = self.lab.namespace(name);
        let link = self.lab.link(&self.cp, &ns);
        assert!(
            hub_addresses().contains(&IpAddr::V4(link.a)),
            "the hub's certificate does not name {}: raise MAX_TENANT_NETWORKS",
            link.a
        );
        let out = self.dir.path().join(format!("leaf-{name}"));
        let (state_dir, hub) = (
            self.state_dir.display().to_string(),
            format!("nats-leaf://{}:{LEAF_PORT}", link.a),
        );
        let (ca, listen, out_dir) = (
            ca.display().to_string(),
            format!("0.0.0.0:{TENANT_NATS_PORT}"),
            out.display().to_string(),
        );
        let mut args = vec![
            "leaf-config",
            "--state-dir",
            &state_dir,
            "--tenant",
            name,
            "--hub",
            &hub,
            "--tls-ca",
            &ca,
            "--listen",
            &listen,
            "--out",
            &out_dir,
        ];
        for server in servers {
            args.extend(["--server", server]);
        }
        admin(&args).await;
        let leaf = ns.spawn(
            &format!("nats leaf {name}"),
            nats_server_bin(),
            &["-c".to_owned(), out.join("leaf.conf").display().to_string()],
        );
        leaf.wait_for("Server is ready").await;
        self.tenants.push(TenantNet {
            name: name.to_owned(),
            ns,
            link,
            leaf,
            agents: Vec::new(),
        });
        self.tenants.len() - 1
    }

    /// Registers `server` with the gateway (the CLI, in `cp`) and starts its agent in tenant
    /// network `tenant`, connected to that network's leaf node only; waits until it is ready.
    pub async fn start_agent(&mut self, tenant: usize, server: &str, hook_dirs: &[PathBuf]) {
        let net = &self.tenants[tenant];
        let url = format!("nats://127.0.0.1:{TENANT_NATS_PORT}");
        let agent = self
            .spawn_agent(&net.ns, &net.name, &url, &[], server, hook_dirs)
            .await;
        self.tenants[tenant].agents.push(agent);
    }

    /// Registers `server` of the first tenant and starts its agent inside `cp`, connected
    /// to the hub directly over TLS (no leaf node): the baseline a leaf-node agent is
    /// compared with.
    pub async fn start_control_plane_agent(&self, server: &str) -> NsProcess {
        let url = format!("nats://127.0.0.1:{HUB_CLIENT_PORT}");
        let ca = self.ca.ca_file().display().to_string();
        self.spawn_agent(&self.cp, TENANTS[0], &url, &["--nats-ca", &ca], server, &[])
            .await
    }

    async fn spawn_agent(
        &self,
        ns: &Netns,
        tenant: &str,
        nats_url: &str,
        extra: &[&str],
        server: &str,
        hook_dirs: &[PathBuf],
    ) -> NsProcess {
        // The registration mints the agent's credentials (its NATS user, the gateway's
        // keys it pins); the file is its identity, handed to it and to nothing else.
        let creds = self.path(&format!("{server}.creds"));
        let creds = creds.display().to_string();
        let run = self
            .flue_as(tenant, &["server", "register", server, "--creds", &creds])
            .await;
        assert_eq!(run.code, 0, "register {server}: {run}");
        let state = self.path(&format!("agent-{server}"));
        let mut args = vec![
            "run".to_owned(),
            "--nats-url".to_owned(),
            nats_url.to_owned(),
            "--server-id".to_owned(),
            server.to_owned(),
            "--state-dir".to_owned(),
            state.display().to_string(),
            "--creds".to_owned(),
            creds,
            "--tenant".to_owned(),
            tenant.to_owned(),
        ];
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        for d in hook_dirs {
            args.push("--hook-dir".to_owned());
            args.push(d.display().to_string());
        }
        let agent = ns.spawn(&format!("flue-agent {server}"), bin("flue-agent"), &args);
        agent.wait_for("agent ready").await;
        agent
    }

    /// Runs `flue --gateway http://GATEWAY_LISTEN ARGS…` inside `cp` as the first tenant,
    /// to its end.
    pub async fn flue(&self, args: &[&str]) -> CliRun {
        self.flue_as(TENANTS[0], args).await
    }

    /// [`TenantNetworks::flue`] with a token of `tenant`.
    pub async fn flue_as(&self, tenant: &str, args: &[&str]) -> CliRun {
        let out = self
            .cp
            .command(bin("flue"))
            .arg("--gateway")
            .arg(format!("http://{GATEWAY_LISTEN}"))
            .args(args)
            .env("FLUE_TOKEN", self.tokens[tenant].for_cli(args))
            .output();
        let out = tokio::time::timeout(WAIT * 3, out)
            .await
            .expect("flue finishes")
            .expect("run flue");
        CliRun {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// The sealed name of `tenant`'s server `server`'s request consumer, the one its agent
    /// has it moved to (computed as the gateway does, from the state directory's keys).
    pub fn sealed_request_consumer(&self, tenant: &str, server: &str) -> String {
        let tenant = TenantId::new(tenant).expect("tenant id");
        flue_gateway::natsauth::NatsAuth::open(&self.state_dir)
            .expect("the gateway's state dir")
            .consumer_names(&tenant)
            .expect("the tenant's consumer names")
            .request(&tenant, &server.parse().expect("server id"))
            .expect("a sealed name (operator mode)")
    }

    /// A credentials file of a new user with the whole of `tenant`'s account (a gateway
    /// user, minted from the state directory): what the test's own NATS clients use.
    pub fn tenant_user_creds(&self, tenant: &str) -> PathBuf {
        let auth = NatsAuth::open(&self.state_dir).expect("the state directory after init");
        let (user, _events) = auth
            .gateway_creds(&TenantId::new(tenant).expect("tenant id"))
            .expect("a gateway user");
        let path = self.path(&format!("{tenant}-user-{}.creds", self.tenants.len()));
        write_secret(&path, &user.to_text());
        path
    }

    /// A credentials file of a new user with the whole of `tenant`'s edge account (minted
    /// with the account's seed from the state directory): what a tenant network's leaf node
    /// admits and links to the hub, the agents' account.
    pub fn edge_user_creds(&self, tenant: &str) -> PathBuf {
        let seed = std::fs::read_to_string(
            self.state_dir
                .join(flue_gateway::natsauth::accounts::ACCOUNTS_DIR)
                .join(tenant)
                .join("edge.nk"),
        )
        .expect("the edge account's seed");
        let edge = nkeys::KeyPair::from_seed(seed.trim()).expect("a seed");
        let user =
            flue_gateway::natsauth::accounts::mint_user(&edge, "whole edge", Default::default())
                .expect("minted");
        let path = self.path(&format!("{tenant}-edge-{}.creds", self.tenants.len()));
        write_secret(&path, &user.to_text());
        path
    }

    /// A path inside the scratch dir (shared by every namespace: they share the filesystem).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Starts a NATS client in namespace `ns` (the venv's nats-py) that connects to
    /// `nats://127.0.0.1:<port>` there as the user of `creds` (over TLS verified against
    /// the test CA when `tls`), subscribes to `subject` and prints `ready`, then the subject
    /// of every message it gets, one per line.
    pub async fn subject_spy(
        &self,
        ns: &Netns,
        port: u16,
        creds: &Path,
        tls: bool,
        subject: &str,
    ) -> NsProcess {
        let ca = if tls {
            self.ca.ca_file().display().to_string()
        } else {
            String::new()
        };
        let spy = ns.spawn(
            &format!("nats spy {subject}"),
            venv_python(),
            &[
                "-u".to_owned(),
                "-c".to_owned(),
                SPY.to_owned(),
                format!("nats://127.0.0.1:{port}"),
                subject.to_owned(),
                creds.display().to_string(),
                ca,
            ],
        );
        spy.wait_for("ready").await;
        spy
    }
}

/// The spy: subscribes, flushes (the broker has the interest), says `ready`, prints subjects.
const SPY: &str = r#"
import asyncio, ssl, sys, nats
async def main():
    url, subject, creds, ca = sys.argv[1:5]
    options = {"max_reconnect_attempts": -1, "user_credentials": creds}
    if ca:
        options["tls"] = ssl.create_default_context(cafile=ca)
    nc = await nats.connect(url, **options)
    async def got(msg):
        print(msg.subject, flush=True)
    await nc.subscribe(subject, cb=got)
    await nc.flush()
    print("ready", flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"#;

/// The venv's Python with nats-py and nkeys (`scripts/test.sh` installs them).
fn venv_python() -> PathBuf {
    let python = crate::repo_root().join(".venv/bin/python");
    let ok = std::process::Command::new(&python)
        .args(["-c", "import nats, nkeys"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "{} cannot import nats and nkeys: run `bash scripts/test.sh` (it installs nats-py[nkeys] into .venv)",
        python.display()
    );
    python
}

/// Every address of `cp` a leaf node may dial: its end of each possible link.
fn hub_addresses() -> Vec<IpAddr> {
    (1..=MAX_TENANT_NETWORKS)
        .map(|k| IpAddr::V4(Ipv4Addr::new(10, 250, k, 1)))
        .collect()
}

/// The hub, the secure way: `flue-gateway init` writes its keys and configuration into
/// `state_dir` (client port on `cp`'s loopback, leaf-node port on every address of `cp`,
/// both with TLS by a certificate of `ca`), `tenant create` adds the other tenants; the
/// hub runs that configuration in `cp`.
async fn start_hub(cp: &Netns, ca: &TestCa, dir: &Path, state_dir: &Path) -> NsProcess {
    let cert = ca.leaf("hub", &hub_addresses());
    let state = state_dir.display().to_string();
    let store = dir.join("hub-js").display().to_string();
    let (cert_file, key_file, ca_file) = (
        cert.cert.display().to_string(),
        cert.key.display().to_string(),
        ca.ca_file().display().to_string(),
    );
    let client = format!("127.0.0.1:{HUB_CLIENT_PORT}");
    let leaf = format!("0.0.0.0:{LEAF_PORT}");
    admin(&[
        "init",
        "--state-dir",
        &state,
        "--tenant",
        TENANTS[0],
        "--store-dir",
        &store,
        "--broker-listen",
        &client,
        "--leafnode-listen",
        &leaf,
        "--tls-cert",
        &cert_file,
        "--tls-key",
        &key_file,
        "--tls-ca",
        &ca_file,
    ])
    .await;
    for tenant in &TENANTS[1..] {
        admin(&["tenant", "create", tenant, "--state-dir", &state]).await;
    }
    let config = state_dir.join("broker/nats-server.conf");
    let hub = cp.spawn(
        "nats hub",
        nats_server_bin(),
        &["-c".to_owned(), config.display().to_string()],
    );
    hub.wait_for("Server is ready").await;
    hub
}

/// How long a reachability probe may take before it counts as "no answer".
pub const PROBE_LIMIT: Duration = Duration::from_secs(2);
