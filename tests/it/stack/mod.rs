//! Stacks run by the `flue` CLI (submitted to the gateway's engine workers, or driven
//! in-process with `--local` where a test is about the engine itself) against a real
//! broker, gateway and agents: the examples, ordering, updates, lifecycle, groups,
//! failures, interruption and bad templates.

mod check;
mod corpus;
mod corpus_create;
mod examples;
mod failure;
mod fidelity;
mod follow;
mod heat;
mod hot;
mod lifecycle;
mod rebuilt;
mod templates;
mod transfer;
mod update;

use std::path::Path;

use flue_proto::{Deployment, ServerId, Stack, StackId};
use flue_tests::{Agent, Flue, WAIT, repo_root};

/// `a` appends `start a` to the record, waits for the data key `go`, then `end a`.
pub const WAITING: &str = r#"heat_template_version: 2018-08-31
parameters:
  record: {type: string}
resources:
  cfg:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      inputs: [{name: record}]
      config: |
        #!/bin/sh
        set -eu
        echo "start $deploy_resource_name" >> "$record"
        flue-agent data get go --wait 120s
        echo "end $deploy_resource_name" >> "$record"
  a: {type: OS::Heat::SoftwareDeployment, properties: {config: {get_resource: cfg}, server: s1, input_values: {record: {get_param: record}}}}
"#;

/// What one `flue` run printed and how it exited.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Runs `flue --gateway GW ARGS…` to its end.
pub async fn flue(flue: &Flue, args: &[&str]) -> Run {
    let token = flue.gateway.cli_token(args);
    run_flue(flue.gateway.url().to_owned(), Some(token), to_owned(args)).await
}

fn to_owned(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| (*a).to_owned()).collect()
}

/// `flue stack create NAME -t TEMPLATE -P PARAM…`.
pub async fn create_stack(env: &Flue, name: &str, template: &str, params: &[&str]) -> Run {
    let mut args = vec!["stack", "create", name, "-t", template];
    for p in params {
        args.extend(["-P", p]);
    }
    flue(env, &args).await
}

/// [`flue`] with owned arguments, so it can run on its own task while the test acts.
pub async fn run_flue(gateway: String, token: Option<String>, args: Vec<String>) -> Run {
    let mut command = tokio::process::Command::new(flue_tests::bin("flue"));
    if let Some(token) = token {
        command.env("FLUE_TOKEN", token);
    }
    let out = command
        .arg("--gateway")
        .arg(gateway)
        .args(args)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(WAIT * 3, out)
        .await
        .expect("flue finishes")
        .expect("run flue");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs `flue ARGS…` on its own task; await the handle for its [`Run`].
pub fn flue_in_background(env: &Flue, args: &[&str]) -> tokio::task::JoinHandle<Run> {
    let token = env.gateway.cli_token(args);
    tokio::spawn(run_flue(
        env.gateway.url().to_owned(),
        Some(token),
        to_owned(args),
    ))
}

/// Starts `flue ARGS… --local` (the engine in the CLI process), waits until `record`
/// holds the line `started` (a hook of the operation is running), then SIGKILLs it: the
/// operation is left unfinished with no one driving it.
pub async fn kill_driver_once(env: &Flue, args: &[&str], record: &Path, started: &str) {
    let mut local = args.to_vec();
    local.push("--local");
    kill_cli_once(env, &local, record, started).await;
}

/// Starts `flue ARGS…`, waits until `record` holds the line `started`, then SIGKILLs it.
pub async fn kill_cli_once(env: &Flue, args: &[&str], record: &Path, started: &str) {
    let mut driver = tokio::process::Command::new(flue_tests::bin("flue"))
        .env("FLUE_TOKEN", env.gateway.cli_token(args))
        .arg("--gateway")
        .arg(env.gateway.url())
        .args(args)
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn flue");
    flue_tests::wait_until(started, WAIT, || {
        lines(record).iter().any(|l| l == started).then_some(())
    })
    .await;
    driver.kill().await.expect("kill the driver");
}

/// Puts `key` in stack `stack`'s data space, as a hook on another server would.
pub async fn put_data(env: &Flue, stack: &str, key: &str, value: &str) {
    let kv = async_nats::jetstream::new(env.nats.client().await)
        .get_key_value(flue_proto::subject::DATA_BUCKET)
        .await
        .expect("data bucket");
    kv.put(format!("default.{stack}.{key}"), value.to_owned().into())
        .await
        .expect("put data key");
}

/// Path of an example template.
pub fn example(name: &str) -> String {
    repo_root()
        .join("examples")
        .join(name)
        .join("stack.yaml")
        .display()
        .to_string()
}

/// A broker, a gateway, and a registered server with a running agent for each name.
pub async fn cluster(servers: &[&str]) -> (Flue, Vec<Agent>) {
    let env = Flue::start().await;
    let mut agents = Vec::new();
    for s in servers {
        env.register(s).await;
        agents.push(env.agent(s, &[]).await);
    }
    (env, agents)
}

/// The stored stack.
pub async fn stack(env: &Flue, id: &str) -> Stack {
    env.client()
        .get_stack(&StackId::new(id).expect("id"))
        .await
        .expect("stack")
}

/// Every deployment the gateway holds for `server`, oldest first.
pub async fn deployments(env: &Flue, server: &str) -> Vec<Deployment> {
    env.client()
        .list_server_deployments(&ServerId::new(server).expect("id"))
        .await
        .expect("deployments")
}

/// `(resource_name, action)` of each deployment of `server` that an agent ran, oldest first.
pub async fn ran(env: &Flue, server: &str) -> Vec<(String, String)> {
    deployments(env, server)
        .await
        .into_iter()
        .filter(|d| d.deploy_status_code.is_some())
        .map(|d| (d.resource_name.unwrap_or_default(), d.action.to_string()))
        .collect()
}

/// Lines of a file, empty when it does not exist.
pub fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|t| t.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}
