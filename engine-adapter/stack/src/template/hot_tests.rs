//! Conditions, constraints, versions and environments on whole templates.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::json;

use super::*;

const CONDITIONAL: &str = r#"
heat_template_version: 2018-08-31
parameters:
  env: {type: string, default: dev, constraints: [{allowed_values: [dev, prod]}]}
  size: {type: number, default: 4, constraints: [{range: {min: 1, max: 8}}, {modulo: {step: 2, offset: 0}}]}
  name: {type: string, default: web, constraints: [{length: {min: 2, max: 8}}, {allowed_pattern: "[a-z]+"}]}
  secret: {type: string, hidden: true, default: xx, constraints: [{length: {min: 2}}]}
  flavor: {type: string, default: m1, constraints: [{custom_constraint: nova.flavor}]}
conditions:
  is_prod: {equals: [{get_param: env}, prod]}
  is_dev: {not: is_prod}
resources:
  server: {type: OS::Flue::Server, properties: {server_id: s1}}
  config: {type: OS::Heat::SoftwareConfig, properties: {config: echo}}
  always:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: config}
      server: {get_resource: server}
      input_values:
        mode: {if: [is_prod, production, development]}
        stack: {get_param: OS::stack_name}
  monitor:
    type: OS::Heat::SoftwareDeployment
    condition: is_prod
    depends_on: [always]
    properties: {config: {get_resource: config}, server: {get_resource: server}}
  after:
    type: OS::Heat::SoftwareDeployment
    depends_on: [monitor]
    properties: {config: {get_resource: config}, server: {get_resource: server}}
outputs:
  monitor_out:
    condition: is_prod
    value: {get_attr: [monitor, deploy_stdout]}
"#;

fn bound(t: &Template, pairs: &[(&str, &str)]) -> Result<Parameters, TemplateError> {
    let given: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let mut p = t.bind_parameters(&given)?;
    p.add_pseudo("shop", Some("acme"));
    Ok(p)
}

#[test]
fn a_false_condition_leaves_the_resource_and_its_output_out() {
    let t = Template::parse(CONDITIONAL, Path::new(".")).expect("valid");
    let (dev, decided) = t
        .instantiate(&bound(&t, &[]).expect("bound"))
        .expect("instantiated");
    assert!(!dev.resources.contains_key("monitor"));
    assert_eq!(decided.skipped_resources["monitor"], "is_prod");
    assert!(dev.outputs.is_empty());
    // depends_on a resource that is not created is dropped, as Heat does.
    assert!(dev.resources["after"].depends_on.is_empty());
    assert_eq!(
        dev.resources["always"].properties["input_values"]["mode"],
        json!("development")
    );
    let (prod, decided) = t
        .instantiate(&bound(&t, &[("env", "prod")]).expect("bound"))
        .expect("instantiated");
    assert!(prod.resources.contains_key("monitor"));
    assert!(decided.conditions["is_prod"]);
    assert_eq!(
        prod.resources["always"].properties["input_values"]["mode"],
        json!("production")
    );
    assert!(prod.outputs.contains_key("monitor_out"));
}

#[test]
fn referencing_a_resource_whose_condition_is_false_is_refused() {
    let text = CONDITIONAL
        .replace(
            "stack: {get_param: OS::stack_name}",
            "stack: {get_attr: [monitor, deploy_stdout]}",
        )
        .replace("    depends_on: [always]\n", "");
    let t = Template::parse(&text, Path::new(".")).expect("valid");
    let e = t
        .instantiate(&bound(&t, &[]).expect("bound"))
        .expect_err("refused");
    assert_eq!(e.path, "resources.always.properties.input_values");
    assert!(
        e.message
            .contains("The specified reference \"monitor\" is incorrect"),
        "{e}"
    );
}

#[test]
fn constraints_are_enforced_with_heats_messages() {
    let t = Template::parse(CONDITIONAL, Path::new(".")).expect("valid");
    let cases = [
        (
            ("env", "test"),
            "\"test\" is not an allowed value [dev, prod]",
        ),
        (("size", "9"), "9 is out of range (min: 1, max: 8)"),
        (
            ("size", "3"),
            "3 is not a multiple of 2 with an offset of 0",
        ),
        (("name", "x"), "length (1) is out of range (min: 2, max: 8)"),
        (
            ("name", "Web1"),
            "\"Web1\" does not match pattern \"[a-z]+\"",
        ),
        // A hidden value is never shown: Heat's description of the rule instead.
        (("secret", "y"), "The length must be at least 2."),
    ];
    for ((k, v), message) in cases {
        let e = bound(&t, &[(k, v)]).expect_err(k);
        assert_eq!(e.path, format!("parameters.{k}"));
        assert_eq!(e.message, message);
    }
    assert_eq!(
        t.notes(),
        vec![
            "parameters.flavor: custom_constraint nova.flavor is not checked by Flue (it needs an OpenStack service)"
        ]
    );
}

#[test]
fn an_immutable_parameter_cannot_change_on_update() {
    let t = Template::parse(
        &CONDITIONAL.replace("default: web,", "default: web, immutable: true,"),
        Path::new("."),
    )
    .expect("valid");
    let first = t.bind_parameters(&BTreeMap::new()).expect("bound");
    let kept = first.to_keep();
    assert_eq!(kept["name"], json!("web"));
    let given = BTreeMap::from([("name".to_owned(), "other".to_owned())]);
    let e = t
        .bind_parameters_over(&given, &kept)
        .expect_err("immutable");
    assert_eq!(
        e.message,
        "The following parameters are immutable and may not be updated: name"
    );
}

#[test]
fn a_function_newer_than_the_template_version_is_refused() {
    let text = r#"
heat_template_version: 2016-04-08
resources:
  server: {type: OS::Flue::Server, properties: {server_id: s1}}
  config: {type: OS::Heat::SoftwareConfig, properties: {config: {if: [true, a, b]}}}
"#;
    let e = Template::parse(text, Path::new(".")).expect_err("if needs newton");
    assert!(
        e.message
            .contains("The function if is not supported in this version of HOT"),
        "{e}"
    );
    let e = Template::parse(
        "AWSTemplateFormatVersion: 2010-09-09\nResources: {}\n",
        Path::new("."),
    )
    .expect_err("cfn");
    assert!(e.message.contains("not supported by Flue"), "{e}");
}

#[test]
fn an_environment_maps_types_and_sets_defaults_and_values() {
    let env = super::super::environment::Environment::parse(
        "parameters: {env: prod}\nparameter_defaults: {size: 6, unknown: 1}\n\
         resource_registry: {My::Deploy: OS::Heat::SoftwareDeployment}\nevent_sinks: []\n",
    )
    .expect("env");
    let text = CONDITIONAL.replace(
        "type: OS::Heat::SoftwareDeployment\n    condition",
        "type: My::Deploy\n    condition",
    );
    let t = Template::parse_with(&text, Path::new("."), &env).expect("valid");
    assert_eq!(
        t.resources["monitor"].kind,
        ResourceKind::SoftwareDeployment
    );
    assert_eq!(t.parameters["size"].default, Some(json!(6)));
    assert_eq!(env.given_text(&t).expect("typed")["env"], "prod");
    assert_eq!(
        env.notes,
        vec!["environment section event_sinks is ignored by Flue"]
    );
    let e =
        super::super::environment::Environment::parse("resource_registry: {X::Y: nested.yaml}\n")
            .expect_err("nested");
    assert!(
        e.message.contains("nested templates are not supported"),
        "{e}"
    );
}

#[test]
fn parameter_groups_name_declared_parameters_once() {
    let with_groups = |groups: &str| {
        CONDITIONAL.replace(
            "conditions:\n",
            &format!("parameter_groups: {groups}\nconditions:\n"),
        )
    };
    Template::parse(
        &with_groups("[{label: a, parameters: [env, size]}]"),
        Path::new("."),
    )
    .expect("valid groups");
    let e = Template::parse(&with_groups("[{parameters: [nope]}]"), Path::new("."))
        .expect_err("undeclared");
    assert_eq!(
        e.message,
        "The grouped parameter nope does not reference a valid parameter."
    );
    let e = Template::parse(
        &with_groups("[{parameters: [env]}, {parameters: [env]}]"),
        Path::new("."),
    )
    .expect_err("twice");
    assert_eq!(
        e.message,
        "The env parameter must be assigned to one parameter group only."
    );
}

#[test]
fn environments_merge_in_order_and_type_their_values() {
    use super::super::environment::Environment;
    let mut env = Environment::parse(
        "parameters: {env: dev, name: abc}\nresource_registry: {A::B: OS::Flue::Server}\n",
    )
    .expect("first");
    env.merge(
        Environment::parse("parameters: {env: prod}\nresource_registry: {X::Y: A::B}\n")
            .expect("second"),
    );
    let t = Template::parse(CONDITIONAL, Path::new(".")).expect("valid");
    let given = env.given_text(&t).expect("typed");
    assert_eq!(given["env"], "prod");
    assert_eq!(given["name"], "abc");
    // Aliases are followed through chains.
    assert_eq!(env.resolve_type("X::Y").expect("alias"), "OS::Flue::Server");
    assert_eq!(
        env.resolve_type("OS::Flue::Server").expect("as is"),
        "OS::Flue::Server"
    );
    let looped = Environment::parse("resource_registry: {A::A: B::B, B::B: A::A}\n").expect("env");
    assert!(looped.resolve_type("A::A").is_err());
    let undeclared = Environment::parse("parameters: {nope: 1}\n").expect("env");
    let e = undeclared.given_text(&t).expect_err("undeclared");
    assert_eq!(
        e.message,
        "The Parameter (nope) was not defined in template."
    );
    let e = Environment::parse("outputs: {}\n").expect_err("wrong section");
    assert!(
        e.message
            .starts_with("environment has wrong section \"outputs\""),
        "{e}"
    );
}

#[test]
fn a_two_argument_if_leaves_the_property_unset_from_wallaby_on() {
    let text = |version: &str| {
        format!(
            "heat_template_version: {version}\nparameters:\n  on: {{type: boolean, default: n}}\n\
             resources:\n  server: {{type: OS::Flue::Server, properties: {{server_id: s1}}}}\n  \
             config:\n    type: OS::Heat::SoftwareConfig\n    properties:\n      config: echo\n      \
             group: {{if: [{{get_param: on}}, ansible]}}\n"
        )
    };
    let e = Template::parse(&text("rocky"), Path::new(".")).expect_err("needs wallaby");
    assert!(
        e.message
            .contains("may be left out from heat_template_version 2021-04-16"),
        "{e}"
    );
    let t = Template::parse(&text("wallaby"), Path::new(".")).expect("valid");
    let p = t.bind_parameters(&BTreeMap::new()).expect("bound");
    let (t, _) = t.instantiate(&p).expect("instantiated");
    assert!(!t.resources["config"].properties.contains_key("group"));
}
