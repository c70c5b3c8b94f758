//! Heat templates that Heat accepts, created by `flue stack create` against a real broker,
//! gateway and agents: a `SoftwareComponent`, an input whose name is no identifier, a
//! group attribute passed through by member, an output nobody declared, `get_file` with
//! `..` and a look-ahead `allowed_pattern`. What `validate` passes, `create` runs.

use serde_json::json;

use super::{cluster, flue, stack};

const TEMPLATE: &str = r##"heat_template_version: 2018-08-31
parameters:
  password:
    type: string
    constraints:
      - allowed_pattern: "(?=^.{6,255}$)((?=.*\\d)(?=.*[A-Z])(?=.*[a-z]))^.*"
resources:
  component:
    type: OS::Heat::SoftwareComponent
    properties:
      configs:
        - tool: script
          config: |
            #!/bin/sh
            printf '%s' "$deploy_action" > "$heat_outputs_path.last_action"
        - actions: [DELETE]
          tool: script
          config: "#!/bin/sh\ntrue"
      outputs: [{name: last_action}]
  on_s1:
    type: OS::Heat::SoftwareDeployment
    properties: {config: {get_resource: component}, server: s1}
  named:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      inputs: [{name: pkg-redhat}]
      config: {get_file: ../shared/named.sh}
  everywhere:
    type: OS::Heat::SoftwareDeploymentGroup
    properties:
      config: {get_resource: named}
      servers: {a: s1, b: s2}
      input_values: {pkg-redhat: httpd}
outputs:
  last_action: {value: {get_attr: [on_s1, last_action]}}
  never_declared: {value: {get_attr: [on_s1, never_declared]}}
  stdouts: {value: {get_attr: [everywhere, deploy_stdout]}}
  b_status: {value: {get_attr: [everywhere, deploy_status_code, b]}}
"##;

/// Reads its own environment as the hook was started with it: a shell neither names
/// `pkg-redhat` as a variable nor passes it on to a child.
const NAMED: &str =
    "#!/bin/sh\ntr '\\0' '\\n' < /proc/$$/environ | grep '^pkg-redhat=' | tr -d '\\n'\n";

#[tokio::test]
async fn a_template_heat_accepts_validates_and_runs_as_heat_runs_it() {
    let (env, _agents) = cluster(&["s1", "s2"]).await;
    std::fs::create_dir_all(env.path("stack")).expect("dir");
    std::fs::create_dir_all(env.path("shared")).expect("dir");
    std::fs::write(env.path("shared/named.sh"), NAMED).expect("script");
    let t = env.path("stack/t.yaml");
    std::fs::write(&t, TEMPLATE).expect("template");
    let t = t.display().to_string();

    // The look-ahead pattern is checked as Python's re.match does.
    let run = flue(
        &env,
        &["stack", "validate", "-t", &t, "-P", "password=weak"],
    )
    .await;
    assert_eq!(run.code, 1, "{run}");
    assert!(run.stderr.contains("parameters.password"), "{run}");
    let run = flue(
        &env,
        &["stack", "validate", "-t", &t, "-P", "password=Str0ngPass"],
    )
    .await;
    assert_eq!(run.code, 0, "{run}");
    assert!(
        run.stdout.contains(
            "on_s1 (OS::Heat::SoftwareDeployment): deploys component on server s1 with hook \
             group component for CREATE, UPDATE, DELETE"
        ),
        "{run}"
    );
    assert!(
        run.stdout.contains(
            "everywhere (OS::Heat::SoftwareDeploymentGroup): deploys named on server a=s1, b=s2 \
             with hook group script"
        ),
        "{run}"
    );

    let run = flue(
        &env,
        &[
            "stack",
            "create",
            "fid",
            "-t",
            &t,
            "-P",
            "password=Str0ngPass",
        ],
    )
    .await;
    assert_eq!(run.code, 0, "{run}");
    let s = stack(&env, "fid").await;
    let outputs = &s.state.outputs;
    // The component ran its CREATE entry with its tool as the group.
    assert_eq!(outputs["last_action"], json!("CREATE"));
    // An output no config declares reads null, as in Heat.
    assert_eq!(outputs["never_declared"], json!(null));
    // The script hook got `pkg-redhat` as an environment entry; the group passes a
    // member attribute through by member.
    assert_eq!(
        outputs["stdouts"],
        json!({"a": "pkg-redhat=httpd", "b": "pkg-redhat=httpd"})
    );
    assert_eq!(outputs["b_status"], json!(0));
}
