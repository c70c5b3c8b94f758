//! A secured broker: `flue-gateway init` (and `tenant create`) run into a temp state
//! directory, then nats-server started with the configuration they wrote, on a free
//! port. Users are minted with the same state directory ([`NatsAuth`]).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use flue_gateway::natsauth::NatsAuth;
use flue_proto::creds::UserCreds;
use tempfile::TempDir;
use tokio::process::{Child, Command};

use crate::{Gateway, Logs, START_WAIT, bin, nats_server_bin};

/// How long a client connected with minted credentials waits for a JetStream answer: a
/// call the broker refuses gets none (async-nats reports it as a timeout), so this is what
/// each refusal costs a test.
pub const REFUSED_WAIT: Duration = Duration::from_secs(2);

/// A nats-server running a configuration file written by `flue-gateway`.
pub struct NatsProcess {
    child: Child,
    port: u16,
    logs: Logs,
    config: PathBuf,
}

impl NatsProcess {
    /// Starts `nats-server -c <config>` on a free loopback port and waits until it is ready.
    pub async fn start(config: &Path) -> NatsProcess {
        let logs = Logs::default();
        let child = Self::spawn(config, "-1", &logs).await;
        let line = logs
            .wait_for("Listening for client connections on ", START_WAIT)
            .await;
        let port = line
            .rsplit(':')
            .next()
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("no port in {line:?}"));
        NatsProcess {
            child,
            port,
            logs,
            config: config.to_owned(),
        }
    }

    /// Kills the server with SIGKILL (`kill -9`: no goodbye to its clients or its hub) and
    /// waits until it is gone.
    pub async fn kill(&mut self) {
        self.child.kill().await.expect("kill nats-server");
    }

    /// Starts the server again after [`NatsProcess::kill`]: same configuration, same port,
    /// same directories; waits until it is ready.
    pub async fn start_again(&mut self) {
        self.child = Self::spawn(&self.config, &self.port.to_string(), &self.logs).await;
    }

    async fn spawn(config: &Path, port: &str, logs: &Logs) -> Child {
        let from = logs.len();
        let mut child = Command::new(nats_server_bin())
            .arg("-c")
            .arg(config)
            .args(["-a", "127.0.0.1", "-p", port])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn nats-server");
        logs.capture(child.stderr.take().expect("stderr"));
        logs.wait_for_after(from, "Server is ready", START_WAIT)
            .await;
        child
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Makes the server read its configuration file again (SIGHUP).
    pub fn reload(&self) {
        let pid = self.child.id().expect("nats-server running");
        let ok = std::process::Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill -HUP {pid} failed");
    }

    /// What the server printed.
    pub fn logs(&self) -> &Logs {
        &self.logs
    }

    /// Connects as the user of `creds` (JetStream calls bounded by [`REFUSED_WAIT`]).
    pub async fn connect(&self, creds: &UserCreds) -> Result<async_nats::Client, String> {
        connect_options(creds)
            .connect(self.url())
            .await
            .map_err(|e| e.to_string())
    }
}

impl Drop for NatsProcess {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("----- nats-server (secured) output -----");
            for line in self.logs.lines() {
                eprintln!("{line}");
            }
        }
        let _ = self.child.start_kill();
    }
}

/// Connect options of a client holding `creds`: no reconnection attempts beyond a few, and
/// JetStream calls answered within [`REFUSED_WAIT`].
pub fn connect_options(creds: &UserCreds) -> async_nats::ConnectOptions {
    async_nats::ConnectOptions::with_credentials(&creds.to_text())
        .expect("minted credentials parse")
        .request_timeout(Some(REFUSED_WAIT))
}

/// A secured hub broker and the state directory holding its keys.
pub struct SecureNats {
    /// The hub broker.
    pub nats: NatsProcess,
    /// Mints users with the state directory's keys.
    pub auth: NatsAuth,
    state_dir: PathBuf,
    dir: Arc<TempDir>,
}

impl SecureNats {
    /// `flue-gateway init` for the first tenant, `tenant create` for the others, then the
    /// broker; `leafnode_port` opens a leaf node listener on that loopback port.
    pub async fn start(tenants: &[&str], leafnode_port: Option<u16>) -> SecureNats {
        let dir = Arc::new(tempfile::tempdir().expect("tempdir"));
        // Where a gateway started on it looks (`Gateway::start_in`).
        let state_dir = dir.path().join("gateway");
        let state = state_dir.to_str().expect("utf-8 path");
        let store = dir.path().join("js");
        let mut init = vec![
            "init",
            "--state-dir",
            state,
            "--tenant",
            tenants[0],
            "--store-dir",
            store.to_str().expect("utf-8 path"),
        ];
        let leaf = leafnode_port.map(|p| format!("127.0.0.1:{p}"));
        if let Some(leaf) = &leaf {
            init.extend(["--leafnode-listen", leaf]);
        }
        admin(&init).await;
        for tenant in &tenants[1..] {
            admin(&["tenant", "create", tenant, "--state-dir", state]).await;
        }
        let nats = NatsProcess::start(&state_dir.join("broker/nats-server.conf")).await;
        let auth = NatsAuth::open(&state_dir).expect("state directory after init");
        SecureNats {
            nats,
            auth,
            state_dir,
            dir,
        }
    }

    /// Sets the broker up as the gateway does it, by the gateway: runs `flue-gateway` on
    /// this state directory (it starts a runtime per tenant `init` and `tenant create`
    /// made: its streams and buckets), registers `servers` of `tenant` through its API
    /// (each server's request consumer), and stops it, so that a test then probes the
    /// broker's rules alone.
    pub async fn set_up_by_gateway(&self, tenant: &str, servers: &[&str]) {
        let mut gateway = Gateway::start_in(
            &self.nats.url(),
            self.dir.clone(),
            &["--default-tenant", tenant],
            None,
        )
        .await;
        let http = gateway.http();
        for server in servers {
            let resp = http
                .post(format!("{}/v1/servers", gateway.url()))
                .json(&serde_json::json!({"id": server}))
                .send()
                .await
                .expect("register");
            assert_eq!(resp.status(), reqwest::StatusCode::CREATED, "{server}");
        }
        gateway.kill().await;
    }

    /// The state directory `init` wrote.
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// A connection of a fresh system account user (pushes account JWTs).
    pub async fn system(&self) -> async_nats::Client {
        let creds = self.auth.system_creds().expect("system user");
        self.nats
            .connect(&creds)
            .await
            .expect("system user connects")
    }

    /// Connections of fresh gateway users of `tenant`: its tenant account, its events account.
    pub async fn gateway(&self, tenant: &str) -> (async_nats::Client, async_nats::Client) {
        let (main, events) = self
            .auth
            .gateway_creds(&tenant.parse().expect("tenant id"))
            .expect("gateway users");
        (
            self.nats
                .connect(&main)
                .await
                .expect("gateway user connects"),
            self.nats
                .connect(&events)
                .await
                .expect("gateway events user connects"),
        )
    }
}

/// Runs `flue-gateway <args>` and checks it succeeded; returns its stdout.
pub async fn admin(args: &[&str]) -> String {
    let out = Command::new(bin("flue-gateway"))
        .args(args)
        .env_remove("FLUE_STATE_DIR")
        .output()
        .await
        .expect("run flue-gateway");
    assert!(
        out.status.success(),
        "flue-gateway {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
