use std::path::Path;

use super::*;

const STACK: &str = r##"
heat_template_version: 2018-08-31
parameters:
  db_host: {type: string, default: db1}
  workers: {type: json, default: {w3: node3, w1: node1, w2: node2}}
  single: {type: string, default: solo}
resources:
  db_server:
    type: OS::Flue::Server
    properties: {server_id: {get_param: db_host}}
  db_config:
    type: OS::Heat::SoftwareConfig
    properties:
      config: "#!/bin/sh\necho db"
      outputs: [{name: host}]
      hooks: {DELETE: "#!/bin/sh\necho bye", SUSPEND: "#!/bin/sh\necho zzz"}
  db:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: db_config}
      server: {get_resource: db_server}
  app_config:
    type: OS::Heat::SoftwareConfig
    properties:
      config: "#!/bin/sh\necho app"
      inputs: [{name: db_host}]
      hooks: {DELETE: "#!/bin/sh\necho bye"}
  app:
    type: OS::Heat::SoftwareDeploymentGroup
    update_policy:
      batch_create: {max_batch_size: 2}
      rolling_update: {max_batch_size: 1, pause_time: 5}
    properties:
      config: {get_resource: app_config}
      servers: {get_param: workers}
      input_values: {db_host: {get_attr: [db, host]}}
      actions: [CREATE, DELETE]
  report_config:
    type: OS::Heat::SoftwareConfig
    properties:
      config:
        str_replace:
          template: "#!/bin/sh\necho $HOST"
          params: {$HOST: {get_attr: [db, host]}}
  report:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: report_config}
      server: {get_param: single}
  late_server:
    type: OS::Flue::Server
    depends_on: [app]
    properties: {server_id: late1}
  late:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: app_config}
      server: {get_resource: late_server}
  last:
    type: OS::Heat::SoftwareDeployment
    depends_on: report
    properties:
      config: {get_resource: app_config}
      server: solo
  plain:
    type: OS::Heat::SoftwareDeploymentGroup
    properties:
      config: {get_resource: app_config}
      servers: {b: node2, a: node1}
"##;

fn template() -> Template {
    Template::parse(STACK, Path::new(".")).expect("valid template")
}

fn bind(t: &Template, given: &[(&str, &str)]) -> Parameters {
    let given = given
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    t.bind_parameters(&given).expect("parameters bind")
}

fn expanded(creating: bool) -> Plan {
    let t = template();
    expand(&t, &bind(&t, &[]), creating).expect("expands")
}

fn server(id: &str) -> ServerId {
    ServerId::new(id).expect("valid server id")
}

fn keys(v: &[&str]) -> BTreeSet<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn one_unit_per_deployment_and_per_group_member() {
    let plan = expanded(true);
    let all: Vec<&str> = plan.units.keys().map(String::as_str).collect();
    assert_eq!(
        all,
        [
            "app/w1", "app/w2", "app/w3", "db", "last", "late", "plain/a", "plain/b", "report"
        ]
    );
    let db = &plan.units["db"];
    assert_eq!(db.member, None);
    assert_eq!(db.server_id, server("db1"));
    let w2 = &plan.units["app/w2"];
    assert_eq!(w2.resource, "app");
    assert_eq!(w2.member.as_deref(), Some("w2"));
    assert_eq!(w2.server_id, server("node2"));
    assert_eq!(plan.units["report"].server_id, server("solo"));
    assert_eq!(plan.units["late"].server_id, server("late1"));
    assert_eq!(plan.unit_keys("app"), ["app/w1", "app/w2", "app/w3"]);
}

#[test]
fn group_members_are_sorted_by_name() {
    let plan = expanded(true);
    assert_eq!(
        plan.members["app"],
        [
            ("w1".to_owned(), server("node1")),
            ("w2".to_owned(), server("node2")),
            ("w3".to_owned(), server("node3")),
        ]
    );
    assert_eq!(
        plan.members["plain"],
        [
            ("a".to_owned(), server("node1")),
            ("b".to_owned(), server("node2"))
        ]
    );
    assert!(!plan.members.contains_key("db"));
}

#[test]
fn batches_follow_batch_create_when_creating_and_rolling_update_otherwise() {
    let batches = |plan: &Plan| -> Vec<Option<Batch>> {
        plan.unit_keys("app")
            .iter()
            .map(|k| plan.units[k].batch)
            .collect()
    };
    let create = |index| {
        Some(Batch {
            index,
            pause: Duration::ZERO,
        })
    };
    assert_eq!(batches(&expanded(true)), [create(0), create(0), create(1)]);
    let update = |index| {
        Some(Batch {
            index,
            pause: Duration::from_secs(5),
        })
    };
    assert_eq!(batches(&expanded(false)), [update(0), update(1), update(2)]);
    // No policy, or not a group: no batches.
    for plan in [expanded(true), expanded(false)] {
        for key in ["plain/a", "plain/b", "db", "report"] {
            assert_eq!(plan.units[key].batch, None, "{key}");
        }
    }
}

#[test]
fn units_wait_for_deployments_reached_through_configs_servers_and_depends_on() {
    let plan = expanded(true);
    let deps = |key: &str| plan.units[key].depends_on.clone();
    assert_eq!(deps("db"), keys(&[]));
    // get_attr in input_values: every member waits for db.
    for member in ["app/w1", "app/w2", "app/w3"] {
        assert_eq!(deps(member), keys(&["db"]), "{member}");
    }
    // get_attr inside its config's body.
    assert_eq!(deps("report"), keys(&["db"]));
    // Its server depends_on a group: every member of it.
    assert_eq!(deps("late"), keys(&["app/w1", "app/w2", "app/w3"]));
    // Its own depends_on.
    assert_eq!(deps("last"), keys(&["report"]));
    assert_eq!(deps("plain/a"), keys(&[]));
}

#[test]
fn actions_default_to_create_and_update_plus_the_configs_hooks() {
    let plan = expanded(true);
    let actions = |key: &str| plan.units[key].actions.clone();
    assert_eq!(actions("db"), ["CREATE", "UPDATE", "DELETE", "SUSPEND"]);
    // Given actions, a hook's action already among them only once.
    assert_eq!(actions("app/w1"), ["CREATE", "DELETE"]);
    assert_eq!(actions("report"), DEFAULT_ACTIONS);
    assert_eq!(actions("late"), ["CREATE", "UPDATE", "DELETE"]);
}

#[test]
fn servers_can_come_from_a_json_parameter() {
    let t = template();
    let params = bind(&t, &[("workers", r#"{"z": "node9", "m": "node8"}"#)]);
    let plan = expand(&t, &params, true).expect("expands");
    assert_eq!(plan.unit_keys("app"), ["app/m", "app/z"]);
    assert_eq!(plan.units["app/m"].server_id, server("node8"));
    assert_eq!(plan.units["app/z"].server_id, server("node9"));
    assert_eq!(
        plan.members["app"],
        [
            ("m".to_owned(), server("node8")),
            ("z".to_owned(), server("node9"))
        ]
    );
}

#[test]
fn bad_servers_are_refused_with_their_path() {
    let t = template();
    let cases = [
        (
            ("db_host", "bad id"),
            "resources.db.properties.server",
            "server id \"bad id\"",
        ),
        (
            ("single", "no/slash"),
            "resources.report.properties.server",
            "server id \"no/slash\"",
        ),
        (
            ("workers", r#"{"w1": "bad id"}"#),
            "resources.app.properties.servers.w1",
            "server id \"bad id\"",
        ),
        (
            ("workers", r#"{"w1": 5}"#),
            "resources.app.properties.servers.w1",
            "must be a server id, got 5",
        ),
        (
            ("workers", r#"{"bad name": "node1"}"#),
            "resources.app.properties.servers.bad name",
            "member names may only hold",
        ),
        (
            ("workers", r#"["node1"]"#),
            "resources.app.properties.servers",
            "must be a map of member name to server",
        ),
    ];
    for ((name, value), path, message) in cases {
        let params = bind(&t, &[(name, value)]);
        let e = expand(&t, &params, true).expect_err(value);
        assert_eq!(e.path, path, "{value}");
        assert!(e.message.contains(message), "{value}: {}", e.message);
    }
}
