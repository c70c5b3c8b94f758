//! Heat templates: servers mapped, external resources, utility resources and resource
//! groups, from template to resolved deployments (no gateway).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use flue_proto::{Deployment, DeploymentId, MappedResource, ServerId, StackState};
use serde_json::{Value, json};

use crate::resolve::{HiddenOutputs, RuntimeResolver, unit_deployment};
use crate::template::Template;
use crate::units::{self, Plan};

use super::MappedBy;

const HEAT: &str = r##"
heat_template_version: 2018-08-31
parameters:
  web_name: {type: string, default: web1}
  servers: {type: json, default: [node-a, node-b, node-c]}
  count: {type: number, default: 2}
resources:
  db_port:
    type: OS::Neutron::Port
    properties: {network: private}
  db_server:
    type: OS::Nova::Server
    deletion_policy: Retain
    properties:
      image: fedora
      flavor: m1.small
      networks: [{port: {get_resource: db_port}}]
      user_data_format: SOFTWARE_CONFIG
      user_data: {get_resource: boot}
  web_server:
    type: OS::Nova::Server
    properties:
      name: {get_param: web_name}
      image: fedora
  boot:
    type: OS::Heat::CloudConfig
    properties:
      cloud_config: {packages: [nginx]}
  nothing:
    type: OS::Heat::None
    properties: {anything: [1, 2]}
  settings:
    type: OS::Heat::Value
    properties:
      type: json
      value:
        db_host: {get_attr: [db_server, first_address]}
        port: {get_resource: db_port}
  config:
    type: OS::Heat::SoftwareConfig
    properties:
      inputs: [{name: db_host}, {name: settings, type: Json}, {name: void}]
      outputs: [{name: result}]
      config: "#!/bin/sh\necho hi"
  db_deploy:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: config}
      server: {get_resource: db_server}
  web_deploy:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: config}
      server: {get_resource: web_server}
      input_values:
        db_host: {get_attr: [db_deploy, result]}
        settings: {get_attr: [settings, value]}
        void: {get_attr: [nothing, whatever]}
  workers:
    type: OS::Heat::ResourceGroup
    properties:
      count: {get_param: count}
      resource_def:
        type: OS::Heat::SoftwareDeployment
        properties:
          config: {get_resource: config}
          server: {get_param: [servers, "%index%"]}
          name: worker-%index%
          input_values: {db_host: "db-for-%index%"}
  mime:
    type: OS::Heat::MultipartMime
    properties:
      parts:
        - config: {get_resource: boot}
        - {config: {get_resource: config}, filename: run.sh, subtype: x-shellscript}
        - {config: "plain words", filename: notes.txt}
  mimed:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: mime}
      server: {get_resource: web_server}
  cloud:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: boot}
      server: {get_resource: web_server}
outputs:
  db_name: {value: {get_attr: [db_server, name]}}
  results: {value: {get_attr: [workers, result]}}
  second: {value: {get_attr: [workers, resource.1, result]}}
  by_index: {value: {get_attr: [workers, attributes, result]}}
  refs: {value: {get_attr: [workers, refs]}}
"##;

fn template() -> Template {
    Template::parse(HEAT, Path::new(".")).expect("a Heat template loads")
}

/// A resource, the server it is mapped onto, and attributes given for it.
type Given<'a> = (&'a str, Option<&'a str>, &'a [(&'a str, &'a str)]);

fn mapped(pairs: &[Given<'_>]) -> BTreeMap<String, MappedResource> {
    pairs
        .iter()
        .map(|(name, server, attrs)| {
            (
                (*name).to_owned(),
                MappedResource {
                    server_id: server.map(|s| ServerId::new(s).expect("id")),
                    reference: None,
                    attributes: attrs
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), json!(v)))
                        .collect(),
                },
            )
        })
        .collect()
}

fn plan(t: &Template, m: &BTreeMap<String, MappedResource>) -> Result<Plan, String> {
    let params = t.bind_parameters(&BTreeMap::new()).expect("params");
    let m = super::merge(t, &BTreeMap::new(), m)?;
    units::expand_mapped(t, &params, &m, true).map_err(|e| e.to_string())
}

fn full_mapping() -> BTreeMap<String, MappedResource> {
    mapped(&[("db_server", Some("db1"), &[("first_address", "10.0.0.5")])])
}

fn deployment(id: &str, outputs: Value) -> Deployment {
    serde_json::from_value(json!({
        "id": id, "tenant": "default", "server_id": "s1", "config_id": "c",
        "group": "script", "name": id, "action": "CREATE", "status": "COMPLETE",
        "outputs": outputs, "deploy_stdout": "", "deploy_stderr": "", "deploy_status_code": 0,
        "timeout_secs": 60, "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z", "expires_at": "2026-01-01T01:00:00Z"
    }))
    .expect("deployment")
}

fn completed(
    state: &mut StackState,
    deployments: &mut HashMap<DeploymentId, Deployment>,
    key: &str,
    out: Value,
) {
    let id = format!("d-{}", key.replace('/', "-"));
    let unit: flue_proto::Unit = serde_json::from_value(json!({
        "resource": key.split('/').next(), "server_id": "s1", "action": "CREATE",
        "status": "COMPLETE", "baseline": id, "baseline_config": "c"
    }))
    .expect("unit");
    state.units.insert(key.to_owned(), unit);
    deployments.insert(
        DeploymentId::new(id.as_str()).expect("id"),
        deployment(&id, out),
    );
}

#[test]
fn nova_servers_map_explicitly_then_by_name_property_then_by_resource_name() {
    let t = template();
    let p = plan(&t, &full_mapping()).expect("plans");
    assert_eq!(p.servers["db_server"].server_id.as_str(), "db1");
    assert_eq!(p.servers["db_server"].by, MappedBy::Explicit);
    assert_eq!(p.servers["web_server"].server_id.as_str(), "web1");
    assert_eq!(p.servers["web_server"].by, MappedBy::NameProperty);
    assert_eq!(p.units["db_deploy"].server_id.as_str(), "db1");
    assert_eq!(p.units["web_deploy"].server_id.as_str(), "web1");
    // web_deploy waits for db_deploy (get_attr), not for servers or values.
    assert_eq!(
        p.units["web_deploy"].depends_on.iter().collect::<Vec<_>>(),
        ["db_deploy"]
    );

    let none = plan(
        &t,
        &mapped(&[("db_server", None, &[("first_address", "10.0.0.5")])]),
    )
    .expect("plans");
    assert_eq!(none.servers["db_server"].server_id.as_str(), "db_server");
    assert_eq!(none.servers["db_server"].by, MappedBy::ResourceName);
}

#[test]
fn an_unknown_attribute_of_a_mapped_server_is_refused_before_anything_runs() {
    let t = template();
    let e = plan(&t, &BTreeMap::new()).expect_err("first_address not given");
    assert!(
        e.contains(
            "resources.settings.properties.value.db_host: get_attr: db_server (OS::Nova::Server)"
        ),
        "{e}"
    );
    assert!(e.contains("--attr db_server.first_address=VALUE"), "{e}");
}

#[test]
fn a_mapping_for_a_resource_flue_runs_or_that_does_not_exist_is_refused() {
    let t = template();
    let e = plan(&t, &mapped(&[("config", Some("s1"), &[])])).expect_err("config");
    assert!(
        e.contains("--server config: config is a OS::Heat::SoftwareConfig"),
        "{e}"
    );
    let e = plan(&t, &mapped(&[("ghost", Some("s1"), &[])])).expect_err("ghost");
    assert!(e.contains("the template has no resource \"ghost\""), "{e}");
    let e = plan(&t, &mapped(&[("db_port", Some("s1"), &[])])).expect_err("port");
    assert!(
        e.contains("--server db_port: db_port is not an OS::Nova::Server"),
        "{e}"
    );
}

#[test]
fn kept_mappings_stand_unless_given_again() {
    let t = template();
    let kept = full_mapping();
    let given = mapped(&[("db_server", Some("db2"), &[])]);
    let m = super::merge(&t, &kept, &given).expect("merges");
    assert_eq!(
        m["db_server"].server_id.as_ref().map(|s| s.as_str()),
        Some("db2")
    );
    assert_eq!(
        m["db_server"].attributes["first_address"],
        json!("10.0.0.5")
    );
    // A kept mapping for a resource the template no longer has is dropped.
    let mut kept = kept;
    kept.insert("gone".into(), MappedResource::default());
    assert!(
        !super::merge(&t, &kept, &BTreeMap::new())
            .expect("merges")
            .contains_key("gone")
    );
}

#[test]
fn values_servers_externals_and_none_resolve_at_run_time() {
    let t = template();
    let p = plan(&t, &full_mapping()).expect("plans");
    let params = t.bind_parameters(&BTreeMap::new()).expect("params");
    let mut state = StackState::default();
    let mut deployments = HashMap::new();
    completed(
        &mut state,
        &mut deployments,
        "db_deploy",
        json!({"result": "db-ok"}),
    );
    let r = RuntimeResolver {
        template: &t,
        params: &params,
        plan: &p,
        state: &state,
        deployments: &deployments,
        hidden_outputs: HiddenOutputs::Refuse,
        reads: Default::default(),
    };
    let web = unit_deployment(&r, &p.units["web_deploy"]).expect("resolves");
    assert_eq!(web.input_values["db_host"], json!("db-ok"));
    assert_eq!(
        web.input_values["settings"],
        json!({"db_host": "10.0.0.5", "port": "db_port"})
    );
    assert_eq!(web.input_values["void"], Value::Null);
}

#[test]
fn a_cloud_config_deployed_is_a_cloud_config_body() {
    let t = template();
    let p = plan(&t, &full_mapping()).expect("plans");
    let params = t.bind_parameters(&BTreeMap::new()).expect("params");
    let (state, deployments) = (StackState::default(), HashMap::new());
    let r = RuntimeResolver {
        template: &t,
        params: &params,
        plan: &p,
        state: &state,
        deployments: &deployments,
        hidden_outputs: HiddenOutputs::Refuse,
        reads: Default::default(),
    };
    let cloud = unit_deployment(&r, &p.units["cloud"]).expect("resolves");
    assert_eq!(cloud.spec.group, "Heat::Ungrouped");
    let body = cloud.spec.config.as_str().expect("text");
    assert!(body.starts_with("#cloud-config\n"), "{body}");
    let data: Value = serde_json::from_str(&body["#cloud-config\n".len()..]).expect("json");
    assert_eq!(data, json!({"packages": ["nginx"]}));
}

#[test]
fn a_resource_group_of_deployments_has_one_unit_per_index() {
    let t = template();
    let p = plan(&t, &full_mapping()).expect("plans");
    let members: Vec<(&str, &str)> = p.members["workers"]
        .iter()
        .map(|(m, s)| (m.as_str(), s.as_str()))
        .collect();
    assert_eq!(members, [("0", "node-a"), ("1", "node-b")]);
    let params = t.bind_parameters(&BTreeMap::new()).expect("params");
    let mut state = StackState::default();
    let mut deployments = HashMap::new();
    completed(
        &mut state,
        &mut deployments,
        "workers/0",
        json!({"result": "r0"}),
    );
    completed(
        &mut state,
        &mut deployments,
        "workers/1",
        json!({"result": "r1"}),
    );
    let r = RuntimeResolver {
        template: &t,
        params: &params,
        plan: &p,
        state: &state,
        deployments: &deployments,
        hidden_outputs: HiddenOutputs::Placeholder,
        reads: Default::default(),
    };
    let w1 = unit_deployment(&r, &p.units["workers/1"]).expect("resolves");
    assert_eq!(w1.input_values["db_host"], json!("db-for-1"));
    assert_eq!(w1.name, "worker-1-1");
    let out = |name: &str| {
        crate::functions::resolve(&t.outputs[name].value, &r, name)
            .expect("resolves")
            .value
    };
    assert_eq!(out("results"), json!(["r0", "r1"]));
    assert_eq!(out("second"), json!("r1"));
    assert_eq!(out("by_index"), json!({"0": "r0", "1": "r1"}));
    assert_eq!(out("refs"), json!(["d-workers-0", "d-workers-1"]));
    assert_eq!(out("db_name"), json!("db1"));

    let more = [("count".to_owned(), "3".to_owned())].into();
    let params = t.bind_parameters(&more).expect("params");
    let m = super::merge(&t, &BTreeMap::new(), &full_mapping()).expect("merge");
    let p = units::expand_mapped(&t, &params, &m, false).expect("plans");
    assert_eq!(p.members["workers"].len(), 3);
}

#[test]
fn a_resource_group_of_servers_is_refused_with_the_way_out() {
    let text = HEAT.replace(
        "        type: OS::Heat::SoftwareDeployment\n        properties:\n          config: {get_resource: config}\n          server: {get_param: [servers, \"%index%\"]}",
        "        type: OS::Nova::Server\n        properties:\n          config: {get_resource: config}\n          server: {get_param: [servers, \"%index%\"]}",
    );
    let e = Template::parse(&text, Path::new(".")).expect_err("a group of servers");
    assert_eq!(e.path, "resources.workers.properties.resource_def.type");
    assert!(e.message.contains("SoftwareDeploymentGroup"), "{e}");
}

#[test]
fn the_heat_examples_load_and_map_onto_registered_servers() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/heat");
    let t = Template::load(&dir.join("two-servers.yaml")).expect("two-servers loads");
    let given = [("data_dir".to_owned(), "/tmp/x".to_owned())].into();
    let params = t.bind_parameters(&given).expect("params");
    let m = mapped(&[
        ("db_server", Some("db1"), &[]),
        ("web_server", Some("web1"), &[]),
    ]);
    let p = units::expand_mapped(&t, &params, &m, true).expect("plans");
    let units: Vec<(&str, &str)> = p
        .units
        .values()
        .map(|u| (u.key.as_str(), u.server_id.as_str()))
        .collect();
    assert_eq!(
        units,
        [
            ("db_deployment", "db1"),
            ("db_password", "db1"),
            ("web_deployment", "web1")
        ]
    );
    assert!(
        p.units["web_deployment"]
            .depends_on
            .contains("db_deployment")
    );
    assert!(p.units["web_deployment"].depends_on.contains("db_password"));

    let t = Template::load(&dir.join("deployment-group.yaml")).expect("group loads");
    let given = [
        ("data_dir".to_owned(), "/tmp/x".to_owned()),
        ("servers".to_owned(), "w1,w2".to_owned()),
    ]
    .into();
    let params = t.bind_parameters(&given).expect("params");
    let m = mapped(&[("node_a", Some("n1"), &[]), ("node_b", Some("n2"), &[])]);
    let p = units::expand_mapped(&t, &params, &m, true).expect("plans");
    let keys: Vec<&str> = p.units.keys().map(String::as_str).collect();
    assert_eq!(keys, ["nodes/a", "nodes/b", "workers/0", "workers/1"]);
    assert_eq!(p.units["workers/1"].server_id.as_str(), "w2");
}

#[test]
fn a_multipart_mime_deployed_is_a_mime_message_of_its_parts_bodies() {
    let t = template();
    let p = plan(&t, &full_mapping()).expect("plans");
    let params = t.bind_parameters(&BTreeMap::new()).expect("params");
    let (state, deployments) = (StackState::default(), HashMap::new());
    let r = RuntimeResolver {
        template: &t,
        params: &params,
        plan: &p,
        state: &state,
        deployments: &deployments,
        hidden_outputs: HiddenOutputs::Refuse,
        reads: Default::default(),
    };
    let mimed = unit_deployment(&r, &p.units["mimed"]).expect("resolves");
    assert_eq!(mimed.spec.group, "Heat::Ungrouped");
    let body = mimed.spec.config.as_str().expect("text").to_owned();
    assert!(
        body.starts_with("Content-Type: multipart/mixed; boundary="),
        "{body}"
    );
    assert!(body.contains("Content-Type: text/plain; charset=\"us-ascii\"\nMIME-Version: 1.0\nContent-Transfer-Encoding: 7bit\n\n#cloud-config\n"), "{body}");
    assert!(body.contains("Content-Type: text/x-shellscript"), "{body}");
    assert!(
        body.contains("filename=\"run.sh\"\n\n#!/bin/sh\necho hi\n"),
        "{body}"
    );
    // Without a subtype, the file name's stem names it, as in Heat.
    assert!(body.contains("Content-Type: text/notes;"), "{body}");
    assert_eq!(body.matches("\n--===============").count(), 4, "{body}");
    // The same parts make the same text, so an update finds nothing changed.
    let again = unit_deployment(&r, &p.units["mimed"]).expect("resolves");
    assert_eq!(again.spec.config, mimed.spec.config);
}

#[test]
fn a_mapped_server_is_named_as_registered_unless_given() {
    let t = template();
    let mut p = plan(&t, &full_mapping()).expect("plans");
    let attr = |p: &Plan, a: &str| {
        super::attribute(
            "db_server",
            crate::template::ResourceKind::NovaServer,
            a,
            &p.servers,
            &p.mapped,
        )
    };
    assert_eq!(attr(&p, "name"), Ok(json!("db1")));
    p.servers
        .get_mut("db_server")
        .expect("mapped")
        .registered_name = Some("database".into());
    assert_eq!(attr(&p, "name"), Ok(json!("database")));
    assert_eq!(
        attr(&p, "show"),
        Ok(json!({"id": "db1", "name": "database", "first_address": "10.0.0.5"}))
    );
    assert!(
        attr(&p, "networks")
            .expect_err("not given")
            .contains("--attr db_server.networks=VALUE")
    );
    p.mapped
        .get_mut("db_server")
        .expect("given")
        .attributes
        .insert("name".into(), json!("db.example"));
    assert_eq!(attr(&p, "name"), Ok(json!("db.example")));
}

#[test]
fn min_in_service_keeps_members_out_of_each_rolling_batch() {
    let text = r#"
heat_template_version: 2018-08-31
resources:
  config: {type: OS::Heat::SoftwareConfig, properties: {config: "true"}}
  group:
    type: OS::Heat::ResourceGroup
    update_policy:
      rolling_update: {max_batch_size: 3, min_in_service: 2, pause_time: 1}
    properties:
      count: 4
      resource_def:
        type: OS::Heat::SoftwareDeployment
        properties: {config: {get_resource: config}, server: "s%index%"}
"#;
    let t = Template::parse(text, Path::new(".")).expect("loads");
    let params = t.bind_parameters(&BTreeMap::new()).expect("params");
    let p = units::expand(&t, &params, false).expect("plans");
    let batches: Vec<usize> = (0..4)
        .map(|i| p.units[&format!("group/{i}")].batch.expect("batched").index)
        .collect();
    assert_eq!(batches, [0, 0, 1, 1]);
    assert_eq!(p.units["group/3"].server_id.as_str(), "s3");
}
