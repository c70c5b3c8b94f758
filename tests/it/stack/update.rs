//! Updates re-run only what changed; removed units are deleted in reverse dependency
//! order; groups roll out in batches.

use super::{cluster, flue, lines, ran, stack};

const CONFIG: &str = r#"
  cfg:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
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

/// Members on different servers, each hook taking a moment: with batches of one they
/// can only run one after the other; the pause is measured from the hooks' own clocks.
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
      group: script
      inputs: [{name: record}, {name: version}]
      config: |
        #!/bin/sh
        echo "start $deploy_resource_name $(date +%s.%N)" >> "$record"
        sleep 0.3
        echo "end $deploy_resource_name $(date +%s.%N)" >> "$record"
  grp:
    type: OS::Heat::SoftwareDeploymentGroup
    update_policy:
      batch_create: {max_batch_size: 1}
      rolling_update: {max_batch_size: 2, pause_time: 1}
    properties:
      config: {get_resource: cfg}
      servers: {a: m1, b: m2, c: m3}
      input_values: {record: {get_param: record}, version: {get_param: version}}
"#,
    )
    .expect("template");
    let t = t.display().to_string();
    let p = format!("record={}", record.display());
    let events = |from: usize| -> Vec<(String, f64)> {
        lines(&record)[from..]
            .iter()
            .map(|l| {
                let mut parts = l.split(' ');
                let what = format!(
                    "{} {}",
                    parts.next().expect("word"),
                    parts.next().expect("member")
                );
                let at: f64 = parts.next().expect("time").parse().expect("seconds");
                (what, at)
            })
            .collect()
    };
    let run = flue(&env, &["stack", "create", "g", "-t", &t, "-P", &p]).await;
    assert_eq!(run.code, 0, "{run}");
    // One member at a time, in member order.
    let names: Vec<String> = events(0).into_iter().map(|(w, _)| w).collect();
    assert_eq!(
        names,
        ["start a", "end a", "start b", "end b", "start c", "end c"],
        "{run}"
    );

    let run = flue(&env, &["stack", "update", "g", "-t", &t, "-P", "version=2"]).await;
    assert_eq!(run.code, 0, "{run}");
    assert!(
        run.stdout.contains("grp: pausing 1.0s before batch 2"),
        "{run}"
    );
    let second = events(6);
    assert_eq!(second.len(), 6, "{second:?}");
    // Batch 1 is a and b; then, at least the pause after both ended, c alone.
    let mut first_batch: Vec<&str> = second[..4].iter().map(|(w, _)| w.as_str()).collect();
    first_batch.sort_unstable();
    assert_eq!(
        first_batch,
        ["end a", "end b", "start a", "start b"],
        "{second:?}"
    );
    assert_eq!(second[4].0, "start c", "{second:?}");
    let batch_end = second[..4].iter().map(|(_, t)| *t).fold(0.0, f64::max);
    assert!(second[4].1 - batch_end >= 1.0, "no pause: {second:?}");

    // An update that changes nothing in the group does not pause at all.
    let run = flue(&env, &["stack", "update", "g", "-t", &t]).await;
    assert_eq!(run.code, 0, "{run}");
    assert!(!run.stdout.contains("pausing"), "{run}");
}

/// Parameters a user gave stand on the next update, typed as given; defaults are
/// not frozen, so a changed default takes effect.
#[tokio::test]
async fn given_parameters_stand_and_changed_defaults_take_effect() {
    let (env, _agents) = cluster(&["s1"]).await;
    let record = env.path("record.log");
    let write = |default: &str| {
        let t = env.path("p.yaml");
        std::fs::write(
            &t,
            format!(
                r#"heat_template_version: 2018-08-31
parameters:
  record: {{type: string}}
  names: {{type: json}}
  colour: {{type: string, default: {default}}}
resources:
  cfg:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      inputs: [{{name: record}}, {{name: names}}, {{name: colour}}]
      config: |
        #!/bin/sh
        echo "$colour $names" >> "$record"
  d:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {{get_resource: cfg}}
      server: s1
      input_values: {{record: {{get_param: record}}, names: {{get_param: names}}, colour: {{get_param: colour}}}}
"#
            ),
        )
        .expect("template");
        t.display().to_string()
    };
    let t = write("n");
    let p = format!("record={}", record.display());
    let run = flue(
        &env,
        &[
            "stack",
            "create",
            "p",
            "-t",
            &t,
            "-P",
            &p,
            "-P",
            r#"names=["alpha","beta"]"#,
        ],
    )
    .await;
    assert_eq!(run.code, 0, "{run}");
    // `n` is a string in YAML 1.2, not a boolean; a list reaches a String input as the
    // JSON Python's json.dumps writes.
    assert_eq!(lines(&record), [r#"n ["alpha", "beta"]"#]);
    let t = write("blue");
    let run = flue(&env, &["stack", "update", "p", "-t", &t]).await;
    assert_eq!(run.code, 0, "{run}");
    assert_eq!(lines(&record)[1..], [r#"blue ["alpha", "beta"]"#]);
}

/// A hidden parameter can come from a file (not the command line), is never stored,
/// and must be given again on update.
#[tokio::test]
async fn hidden_parameters_come_from_files_and_are_never_stored() {
    let (env, _agents) = cluster(&["s1"]).await;
    let record = env.path("record.log");
    let secret = env.path("secret.txt");
    std::fs::write(&secret, "s3cr3t-from-file\n").expect("secret");
    let t = env.path("h.yaml");
    std::fs::write(
        &t,
        r#"heat_template_version: 2018-08-31
parameters:
  record: {type: string}
  password: {type: string, hidden: true}
  token: {type: string, hidden: true, default: dflt}
resources:
  cfg:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      inputs: [{name: record}, {name: password}]
      config: |
        #!/bin/sh
        test "$password" = s3cr3t-from-file && echo ok >> "$record"
  d:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: cfg}
      server: s1
      input_values: {record: {get_param: record}, password: {get_param: password}}
"#,
    )
    .expect("template");
    let t = t.display().to_string();
    let p = format!("record={}", record.display());
    let f = format!("password={}", secret.display());
    let run = flue(
        &env,
        &[
            "stack",
            "create",
            "h",
            "-t",
            &t,
            "-P",
            &p,
            "--parameter-file",
            &f,
            "-P",
            "token=given",
        ],
    )
    .await;
    assert_eq!(run.code, 0, "{run}");
    assert_eq!(lines(&record), ["ok"]);
    let show = flue(&env, &["stack", "show", "h", "--json"]).await;
    assert!(!show.stdout.contains("s3cr3t"), "{show}");
    let d = &super::deployments(&env, "s1").await[0];
    assert_eq!(d.input_values["password"], "<hidden>");
    let run = flue(&env, &["stack", "update", "h", "-t", &t]).await;
    assert_eq!(run.code, 2, "{run}");
    assert!(
        run.stderr.contains("--parameter-file password=PATH"),
        "{run}"
    );
    // A hidden parameter given before is refused even though it has a default: it
    // must not silently fall back to it.
    let run = flue(
        &env,
        &["stack", "update", "h", "-t", &t, "--parameter-file", &f],
    )
    .await;
    assert_eq!(run.code, 2, "{run}");
    assert!(run.stderr.contains("parameters.token"), "{run}");
    let run = flue(
        &env,
        &[
            "stack",
            "update",
            "h",
            "-t",
            &t,
            "--parameter-file",
            &f,
            "-P",
            "token=given",
        ],
    )
    .await;
    assert_eq!(run.code, 0, "{run}");
    assert!(run.stdout.contains("unchanged, not run"), "{run}");
}
