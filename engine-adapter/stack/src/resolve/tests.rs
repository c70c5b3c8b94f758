use std::path::Path;

use flue_proto::StackState;
use serde_json::json;

use super::*;
use crate::units;

const STACK: &str = r##"
heat_template_version: 2018-08-31
parameters:
  password: {type: string, hidden: true}
  port: {type: number, default: 8080}
  workers: {type: json, default: {b: node2, a: node1}}
resources:
  db_config:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      config: "#!/bin/sh\necho db"
      inputs:
        - {name: password}
        - {name: port, type: Number}
  db:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: db_config}
      server: db1
      name: database
      timeout: 30
      input_values:
        password:
          str_replace:
            template: "secret-$PW"
            params: {$PW: {get_param: password}}
        port: {get_param: port}
        token: {get_param: password}
        greeting: hello
  cluster:
    type: OS::Heat::SoftwareDeploymentGroup
    properties:
      config: {get_resource: db_config}
      servers: {get_param: workers}
      members_input: members
      input_values: {port: {get_param: port}}
  leaky_config:
    type: OS::Heat::SoftwareConfig
    properties:
      config:
        str_replace:
          template: "#!/bin/sh\necho $PW"
          params: {$PW: {get_param: password}}
  leaky:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: leaky_config}
      server: db1
"##;

struct Fixture {
    template: Template,
    params: Parameters,
    plan: Plan,
    state: StackState,
    deployments: HashMap<DeploymentId, Deployment>,
}

impl Fixture {
    fn new() -> Self {
        Self::with(STACK)
    }

    fn with(text: &str) -> Self {
        let template = Template::parse(text, Path::new(".")).expect("valid template");
        let given = [("password".to_owned(), "s3cret".to_owned())].into();
        let params = template.bind_parameters(&given).expect("parameters bind");
        let plan = units::expand(&template, &params, true).expect("expands");
        Self {
            template,
            params,
            plan,
            state: StackState::default(),
            deployments: HashMap::new(),
        }
    }

    fn resolve(&self, key: &str) -> Result<Resolved, TemplateError> {
        let r = RuntimeResolver {
            template: &self.template,
            params: &self.params,
            plan: &self.plan,
            state: &self.state,
            deployments: &self.deployments,
            hidden_outputs: HiddenOutputs::Refuse,
            reads: Default::default(),
        };
        unit_deployment(&r, &self.plan.units[key])
    }
}

fn decl<'a>(resolved: &'a Resolved, name: &str) -> &'a InputDecl {
    resolved
        .spec
        .inputs
        .iter()
        .find(|i| i.name == name)
        .unwrap_or_else(|| panic!("no declaration of {name}"))
}

#[test]
fn an_input_derived_from_a_hidden_parameter_is_declared_hidden() {
    let f = Fixture::new();
    let db = f.resolve("db").expect("resolves");
    assert_eq!(db.input_values["password"], json!("secret-s3cret"));
    let password = decl(&db, "password");
    assert!(password.hidden);
    // The config's own declaration is kept, only marked.
    assert_eq!(password.kind, "String");
    assert!(!decl(&db, "port").hidden);
    assert_eq!(decl(&db, "port").kind, "Number");
    // The config itself holds no hidden value.
    assert_eq!(db.spec.config, json!("#!/bin/sh\necho db"));
}

#[test]
fn undeclared_input_values_get_a_declaration() {
    let f = Fixture::new();
    let db = f.resolve("db").expect("resolves");
    let mut names: Vec<&str> = db.spec.inputs.iter().map(|i| i.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["greeting", "password", "port", "token"]);
    let greeting = decl(&db, "greeting");
    assert_eq!(
        *greeting,
        InputDecl {
            name: "greeting".into(),
            kind: "String".into(),
            description: None,
            default: None,
            hidden: false,
        }
    );
    assert_eq!(db.input_values["greeting"], json!("hello"));
    // Undeclared and derived from a hidden parameter: declared hidden.
    assert!(decl(&db, "token").hidden);
    assert_eq!(db.input_values["token"], json!("s3cret"));
    assert_eq!(db.input_values["port"], json!(8080));
    assert_eq!(db.name, "database");
    assert_eq!(db.timeout_secs, Some(30));
    assert_eq!(db.spec.name, "db_config");
    assert_eq!(db.spec.group, "script");
    assert!(!db.spec.substitute_inputs);
}

#[test]
fn members_input_adds_the_member_list() {
    let f = Fixture::new();
    let a = f.resolve("cluster/a").expect("resolves");
    let members = json!([
        {"name": "a", "server_id": "node1"},
        {"name": "b", "server_id": "node2"},
    ]);
    assert_eq!(a.input_values["members"], members);
    assert_eq!(decl(&a, "members").kind, "Json");
    assert!(!decl(&a, "members").hidden);
    assert_eq!(a.name, "cluster-a");
    // Every member gets the same list.
    let b = f.resolve("cluster/b").expect("resolves");
    assert_eq!(b.input_values["members"], members);
    assert_eq!(b.name, "cluster-b");
    // A single deployment has no members.
    let db = f.resolve("db").expect("resolves");
    assert!(!db.input_values.contains_key("members"));
}

#[test]
fn a_hidden_parameter_in_a_config_body_is_refused_with_its_path() {
    let f = Fixture::new();
    let e = f.resolve("leaky").expect_err("hidden value in a config");
    assert_eq!(e.path, "resources.leaky_config.properties.config");
    assert!(
        e.message.contains("uses a hidden parameter"),
        "{}",
        e.message
    );
}

#[test]
fn a_hidden_output_travels_only_as_a_whole_input_reference() {
    let text = r#"heat_template_version: 2018-08-31
resources:
  db_config:
    type: OS::Heat::SoftwareConfig
    properties:
      outputs: [{name: password, hidden: true}, {name: address}]
      config: x
  db: {type: OS::Heat::SoftwareDeployment, properties: {config: {get_resource: db_config}, server: s1}}
  web_config: {type: OS::Heat::SoftwareConfig, properties: {config: x}}
  web:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: web_config}
      server: s2
      input_values:
        pw: {get_attr: [db, password]}
        addr: {get_attr: [db, address]}
        url: {list_join: ['', ['pg://', {get_attr: [db, address]}]]}
        plain: 5
"#;
    // Anything but a whole input value is refused when the template loads.
    let leaky = format!(
        "{text}  leaky:\n    type: OS::Heat::SoftwareDeployment\n    properties:\n      config: {{get_resource: web_config}}\n      server: s2\n      input_values:\n        url: {{str_replace: {{template: \"u:PW\", params: {{PW: {{get_attr: [db, password]}}}}}}}}\n"
    );
    let err = Template::parse(&leaky, Path::new(".")).expect_err("refused");
    assert_eq!(
        err.path,
        "resources.leaky.properties.input_values.url.str_replace.params.PW"
    );
    assert!(err.message.contains("can only be passed whole"), "{err}");
    let template = Template::parse(text, Path::new(".")).expect("template");
    assert!(is_hidden_output(&template, "db", "password"));
    assert!(!is_hidden_output(&template, "db", "address"));
    let params = template
        .bind_parameters(&Default::default())
        .expect("params");
    let plan = units::expand(&template, &params, true).expect("plan");
    let db_id = DeploymentId::new("d-db").expect("id");
    let mut state = StackState::default();
    let mut unit: flue_proto::Unit = serde_json::from_value(json!({
        "resource": "db", "server_id": "s1", "action": "CREATE", "status": "COMPLETE",
        "baseline": "d-db", "baseline_config": "c-db"
    }))
    .expect("unit");
    unit.member = None;
    state.units.insert("db".into(), unit);
    let d: Deployment = serde_json::from_value(json!({
        "id": "d-db", "tenant": "default", "server_id": "s1", "config_id": "c-db",
        "group": "script", "name": "db", "action": "CREATE", "status": "COMPLETE",
        "outputs": {"password": "<hidden>", "address": "10.0.0.1:5432"},
        "timeout_secs": 60, "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z", "expires_at": "2026-01-01T01:00:00Z"
    }))
    .expect("deployment");
    let deployments: HashMap<DeploymentId, Deployment> = [(db_id.clone(), d)].into();
    let r = RuntimeResolver {
        template: &template,
        params: &params,
        plan: &plan,
        state: &state,
        deployments: &deployments,
        hidden_outputs: HiddenOutputs::Refuse,
        reads: Default::default(),
    };
    let web = unit_deployment(&r, &plan.units["web"]).expect("web resolves");
    assert_eq!(
        web.input_refs["pw"],
        OutputRef {
            deployment_id: db_id,
            output: "password".into()
        }
    );
    assert!(!web.input_values.contains_key("pw"));
    assert_eq!(web.input_values["addr"], json!("10.0.0.1:5432"));
    assert!(web.spec.inputs.iter().any(|i| i.name == "pw" && i.hidden));

    // What each input read is recorded, and how it was made; never a value.
    let read = |output: &str| OutputRead {
        unit: "db".into(),
        output: Some(output.into()),
        deployment_id: DeploymentId::new("d-db").expect("id"),
    };
    let source = |output: &str, made: InputMade| InputSource {
        reads: vec![read(output)],
        made,
    };
    assert_eq!(web.inputs_read["pw"], source("password", InputMade::Hidden));
    let whole = InputMade::Output { path: Vec::new() };
    assert_eq!(web.inputs_read["addr"], source("address", whole));
    assert_eq!(
        web.inputs_read["url"],
        source("address", InputMade::Expression)
    );
    assert!(!web.inputs_read.contains_key("plain"), "reads no output");
    let recorded = serde_json::to_string(&web.inputs_read).expect("json");
    assert!(!recorded.contains("10.0.0.1"), "{recorded}");
}

#[test]
fn hidden_outputs_of_a_group_cannot_be_passed_on() {
    let text = r#"heat_template_version: 2018-08-31
resources:
  member_config:
    type: OS::Heat::SoftwareConfig
    properties: {config: x, outputs: [{name: token, hidden: true}]}
  grp:
    type: OS::Heat::SoftwareDeploymentGroup
    properties: {config: {get_resource: member_config}, servers: {a: s1}}
  user:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: member_config}
      server: s2
      input_values: {tokens: {get_attr: [grp, token]}}
"#;
    let err = Template::parse(text, Path::new(".")).expect_err("refused");
    assert_eq!(err.path, "resources.user.properties.input_values.tokens");
    assert!(err.message.contains("hidden outputs of a group"), "{err}");
}

const HEAT_DEFAULTS: &str = r##"
heat_template_version: 2018-08-31
parameters:
  password: {type: string}
resources:
  component:
    type: OS::Heat::SoftwareComponent
    properties:
      configs:
        - {tool: script, config: "echo up"}
        - {actions: [DELETE], tool: ansible, config: {get_param: password}}
      outputs: [{name: last_action}]
  plain: {type: OS::Heat::SoftwareConfig, properties: {config: "echo"}}
  spelled: {type: OS::Heat::SoftwareConfig, properties: {group: "Heat::Ungrouped"}}
  listed: {type: OS::Heat::StructuredConfig, properties: {group: os-apply-config, config: [a, {b: 1}]}}
  c: {type: OS::Heat::SoftwareDeployment, properties: {config: {get_resource: component}, server: s1, actions: [CREATE]}}
  p: {type: OS::Heat::SoftwareDeployment, properties: {config: {get_resource: plain}, server: s1}}
  s: {type: OS::Heat::SoftwareDeployment, properties: {config: {get_resource: spelled}, server: s1}}
  l: {type: OS::Heat::SoftwareDeployment, properties: {config: {get_resource: listed}, server: s1}}
"##;

#[test]
fn a_component_runs_with_group_component_for_the_actions_its_configs_list() {
    let f = Fixture::with(HEAT_DEFAULTS);
    let c = f.resolve("c").expect("resolves");
    assert_eq!(c.spec.group, "component");
    // Heat's default actions made explicit for the agent; functions resolved.
    assert_eq!(
        c.spec.config,
        json!({"configs": [
            {"actions": ["CREATE", "UPDATE"], "tool": "script", "config": "echo up"},
            {"actions": ["DELETE"], "tool": "ansible", "config": "s3cret"},
        ]})
    );
    assert_eq!(c.spec.outputs[0].name, "last_action");
    // The deployment's own `actions` give way to the configs', as in Heat.
    assert_eq!(f.plan.units["c"].actions, ["CREATE", "UPDATE", "DELETE"]);
}

#[test]
fn a_config_without_a_group_is_heat_ungrouped_and_a_structured_body_may_be_a_list() {
    let f = Fixture::with(HEAT_DEFAULTS);
    assert_eq!(
        f.resolve("p").expect("resolves").spec.group,
        "Heat::Ungrouped"
    );
    assert_eq!(
        f.resolve("s").expect("resolves").spec.group,
        "Heat::Ungrouped"
    );
    let l = f.resolve("l").expect("resolves");
    assert_eq!(l.spec.config, json!(["a", {"b": 1}]));
    assert!(l.spec.substitute_inputs);
}
