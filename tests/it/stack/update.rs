//! Updates re-run only what changed; removed units are deleted in reverse dependency
//! order; groups roll out in batches.

use super::{cluster, flue, lines, ran, stack};

const CONFIG: &str = r#"
  cfg:
    type: OS::Heat::SoftwareConfig
    properties:
      inputs: [{name: record}, {name: tag}, {name: upstream}]
      outputs: [{name: out}]
      config: |
        #!/bin/sh
        echo "$deploy_action $deploy_resource_name" >> "$record"
        printf '%s' "$tag" > "$heat_outputs_path.out"
      hooks:
        DELETE: |
          #!/bin/sh
          echo "DELETE $deploy_resource_name" >> "$record"
"#;

fn template(resources: &str) -> String {
    format!(
        "heat_template_version: 2018-08-31\nparameters:\n  record: {{type: string}}\n  c_value: {{type: string, default: one}}\nresources:{CONFIG}{resources}"
    )
}

const A: &str = "
  a:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: cfg}
      server: s1
      input_values: {record: {get_param: record}, tag: a}
";
const B: &str = "
  b:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: cfg}
      server: s2
      input_values: {record: {get_param: record}, tag: b, upstream: {get_attr: [a, out]}}
";
const C: &str = "
  c:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: cfg}
      server: s1
      input_values: {record: {get_param: record}, tag: {get_param: c_value}}
";
const D: &str = "
  d:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: cfg}
      server: s2
      input_values: {record: {get_param: record}, tag: d}
";

#[tokio::test]
async fn update_runs_only_what_changed_and_deletes_removed_units_in_reverse_order() {
    let (env, _agents) = cluster(&["s1", "s2"]).await;
    let record = env.path("record.log");
    let p = format!("record={}", record.display());
    let v1 = env.path("v1.yaml");
    std::fs::write(&v1, template(&format!("{A}{B}{C}"))).expect("v1");
    let v1 = v1.display().to_string();

    let run = flue(&env, &["stack", "create", "up", "-t", &v1, "-P", &p]).await;
    assert_eq!(run.code, 0, "{run}");
    let created = lines(&record);
    assert_eq!(created.len(), 3, "{created:?}");
    let pos = |l: &str| created.iter().position(|x| x == l).expect(l);
    assert!(pos("CREATE a") < pos("CREATE b"), "{created:?}");

    // The same template again: nothing runs.
    let run = flue(&env, &["stack", "update", "up", "-t", &v1]).await;
    assert_eq!(run.code, 0, "{run}");
    assert_eq!(lines(&record).len(), 3, "{run}");
    assert_eq!(run.stdout.matches("unchanged, not run").count(), 3, "{run}");

    // One input of c changes: only c runs, with UPDATE. The record parameter was not
    // given again: its last value stands.
    let run = flue(
        &env,
        &["stack", "update", "up", "-t", &v1, "-P", "c_value=two"],
    )
    .await;
    assert_eq!(run.code, 0, "{run}");
    assert_eq!(lines(&record)[3..], ["UPDATE c"], "{run}");

    // a and b leave (b used a's output, so b goes first), d arrives; c stays as is.
    let v2 = env.path("v2.yaml");
    std::fs::write(&v2, template(&format!("{C}{D}"))).expect("v2");
    let v2 = v2.display().to_string();
    let run = flue(&env, &["stack", "update", "up", "-t", &v2]).await;
    assert_eq!(run.code, 0, "{run}");
    assert_eq!(
        lines(&record)[4..],
        ["CREATE d", "DELETE b", "DELETE a"],
        "{run}"
    );
    let s = stack(&env, "up").await;
    let units: Vec<&str> = s.state.units.keys().map(String::as_str).collect();
    assert_eq!(units, ["c", "d"]);
    assert_eq!(s.state.parameters["c_value"], "two");
    let pair = |r: &str, a: &str| (r.to_owned(), a.to_owned());
    assert_eq!(
        ran(&env, "s1")
            .await
            .into_iter()
            .filter(|(r, _)| r == "c")
            .collect::<Vec<_>>(),
        [pair("c", "CREATE"), pair("c", "UPDATE")]
    );
}

#[tokio::test]
async fn groups_roll_out_in_batches() {
    let (env, _agents) = cluster(&["m1", "m2", "m3"]).await;
    let record = env.path("record.log");
    let t = env.path("group.yaml");
    std::fs::write(
        &t,
        r#"heat_template_version: 2018-08-31
parameters:
  record: {type: string}
  version: {type: string, default: "1"}
resources:
  cfg:
    type: OS::Heat::SoftwareConfig
    properties:
      inputs: [{name: record}, {name: version}]
      config: |
        #!/bin/sh
        echo "start $deploy_resource_name" >> "$record"
        echo "end $deploy_resource_name" >> "$record"
  grp:
    type: OS::Heat::SoftwareDeploymentGroup
    update_policy:
      batch_create: {max_batch_size: 1}
      rolling_update: {max_batch_size: 2, pause_time: 0.2}
    properties:
      config: {get_resource: cfg}
      servers: {a: m1, b: m2, c: m3}
      input_values: {record: {get_param: record}, version: {get_param: version}}
"#,
    )
    .expect("template");
    let t = t.display().to_string();
    let p = format!("record={}", record.display());
    let run = flue(&env, &["stack", "create", "g", "-t", &t, "-P", &p]).await;
    assert_eq!(run.code, 0, "{run}");
    // One member at a time, in member order.
    assert_eq!(
        lines(&record),
        [
            "start grp/a",
            "end grp/a",
            "start grp/b",
            "end grp/b",
            "start grp/c",
            "end grp/c"
        ]
    );

    let run = flue(&env, &["stack", "update", "g", "-t", &t, "-P", "version=2"]).await;
    assert_eq!(run.code, 0, "{run}");
    assert!(
        run.stdout.contains("grp: pausing 0.2s before batch 2"),
        "{run}"
    );
    let second: Vec<String> = lines(&record)[6..].to_vec();
    assert_eq!(second.len(), 6, "{second:?}");
    // Batch 1 is a and b (in either order), then c alone.
    assert_eq!(second[4..], ["start grp/c", "end grp/c"], "{second:?}");
}
