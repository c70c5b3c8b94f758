use std::path::PathBuf;

use serde_json::json;

use super::*;

/// A scratch directory removed on drop (the crate has no tempfile dependency).
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("flue-tpl-test-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temp dir");
        Self(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const FULL: &str = r##"
heat_template_version: 2018-08-31
description: a database and a web server
parameters:
  db_password: {type: string, hidden: true, description: the password}
  web_port: {type: number, default: 8080}
  debug: {type: boolean, default: "no", label: Debug}
  extra: {type: json, default: {a: 1}}
  names: {type: comma_delimited_list, default: "a, b ,c", constraints: [{length: {min: 1}}]}
  db_server: {type: string, default: server-db, immutable: true}
parameter_groups: [{label: x, parameters: [web_port]}]
resources:
  db_server:
    type: OS::Flue::Server
    properties: {server_id: {get_param: db_server}}
  web_server:
    type: OS::Flue::Server
    metadata: {anything: [1, 2]}
    properties: {server_id: server-web}
  db_config:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      config: |
        #!/bin/sh
        echo "$db_password" > /dev/null
      inputs:
        - {name: db_password, type: String, hidden: true}
      outputs:
        - {name: host}
        - {name: failure, error_output: true}
      options: {retries: 2}
      hooks:
        DELETE: "#!/bin/sh\necho bye"
      actions:
        backup: {config: "#!/bin/sh\necho backup", description: take a backup}
  web_config:
    type: OS::Heat::StructuredConfig
    properties:
      group: ansible
      config:
        port: {get_input: port}
        db: {get_input: db_host}
  db_deploy:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: db_config}
      server: {get_resource: db_server}
      input_values: {db_password: {get_param: db_password}}
      actions: [CREATE, UPDATE, DELETE]
      name: db
      signal_transport: NO_SIGNAL
      timeout: 600
  web_deploy:
    type: OS::Heat::StructuredDeployment
    depends_on: db_deploy
    properties:
      config: {get_resource: web_config}
      server: {get_resource: web_server}
      input_values:
        port: {get_param: web_port}
        db_host: {get_attr: [db_deploy, host]}
        url:
          str_replace:
            template: http://$HOST:$PORT/
            params: {$HOST: {get_attr: [db_deploy, host]}, $PORT: {get_param: web_port}}
  cluster:
    type: OS::Heat::SoftwareDeploymentGroup
    depends_on: [db_deploy, web_deploy]
    update_policy:
      batch_create: {max_batch_size: 2}
      rolling_update: {max_batch_size: 1, pause_time: 1.5}
    properties:
      config: {get_resource: db_config}
      servers: {a: {get_resource: web_server}, b: server-b, c: {get_param: db_server}}
      members_input: members
      input_values:
        all: {list_join: [",", {get_param: names}, [x]]}
outputs:
  db_host:
    value: {get_attr: [db_deploy, host]}
    description: where the database is
  stdouts:
    value: {get_attr: [cluster, deploy_stdouts]}
  web_id:
    value: {get_attr: [web_server, server_id]}
"##;

fn full() -> Template {
    Template::parse(FULL, Path::new(".")).expect("valid template")
}

#[test]
fn a_full_template_parses_into_the_model() {
    let t = full();
    assert_eq!(
        t.description.as_deref(),
        Some("a database and a web server")
    );
    assert_eq!(t.resources.len(), 7);
    let p = &t.parameters;
    assert_eq!(
        p["db_password"],
        ParamDecl {
            kind: ParamType::String,
            default: None,
            hidden: true,
            description: Some("the password".to_owned()),
            label: None,
            immutable: false,
            constraints: Vec::new(),
        }
    );
    assert_eq!(p["web_port"].default, Some(json!(8080)));
    assert_eq!(p["debug"].default, Some(json!(false)));
    assert_eq!(p["extra"].default, Some(json!({"a": 1})));
    assert_eq!(p["names"].default, Some(json!(["a", "b", "c"])));

    let db = &t.resources["db_deploy"];
    assert_eq!(db.kind, ResourceKind::SoftwareDeployment);
    assert_eq!(db.name, "db_deploy");
    assert_eq!(
        db.properties["server"],
        json!({"get_resource": "db_server"})
    );
    assert_eq!(db.properties["timeout"], json!(600));
    let web = &t.resources["web_deploy"];
    assert_eq!(web.kind, ResourceKind::SoftwareDeployment);
    assert_eq!(web.depends_on, vec!["db_deploy".to_owned()]);
    assert_eq!(
        web.properties["input_values"]["db_host"],
        json!({"get_attr": ["db_deploy", "host"]})
    );
    assert_eq!(
        t.resources["web_config"].properties["config"],
        json!({"port": {"get_input": "port"}, "db": {"get_input": "db_host"}})
    );
    assert_eq!(
        t.resources["web_config"].kind,
        ResourceKind::StructuredConfig
    );
    let cluster = &t.resources["cluster"];
    assert_eq!(cluster.kind, ResourceKind::SoftwareDeploymentGroup);
    assert_eq!(
        cluster.update_policy,
        UpdatePolicy {
            batch_create: Some(Batching {
                max_batch_size: 2,
                pause_time: Duration::ZERO,
                min_in_service: 0,
            }),
            rolling_update: Some(Batching {
                max_batch_size: 1,
                pause_time: Duration::from_millis(1500),
                min_in_service: 0,
            }),
        }
    );
    assert_eq!(db.update_policy, UpdatePolicy::default());
    assert_eq!(
        t.outputs["db_host"],
        OutputDef {
            value: json!({"get_attr": ["db_deploy", "host"]}),
            description: Some("where the database is".to_owned())
        }
    );
    assert_eq!(
        config_outputs(&t, db),
        Some(vec!["host".to_owned(), "failure".to_owned()])
    );
}

#[test]
fn json_templates_and_quoted_versions_work_too() {
    let t = Template::parse(
        r#"{"heat_template_version": "2018-08-31",
            "resources": {"s": {"type": "OS::Flue::Server", "properties": {"server_id": "x"}}}}"#,
        Path::new("."),
    )
    .expect("json template");
    assert_eq!(t.resources["s"].kind, ResourceKind::Server);
    // A YAML flow mapping that is not JSON still parses as YAML.
    Template::parse(
        "{heat_template_version: 2021-04-16, resources: {s: {type: OS::Flue::Server, properties: {server_id: x}}}}",
        Path::new("."),
    )
    .expect("flow yaml");
}

fn resource_kinds() -> Vec<(&'static str, ResourceKind)> {
    vec![
        ("OS::Nova::Server", ResourceKind::NovaServer),
        (
            "OS::Neutron::Port",
            ResourceKind::External("OS::Neutron::Port"),
        ),
        ("OS::Heat::RandomString", ResourceKind::RandomString),
        ("OS::Heat::Value", ResourceKind::HeatValue),
        ("OS::Heat::None", ResourceKind::HeatNone),
        ("OS::Heat::ResourceGroup", ResourceKind::ResourceGroup),
        ("OS::Heat::CloudConfig", ResourceKind::CloudConfig),
        ("OS::Heat::MultipartMime", ResourceKind::MultipartMime),
        ("OS::Heat::SoftwareConfig", ResourceKind::SoftwareConfig),
        ("OS::Heat::StructuredConfig", ResourceKind::StructuredConfig),
        (
            "OS::Heat::SoftwareDeployment",
            ResourceKind::SoftwareDeployment,
        ),
        (
            "OS::Heat::StructuredDeployment",
            ResourceKind::SoftwareDeployment,
        ),
        (
            "OS::Heat::SoftwareDeploymentGroup",
            ResourceKind::SoftwareDeploymentGroup,
        ),
        (
            "OS::Heat::StructuredDeploymentGroup",
            ResourceKind::SoftwareDeploymentGroup,
        ),
        ("OS::Flue::Server", ResourceKind::Server),
    ]
}

#[test]
fn resource_type_names_round_trip() {
    for (name, kind) in resource_kinds() {
        assert_eq!(ResourceKind::from_type(name), Some(kind));
        assert_eq!(ResourceKind::from_type(kind.type_name()), Some(kind));
    }
    assert_eq!(ResourceKind::from_type("OS::Trove::Instance"), None);
    assert_eq!(ResourceKind::Server.to_string(), "OS::Flue::Server");
}

/// A small valid template as JSON, to break one field at a time.
fn base() -> Value {
    json!({
        "heat_template_version": "2018-08-31",
        "parameters": {"srv": {"type": "string", "default": "s1"}},
        "resources": {
            "server": {"type": "OS::Flue::Server", "properties": {"server_id": "s1"}},
            "config": {"type": "OS::Heat::SoftwareConfig",
                       "properties": {"config": "echo", "outputs": [{"name": "result"}]}},
            "deploy": {"type": "OS::Heat::SoftwareDeployment",
                       "properties": {"config": {"get_resource": "config"},
                                      "server": {"get_resource": "server"}}},
            "group": {"type": "OS::Heat::SoftwareDeploymentGroup",
                      "properties": {"config": {"get_resource": "config"},
                                     "servers": {"m1": "s1"}}}
        }
    })
}

fn parse_value(v: &Value) -> Result<Template, TemplateError> {
    Template::parse(&v.to_string(), Path::new("."))
}

/// Asserts that `v` is refused at `path` with a message containing `fragment`.
#[track_caller]
fn refused(v: &Value, path: &str, fragment: &str) {
    let e = parse_value(v).expect_err("template should be refused");
    assert_eq!(e.path, path, "{e}");
    assert!(e.message.contains(fragment), "{e:?} lacks {fragment:?}");
}

#[test]
fn the_base_template_is_valid() {
    parse_value(&base()).expect("valid");
}

#[test]
fn sections_are_checked() {
    let mut v = base();
    v["mappings"] = json!({});
    refused(&v, "mappings", "unknown section");
    let mut v = base();
    v.as_object_mut()
        .expect("map")
        .remove("heat_template_version");
    refused(&v, "heat_template_version", "required");
    let mut v = base();
    v["heat_template_version"] = json!(2018);
    refused(&v, "heat_template_version", "must be a version");
    let mut v = base();
    v["resources"] = json!({});
    refused(&v, "resources", "at least one resource");
    let mut v = base();
    v["description"] = json!(["x"]);
    refused(&v, "description", "must be a string, got a list");
    let mut v = base();
    v["outputs"] = json!({"o": {"description": "no value"}});
    refused(&v, "outputs.o.value", "required");
    let mut v = base();
    v["outputs"] = json!({"o": {"value": 1, "condition": "x"}});
    refused(&v, "outputs.o.condition", "Invalid condition \"x\"");
    let mut v = base();
    v["outputs"] = json!({"o": {"value": 1, "label": "x"}});
    refused(&v, "outputs.o.label", "unknown key");
    let e = Template::parse("- a\n- b\n", Path::new(".")).expect_err("a list");
    assert_eq!(e.path, "template");
}

#[test]
fn yaml_errors_say_where() {
    let e = Template::parse("heat_template_version: [1,\nresources: 2", Path::new("."))
        .expect_err("bad yaml");
    assert_eq!(e.path, "template");
    assert!(e.message.starts_with("not valid YAML: "), "{e}");
    assert!(e.message.contains("line 1"), "{e}");
    let e = Template::parse(
        "heat_template_version: 2018-08-31\nresources: {}\nresources: {}\n",
        Path::new("."),
    )
    .expect_err("duplicate key");
    assert!(
        e.message.contains("duplicate mapping key: resources"),
        "{e}"
    );
    assert!(!e.message.contains("DuplicateKeyPolicy"), "{e}");
}

#[test]
fn resource_definitions_are_checked() {
    let mut v = base();
    v["resources"]["server"]["type"] = json!("OS::Trove::Instance");
    refused(
        &v,
        "resources.server.type",
        "unsupported resource type \"OS::Trove::Instance\"",
    );
    let mut v = base();
    v["resources"]["server"]["deletion_policy"] = json!("retain");
    refused(
        &v,
        "resources.server.deletion_policy",
        "unknown key; allowed here: type, properties",
    );
    let mut v = base();
    v["resources"]["bad.name"] =
        json!({"type": "OS::Flue::Server", "properties": {"server_id": "x"}});
    refused(&v, "resources.bad.name", "resource name contains '.'");
    let mut v = base();
    v["resources"]["server"]["properties"] = json!([1]);
    refused(
        &v,
        "resources.server.properties",
        "must be a map, got a list",
    );
    let mut v = base();
    v["resources"]["deploy"]["update_policy"] = json!({"rolling_update": {}});
    refused(
        &v,
        "resources.deploy.update_policy",
        "only deployment groups",
    );
}

#[test]
fn unknown_and_missing_properties_name_resource_and_property() {
    let cases = [
        ("server", "flavor", "resources.server.properties.flavor"),
        ("config", "server", "resources.config.properties.server"),
        ("deploy", "servers", "resources.deploy.properties.servers"),
        ("group", "server", "resources.group.properties.server"),
    ];
    for (resource, prop, path) in cases {
        let mut v = base();
        v["resources"][resource]["properties"][prop] = json!("x");
        refused(&v, path, "unknown key; allowed here:");
    }
    let cases = [
        ("server", "server_id"),
        ("deploy", "config"),
        ("deploy", "server"),
        ("group", "servers"),
        ("group", "config"),
    ];
    for (resource, prop) in cases {
        let mut v = base();
        v["resources"][resource]["properties"]
            .as_object_mut()
            .expect("map")
            .remove(prop);
        refused(
            &v,
            &format!("resources.{resource}.properties.{prop}"),
            "required",
        );
    }
}

#[test]
fn config_properties_are_checked() {
    let at = "resources.config.properties";
    let cases: Vec<(&str, Value, String, &str)> = vec![
        (
            "group",
            json!("a/b"),
            format!("{at}.group"),
            "hook group name",
        ),
        (
            "config",
            json!({"a": 1}),
            format!("{at}.config"),
            "use OS::Heat::StructuredConfig",
        ),
        (
            "inputs",
            json!({"name": "x"}),
            format!("{at}.inputs"),
            "must be a list",
        ),
        (
            "inputs",
            json!([{"name": "a=b"}]),
            format!("{at}.inputs[0].name"),
            "must be non-empty and hold no '=' or NUL",
        ),
        (
            "inputs",
            json!([{"type": "String"}]),
            format!("{at}.inputs[0].name"),
            "required",
        ),
        (
            "inputs",
            json!([{"name": "a"}, {"name": "a"}]),
            format!("{at}.inputs[1].name"),
            "declared twice",
        ),
        (
            "inputs",
            json!([{"name": "a", "secret": true}]),
            format!("{at}.inputs[0].secret"),
            "unknown key",
        ),
        (
            "inputs",
            json!([{"name": "a", "hidden": "yes"}]),
            format!("{at}.inputs[0].hidden"),
            "true or false",
        ),
        (
            "outputs",
            json!([{"name": "o", "error_output": 1}]),
            format!("{at}.outputs[0].error_output"),
            "true or false",
        ),
        (
            "outputs",
            json!([{"name": "o", "hidden": "yes"}]),
            format!("{at}.outputs[0].hidden"),
            "true or false",
        ),
        (
            "options",
            json!("x"),
            format!("{at}.options"),
            "must be a map",
        ),
        (
            "hooks",
            json!({"BACKUP": "x"}),
            format!("{at}.hooks.BACKUP"),
            "not a lifecycle action",
        ),
        (
            "hooks",
            json!(["DELETE"]),
            format!("{at}.hooks"),
            "must be a map",
        ),
        (
            "actions",
            json!({"DELETE": {"config": "x"}}),
            format!("{at}.actions.DELETE"),
            "give its body in `hooks`",
        ),
        (
            "actions",
            json!({"back up": {"config": "x"}}),
            format!("{at}.actions.back up"),
            "action name contains ' '",
        ),
        (
            "actions",
            json!({"backup": {"description": "x"}}),
            format!("{at}.actions.backup.config"),
            "required",
        ),
        (
            "actions",
            json!({"backup": {"config": "x", "when": 1}}),
            format!("{at}.actions.backup.when"),
            "unknown key",
        ),
    ];
    for (prop, value, path, fragment) in cases {
        let mut v = base();
        v["resources"]["config"]["properties"][prop] = value;
        refused(&v, &path, fragment);
    }
    let mut v = base();
    v["resources"]["config"]["type"] = json!("OS::Heat::StructuredConfig");
    refused(
        &v,
        &format!("{at}.config"),
        "must be a map or a list, got a string",
    );
    // Heat serialises any structured body, a list too.
    v["resources"]["config"]["properties"]["config"] = json!([{"a": 1}, "b"]);
    parse_value(&v).expect("a list body");
    v["resources"]["config"]["properties"]["config"] = json!({"get_param": "srv"});
    parse_value(&v).expect("a call is fine anywhere a value goes");
}

#[test]
fn deployment_properties_are_checked() {
    let at = "resources.deploy.properties";
    let cases: Vec<(&str, Value, String, &str)> = vec![
        (
            "config",
            json!("config"),
            format!("{at}.config"),
            "must be {get_resource:",
        ),
        (
            "config",
            json!({"get_resource": "nope"}),
            format!("{at}.config"),
            "resource \"nope\" does not exist",
        ),
        (
            "config",
            json!({"get_resource": "server"}),
            format!("{at}.config"),
            "is a OS::Flue::Server, not a software config",
        ),
        (
            "server",
            json!({"get_attr": ["deploy", "x"]}),
            format!("{at}.server"),
            "no get_attr",
        ),
        (
            "server",
            json!({"get_resource": "config"}),
            format!("{at}.server"),
            "not an OS::Nova::Server or OS::Flue::Server",
        ),
        (
            "server",
            json!({"get_resource": "nope"}),
            format!("{at}.server"),
            "does not exist",
        ),
        (
            "server",
            json!("bad id"),
            format!("{at}.server"),
            "server id \"bad id\" contains ' '",
        ),
        (
            "server",
            json!({"get_param": ["srv", {"get_attr": ["group", "x"]}]}),
            format!("{at}.server"),
            "no get_attr",
        ),
        (
            "server",
            json!(["s1"]),
            format!("{at}.server"),
            "must be {get_resource:",
        ),
        (
            "input_values",
            json!(["a"]),
            format!("{at}.input_values"),
            "must be a map",
        ),
        (
            "input_values",
            json!({"get_param": "srv"}),
            format!("{at}.input_values"),
            "must be a map",
        ),
        (
            "actions",
            json!(["CREATE", "BACKUP"]),
            format!("{at}.actions[1]"),
            "must be one of CREATE",
        ),
        (
            "actions",
            json!("CREATE"),
            format!("{at}.actions"),
            "must be a list",
        ),
        ("name", json!(3), format!("{at}.name"), "must be a string"),
        (
            "timeout",
            json!(0),
            format!("{at}.timeout"),
            "positive whole number",
        ),
        (
            "timeout",
            json!(1.5),
            format!("{at}.timeout"),
            "positive whole number",
        ),
    ];
    for (prop, value, path, fragment) in cases {
        let mut v = base();
        v["resources"]["deploy"]["properties"][prop] = value;
        refused(&v, &path, fragment);
    }
    let ok = [
        ("server", json!("s9")),
        ("server", json!({"get_param": "srv"})),
        ("actions", json!({"get_param": "srv"})),
        ("timeout", json!({"get_param": "srv"})),
        ("signal_transport", json!("HEAT_SIGNAL")),
    ];
    for (prop, value) in ok {
        let mut v = base();
        v["resources"]["deploy"]["properties"][prop] = value;
        parse_value(&v).expect("accepted");
    }
}

#[test]
fn group_properties_are_checked() {
    let at = "resources.group.properties";
    let cases: Vec<(&str, Value, String, &str)> = vec![
        (
            "servers",
            json!(["s1"]),
            format!("{at}.servers"),
            "map of member name to server",
        ),
        (
            "servers",
            json!({"m.1": "s1"}),
            format!("{at}.servers.m.1"),
            "member name contains '.'",
        ),
        (
            "servers",
            json!({"m1": {"get_attr": ["deploy", "x"]}}),
            format!("{at}.servers.m1"),
            "no get_attr",
        ),
        (
            "servers",
            json!({"get_attr": ["deploy", "x"]}),
            format!("{at}.servers"),
            "or {get_param",
        ),
        (
            "members_input",
            json!("my-members"),
            format!("{at}.members_input"),
            "input name",
        ),
    ];
    for (prop, value, path, fragment) in cases {
        let mut v = base();
        v["resources"]["group"]["properties"][prop] = value;
        refused(&v, &path, fragment);
    }
    let at = "resources.group.update_policy";
    let cases: Vec<(Value, String, &str)> = vec![
        (
            json!({"rolling": {}}),
            format!("{at}.rolling"),
            "unknown key",
        ),
        (
            json!({"rolling_update": {"max_batch_size": 0}}),
            format!("{at}.rolling_update.max_batch_size"),
            "at least 1",
        ),
        (
            json!({"batch_create": {"pause_time": -1}}),
            format!("{at}.batch_create.pause_time"),
            "0 or more",
        ),
        (
            json!({"batch_create": {"pause_time": "PT1M"}}),
            format!("{at}.batch_create.pause_time"),
            "number of seconds",
        ),
        (
            json!({"batch_create": {"min_in_service": 1}}),
            format!("{at}.batch_create.min_in_service"),
            "unknown key",
        ),
    ];
    for (policy, path, fragment) in cases {
        let mut v = base();
        v["resources"]["group"]["update_policy"] = policy;
        refused(&v, &path, fragment);
    }
    let mut v = base();
    v["resources"]["group"]["properties"]["servers"] = json!({"get_param": "srv"});
    parse_value(&v).expect("servers from a parameter");
}

#[test]
fn server_ids_are_checked() {
    let mut v = base();
    v["resources"]["server"]["properties"]["server_id"] = json!("a.b");
    refused(
        &v,
        "resources.server.properties.server_id",
        "server id \"a.b\"",
    );
    v["resources"]["server"]["properties"]["server_id"] = json!({"get_attr": ["deploy", "x"]});
    refused(
        &v,
        "resources.server.properties.server_id",
        "must be a server id or {get_param",
    );
}

#[test]
fn depends_on_names_must_exist() {
    let mut v = base();
    v["resources"]["deploy"]["depends_on"] = json!(["group", "nope"]);
    refused(
        &v,
        "resources.deploy.depends_on",
        "resource \"nope\" does not exist",
    );
    v["resources"]["deploy"]["depends_on"] = json!("deploy");
    refused(&v, "resources.deploy.depends_on", "cannot depend on itself");
    v["resources"]["deploy"]["depends_on"] = json!({"a": 1});
    refused(
        &v,
        "resources.deploy.depends_on",
        "a resource name or a list",
    );
}

#[test]
fn function_targets_are_checked_statically() {
    let at = "resources.deploy.properties.input_values.x";
    let cases: Vec<(Value, &str)> = vec![
        (
            json!({"get_param": "nope"}),
            "get_param: parameter \"nope\" does not exist (declared: srv)",
        ),
        (
            json!({"get_param": [1]}),
            "get_param: expected [parameter name, key…]",
        ),
        (
            json!({"get_resource": "nope"}),
            "get_resource: resource \"nope\" does not exist",
        ),
        (
            json!({"get_attr": ["db_deplyo", "host"]}),
            "get_attr: resource \"db_deplyo\" does not exist",
        ),
        (
            json!({"get_attr": ["config", "result"]}),
            "is a OS::Heat::SoftwareConfig; get_attr works on deployments",
        ),
        (json!({"get_attr": ["server", "ip"]}), "it has server_id"),
        (
            json!({"get_attr": ["server"]}),
            "get_attr: expected [resource, attribute, key…]",
        ),
        (
            json!({"str_replace": {"template": "x"}}),
            "str_replace: needs both template and params",
        ),
        (
            json!({"str_replace": {"template": 1, "params": {}}}),
            "template must be a string, got a number",
        ),
        (
            json!({"str_replace": {"template": "x", "params": []}}),
            "params must be a map, got a list",
        ),
        (
            json!({"list_join": [","]}),
            "list_join: expected at least one list",
        ),
        (
            json!({"list_join": [1, ["a"]]}),
            "the delimiter must be a string",
        ),
        (
            json!({"list_join": [",", "a"]}),
            "expected lists to join, got a string",
        ),
        (
            json!({"yaql": {"expression": "$.data"}}),
            "yaql is not supported by Flue",
        ),
    ];
    for (value, fragment) in cases {
        let mut v = base();
        v["resources"]["deploy"]["properties"]["input_values"] = json!({"x": value});
        refused(&v, at, fragment);
    }
    // Errors inside arguments point into them.
    let mut v = base();
    v["resources"]["deploy"]["properties"]["input_values"] = json!({"x": {"str_replace": {
        "template": "$A", "params": {"$A": {"get_attr": ["nope", "x"]}}}}});
    refused(
        &v,
        &format!("{at}.str_replace.params.$A"),
        "get_attr: resource \"nope\"",
    );
    let mut v = base();
    v["resources"]["deploy"]["properties"]["input_values"] = json!({"x": {"str_replace": {
        "template": "x", "params": {}, "extra": 1}}});
    refused(&v, &format!("{at}.str_replace.extra"), "unknown key");
    let mut v = base();
    v["outputs"] = json!({"o": {"value": {"get_attr": ["server", "nope"]}}});
    refused(&v, "outputs.o.value", "has no attribute \"nope\"");
}

#[test]
fn valid_attributes_are_accepted() {
    let attrs = [
        json!({"get_attr": ["deploy", "result"]}),
        json!({"get_attr": ["deploy", "deploy_stdout"]}),
        json!({"get_attr": ["deploy", "deploy_status_code"]}),
        json!({"get_attr": ["group", "deploy_stderrs", "m1"]}),
        json!({"get_attr": ["group", "result", {"get_param": "srv"}]}),
        // As Heat: an output the config does not declare (it reads null until a hook
        // answers it), and any member attribute passed through a group, by member.
        json!({"get_attr": ["deploy", "undeclared"]}),
        json!({"get_attr": ["group", "deploy_stdout"]}),
        json!({"get_attr": ["group", "deploy_status_code", "m1"]}),
        json!({"get_attr": ["server", "server_id"]}),
        json!({"get_input": "left_for_the_agent"}),
        json!({"list_join": [{"get_param": "srv"}, {"get_param": "srv"}, ["a"]]}),
    ];
    for attr in attrs {
        let mut v = base();
        v["outputs"] = json!({"o": {"value": attr}});
        parse_value(&v).expect("accepted");
    }
    // Output declarations must be literal (hidden ones are known before anything runs).
    let mut v = base();
    v["resources"]["config"]["properties"]["outputs"] = json!({"get_param": "srv"});
    refused(&v, "resources.config.properties.outputs", "must be a list");
}

#[test]
fn a_dependency_cycle_is_printed() {
    let mut v = base();
    let deploy = v["resources"]["deploy"].clone();
    for (name, next) in [("a", "b"), ("b", "c"), ("c", "a")] {
        let mut d = deploy.clone();
        d["properties"]["input_values"] = json!({"x": {"get_attr": [next, "deploy_stdout"]}});
        v["resources"][name] = d;
    }
    let e = parse_value(&v).expect_err("cycle");
    assert_eq!(
        e.to_string(),
        "resources: dependency cycle: a -> b -> c -> a"
    );
    // Through depends_on and a config that reads a deployment, too.
    let mut v = base();
    v["resources"]["config"]["properties"]["config"] =
        json!({"get_attr": ["deploy", "deploy_stdout"]});
    let e = parse_value(&v).expect_err("cycle");
    assert_eq!(
        e.to_string(),
        "resources: dependency cycle: config -> deploy -> config"
    );
}

#[test]
fn get_file_is_inlined_relative_to_the_template() {
    let dir = TempDir::new();
    std::fs::create_dir(dir.0.join("scripts")).expect("mkdir");
    std::fs::write(dir.0.join("scripts/db.sh"), "#!/bin/sh\necho db\n").expect("write");
    let mut v = base();
    v["resources"]["config"]["properties"]["config"] = json!({"get_file": "scripts/db.sh"});
    v["resources"]["config"]["properties"]["hooks"] =
        json!({"DELETE": {"get_file": "scripts/db.sh"}});
    v["outputs"] = json!({"script": {"value": {"get_file": "scripts/db.sh"}}});
    let path = dir.0.join("stack.json");
    std::fs::write(&path, v.to_string()).expect("write");
    let t = Template::load(&path).expect("loads");
    let props = &t.resources["config"].properties;
    assert_eq!(props["config"], json!("#!/bin/sh\necho db\n"));
    assert_eq!(props["hooks"]["DELETE"], json!("#!/bin/sh\necho db\n"));
    assert_eq!(t.outputs["script"].value, json!("#!/bin/sh\necho db\n"));

    v["resources"]["config"]["properties"]["config"] = json!({"get_file": "../etc/passwd"});
    std::fs::write(&path, v.to_string()).expect("write");
    let e = Template::load(&path).expect_err("escape");
    assert_eq!(e.path, "resources.config.properties.config");
    assert!(e.message.starts_with("get_file: "), "{e}");

    let e = Template::load(&dir.0.join("missing.yaml")).expect_err("missing");
    assert!(e.path.ends_with("missing.yaml"), "{e}");
    assert!(e.message.starts_with("cannot read"), "{e}");
}

#[test]
fn parameter_declarations_are_checked() {
    let cases: Vec<(Value, &str, &str)> = vec![
        (json!({"default": 1}), "parameters.p.type", "required"),
        (
            json!({"type": "String"}),
            "parameters.p.type",
            "must be one of string, number",
        ),
        (
            json!({"type": "number", "default": "many"}),
            "parameters.p.default",
            "not a number",
        ),
        (
            json!({"type": "boolean", "default": "maybe"}),
            "parameters.p.default",
            "true or false",
        ),
        (
            json!({"type": "json", "default": "[1"}),
            "parameters.p.default",
            "not valid JSON",
        ),
        (
            json!({"type": "json", "default": 3}),
            "parameters.p.default",
            "must be a json, got a number",
        ),
        (
            json!({"type": "comma_delimited_list", "default": [{}]}),
            "parameters.p.default",
            "list items must be strings",
        ),
        (
            json!({"type": "string", "hidden": "yes"}),
            "parameters.p.hidden",
            "true or false",
        ),
        (
            json!({"type": "string", "secret": true}),
            "parameters.p.secret",
            "unknown key",
        ),
        (
            json!({"type": "string", "constraints": {"length": {}}}),
            "parameters.p.constraints",
            "list of constraint maps",
        ),
        (json!("string"), "parameters.p", "must be a map"),
    ];
    for (decl, path, fragment) in cases {
        let mut v = base();
        v["parameters"]["p"] = decl;
        refused(&v, path, fragment);
    }
    let mut v = base();
    v["parameters"]["a=b"] = json!({"type": "string"});
    refused(&v, "parameters.a=b", "parameter name contains '='");
    let mut v = base();
    v["parameters"]["n"] = json!({"type": "string", "default": 5});
    assert_eq!(
        parse_value(&v).expect("valid").parameters["n"].default,
        Some(json!("5"))
    );
}

fn given(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn bind_parameters_types_values_and_adds_defaults() {
    let t = full();
    let p = t
        .bind_parameters(&given(&[
            ("db_password", "pw"),
            ("web_port", "9090"),
            ("debug", "TRUE"),
            ("extra", r#"{"k": [1, 2]}"#),
            ("names", "x,y"),
        ]))
        .expect("bound");
    assert_eq!(p.values["db_password"], json!("pw"));
    assert_eq!(p.values["web_port"], json!(9090));
    assert_eq!(p.values["debug"], json!(true));
    assert_eq!(p.values["extra"], json!({"k": [1, 2]}));
    assert_eq!(p.values["names"], json!(["x", "y"]));
    assert_eq!(p.values["db_server"], json!("server-db"));
    assert_eq!(p.hidden, BTreeSet::from(["db_password".to_owned()]));
    assert!(!p.visible().contains_key("db_password"));
    assert_eq!(p.visible().len(), 5);

    let p = t
        .bind_parameters(&given(&[
            ("db_password", "pw"),
            ("web_port", "0.5"),
            ("names", "z"),
        ]))
        .expect("bound");
    assert_eq!(p.values["web_port"], json!(0.5));
    assert_eq!(p.values["names"], json!(["z"]));
    assert_eq!(p.values["debug"], json!(false));
}

#[test]
fn bind_parameters_refuses_missing_unknown_and_badly_typed_values() {
    let t = full();
    let e = t.bind_parameters(&BTreeMap::new()).expect_err("missing");
    assert_eq!(
        e.to_string(),
        "parameters.db_password: required, no default; pass -P db_password=…"
    );
    let e = t
        .bind_parameters(&given(&[("db_password", "x"), ("webport", "1")]))
        .expect_err("unknown");
    assert_eq!(e.path, "parameters.webport");
    assert!(
        e.message
            .contains("unknown parameter; the template declares db_password, db_server, debug"),
        "{e}"
    );
    let e = t
        .bind_parameters(&given(&[("db_password", "x"), ("web_port", "eighty")]))
        .expect_err("not a number");
    assert_eq!(
        e.to_string(),
        "parameters.web_port: not a number (expected a number)"
    );
    let e = t
        .bind_parameters(&given(&[("db_password", "x"), ("extra", "\"s\"")]))
        .expect_err("not a map");
    assert!(e.message.contains("must be a JSON map or list"), "{e}");
    let e = t
        .bind_parameters(&given(&[("db_password", "x"), ("debug", "maybe")]))
        .expect_err("not a boolean");
    assert!(e.message.contains("must be true or false"), "{e}");
}

#[test]
fn bad_hidden_values_are_never_echoed() {
    let mut v = base();
    v["parameters"]["pin"] = json!({"type": "number", "hidden": true, "default": 1});
    let t = parse_value(&v).expect("valid");
    let e = t
        .bind_parameters(&given(&[("pin", "hunter2")]))
        .expect_err("not a number");
    assert!(!e.to_string().contains("hunter2"), "{e}");
}

#[test]
fn unknown_parameters_when_none_are_declared() {
    let mut v = base();
    v.as_object_mut().expect("map").remove("parameters");
    v["resources"]
        .as_object_mut()
        .expect("map")
        .retain(|k, _| k == "server");
    let t = parse_value(&v).expect("valid");
    let e = t
        .bind_parameters(&given(&[("x", "1")]))
        .expect_err("unknown");
    assert_eq!(
        e.to_string(),
        "parameters.x: unknown parameter; the template declares none"
    );
    assert_eq!(
        t.bind_parameters(&BTreeMap::new()),
        Ok(Parameters::default())
    );
}
