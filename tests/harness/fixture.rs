//! A whole Flue on one machine: broker, gateway, a temp dir for agents and hooks.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use flue_client::Client;
use flue_proto::creds::AgentCredentials;
use flue_proto::{
    Config, ConfigSpec, CreateDeployment, Deployment, DeploymentId, DeploymentStatus,
    RegisterServer, Server, ServerId,
};
use tempfile::TempDir;

use crate::{Agent, Gateway, Nats, TestCa, WAIT};

/// Broker + gateway + scratch space, torn down on drop.
pub struct Flue {
    /// The broker.
    pub nats: Nats,
    /// The gateway.
    pub gateway: Gateway,
    /// Scratch dir: agent state dirs, hook dirs, files hooks write.
    pub dir: TempDir,
    /// The test CA, when everything speaks TLS ([`Flue::start_tls`]).
    pub ca: Option<TestCa>,
    /// Flags every agent of this Flue gets (`--nats-ca` under TLS).
    agent_flags: Vec<String>,
}

impl Flue {
    /// Starts a broker and a gateway with default flags, the secure way
    /// ([`Flue::start_operator`]).
    pub async fn start() -> Flue {
        Flue::start_with(&[]).await
    }

    /// Starts a broker and a gateway with extra gateway flags, the secure way
    /// ([`Flue::start_operator`]).
    pub async fn start_with(gateway_flags: &[&str]) -> Flue {
        Flue::start_operator(gateway_flags).await
    }

    /// Starts the anonymous development broker (the shipped `scripts/nats-server.conf`)
    /// and a gateway given `--insecure-dev-broker` plus `gateway_flags`; agents' credentials
    /// then hold no broker user (the harness gives them `--insecure-dev-broker`). Only for
    /// tests of the development mode itself and of what needs the anonymous broker.
    pub async fn start_dev_broker(gateway_flags: &[&str]) -> Flue {
        let nats = Nats::start().await;
        let gateway = Gateway::start(&nats.url(), gateway_flags).await;
        Flue {
            nats,
            gateway,
            dir: tempfile::tempdir().expect("tempdir"),
            ca: None,
            agent_flags: Vec::new(),
        }
    }

    /// Starts Flue the secure way, in operator mode: `flue-gateway init` into the
    /// gateway's state dir, nats-server with the configuration it wrote (every client
    /// authenticated, one account per tenant), the gateway on that state dir; agents
    /// authenticate with the broker user their credentials carry. [`Nats::client`]
    /// connects as a user of the default tenant's account, [`Nats::events_client`] of its
    /// events account.
    pub async fn start_operator(gateway_flags: &[&str]) -> Flue {
        Flue::start_operator_on(gateway_flags, None).await
    }

    /// [`Flue::start_operator`] with the broker's leaf-node listener on
    /// `127.0.0.1:<leafnode_port>`, for a tenant leaf node (`flue-gateway leaf-config
    /// --hub nats-leaf://127.0.0.1:<leafnode_port>`).
    pub async fn start_operator_leafnodes(gateway_flags: &[&str], leafnode_port: u16) -> Flue {
        Flue::start_operator_on(gateway_flags, Some(leafnode_port)).await
    }

    async fn start_operator_on(gateway_flags: &[&str], leafnode_port: Option<u16>) -> Flue {
        let state = std::sync::Arc::new(tempfile::tempdir().expect("tempdir"));
        let state_dir = state.path().join("gateway");
        let nats = match leafnode_port {
            None => Nats::start_operator(&state_dir).await,
            Some(port) => {
                Nats::start_operator_leafnodes(&state_dir, &format!("127.0.0.1:{port}")).await
            }
        };
        Flue::with_operator_broker(nats, state, gateway_flags).await
    }

    /// [`Flue::start_operator`] with the broker's store on a disk of `size` (`64m`) of its
    /// own, which fills before its `max_file_store` ([`Nats::start_operator_on_small_disk`];
    /// needs root).
    pub async fn start_operator_on_small_disk(gateway_flags: &[&str], size: &str) -> Flue {
        let state = std::sync::Arc::new(tempfile::tempdir().expect("tempdir"));
        let state_dir = state.path().join("gateway");
        let nats = Nats::start_operator_on_small_disk(&state_dir, size).await;
        Flue::with_operator_broker(nats, state, gateway_flags).await
    }

    /// The gateway on `state`, over `nats` started in operator mode from it.
    async fn with_operator_broker(
        mut nats: Nats,
        state: std::sync::Arc<TempDir>,
        gateway_flags: &[&str],
    ) -> Flue {
        let state_dir = state.path().join("gateway");
        let auth = flue_gateway::natsauth::NatsAuth::open(&state_dir).expect("initialised");
        let (tenant, events) = auth
            .gateway_creds(&"default".parse().expect("tenant id"))
            .expect("gateway users of the default tenant");
        nats.connect_as(tenant, events);
        let gateway = Gateway::start_in(&nats.url(), state, gateway_flags, None).await;
        Flue {
            nats,
            gateway,
            dir: tempfile::tempdir().expect("tempdir"),
            ca: None,
            agent_flags: Vec::new(),
        }
    }

    /// A Flue over a broker and a gateway started elsewhere (a cluster's first node).
    pub(crate) fn assemble(nats: Nats, gateway: Gateway) -> Flue {
        Flue {
            nats,
            gateway,
            dir: tempfile::tempdir().expect("tempdir"),
            ca: None,
            agent_flags: Vec::new(),
        }
    }

    /// Starts everything over TLS with a fresh test CA, in operator mode: a broker that
    /// speaks TLS only (`flue-gateway init --tls-cert --tls-key`),
    /// a gateway connecting to it with `--nats-ca` and serving HTTPS (`--tls-cert`,
    /// `--tls-key`), and agents given `--nats-ca`; plus extra gateway flags.
    pub async fn start_tls(gateway_flags: &[&str]) -> Flue {
        let ca = TestCa::new();
        let state = std::sync::Arc::new(tempfile::tempdir().expect("tempdir"));
        let state_dir = state.path().join("gateway");
        let mut nats = Nats::start_operator_with(&state_dir, Some(&ca)).await;
        let auth = flue_gateway::natsauth::NatsAuth::open(&state_dir).expect("initialised");
        let (tenant, events) = auth
            .gateway_creds(&"default".parse().expect("tenant id"))
            .expect("gateway users of the default tenant");
        nats.connect_as(tenant, events);
        let https = ca.leaf("gateway", &[]);
        let ca_file = ca.ca_file().display().to_string();
        let cert = https.cert.display().to_string();
        let key = https.key.display().to_string();
        let mut flags = vec![
            "--nats-ca",
            ca_file.as_str(),
            "--tls-cert",
            cert.as_str(),
            "--tls-key",
            key.as_str(),
        ];
        flags.extend_from_slice(gateway_flags);
        let gateway = Gateway::start_in(&nats.url(), state, &flags, Some(&ca.ca_file())).await;
        Flue {
            nats,
            gateway,
            dir: tempfile::tempdir().expect("tempdir"),
            agent_flags: vec!["--nats-ca".to_owned(), ca_file],
            ca: Some(ca),
        }
    }

    /// Sets the broker's JetStream file store limit (`max_file_store`, nats-server's
    /// size syntax: `32MB`) in the configuration `flue-gateway init` wrote (operator
    /// mode) and restarts the broker with it; the gateway reconnects by itself.
    pub async fn limit_file_store(&mut self, limit: &str) {
        let conf = self.gateway.state_dir().join("broker/nats-server.conf");
        let text = std::fs::read_to_string(&conf).expect("the broker's configuration");
        let text = match text.find("\n  max_file_store:") {
            Some(at) => {
                let end = at + 1 + text[at + 1..].find('\n').expect("a line");
                format!("{}\n  max_file_store: {limit}{}", &text[..at], &text[end..])
            }
            None => text.replacen(
                "jetstream {",
                &format!("jetstream {{\n  max_file_store: {limit}"),
                1,
            ),
        };
        std::fs::write(&conf, text).expect("write the configuration");
        self.nats.kill().await;
        self.nats.start_again().await;
    }

    /// A typed client for the current gateway.
    pub fn client(&self) -> Client {
        self.gateway.client()
    }

    /// A path inside the scratch dir.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes an external heat-config hook for `group` into `<scratch>/hooks` that saves the
    /// item it gets on stdin to `<scratch>/item.json` and prints `answer` (a JSON object) as
    /// its result; returns (the hook dir to give an agent, the item file).
    pub fn item_recording_hook(
        &self,
        group: &str,
        answer: &serde_json::Value,
    ) -> (PathBuf, PathBuf) {
        let hooks = self.path("hooks");
        std::fs::create_dir_all(&hooks).expect("hook dir");
        let item_file = self.path("item.json");
        crate::write_executable(
            &hooks.join(group),
            &format!(
                "#!/bin/sh\ncat > '{}'\nprintf '%s' '{answer}'\n",
                item_file.display()
            ),
        );
        (hooks, item_file)
    }

    /// A typed client with an admin token (servers).
    pub fn admin_client(&self) -> Client {
        self.gateway.admin_client()
    }

    /// A raw HTTP client sending, per request, a token of a role the route allows.
    pub fn http(&self) -> crate::Http {
        self.gateway.http()
    }

    /// Creates tenant `id` as the operator does (`POST /v1/tenants`: served at once) and
    /// returns a token per role of it, minted from the gateway's state dir.
    pub async fn create_tenant(&self, id: &str) -> crate::Tokens {
        use flue_proto::auth::Role;
        let tenant = flue_proto::TenantId::new(id).expect("a tenant id");
        self.gateway
            .client_as(Role::Operator)
            .create_tenant(&flue_proto::CreateTenant {
                id: tenant.clone(),
                name: id.to_owned(),
            })
            .await
            .expect("the operator creates a tenant");
        crate::Tokens::for_tenant(&self.gateway.state_dir(), &tenant)
    }

    /// Registers a server, keeping the credentials the registration minted in
    /// [`Flue::creds_path`]; when it was registered before (no credentials handed out)
    /// and the kept file does not hold its current key, new ones are minted by rotation.
    pub async fn register(&self, server: &str) {
        let registration = self
            .admin_client()
            .register_server(&RegisterServer {
                transport: Default::default(),
                id: ServerId::new(server).expect("server id"),
                name: String::new(),
            })
            .await
            .expect("register server");
        match registration.credentials {
            Some(text) => self.save_creds(server, &text),
            None => self.refresh_creds(&registration.server).await,
        }
    }

    /// The flags an event listener (`examples/listeners/flue_events.py`) needs for this
    /// broker: `--creds FILE --domain flue --consumer NAME` with listener credentials minted through the API
    /// (`POST /v1/listener-credentials`) in operator mode; none on the development broker.
    pub async fn listener_flags(&self) -> Vec<String> {
        let Ok(minted) = self.admin_client().create_listener_credentials().await else {
            return Vec::new();
        };
        let path = self.path("listener.creds");
        std::fs::write(&path, &minted.credentials).expect("write listener credentials");
        vec![
            "--creds".to_owned(),
            path.display().to_string(),
            "--domain".to_owned(),
            minted.js_domain,
            // The first of the consumer names the credentials allow (runs take turns).
            "--consumer".to_owned(),
            minted.consumers[0].clone(),
        ]
    }

    /// Where the harness keeps `server`'s agent credentials: `<scratch>/creds/<server>.creds`.
    pub fn creds_path(&self, server: &str) -> PathBuf {
        self.path("creds").join(format!("{server}.creds"))
    }

    /// The credentials file of `server`'s agent, valid for its current registration:
    /// registers the server when it is not (a test that registers after starting its
    /// agent now registers first), rotates its credentials when the kept file is not
    /// the one recorded (the test registered it through the API itself).
    pub async fn creds(&self, server: &str) -> PathBuf {
        let id = ServerId::new(server).expect("server id");
        let servers = self
            .admin_client()
            .list_servers()
            .await
            .expect("list servers");
        match servers.into_iter().find(|s| s.id == id) {
            Some(registered) => self.refresh_creds(&registered).await,
            None => self.register(server).await,
        }
        self.creds_path(server)
    }

    /// Rotates `server`'s credentials unless the kept file holds its recorded key.
    async fn refresh_creds(&self, server: &Server) {
        let path = self.creds_path(server.id.as_str());
        let kept = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| AgentCredentials::parse(&t).ok())
            .and_then(|c| nkeys::KeyPair::from_seed(&c.user.seed).ok())
            .map(|k| k.public_key());
        let recorded = server.keys.as_ref().map(|k| k.signing.clone());
        if kept.is_some() && kept == recorded {
            return;
        }
        let rotated = self
            .admin_client()
            .rotate_server_credentials(&server.id)
            .await
            .expect("rotate credentials");
        let text = rotated
            .credentials
            .expect("a rotation hands out credentials");
        self.save_creds(server.id.as_str(), &text);
    }

    /// `credentials` (an agent's credentials file text, its user minted in the default
    /// tenant's edge account) with the user JWT signed by the tenant's state account
    /// instead, with the same user key and rights: an agent of the layout before the edge
    /// account (issue 22), a user of the account that holds the streams. For the bench that
    /// compares the two layouts (`benches/layout.rs`) and the upgrade test of the edge layout.
    pub fn in_state_account(&self, credentials: &str) -> String {
        use flue_gateway::natsauth::{accounts, jwt};
        let mut creds = AgentCredentials::parse(credentials).expect("agent credentials");
        let claims: jwt::Claims<jwt::User> = jwt::decode(&creds.user.jwt).expect("user claims");
        let seed = self
            .gateway
            .state_dir()
            .join(accounts::ACCOUNTS_DIR)
            .join("default")
            .join("account.nk");
        let seed = std::fs::read_to_string(&seed).expect("the state account's seed");
        let state = nkeys::KeyPair::from_seed(seed.trim()).expect("an account seed");
        let rights = jwt::Permissions {
            publish: claims.nats.publish,
            subscribe: claims.nats.subscribe,
        };
        creds.user.jwt =
            accounts::sign_user(&state, &claims.sub, &claims.name, rights).expect("signed");
        creds.to_text()
    }

    fn save_creds(&self, server: &str, text: &str) {
        use std::os::unix::fs::PermissionsExt as _;
        let path = self.creds_path(server);
        std::fs::create_dir_all(path.parent().expect("creds dir")).expect("creds dir");
        std::fs::write(&path, text).expect("write credentials");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .expect("chmod credentials");
    }

    /// Starts an agent for `server` with its own state dir, the given hook dirs and its
    /// credentials ([`Flue::creds`]); waits until ready.
    pub async fn agent(&self, server: &str, hook_dirs: &[PathBuf]) -> Agent {
        self.agent_in(server, &format!("agent-{server}"), hook_dirs, &[])
            .await
    }

    /// Starts an agent for `server` with the state dir `<scratch>/<state>`, hook dirs and
    /// extra flags, with its credentials; waits until ready.
    pub async fn agent_in(
        &self,
        server: &str,
        state: &str,
        hook_dirs: &[PathBuf],
        extra: &[&str],
    ) -> Agent {
        let agent = self.spawn_agent_with(server, state, hook_dirs, extra).await;
        agent.ready().await;
        agent
    }

    /// Spawns an agent with its credentials without waiting for readiness.
    pub async fn spawn_agent(&self, server: &str) -> Agent {
        self.spawn_agent_with(server, &format!("agent-{server}"), &[], &[])
            .await
    }

    /// Spawns an agent (state dir `<scratch>/<state>`, hook dirs, extra flags) with its
    /// credentials ([`Flue::creds`]) without waiting for readiness.
    pub async fn spawn_agent_with(
        &self,
        server: &str,
        state: &str,
        hook_dirs: &[PathBuf],
        extra: &[&str],
    ) -> Agent {
        self.creds(server).await;
        self.spawn_agent_as_is(server, state, hook_dirs, extra)
    }

    /// [`Flue::spawn_agent_with`] running `program` instead of the workspace's agent.
    pub async fn spawn_agent_program(
        &self,
        program: PathBuf,
        server: &str,
        state: &str,
        hook_dirs: &[PathBuf],
        extra: &[&str],
    ) -> Agent {
        let creds = self.creds(server).await.display().to_string();
        let mut flags = vec!["--creds", creds.as_str()];
        flags.extend(self.agent_flags.iter().map(String::as_str));
        flags.extend_from_slice(extra);
        Agent::spawn_program(
            program,
            &self.nats.url(),
            server,
            &self.path(state),
            hook_dirs,
            &flags,
        )
    }

    /// Spawns an agent with the kept credentials file as it is (registering nothing):
    /// for tests of an agent whose server is not (or no longer) registered.
    pub fn spawn_agent_as_is(
        &self,
        server: &str,
        state: &str,
        hook_dirs: &[PathBuf],
        extra: &[&str],
    ) -> Agent {
        let creds = self.creds_path(server).display().to_string();
        let mut flags = vec!["--creds", creds.as_str()];
        flags.extend(self.agent_flags.iter().map(String::as_str));
        flags.extend_from_slice(extra);
        Agent::spawn_with(
            &self.nats.url(),
            server,
            &self.path(state),
            hook_dirs,
            &flags,
        )
    }

    /// Creates a `script` config with the given body, inputs and outputs.
    pub async fn script_config(
        &self,
        id: &str,
        script: &str,
        inputs: &[&str],
        outputs: &[&str],
    ) -> Config {
        let spec: ConfigSpec = serde_json::from_value(serde_json::json!({
            "id": id,
            "group": "script",
            "config": script,
            "inputs": inputs.iter().map(|n| serde_json::json!({"name": n})).collect::<Vec<_>>(),
            "outputs": outputs.iter().map(|n| serde_json::json!({"name": n})).collect::<Vec<_>>(),
        }))
        .expect("config spec");
        self.client()
            .create_config(&spec)
            .await
            .expect("create config")
    }

    /// Creates a CREATE deployment with string inputs.
    pub async fn deploy(&self, config: &str, server: &str, inputs: &[(&str, &str)]) -> Deployment {
        self.deploy_with(config, server, inputs, None).await
    }

    /// Creates a CREATE deployment with string inputs and an optional timeout.
    pub async fn deploy_with(
        &self,
        config: &str,
        server: &str,
        inputs: &[(&str, &str)],
        timeout_secs: Option<u64>,
    ) -> Deployment {
        let input_values: BTreeMap<String, serde_json::Value> = inputs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), serde_json::Value::String((*v).to_owned())))
            .collect();
        self.client()
            .create_deployment(&CreateDeployment {
                input_values,
                timeout_secs,
                ..CreateDeployment::new(
                    config.parse().expect("config id"),
                    server.parse().expect("server id"),
                )
            })
            .await
            .expect("create deployment")
    }

    /// Waits (long-polling the gateway) until the deployment is COMPLETE or FAILED.
    pub async fn finished(&self, id: &DeploymentId) -> Deployment {
        self.finished_within(id, WAIT).await
    }

    /// Same as [`Flue::finished`] with another bound. Long-polls the gateway; an error
    /// (the gateway restarting, the broker coming back) is retried until the bound.
    pub async fn finished_within(&self, id: &DeploymentId, limit: Duration) -> Deployment {
        let client = self.client();
        let fut = async {
            let mut last: Option<DeploymentStatus> = None;
            loop {
                match client
                    .wait_deployment(id, last, Duration::from_secs(10))
                    .await
                {
                    Ok(d) if d.status.is_terminal() => return d,
                    Ok(d) => last = Some(d.status),
                    Err(e) => {
                        eprintln!("waiting for {id}: {e}; retrying");
                        tokio::time::sleep(Duration::from_millis(200)).await; // retry backoff
                    }
                }
            }
        };
        tokio::time::timeout(limit, fut)
            .await
            .unwrap_or_else(|_| panic!("deployment {id} did not finish within {limit:?}"))
    }

    /// Waits until the deployment's status is no longer `status`.
    pub async fn changed_from(&self, id: &DeploymentId, status: DeploymentStatus) -> Deployment {
        let fut = async {
            loop {
                let d = self
                    .client()
                    .wait_deployment(id, Some(status), Duration::from_secs(10))
                    .await
                    .expect("long-poll deployment");
                if d.status != status {
                    return d;
                }
            }
        };
        tokio::time::timeout(WAIT, fut)
            .await
            .unwrap_or_else(|_| panic!("deployment {id} stayed {status}"))
    }
}
