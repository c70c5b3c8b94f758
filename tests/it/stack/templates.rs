//! Bad templates and parameters: exit 2, a message naming the resource and the field,
//! and nothing stored or run.

use super::{cluster, flue};

const HEAD: &str = "heat_template_version: 2018-08-31\n";
const CFG: &str = "
  cfg:
    type: OS::Heat::SoftwareConfig
    properties: {group: script, config: 'echo hi'}
";

#[tokio::test]
async fn bad_templates_are_refused_naming_the_resource_and_field() {
    let (env, _agents) = cluster(&["s1"]).await;
    let dep = |name: &str, extra: &str| {
        format!(
            "\n  {name}:\n    type: OS::Heat::SoftwareDeployment\n{extra}    properties:\n      config: {{get_resource: cfg}}\n      server: s1\n"
        )
    };
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "unknown property",
            format!(
                "{HEAD}resources:{CFG}\n  d:\n    type: OS::Heat::SoftwareDeployment\n    properties: {{config: {{get_resource: cfg}}, sever: s1}}\n"
            ),
            "resources.d.properties.sever",
        ),
        (
            "unknown resource type",
            format!("{HEAD}resources:\n  x:\n    type: OS::Nova::Serverr\n"),
            "resources.x.type",
        ),
        (
            "get_attr of a missing resource",
            format!(
                "{HEAD}resources:{CFG}\n  d:\n    type: OS::Heat::SoftwareDeployment\n    properties:\n      config: {{get_resource: cfg}}\n      server: s1\n      input_values: {{x: {{get_attr: [nope, out]}}}}\n"
            ),
            "resources.d.properties.input_values.x",
        ),
        (
            "dependency cycle",
            format!(
                "{HEAD}resources:{CFG}{}{}{}",
                dep("a", "    depends_on: c\n"),
                dep("b", "    depends_on: a\n"),
                dep("c", "    depends_on: b\n")
            ),
            "dependency cycle: a -> c -> b -> a",
        ),
        (
            "undeclared parameter",
            format!(
                "{HEAD}resources:{CFG}\n  d:\n    type: OS::Heat::SoftwareDeployment\n    properties: {{config: {{get_resource: cfg}}, server: {{get_param: where}}}}\n"
            ),
            "resources.d.properties.server",
        ),
        (
            "hidden output used inside another value",
            format!(
                "{HEAD}resources:\n  hcfg:\n    type: OS::Heat::SoftwareConfig\n    properties: {{config: x, outputs: [{{name: pw, hidden: true}}]}}\n  h:\n    type: OS::Heat::SoftwareDeployment\n    properties: {{config: {{get_resource: hcfg}}, server: s1}}{CFG}\n  d:\n    type: OS::Heat::SoftwareDeployment\n    properties:\n      config: {{get_resource: cfg}}\n      server: s1\n      input_values: {{url: {{list_join: ['', [a, {{get_attr: [h, pw]}}]]}}}}\n"
            ),
            "resources.d.properties.input_values.url",
        ),
        ("yaml syntax", format!("{HEAD}resources: [unclosed\n"), ""),
        (
            "server not registered",
            format!(
                "{HEAD}resources:{CFG}\n  d:\n    type: OS::Heat::SoftwareDeployment\n    properties: {{config: {{get_resource: cfg}}, server: ghost}}\n"
            ),
            "server \"ghost\" is not registered",
        ),
    ];
    for (what, text, needle) in cases {
        let path = env.path("bad.yaml");
        std::fs::write(&path, &text).expect("template");
        let run = flue(
            &env,
            &["stack", "create", "bad", "-t", &path.display().to_string()],
        )
        .await;
        assert_eq!(run.code, 2, "{what}: {run}");
        assert!(
            run.stderr.contains(needle),
            "{what}: expected {needle:?} in {run}"
        );
        assert!(!run.stderr.contains("panicked"), "{what}: {run}");
    }
    // The cycle message names the cycle in one of its rotations: a's own check.
    let list = flue(&env, &["stack", "list"]).await;
    assert_eq!(list.stdout, "no stacks\n", "nothing stored: {list}");
}

#[tokio::test]
async fn bad_parameters_are_refused_naming_the_parameter() {
    let (env, _agents) = cluster(&["s1"]).await;
    let path = env.path("p.yaml");
    std::fs::write(
        &path,
        format!(
            "{HEAD}parameters:\n  port: {{type: number}}\n  secret: {{type: string, hidden: true}}\nresources:{CFG}\n  d:\n    type: OS::Heat::SoftwareDeployment\n    properties:\n      config: {{get_resource: cfg}}\n      server: s1\n      input_values: {{port: {{get_param: port}}, secret: {{get_param: secret}}}}\n"
        ),
    )
    .expect("template");
    let t = path.display().to_string();
    for (args, needle) in [
        (vec!["-P", "port=80"], "parameters.secret"),
        (
            vec!["-P", "port=eighty", "-P", "secret=x"],
            "parameters.port",
        ),
        (
            vec!["-P", "port=80", "-P", "secret=x", "-P", "colour=red"],
            "colour",
        ),
        (vec!["-P", "port"], "-P expects NAME=VALUE"),
    ] {
        let mut all = vec!["stack", "create", "p", "-t", t.as_str()];
        all.extend(args.iter().copied());
        let run = flue(&env, &all).await;
        assert_eq!(run.code, 2, "{args:?}: {run}");
        assert!(
            run.stderr.contains(needle),
            "{args:?}: expected {needle:?} in {run}"
        );
    }
    // Right ones work, and the hidden value is stored nowhere readable.
    let run = flue(
        &env,
        &[
            "stack",
            "create",
            "p",
            "-t",
            &t,
            "-P",
            "port=80",
            "-P",
            "secret=s3cr3t-value",
        ],
    )
    .await;
    assert_eq!(run.code, 0, "{run}");
    let show = flue(&env, &["stack", "show", "p", "--json"]).await;
    assert!(!show.stdout.contains("s3cr3t-value"), "{show}");
    assert!(show.stdout.contains("secret"), "{show}");
    // On update a hidden parameter must be given again: it was never stored.
    let run = flue(&env, &["stack", "update", "p", "-t", &t]).await;
    assert_eq!(run.code, 2, "{run}");
    assert!(run.stderr.contains("never stored"), "{run}");
}
