//! Heat compatibility (issue 12, point 1): heat-agents' stock hooks (13.0.0, unmodified)
//! run through Flue's agent, get the item Heat's dispatcher (`55-heat-config`) would hand
//! them, and are judged as Heat judges them.
//!
//! The hooks come from heat-agents' source distribution, which `scripts/test.sh` unpacks
//! into `.venv/share/heat_agents-13.0.0` (or `$FLUE_HEAT_AGENTS`); the Ansible hook runs the
//! `ansible-playbook` it installs into `.venv/bin`. Each stock hook is started by a small
//! wrapper in the test's hook dir that points its work and data directories (settable by
//! environment variables in every stock hook) into the test's scratch dir.

mod hooks;
mod inputs;
mod oracle;
mod result;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use flue_proto::{ConfigSpec, CreateDeployment, Deployment};
use flue_tests::{Flue, repo_root, write_executable};
use serde_json::Value;

/// The pinned heat-agents release the stock hooks come from.
const HEAT_AGENTS: &str = "heat_agents-13.0.0";

/// The unpacked heat-agents source tree; fails saying how to get it.
pub(crate) fn heat_agents() -> PathBuf {
    let dir = std::env::var_os("FLUE_HEAT_AGENTS").map_or_else(
        || repo_root().join(".venv/share").join(HEAT_AGENTS),
        PathBuf::from,
    );
    let dispatcher = dir.join("heat-config/os-refresh-config/configure.d/55-heat-config");
    assert!(
        dispatcher.exists(),
        "heat-agents 13.0.0 is not unpacked at {}: run `bash scripts/test.sh` (it unpacks it \
         into .venv/share) or set FLUE_HEAT_AGENTS to an unpacked heat-agents 13.0.0 source tree",
        dir.display()
    );
    dir
}

/// The venv's Python, which runs the stock hooks (and Ansible's modules).
fn python() -> PathBuf {
    let python = repo_root().join(".venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run `bash scripts/test.sh`",
        python.display()
    );
    python
}

/// Writes, into `<scratch>/stock-hooks`, a hook per group in `groups` that runs heat-agents'
/// stock hook for it with its directories inside `<scratch>/heat`; returns the hook dir.
pub(crate) fn stock_hooks(flue: &Flue, groups: &[&str]) -> PathBuf {
    stock_hooks_in(flue, "stock-hooks", "heat", groups)
}

/// [`stock_hooks`] into `<scratch>/<dir>`, working inside `<scratch>/<work>`.
fn stock_hooks_in(flue: &Flue, dir: &str, work: &str, groups: &[&str]) -> PathBuf {
    let agents = heat_agents();
    let hooks = flue.path(dir);
    let work = flue.path(work);
    std::fs::create_dir_all(&hooks).expect("hook dir");
    for group in groups {
        let script = agents.join(format!("heat-config-{group}/install.d/hook-{group}.py"));
        assert!(script.exists(), "no stock hook {}", script.display());
        let vars = stock_env(group, &work);
        let exports: String = vars
            .iter()
            .map(|(k, v)| format!("export {k}='{v}'\n"))
            .collect();
        write_executable(
            &hooks.join(group),
            &format!(
                "#!/bin/sh\n{exports}exec '{}' '{}'\n",
                python().display(),
                script.display()
            ),
        );
    }
    hooks
}

/// The variables each stock hook reads for where to work, pointed into `work`.
fn stock_env(group: &str, work: &Path) -> Vec<(&'static str, String)> {
    let at = |p: &str| work.join(p).display().to_string();
    match group {
        "script" => vec![
            ("HEAT_SCRIPT_WORKING", at("script/work")),
            ("HEAT_SCRIPT_OUTPUTS", at("script/outputs")),
        ],
        "hiera" => vec![
            ("HEAT_PUPPET_HIERA_DATADIR", at("hieradata")),
            ("HEAT_HIERA_CONFIG", at("hiera.yaml")),
            // No legacy os-apply-config hiera data on this machine.
            ("HEAT_HIERA_ELEMENT_CHECK_CMD", "echo empty".to_owned()),
        ],
        "ansible" => {
            let bin = repo_root().join(".venv/bin");
            let playbook = bin.join("ansible-playbook");
            assert!(
                playbook.exists(),
                "{} is missing: run `bash scripts/test.sh` (it installs ansible-core into .venv)",
                playbook.display()
            );
            vec![
                ("HEAT_ANSIBLE_WORKING", at("ansible/work")),
                ("HEAT_ANSIBLE_OUTPUTS", at("ansible/outputs")),
                ("HEAT_ANSIBLE_CMD", playbook.display().to_string()),
                ("ANSIBLE_PYTHON_INTERPRETER", python().display().to_string()),
                ("ANSIBLE_LOCAL_TEMP", at("ansible/tmp")),
                ("ANSIBLE_HOME", at("ansible/home")),
            ]
        }
        _ => Vec::new(),
    }
}

/// Creates the config `spec` (JSON of a [`ConfigSpec`]).
async fn config(flue: &Flue, spec: Value) {
    let spec: ConfigSpec = serde_json::from_value(spec).expect("config spec");
    flue.client().create_config(&spec).await.expect("config");
}

/// Deploys `config` on `server` with `values` (any JSON) and waits for its end.
async fn run(flue: &Flue, config: &str, server: &str, values: Value) -> Deployment {
    let input_values: BTreeMap<String, Value> =
        serde_json::from_value(values).expect("input values");
    let created = flue
        .client()
        .create_deployment(&CreateDeployment {
            input_values,
            ..CreateDeployment::new(
                config.parse().expect("config id"),
                server.parse().expect("server id"),
            )
        })
        .await
        .expect("create deployment");
    flue.finished(&created.id).await
}
