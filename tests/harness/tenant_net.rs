//! Flue across isolated tenant networks, in network namespaces ([`crate::netns`]): a
//! control-plane namespace `cp` with the NATS hub and the gateway, and one namespace per
//! tenant network with its own NATS leaf node and the agents of its servers.
//!
//! In `cp` only the hub's leaf-node port listens beyond loopback: the gateway's HTTP API and
//! the hub's client port are bound to `cp`'s loopback, so no other namespace can address
//! them whatever routes it adds (a packet for 127.0.0.1 coming in on a veth is dropped as a
//! martian). The test driver (the `flue` CLI) runs inside `cp`. A tenant namespace is linked
//! to `cp` only; its agents connect to their leaf node on the tenant's own loopback.
//! No broker authentication yet: every connection lands in the global account.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tempfile::TempDir;

use crate::auth::Tokens;
use crate::netns::{Link, NetLab, Netns, NsProcess};
use crate::{WAIT, bin, nats_server_bin};

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
    /// Tokens the gateway accepts, one per role.
    pub tokens: Tokens,
    dir: TempDir,
    // Last: the namespaces go after every process above was killed.
    lab: NetLab,
}

impl TenantNetworks {
    /// Creates `cp` and starts the hub and the gateway in it.
    pub async fn start() -> TenantNetworks {
        let mut lab = NetLab::new();
        let dir = tempfile::tempdir().expect("tempdir");
        let cp = lab.namespace("cp");
        let hub = start_hub(&cp, dir.path()).await;
        let state_dir = dir.path().join("gateway-state");
        // Keys made first, so the CLI gets tokens the gateway accepts.
        let tokens = Tokens::new(&state_dir);
        let gateway = cp.spawn(
            "flue-gateway",
            bin("flue-gateway"),
            &[
                "--listen",
                GATEWAY_LISTEN,
                "--nats-url",
                &format!("nats://127.0.0.1:{HUB_CLIENT_PORT}"),
                "--state-dir",
                &state_dir.display().to_string(),
                "--timeout-sweep-ms",
                "100",
                "--insecure-dev-broker",
            ],
        );
        gateway.wait_for("flue-gateway listening on ").await;
        TenantNetworks {
            gateway,
            hub,
            tenants: Vec::new(),
            cp,
            tokens,
            dir,
            lab,
        }
    }

    /// Adds tenant network `name`: a namespace linked to `cp` only, with a leaf node whose
    /// remote is the hub's leaf port; waits until the leaf is connected. Returns its index.
    pub async fn add_tenant_network(&mut self, name: &str) -> usize {
        let ns = self.lab.namespace(name);
        let link = self.lab.link(&self.cp, &ns);
        let config = self.dir.path().join(format!("leaf-{name}.conf"));
        std::fs::write(&config, leaf_config(name, link.a)).expect("write leaf config");
        let leaf = ns.spawn(
            &format!("nats leaf {name}"),
            nats_server_bin(),
            &["-c".to_owned(), config.display().to_string()],
        );
        leaf.wait_for("Leafnode connection created").await;
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
        let agent = self.spawn_agent(&net.ns, &url, server, hook_dirs).await;
        self.tenants[tenant].agents.push(agent);
    }

    /// Registers `server` and starts its agent inside `cp`, connected to the hub directly
    /// (no leaf node): the baseline a leaf-node agent is compared with.
    pub async fn start_control_plane_agent(&self, server: &str) -> NsProcess {
        let url = format!("nats://127.0.0.1:{HUB_CLIENT_PORT}");
        self.spawn_agent(&self.cp, &url, server, &[]).await
    }

    async fn spawn_agent(
        &self,
        ns: &Netns,
        nats_url: &str,
        server: &str,
        hook_dirs: &[PathBuf],
    ) -> NsProcess {
        let run = self.flue(&["server", "register", server]).await;
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
            "--insecure-dev-broker".to_owned(),
        ];
        for d in hook_dirs {
            args.push("--hook-dir".to_owned());
            args.push(d.display().to_string());
        }
        let agent = ns.spawn(&format!("flue-agent {server}"), bin("flue-agent"), &args);
        agent.wait_for("agent ready").await;
        agent
    }

    /// Runs `flue --gateway http://GATEWAY_LISTEN ARGS…` inside `cp`, to its end.
    pub async fn flue(&self, args: &[&str]) -> CliRun {
        let out = self
            .cp
            .command(bin("flue"))
            .arg("--gateway")
            .arg(format!("http://{GATEWAY_LISTEN}"))
            .args(args)
            .env("FLUE_TOKEN", self.tokens.for_cli(args))
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

    /// A path inside the scratch dir (shared by every namespace: they share the filesystem).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Starts a NATS client in namespace `ns` (the venv's nats-py) that connects to
    /// `nats://127.0.0.1:<port>` there, subscribes to `subject` and prints `ready`, then the
    /// subject of every message it gets, one per line.
    pub async fn subject_spy(&self, ns: &Netns, port: u16, subject: &str) -> NsProcess {
        let spy = ns.spawn(
            &format!("nats spy {subject}"),
            venv_python(),
            &[
                "-u".to_owned(),
                "-c".to_owned(),
                SPY.to_owned(),
                format!("nats://127.0.0.1:{port}"),
                subject.to_owned(),
            ],
        );
        spy.wait_for("ready").await;
        spy
    }
}

/// The spy: subscribes, flushes (the broker has the interest), says `ready`, prints subjects.
const SPY: &str = r#"
import asyncio, sys, nats
async def main():
    nc = await nats.connect(sys.argv[1], max_reconnect_attempts=-1)
    async def got(msg):
        print(msg.subject, flush=True)
    await nc.subscribe(sys.argv[2], cb=got)
    await nc.flush()
    print("ready", flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"#;

/// The venv's Python with nats-py (`scripts/test.sh` installs it).
fn venv_python() -> PathBuf {
    let python = crate::repo_root().join(".venv/bin/python");
    let ok = std::process::Command::new(&python)
        .args(["-c", "import nats"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "{} cannot import nats: run `bash scripts/test.sh` (it installs nats-py into .venv)",
        python.display()
    );
    python
}

/// The hub: the shipped broker settings (JetStream in domain `flue`, consumer limit lifted)
/// plus a leaf-node listener; the client port on `cp`'s loopback only.
async fn start_hub(cp: &Netns, dir: &Path) -> NsProcess {
    let config = dir.join("hub.conf");
    let store = dir.join("hub-js");
    std::fs::write(
        &config,
        format!(
            "server_name: hub\n\
             listen: \"127.0.0.1:{HUB_CLIENT_PORT}\"\n\
             jetstream {{\n  domain: {domain}\n  store_dir: \"{store}\"\n  limits {{ default_max_consumers: -1 }}\n}}\n\
             leafnodes {{\n  listen: \"0.0.0.0:{LEAF_PORT}\"\n  no_advertise: true\n}}\n",
            domain = flue_proto::subject::JETSTREAM_DOMAIN,
            store = store.display(),
        ),
    )
    .expect("write hub config");
    let hub = cp.spawn(
        "nats hub",
        nats_server_bin(),
        &["-c".to_owned(), config.display().to_string()],
    );
    hub.wait_for("Server is ready").await;
    hub
}

/// A leaf node without JetStream of its own: its clients' JetStream calls go to the hub
/// through the domain prefix (`$JS.flue.API`).
fn leaf_config(name: &str, hub: Ipv4Addr) -> String {
    format!(
        "server_name: leaf-{name}\n\
         listen: \"0.0.0.0:{TENANT_NATS_PORT}\"\n\
         leafnodes {{\n  reconnect: \"1s\"\n  remotes: [ {{ url: \"nats-leaf://{hub}:{LEAF_PORT}\" }} ]\n}}\n"
    )
}

/// How long a reachability probe may take before it counts as "no answer".
pub const PROBE_LIMIT: Duration = Duration::from_secs(2);
