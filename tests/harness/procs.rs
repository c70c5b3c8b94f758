//! The three real processes a test runs: nats-server, flue-gateway, flue-agent.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};

use std::sync::Arc;

use flue_proto::auth::Role;
use flue_proto::creds::{AgentCredentials, UserCreds};
use tempfile::TempDir;
use tokio::process::{Child, Command};

use crate::auth::{Http, Tokens};
use crate::tls::{TestCa, install_crypto_provider};
use crate::{Logs, START_WAIT, WAIT, bin, nats_server_bin};

fn dump_on_panic(name: &str, logs: &[&Logs]) {
    if std::thread::panicking() {
        eprintln!("----- {name} output -----");
        for l in logs {
            for line in l.lines() {
                eprintln!("{line}");
            }
        }
    }
}

/// Sends SIGSTOP to `child` and returns once every one of its threads is stopped: kill(2)
/// only starts a group stop, and a thread still finishing a system call (a broker's fsync)
/// could answer one more message after it returned.
fn stop(child: &Child) {
    signal(child, "-STOP");
    let pid = child.id().expect("child still running");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !all_threads_stopped(pid) {
        assert!(
            std::time::Instant::now() < deadline,
            "process {pid} not stopped 10 s after SIGSTOP"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Whether every thread of process `pid` is in the stopped state (`T`), as
/// `/proc/<pid>/task/*/stat` shows it.
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|task| {
        std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
            // The state is the first field after the command name's closing parenthesis.
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next())
                .is_some_and(|state| state == 'T' || state == 't')
        })
    })
}

fn signal(child: &Child, sig: &str) {
    let pid = child.id().expect("child still running");
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("run kill")
        .success();
    assert!(ok, "kill {sig} {pid} failed");
}

/// The broker configuration Flue ships, `scripts/nats-server.conf`, which every test's
/// broker runs with.
pub fn broker_config() -> PathBuf {
    crate::repo_root().join("scripts/nats-server.conf")
}

/// A real nats-server with JetStream on a free loopback port and a temp store dir,
/// started with the shipped configuration ([`broker_config`]).
pub struct Nats {
    child: Option<Child>,
    /// 0 until the first start, when the server picks a free port itself.
    port: u16,
    store: TempDir,
    config: PathBuf,
    /// The CA clients must trust when the server speaks TLS only.
    ca_file: Option<PathBuf>,
    /// Holds a generated configuration file.
    _conf_dir: Option<TempDir>,
    logs: Logs,
    /// In operator mode: the users [`Nats::client`] and [`Nats::events_client`] connect as
    /// (the default tenant's gateway users: whole tenant account, whole events account).
    users: Option<(UserCreds, UserCreds)>,
    /// The configuration names the store dir itself (written by `flue-gateway init`), so
    /// `-sd` is not given (nats-server refuses both).
    store_in_config: bool,
    /// The size of a tmpfs the store lives on, mounted in a mount namespace of the
    /// broker's own (`unshare -m`, root): a disk that fills ([`Nats::start_operator_on_small_disk`]).
    disk: Option<String>,
}

impl Nats {
    /// Starts a server with the shipped configuration and waits until it is ready.
    pub async fn start() -> Nats {
        Nats::start_with_config(&broker_config()).await
    }

    /// Starts a server with the shipped configuration plus a `tls` block (written by
    /// the gateway's [`flue_gateway::tls::client_tls_block`]) with a certificate from
    /// `ca`: every client must speak TLS and trust `ca`.
    pub async fn start_tls(ca: &TestCa) -> Nats {
        Nats::start_with_tls_block(ca, None, "").await
    }

    /// Like [`Nats::start_tls`], and every client must also present a certificate
    /// issued by `ca` (mutual TLS); [`Nats::client`] has none, so it cannot connect.
    pub async fn start_mutual_tls(ca: &TestCa) -> Nats {
        Nats::start_with_tls_block(ca, Some(ca.ca_file()), "").await
    }

    /// Like [`Nats::start_tls`] with `extra` configuration text appended (a `leafnodes`
    /// block, say).
    pub async fn start_tls_with(ca: &TestCa, extra: &str) -> Nats {
        Nats::start_with_tls_block(ca, None, extra).await
    }

    async fn start_with_tls_block(ca: &TestCa, client_ca: Option<PathBuf>, extra: &str) -> Nats {
        let leaf = ca.leaf("nats-server", &[]);
        let block = flue_gateway::tls::client_tls_block(&flue_gateway::tls::BrokerTlsFiles {
            cert_file: leaf.cert,
            key_file: leaf.key,
            client_ca_file: client_ca,
        })
        .expect("tls block");
        let shipped = std::fs::read_to_string(broker_config()).expect("read the shipped config");
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("nats-server.conf");
        std::fs::write(&config, format!("{shipped}\n{block}\n{extra}\n"))
            .expect("write the TLS config");
        let mut nats = Nats::start_with_config(&config).await;
        nats.ca_file = Some(ca.ca_file());
        nats._conf_dir = Some(dir);
        nats
    }

    /// Starts a server with another configuration file (its port and store are still
    /// chosen here) and waits until it is ready.
    pub async fn start_with_config(config: &Path) -> Nats {
        install_crypto_provider();
        let store = tempfile::tempdir().expect("tempdir");
        let mut nats = Nats {
            child: None,
            port: 0,
            store,
            config: config.to_owned(),
            ca_file: None,
            _conf_dir: None,
            logs: Logs::default(),
            users: None,
            store_in_config: false,
            disk: None,
        };
        nats.spawn().await;
        nats
    }

    /// Runs `flue-gateway init` on the state dir `state_dir` (store dir: this broker's
    /// temp store) and starts the broker with the configuration it wrote: operator mode,
    /// every client authenticated. [`Nats::connect_as`] then says who tests connect as.
    pub async fn start_operator(state_dir: &Path) -> Nats {
        Nats::start_operator_with(state_dir, None).await
    }

    /// [`Nats::start_operator`], speaking TLS only with a certificate from `ca` when given
    /// (`init --tls-cert --tls-key`): every client must trust `ca`.
    pub async fn start_operator_with(state_dir: &Path, ca: Option<&TestCa>) -> Nats {
        Nats::start_operator_init(state_dir, ca, &[]).await
    }

    /// [`Nats::start_operator`] with a leaf-node listener on `leafnode_listen`
    /// (`init --leafnode-listen`), where a leaf node written by `flue-gateway leaf-config`
    /// links.
    pub async fn start_operator_leafnodes(state_dir: &Path, leafnode_listen: &str) -> Nats {
        Nats::start_operator_init(state_dir, None, &["--leafnode-listen", leafnode_listen]).await
    }

    async fn start_operator_init(state_dir: &Path, ca: Option<&TestCa>, extra: &[&str]) -> Nats {
        install_crypto_provider();
        let store = tempfile::tempdir().expect("tempdir");
        let mut init: Vec<String> = vec![
            "init".into(),
            "--state-dir".into(),
            state_dir.display().to_string(),
            "--store-dir".into(),
            store.path().display().to_string(),
        ];
        if let Some(ca) = ca {
            let leaf = ca.leaf("nats-server", &[]);
            init.extend([
                "--tls-cert".into(),
                leaf.cert.display().to_string(),
                "--tls-key".into(),
                leaf.key.display().to_string(),
            ]);
        }
        init.extend(extra.iter().map(|a| (*a).to_owned()));
        crate::admin(&init.iter().map(String::as_str).collect::<Vec<_>>()).await;
        let mut nats = Nats {
            child: None,
            port: 0,
            store,
            config: state_dir.join("broker/nats-server.conf"),
            ca_file: ca.map(TestCa::ca_file),
            _conf_dir: None,
            logs: Logs::default(),
            users: None,
            store_in_config: true,
            disk: None,
        };
        nats.spawn().await;
        nats
    }

    /// [`Nats::start_operator`] with the store on a tmpfs of `size` (`64m`) of its own, and
    /// `max_file_store` far above it: writes then fail when the disk is full ("no space
    /// left on device"), not at nats-server's limit. Needs root (`unshare -m`, `mount`);
    /// a restart starts on a new, empty disk.
    pub async fn start_operator_on_small_disk(state_dir: &Path, size: &str) -> Nats {
        install_crypto_provider();
        let store = tempfile::tempdir().expect("tempdir");
        let init = [
            "init",
            "--state-dir",
            &state_dir.display().to_string(),
            "--store-dir",
            &store.path().display().to_string(),
        ]
        .map(str::to_owned);
        crate::admin(&init.iter().map(String::as_str).collect::<Vec<_>>()).await;
        let config = state_dir.join("broker/nats-server.conf");
        let text = std::fs::read_to_string(&config).expect("the broker's configuration");
        let text = text.replacen("jetstream {", "jetstream {\n  max_file_store: 1GB", 1);
        std::fs::write(&config, text).expect("write the configuration");
        let mut nats = Nats {
            child: None,
            port: 0,
            store,
            config,
            ca_file: None,
            _conf_dir: None,
            logs: Logs::default(),
            users: None,
            store_in_config: true,
            disk: Some(size.to_owned()),
        };
        nats.spawn().await;
        nats
    }

    /// Starts one node of a cluster with its configuration (written by `flue-gateway
    /// cluster-config`: listener, store, routes) on client port `port`; waits until ready.
    pub async fn start_node(config: &Path, port: u16) -> Nats {
        install_crypto_provider();
        let mut nats = Nats {
            child: None,
            port,
            store: tempfile::tempdir().expect("tempdir"),
            config: config.to_owned(),
            ca_file: None,
            _conf_dir: None,
            logs: Logs::default(),
            users: None,
            store_in_config: true,
            disk: None,
        };
        nats.spawn().await;
        nats
    }

    /// Makes [`Nats::client`] connect as `tenant_user` and [`Nats::events_client`] as
    /// `events_user` (a broker in operator mode checks every client).
    pub fn connect_as(&mut self, tenant_user: UserCreds, events_user: UserCreds) {
        self.users = Some((tenant_user, events_user));
    }

    fn options(&self, user: Option<&UserCreds>) -> async_nats::ConnectOptions {
        let mut options = match user {
            Some(user) => async_nats::ConnectOptions::with_credentials(&user.to_text())
                .expect("minted credentials parse"),
            None => async_nats::ConnectOptions::new(),
        };
        if let Some(ca) = &self.ca_file {
            options = options.add_root_certificates(ca.clone()).require_tls(true);
        }
        options
    }

    /// A client of the event stream's account (`FLUE_EVT`): in operator mode the default
    /// tenant's events account, else the same as [`Nats::client`].
    pub async fn events_client(&self) -> async_nats::Client {
        self.options(self.users.as_ref().map(|(_, events)| events))
            .connect(self.url())
            .await
            .expect("connect to nats (events account)")
    }

    async fn spawn(&mut self) {
        // `-p -1`: the server binds a free port itself (no race with other tests);
        // a restart reuses the port it chose.
        let port = match self.port {
            0 => "-1".to_owned(),
            p => p.to_string(),
        };
        // The documented broker: the shipped config, with a free port and a temp store.
        let mut command = match &self.disk {
            None => Command::new(nats_server_bin()),
            Some(size) => {
                // `sh` mounts the tmpfs over the store in the new namespace, then becomes
                // nats-server (same pid: signals reach the broker).
                let mut command = Command::new("unshare");
                command
                    .args(["-m", "--propagation", "private", "sh", "-c"])
                    .arg(r#"mount -t tmpfs -o "size=$1" flue-test-disk "$2" && shift 2 && exec "$@""#)
                    .args(["sh", size])
                    .arg(self.store.path())
                    .arg(nats_server_bin());
                command
            }
        };
        command
            .arg("-c")
            .arg(&self.config)
            .args(["-js", "-a", "127.0.0.1", "-p", &port]);
        if !self.store_in_config {
            command.arg("-sd").arg(self.store.path());
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn nats-server");
        let from = self.logs.len();
        self.logs.capture(child.stderr.take().expect("stderr"));
        self.child = Some(child);
        self.logs
            .wait_for_after(from, "Server is ready", START_WAIT)
            .await;
        if self.port == 0 {
            let line = self
                .logs
                .wait_for_after(from, "Listening for client connections on ", START_WAIT)
                .await;
            self.port = line
                .rsplit(':')
                .next()
                .and_then(|p| p.trim().parse().ok())
                .unwrap_or_else(|| panic!("no port in {line:?}"));
        }
    }

    /// The JetStream store directory (`-sd`): the broker's bytes on disk.
    pub fn store_dir(&self) -> &Path {
        self.store.path()
    }

    /// `nats://127.0.0.1:<port>`, or `tls://…` when it speaks TLS only.
    pub fn url(&self) -> String {
        let scheme = if self.ca_file.is_some() {
            "tls"
        } else {
            "nats"
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// The CA to trust when it speaks TLS only ([`Nats::start_tls`]).
    pub fn ca_file(&self) -> Option<&Path> {
        self.ca_file.as_deref()
    }

    /// What it logged.
    pub fn logs(&self) -> &Logs {
        &self.logs
    }

    /// Kills the server with SIGKILL and waits for it to be gone.
    pub async fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().await.expect("kill nats-server");
        }
    }

    /// Starts it again on the same port and store after [`Nats::kill`] (a test changes
    /// its files in between).
    pub async fn start_again(&mut self) {
        self.spawn().await;
    }

    /// Starts it again on the same port and store.
    pub async fn restart(&mut self) {
        self.kill().await;
        self.spawn().await;
    }

    /// Kills the server, deletes everything in its store (streams, consumers, KV buckets:
    /// a broker that lost its disk) and starts it again, empty, on the same port.
    pub async fn wipe_and_restart(&mut self) {
        self.kill().await;
        for entry in std::fs::read_dir(self.store.path()).expect("read the store dir") {
            let path = entry.expect("store dir entry").path();
            if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            }
            .unwrap_or_else(|e| panic!("remove {}: {e}", path.display()));
        }
        self.spawn().await;
    }

    /// Freezes the server (SIGSTOP): connections stay open but nothing is answered, as
    /// with a hung broker. [`Nats::resume`] thaws it.
    pub fn pause(&self) {
        stop(self.child.as_ref().expect("nats-server running"));
    }

    /// Thaws a server frozen by [`Nats::pause`] (SIGCONT).
    pub fn resume(&self) {
        signal(self.child.as_ref().expect("nats-server running"), "-CONT");
    }

    /// Its process id, while running (the scale bench reads its `/proc` figures).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }

    /// Stops the server cleanly (SIGTERM) and waits, at most `limit`, until it has exited.
    pub async fn terminate_within(&mut self, limit: std::time::Duration) -> ExitStatus {
        let mut child = self.child.take().expect("nats-server running");
        signal(&child, "-TERM");
        tokio::time::timeout(limit, child.wait())
            .await
            .unwrap_or_else(|_| panic!("nats-server did not exit within {limit:?} of SIGTERM"))
            .expect("wait for nats-server")
    }

    /// A client connection (for tests that look at the broker directly), over TLS
    /// trusting the test CA when the server speaks TLS only.
    ///
    /// In operator mode ([`Nats::connect_as`]) it connects as a user with every right in
    /// the default tenant's account (test-only: the gateway's own kind of user).
    pub async fn client(&self) -> async_nats::Client {
        self.options(self.users.as_ref().map(|(tenant, _)| tenant))
            .connect(self.url())
            .await
            .expect("connect to nats")
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        // The port and configuration tell a cluster's nodes apart (`…/cluster/n2/…`).
        let name = format!(
            "nats-server on port {} ({})",
            self.port,
            self.config.display()
        );
        dump_on_panic(&name, &[&self.logs]);
    }
}

/// The real `flue-gateway` binary, with its own temp state dir (its keys) and a token
/// per role minted from it ([`Tokens`]).
pub struct Gateway {
    child: Option<Child>,
    url: String,
    /// The CA its HTTPS certificate chains to, for its clients.
    ca_file: Option<PathBuf>,
    args: Vec<String>,
    stdout: Logs,
    stderr: Logs,
    state: Arc<TempDir>,
    tokens: Arc<Tokens>,
    /// Its output was printed already (by a failed start's panic): `Drop` does not
    /// print it again.
    dumped: bool,
    /// Where the output of the process started last begins, in `stdout` and `stderr`.
    stdout_from: usize,
    stderr_from: usize,
}

impl Gateway {
    /// Starts a gateway on `127.0.0.1:0` against `nats_url`, with extra flags and a new
    /// state dir.
    pub async fn start(nats_url: &str, extra: &[&str]) -> Gateway {
        Gateway::start_trusting(nats_url, extra, None).await
    }

    /// Starts a gateway like [`Gateway::start`] whose clients trust `ca_file` (for a
    /// gateway given `--tls-cert`).
    pub async fn start_trusting(nats_url: &str, extra: &[&str], ca_file: Option<&Path>) -> Gateway {
        let state = Arc::new(tempfile::tempdir().expect("tempdir"));
        Gateway::start_sharing(nats_url, state, extra, ca_file).await
    }

    /// Starts a second gateway with the same state dir (so the same keys) as `other`:
    /// two gateways of one deployment, serving the same broker.
    pub async fn start_like(other: &Gateway, nats_url: &str, extra: &[&str]) -> Gateway {
        Gateway::start_sharing(
            nats_url,
            other.state.clone(),
            extra,
            other.ca_file.as_deref(),
        )
        .await
    }

    /// Starts a gateway on the state dir `<state>/gateway` made beforehand (by
    /// `flue-gateway init`: operator mode).
    /// `ca_file` is the CA its HTTPS certificate chains to, when it serves HTTPS.
    pub async fn start_in(
        nats_url: &str,
        state: Arc<TempDir>,
        extra: &[&str],
        ca_file: Option<&Path>,
    ) -> Gateway {
        Gateway::start_sharing(nats_url, state, extra, ca_file).await
    }

    /// [`Gateway::start_in`] without waiting: the process runs, [`Gateway::logs`] fills,
    /// and [`Gateway::listening`] waits for it to serve (a test acts on the broker while
    /// the gateway starts).
    pub fn spawn_in(nats_url: &str, state: Arc<TempDir>, extra: &[&str]) -> Gateway {
        let mut gw = Gateway::prepare(nats_url, state, extra, None);
        gw.spawn_child();
        gw
    }

    async fn start_sharing(
        nats_url: &str,
        state: Arc<TempDir>,
        extra: &[&str],
        ca_file: Option<&Path>,
    ) -> Gateway {
        let mut gw = Gateway::prepare(nats_url, state, extra, ca_file);
        gw.spawn().await;
        gw
    }

    /// The gateway's arguments and tokens; no process yet.
    fn prepare(
        nats_url: &str,
        state: Arc<TempDir>,
        extra: &[&str],
        ca_file: Option<&Path>,
    ) -> Gateway {
        install_crypto_provider();
        let state_dir = state.path().join("gateway");
        std::fs::create_dir_all(state.path()).expect("state parent");
        // Keys made here first, so the tests can mint tokens the gateway accepts.
        // Tokens of the tenant it serves by default (`--default-tenant`, alias `--tenant`).
        let tenant = extra
            .windows(2)
            .find(|w| w[0] == "--default-tenant" || w[0] == "--tenant")
            .map_or_else(|| "default".to_owned(), |w| w[1].to_owned());
        let tenant = tenant.parse().expect("a tenant id");
        let tokens = Arc::new(Tokens::for_tenant(&state_dir, &tenant));
        let mut args: Vec<String> = vec![
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--nats-url".into(),
            nats_url.into(),
            "--timeout-sweep-ms".into(),
            "100".into(),
            "--state-dir".into(),
            state_dir.display().to_string(),
        ];
        // A state dir without broker keys (no `flue-gateway init`): the anonymous
        // development broker, which the gateway refuses unless told so.
        if !state_dir.join("operator.nk").exists() && !extra.contains(&"--insecure-dev-broker") {
            args.push("--insecure-dev-broker".into());
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        Gateway {
            child: None,
            url: String::new(),
            ca_file: ca_file.map(Path::to_owned),
            args,
            stdout: Logs::default(),
            stderr: Logs::default(),
            state,
            tokens,
            dumped: false,
            stdout_from: 0,
            stderr_from: 0,
        }
    }

    async fn spawn(&mut self) {
        self.spawn_child();
        self.listening().await;
    }

    /// Starts the process; its output is captured from the next line on.
    fn spawn_child(&mut self) {
        let mut child = Command::new(bin("flue-gateway"))
            .args(&self.args)
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn flue-gateway");
        self.stdout_from = self.stdout.len();
        self.stderr_from = self.stderr.len();
        self.stdout.capture(child.stdout.take().expect("stdout"));
        self.stderr.capture(child.stderr.take().expect("stderr"));
        self.child = Some(child);
    }

    /// Waits (bounded by [`START_WAIT`], or until it exits) until the process started
    /// last serves, and takes its URL; panics with what it logged otherwise.
    pub async fn listening(&mut self) {
        let (from, err_from) = (self.stdout_from, self.stderr_from);
        let line = match self
            .stdout
            .try_wait_for_after(from, "flue-gateway listening on ", START_WAIT)
            .await
        {
            Ok(line) => line,
            // What it logged says why (stdout holds only the listening line); the
            // `Drop` of a cluster's nodes adds theirs.
            Err(why) => {
                self.dumped = true;
                panic!(
                    "flue-gateway: {why} waiting for \"flue-gateway listening on\"; its log:\n{}",
                    self.stderr.lines()[err_from..].join("\n")
                )
            }
        };
        let url = line
            .rsplit(' ')
            .next()
            .expect("address at end of line")
            .to_owned();
        self.url = url;
    }

    /// Base URL, `http://127.0.0.1:<port>` (`https://` when serving HTTPS).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A typed API client for this gateway with an engine token (configs, deployments,
    /// stacks, reads and events).
    pub fn client(&self) -> flue_client::Client {
        self.client_as(Role::Engine)
    }

    /// A typed API client with an admin token (servers, tokens, reads).
    pub fn admin_client(&self) -> flue_client::Client {
        self.client_as(Role::Admin)
    }

    /// A typed API client with the token of `role`.
    pub fn client_as(&self, role: Role) -> flue_client::Client {
        flue_client::Client::with_ca(&self.url, self.ca_file.as_deref())
            .expect("client")
            .with_token(self.tokens.get(role))
    }

    /// A raw HTTP client sending, per request, a token of a role the route allows.
    pub fn http(&self) -> Http {
        self.http_with(reqwest::Client::new())
    }

    /// [`Gateway::http`] around a client built as the test needs it.
    pub fn http_with(&self, client: reqwest::Client) -> Http {
        Http::new(client, self.tokens.clone())
    }

    /// Its state dir (`--state-dir`): its keys, `token.key` among them.
    pub fn state_dir(&self) -> PathBuf {
        self.state.path().join("gateway")
    }

    /// This gateway's tokens (one per role) and their key.
    pub fn tokens(&self) -> &Tokens {
        &self.tokens
    }

    /// What it printed on stdout.
    pub fn stdout(&self) -> &Logs {
        &self.stdout
    }

    /// The token a `flue ARGS…` command line needs ([`Tokens::for_cli`]).
    pub fn cli_token(&self, args: &[&str]) -> String {
        self.tokens.for_cli(args).to_owned()
    }

    /// Kills it with SIGKILL (no graceful shutdown).
    pub async fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().await.expect("kill gateway");
        }
    }

    /// Starts it again with the same flags (a new port).
    pub async fn restart(&mut self) {
        self.kill().await;
        self.spawn().await;
    }

    /// What it logged on stderr.
    pub fn logs(&self) -> &Logs {
        &self.stderr
    }

    /// Its process id, while running (the scale bench reads its `/proc` figures).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }

    /// Freezes it (SIGSTOP), as a machine that stalls would: its connections stay open,
    /// nothing it holds is renewed. [`Gateway::resume`] thaws it.
    pub fn pause(&self) {
        stop(self.child.as_ref().expect("gateway running"));
    }

    /// Thaws a gateway frozen by [`Gateway::pause`] (SIGCONT).
    pub fn resume(&self) {
        signal(self.child.as_ref().expect("gateway running"), "-CONT");
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if self.dumped {
            return;
        }
        dump_on_panic("flue-gateway", &[&self.stdout, &self.stderr]);
    }
}

/// The real `flue-agent` binary for one server.
pub struct Agent {
    child: Option<Child>,
    /// The executable run (and run again by [`Agent::restart`]).
    program: PathBuf,
    /// Server id it serves.
    pub server: String,
    args: Vec<String>,
    logs: Logs,
}

impl Agent {
    /// Spawns an agent without waiting for it to be ready.
    pub fn spawn(nats_url: &str, server: &str, state_dir: &Path, hook_dirs: &[PathBuf]) -> Agent {
        Agent::spawn_with(nats_url, server, state_dir, hook_dirs, &[])
    }

    /// Spawns an agent with extra flags, without waiting for it to be ready.
    pub fn spawn_with(
        nats_url: &str,
        server: &str,
        state_dir: &Path,
        hook_dirs: &[PathBuf],
        extra: &[&str],
    ) -> Agent {
        Agent::spawn_program(
            bin("flue-agent"),
            nats_url,
            server,
            state_dir,
            hook_dirs,
            extra,
        )
    }

    /// [`Agent::spawn_with`], running `program` (a copy of the agent somewhere else, as
    /// an upgrade test needs) instead of the workspace's `flue-agent`.
    pub fn spawn_program(
        program: PathBuf,
        nats_url: &str,
        server: &str,
        state_dir: &Path,
        hook_dirs: &[PathBuf],
        extra: &[&str],
    ) -> Agent {
        let mut args: Vec<String> = vec![
            "run".into(),
            "--nats-url".into(),
            nats_url.into(),
            "--server-id".into(),
            server.into(),
            "--state-dir".into(),
            state_dir.display().to_string(),
        ];
        for d in hook_dirs {
            args.push("--hook-dir".into());
            args.push(d.display().to_string());
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        // Credentials minted by a gateway on the anonymous development broker hold no
        // broker user: the agent accepts them only when told so.
        let creds = extra
            .windows(2)
            .find(|w| w[0] == "--creds")
            .and_then(|w| std::fs::read_to_string(w[1]).ok())
            .and_then(|text| AgentCredentials::parse(&text).ok());
        if creds.is_some_and(|c| c.user.jwt.is_empty()) && !extra.contains(&"--insecure-dev-broker")
        {
            args.push("--insecure-dev-broker".into());
        }
        let mut agent = Agent {
            child: None,
            program,
            server: server.into(),
            args,
            logs: Logs::default(),
        };
        agent.spawn_child();
        agent
    }

    /// Spawns an agent and waits until it is pulling its queue.
    pub async fn start(
        nats_url: &str,
        server: &str,
        state_dir: &Path,
        hook_dirs: &[PathBuf],
    ) -> Agent {
        let agent = Agent::spawn(nats_url, server, state_dir, hook_dirs);
        agent.logs.wait_for("agent ready", START_WAIT).await;
        agent
    }

    fn spawn_child(&mut self) {
        let mut child = Command::new(&self.program)
            .args(&self.args)
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn flue-agent");
        self.logs.capture(child.stderr.take().expect("stderr"));
        self.child = Some(child);
    }

    /// Starts the same agent again (same state dir, so the same ledger) and waits until ready.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "agent still running");
        let from = self.logs.len();
        self.spawn_child();
        self.logs
            .wait_for_after(from, "agent ready", START_WAIT)
            .await;
    }

    /// SIGKILL: the agent gets no chance to clean up.
    pub async fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().await.expect("kill agent");
        }
    }

    /// SIGTERM, then waits (bounded) for the exit status.
    pub async fn terminate(&mut self) -> ExitStatus {
        self.sigterm();
        self.wait_exit().await
    }

    /// Sends SIGTERM without waiting.
    pub fn sigterm(&self) {
        signal(self.child.as_ref().expect("agent running"), "-TERM");
    }

    /// Waits (bounded) for the agent to exit and returns its status.
    pub async fn wait_exit(&mut self) -> ExitStatus {
        let mut c = self.child.take().expect("agent running");
        tokio::time::timeout(WAIT, c.wait())
            .await
            .expect("agent exits")
            .expect("wait for agent")
    }

    /// Waits until it is ready (after [`Agent::spawn`]).
    pub async fn ready(&self) {
        self.logs.wait_for("agent ready", START_WAIT).await;
    }

    /// What it logged.
    pub fn logs(&self) -> &Logs {
        &self.logs
    }

    /// Its process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }

    /// Freezes it (SIGSTOP), as a server that stalls would: its broker connection stays
    /// open (the broker notices only after its pings go unanswered, minutes), no heartbeat
    /// is sent. Killed on drop as any agent.
    pub fn pause(&self) {
        stop(self.child.as_ref().expect("agent running"));
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        dump_on_panic(&format!("flue-agent {}", self.server), &[&self.logs]);
    }
}
