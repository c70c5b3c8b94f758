//! A whole Flue on one machine: broker, gateway, a temp dir for agents and hooks.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use flue_engine::Client;
use flue_proto::{
    Config, ConfigSpec, CreateDeployment, Deployment, DeploymentId, DeploymentStatus,
    RegisterServer, ServerId,
};
use tempfile::TempDir;

use crate::{Agent, Gateway, Nats, WAIT};

/// Broker + gateway + scratch space, torn down on drop.
pub struct Flue {
    /// The broker.
    pub nats: Nats,
    /// The gateway.
    pub gateway: Gateway,
    /// Scratch dir: agent state dirs, hook dirs, files hooks write.
    pub dir: TempDir,
}

impl Flue {
    /// Starts a broker and a gateway with default flags.
    pub async fn start() -> Flue {
        Flue::start_with(&[]).await
    }

    /// Starts a broker and a gateway with extra gateway flags.
    pub async fn start_with(gateway_flags: &[&str]) -> Flue {
        let nats = Nats::start().await;
        let gateway = Gateway::start(&nats.url(), gateway_flags).await;
        Flue {
            nats,
            gateway,
            dir: tempfile::tempdir().expect("tempdir"),
        }
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

    /// Registers a server, keeping the credentials file its registration minted (as
    /// `flue server register ID --creds FILE` does) for [`Flue::agent`] to pass on.
    pub async fn register(&self, server: &str) {
        let registration = self
            .client()
            .register_server(&RegisterServer {
                id: ServerId::new(server).expect("server id"),
                name: String::new(),
            })
            .await
            .expect("register server");
        if let Some(text) = registration.credentials {
            crate::write_secret(&self.creds_path(server), &text);
        }
    }

    /// Where [`Flue::register`] keeps `server`'s credentials file.
    pub fn creds_path(&self, server: &str) -> PathBuf {
        self.path(&format!("{server}.creds"))
    }

    /// `--creds FILE` when `server` was registered through [`Flue::register`].
    fn creds_args(&self, server: &str) -> Vec<String> {
        let path = self.creds_path(server);
        if path.exists() {
            vec!["--creds".into(), path.display().to_string()]
        } else {
            Vec::new()
        }
    }

    /// Starts an agent for `server` with its own state dir, the given hook dirs and the
    /// server's credentials (when registered here); waits until ready.
    pub async fn agent(&self, server: &str, hook_dirs: &[PathBuf]) -> Agent {
        let agent = self.spawn_agent_with(server, hook_dirs);
        agent.ready().await;
        agent
    }

    /// Spawns an agent without waiting for readiness.
    pub fn spawn_agent(&self, server: &str) -> Agent {
        self.spawn_agent_with(server, &[])
    }

    fn spawn_agent_with(&self, server: &str, hook_dirs: &[PathBuf]) -> Agent {
        let creds = self.creds_args(server);
        let extra: Vec<&str> = creds.iter().map(String::as_str).collect();
        Agent::spawn_with(
            &self.nats.url(),
            server,
            &self.path(&format!("agent-{server}")),
            hook_dirs,
            &extra,
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
