//! The public Heat template corpus's software-config examples created, unchanged, by
//! `flue stack create` against a real broker, gateway and two agents (`vm1`, `vm2`) whose
//! hook dir holds heat-agents' stock `script` and `ansible` hooks (the Ansible hook runs
//! the `ansible-playbook` `scripts/test.sh` installs into `.venv`), each with the
//! arguments `corpus.table` gives it for `validate`. Each stack must reach
//! CREATE_COMPLETE, and its outputs and deployments must be what the template's scripts
//! compute, worked out by hand below.
//!
//! The scripts write into the real `/tmp` as they do on a Heat server (`/tmp/baaaaa`,
//! `/tmp/barmy`, `/tmp/None`); their outputs do not depend on what was there before.
//!
//! Not created here, because their hook's tool cannot be installed on this machine:
//! `example-puppet-template.yaml` (puppet), `example-chef-template.yaml` (chef-client),
//! `example-salt-template.yaml` (salt-call), `example-docker-compose-template.yaml` and
//! `example-pristine-atomic-docker-compose.yaml` (docker-compose and a Docker daemon),
//! `example-kubelet-template.yaml` (kubelet), `example-pristine-atomic-tool.yaml` (atomic;
//! validate refuses it too), `example-cfn-init-template.yaml` (cfn-init). Nor those that
//! fail or need a machine of their own: `example-sw-component-template.yaml` and
//! `cirros-example/cirros-hello-world.yaml` have bodies without `#!`, which the stock
//! `script` hook cannot exec (`Exec format error`, as under Heat), and the latter writes
//! `/hello`; `example-ssh-copy-id.yaml` needs the user `ec2-user` and ssh between the
//! servers; the WordPress templates install packages with yum as root. The corpus has no
//! template with a `json-file` or `hiera` config (`tests/it/heat/` runs those hooks).

use std::collections::BTreeMap;

use flue_proto::{Deployment, DeploymentStatus};
use serde_json::{Value, json};

use flue_tests::Flue;

use super::{deployments, flue, stack};

/// Where the examples live inside the corpus.
const EXAMPLES: &str = "hot/software-config/example-templates";

/// What a created stack left: its outputs and the deployments it made on each server.
struct Created {
    outputs: BTreeMap<String, Value>,
    /// This stack's deployments, oldest first, with the server they ran on.
    deployments: Vec<Deployment>,
}

impl Created {
    /// The deployment of resource (or group member) `name` on `server`.
    fn on(&self, server: &str, name: &str) -> &Deployment {
        self.deployments
            .iter()
            .find(|d| d.server_id.as_str() == server && d.resource_name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("no deployment {name} on {server}: {:#?}", self.deployments))
    }
}

/// One template: its file under [`EXAMPLES`], the stack's name, and what it must compute.
struct Case {
    template: &'static str,
    stack: &'static str,
    check: fn(&Created),
}

const CASES: &[Case] = &[
    Case {
        template: "example-script-template.yaml",
        stack: "script",
        check: script,
    },
    Case {
        // The script example again, on a pristine image: its own `_env` file maps
        // `Heat::InstallConfigAgent` to a config, and the floating IP is external.
        template: "example-config-pristine-image.yaml",
        stack: "pristine",
        check: script,
    },
    Case {
        template: "example-deploy-sequence.yaml",
        stack: "sequence",
        check: sequence,
    },
    Case {
        template: "example-ansible-template.yaml",
        stack: "ansible",
        check: ansible,
    },
    Case {
        template: "example-software-deploymentgroup-template.yaml",
        stack: "group",
        check: group,
    },
    Case {
        template: "example-structured-template.yaml",
        stack: "structured",
        check: structured,
    },
    Case {
        template: "example-os-apply-config.yaml",
        stack: "oac",
        check: os_apply_config,
    },
    Case {
        template: "example-os-apply-config-plus-cloud-config.yaml",
        stack: "oac-cc",
        check: os_apply_config,
    },
    Case {
        template: "example-cloud-init.yaml",
        stack: "cloudinit",
        check: cloud_init,
    },
    Case {
        template: "example-cloud-init-configure-ca-cert.yaml",
        stack: "cacert",
        check: cloud_init,
    },
];

/// `config-scripts/example-script.sh` (`#!/bin/sh -x`) writes `$foo` to `/tmp/$bar` and
/// reports it, with the server and action, as `result`, without a newline (`echo -n`).
fn script(c: &Created) {
    assert_eq!(
        c.outputs["result"],
        json!("The file /tmp/baaaaa contains fooooo for server vm1 during CREATE")
    );
    assert_eq!(
        c.outputs["other_result"],
        json!("The file /tmp/barmy contains fu for server vm1 during CREATE")
    );
    assert_eq!(
        c.outputs["stdout"],
        json!("Writing to /tmp/baaaaa\nWritten to /tmp/baaaaa\n")
    );
    let stderr = c.outputs["stderr"].as_str().expect("stderr");
    // `sh -x` traces each command to stderr before the script's own line.
    assert!(stderr.contains("+ echo Writing to /tmp/baaaaa"), "{stderr}");
    assert!(stderr.ends_with("Output to stderr\n"), "{stderr}");
    assert_eq!(c.outputs["status_code"], json!(0));
}

/// `deployment_a` (server_a = vm1) runs first with the input's default, `deployment_b`
/// (vm2) gets a's stdout as `previous`, `deployment_c` (vm1) runs after b.
fn sequence(c: &Created) {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname");
    let ran = |name: &str| format!("{name} is running on {} at ", host.trim());
    let a = c.outputs["deployment_a_stdout"]
        .as_str()
        .expect("a's stdout");
    let b = c.outputs["deployment_b_stdout"]
        .as_str()
        .expect("b's stdout");
    let cc = c.outputs["deployment_c_stdout"]
        .as_str()
        .expect("c's stdout");
    assert!(
        a.starts_with(&format!("Previous: NONE\n{}", ran("deployment_a"))),
        "{a}"
    );
    assert!(
        b.starts_with(&format!("Previous: {a}\n{}", ran("deployment_b"))),
        "{b}"
    );
    assert!(
        cc.starts_with(&format!("Previous: deployment_b\n{}", ran("deployment_c"))),
        "{cc}"
    );
    assert_eq!(c.on("vm2", "deployment_b").server_id.as_str(), "vm2");
    let (b_end, c_start) = (
        c.on("vm2", "deployment_b").finished_at.expect("b finished"),
        c.on("vm1", "deployment_c").started_at.expect("c started"),
    );
    assert!(b_end <= c_start, "deployment_c started before b ended");
    let (a_end, b_start) = (
        c.on("vm1", "deployment_a").finished_at.expect("a finished"),
        c.on("vm2", "deployment_b").started_at.expect("b started"),
    );
    assert!(a_end <= b_start, "deployment_b started before a ended");
}

/// `config-scripts/example-ansible-template.ansible` appends the sentence, with a newline
/// (`echo`), to the `result` output file.
fn ansible(c: &Created) {
    assert_eq!(
        c.outputs["result"],
        json!("The file /tmp/baaaaa contains fooooo\n")
    );
    assert_eq!(
        c.outputs["other_result"],
        json!("The file /tmp/barmy contains fu\n")
    );
    assert_eq!(c.outputs["status_code"], json!(0));
    let stdout = c.outputs["stdout"].as_str().expect("stdout");
    assert!(stdout.contains("PLAY RECAP"), "{stdout}");
    assert!(stdout.contains("failed=0"), "{stdout}");
}

/// The same playbook on members `0` (server_ubuntu = vm2) and `1` (server_fedora = vm1),
/// with no `input_values`: `foo` and `bar` have no value, which the dispatcher hands a
/// `String` input as the text `None`, as under Heat.
fn group(c: &Created) {
    let line = json!("The file /tmp/None contains None\n");
    assert_eq!(c.outputs["result"], json!({"0": line, "1": line}));
    assert_eq!(c.outputs["status_code"], json!({"0": 0, "1": 0}));
    assert_eq!(c.on("vm2", "0").status, DeploymentStatus::Complete);
    assert_eq!(c.on("vm1", "1").status, DeploymentStatus::Complete);
}

/// A `StructuredConfig` with no group is `Heat::Ungrouped`: no hook runs, and each
/// deployment completes at once (under Heat only because it says `NO_SIGNAL`).
fn structured(c: &Created) {
    assert_eq!(c.outputs["server_ip"], json!("10.0.0.5"));
    for name in ["deployment", "other_deployment"] {
        skipped(c.on("vm1", name), "Heat::Ungrouped");
    }
    assert_eq!(
        c.on("vm1", "deployment").input_values["foo"],
        json!("fooooo")
    );
}

/// `os-apply-config` configs go to os-apply-config, not to a hook: the deployment
/// completes without running anything.
fn os_apply_config(c: &Created) {
    assert_eq!(c.outputs["server_ip"], json!("10.0.0.5"));
    skipped(c.on("vm1", "deployment"), "os-apply-config");
    assert_eq!(c.outputs["deployment_status"], json!(null));
    assert_eq!(c.outputs["deployment_stdout"], json!(""));
    assert_eq!(c.outputs["deployment_stderr"], json!(""));
}

/// Its configs only feed the server's `user_data`, which Flue ignores with the server: the
/// stack deploys nothing and has no outputs.
fn cloud_init(c: &Created) {
    assert!(c.deployments.is_empty(), "{:#?}", c.deployments);
    assert!(c.outputs.is_empty(), "{:?}", c.outputs);
}

/// A deployment of `group` that completed with no hook run.
fn skipped(d: &Deployment, group: &str) {
    assert_eq!(d.group, group);
    assert_eq!(d.status, DeploymentStatus::Complete, "{d:?}");
    let reason = d.status_reason.as_deref().unwrap_or_default();
    assert!(
        reason.contains(&format!("no hook for group \"{group}\"")) && reason.contains("skipped"),
        "{reason}"
    );
    assert_eq!(d.deploy_status_code, None, "{d:?}");
}

#[tokio::test]
async fn the_corpus_software_config_examples_are_created_unchanged_by_the_stock_hooks() {
    let Some(corpus) = super::corpus::locate() else {
        return;
    };
    let rows = super::corpus::rows();
    let env = Flue::start().await;
    let hooks = crate::heat::stock_hooks(&env, &["script", "ansible"]);
    let mut agents = Vec::new();
    for server in ["vm1", "vm2"] {
        env.register(server).await;
        agents.push(env.agent(server, std::slice::from_ref(&hooks)).await);
    }
    // Only mapped: the CA-certificate example's third server deploys nothing.
    env.register("vm3").await;
    for case in CASES {
        let path = format!("{EXAMPLES}/{}", case.template);
        let row = rows
            .iter()
            .find(|r| r.path == path)
            .unwrap_or_else(|| panic!("corpus.table has no row for {path}"));
        let template = corpus.join(&path).display().to_string();
        let mut args = vec!["stack", "create", case.stack, "-t", &template];
        let given = row.args(&corpus);
        args.extend(given.iter().map(String::as_str));
        let run = flue(&env, &args).await;
        assert_eq!(run.code, 0, "{}: {run}", case.template);
        let created = stack(&env, case.stack).await;
        assert_eq!(
            created.status.to_string(),
            "CREATE_COMPLETE",
            "{}",
            case.template
        );
        let mut mine = Vec::new();
        for server in ["vm1", "vm2"] {
            mine.extend(
                deployments(&env, server)
                    .await
                    .into_iter()
                    .filter(|d| d.stack_id.as_ref().map(|s| s.as_str()) == Some(case.stack)),
            );
        }
        for d in &mine {
            assert_eq!(
                d.status,
                DeploymentStatus::Complete,
                "{}: {d:?}",
                case.template
            );
        }
        eprintln!("{} created; checking what it computed", case.template);
        (case.check)(&Created {
            outputs: created.state.outputs,
            deployments: mine,
        });
    }
    // heat-agents' hooks ran them, not the agent's built-in `script`: each keeps the
    // configs it ran in its working dir.
    for work in ["heat/script/work", "heat/ansible/work"] {
        let kept = std::fs::read_dir(env.path(work)).map_or(0, Iterator::count);
        assert!(kept > 0, "nothing in the stock hook's {work}");
    }
}
