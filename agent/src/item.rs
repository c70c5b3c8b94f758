//! The deployment item handed to a hook, in the heat-config hook protocol, shaped as
//! heat-agents' dispatcher (`55-heat-config`) hands it over.
//!
//! Stock heat-agents hooks read this JSON on stdin and several of them break on
//! details Heat always gets right, so this module keeps them: `options` is `{}`
//! rather than null, `name` and `creation_time` are always present, and each input value
//! has its declared type (`flue_proto::heat`): a `Number` is a JSON number, a `Boolean`
//! a JSON boolean, a `Json` any JSON value, and a `String` text (a non-text value made
//! text as the dispatcher makes it: `True`, `3`, `None` for no value, JSON for maps and
//! lists). A declared input carries its `default` too, typed, as Heat's item does.
//!
//! After the declared and extra inputs come the derived inputs Heat adds (see
//! [`from_request`]), all `String`, each with Heat's description.
//!
//! The `config` handed over is the body for the deployment's action: the config's hook for
//! that lifecycle action or its ad-hoc action's body, else its own `config`; when the
//! config sets `substitute_inputs`, every `{"get_input": NAME}` in it is replaced first,
//! with the typed value (before a `String`'s is made text, as Heat substitutes in the
//! engine, before the dispatcher).

use flue_proto::DeploymentRequest;
use flue_proto::heat::{self, InputType};
pub use flue_proto::poll::HeatItem;
use flue_proto::poll::{HeatInput, HeatOutput};
use serde_json::Value;
use time::format_description::well_known::Rfc3339;

/// The `deploy_signal_transport` the item names: Heat's `NO_SIGNAL`, "the server does not
/// signal back by itself". The agent answers on the queue; with this transport Heat adds no
/// `deploy_signal_id`, `deploy_signal_verb`, `deploy_auth_url` or `deploy_queue_id`, and
/// without those `heat-config-notify` signals nothing, so no stock tool tries to.
pub const SIGNAL_TRANSPORT: &str = "NO_SIGNAL";

/// The derived inputs, in Heat's order, with Heat's descriptions.
const DERIVED: [(&str, &str); 5] = [
    ("deploy_server_id", "ID of the server being deployed to"),
    ("deploy_action", "Name of the current action being deployed"),
    (
        "deploy_stack_id",
        "ID of the stack this deployment belongs to",
    ),
    (
        "deploy_resource_name",
        "Name of this deployment resource in the stack",
    ),
    (
        "deploy_signal_transport",
        "How the server should signal to heat with the deployment output values.",
    ),
];

/// A typed input before the dispatcher's `String` rule: what `get_input` substitutes.
struct Typed {
    name: String,
    kind: String,
    default: Option<Value>,
    value: Value,
    description: Option<String>,
}

/// Builds the item for `req`.
///
/// The derived inputs, as Heat forms them: `deploy_server_id` (the server),
/// `deploy_action` (`CREATE`…, or the ad-hoc action's name), `deploy_stack_id`
/// (`<stack name>/<stack id>`; a Flue stack's id is its name, so `web/web`; empty
/// outside a stack), `deploy_resource_name` (the template's resource, a group
/// member's name, else the deployment's name) and `deploy_signal_transport`
/// ([`SIGNAL_TRANSPORT`]). The agent knows these better than any caller: a
/// same-named value is replaced.
pub fn from_request(req: &DeploymentRequest) -> HeatItem {
    let cfg = &req.config;
    let mut typed: Vec<Typed> = cfg
        .inputs
        .iter()
        .map(|decl| {
            let kind = InputType::parse(&decl.kind);
            let value = req
                .input_values
                .get(&decl.name)
                .or(decl.default.as_ref())
                .unwrap_or(&Value::Null);
            Typed {
                name: decl.name.clone(),
                kind: decl.kind.clone(),
                default: heat::item_default(kind, decl.default.as_ref()),
                value: heat::typed_or_as_is(kind, value),
                description: decl.description.clone(),
            }
        })
        .collect();
    for (name, value) in &req.input_values {
        if !cfg.inputs.iter().any(|d| &d.name == name) {
            typed.push(string_input(name, value.clone(), None));
        }
    }
    let resource_name = req.resource_name.as_deref().unwrap_or(&req.name);
    let stack_id = req
        .stack_id
        .as_ref()
        .map_or(String::new(), |s| format!("{s}/{s}"));
    let values = [
        req.server.as_str(),
        req.action.as_str(),
        stack_id.as_str(),
        resource_name,
        SIGNAL_TRANSPORT,
    ];
    typed.retain(|i| !DERIVED.iter().any(|(name, _)| *name == i.name));
    typed.extend(
        DERIVED
            .iter()
            .zip(values)
            .map(|((name, about), v)| string_input(name, Value::String(v.to_owned()), Some(about))),
    );

    let mut group = cfg.group.clone();
    let mut config = cfg.body_for(&req.action).clone();
    if group == COMPONENT_GROUP
        && let Some((tool, body)) = component_part(&config, req.action.as_str())
    {
        group = tool;
        config = body;
    }
    if cfg.substitute_inputs {
        substitute(&mut config, &|name| {
            typed.iter().find(|i| i.name == name).map(|i| &i.value)
        });
    }
    let inputs: Vec<HeatInput> = typed
        .into_iter()
        .map(|t| HeatInput {
            value: heat::dispatched(InputType::parse(&t.kind), t.value),
            name: t.name,
            kind: t.kind,
            default: t.default,
            description: t.description,
        })
        .collect();
    let options = match &cfg.options {
        Value::Null => Value::Object(serde_json::Map::new()),
        other => other.clone(),
    };
    HeatItem {
        id: req.deployment_id.to_string(),
        name: req.name.clone(),
        group,
        creation_time: req
            .created_at
            .format(&Rfc3339)
            .unwrap_or_else(|_| req.created_at.unix_timestamp().to_string()),
        config,
        options,
        inputs,
        outputs: cfg
            .outputs
            .iter()
            .map(|o| HeatOutput {
                name: o.name.clone(),
                kind: o.kind.clone(),
                error_output: o.error_output,
                description: o.description.clone(),
            })
            .collect(),
    }
}

/// The config body as the text of a script: a string as-is, anything else as JSON.
pub fn config_text(item: &HeatItem) -> String {
    match &item.config {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The group of Heat's `OS::Heat::SoftwareComponent`: its body is
/// `{"configs": [{"actions": [...], "tool": GROUP, "config": BODY}, ...]}`, and the
/// dispatcher runs the first entry that lists the deployment's action, as group `tool`.
/// An item still of this group has no entry for its action: Heat's engine sends nothing
/// for such an action and the deployment completes at once, which the agent does too.
pub const COMPONENT_GROUP: &str = "component";

/// The `(tool, config)` of the first entry of a component body listing `action`.
fn component_part(body: &Value, action: &str) -> Option<(String, Value)> {
    let configs = body.get("configs")?.as_array()?;
    configs.iter().find_map(|entry| {
        let actions = entry.get("actions")?.as_array()?;
        if !actions.iter().any(|a| a.as_str() == Some(action)) {
            return None;
        }
        let tool = entry.get("tool")?.as_str()?.to_owned();
        Some((tool, entry.get("config").cloned().unwrap_or(Value::Null)))
    })
}

/// Replaces, anywhere in `body`, every object that is exactly `{"get_input": NAME}` with
/// the value of input NAME as the item carries it, or null when there is no such input
/// (Heat's `OS::Heat::StructuredConfig`). A `get_input` whose argument is not a string, or
/// an object with other keys beside it, is left as it is. (The item's own substitution,
/// with the inputs it is built from; its tests compare against this on the whole item.)
#[cfg(test)]
fn substitute_inputs(body: &mut Value, inputs: &[HeatInput]) {
    substitute(body, &|name| {
        inputs.iter().find(|i| i.name == name).map(|i| &i.value)
    });
}

fn substitute<'a>(body: &mut Value, value_of: &dyn Fn(&str) -> Option<&'a Value>) {
    match body {
        Value::Object(map) => {
            if map.len() == 1
                && let Some(Value::String(name)) = map.get("get_input")
            {
                *body = value_of(name).cloned().unwrap_or(Value::Null);
                return;
            }
            map.values_mut().for_each(|v| substitute(v, value_of));
        }
        Value::Array(items) => items.iter_mut().for_each(|v| substitute(v, value_of)),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {}
    }
}

/// An input Heat types `String`: an extra value with no declaration, or a derived one.
fn string_input(name: &str, value: Value, description: Option<&str>) -> Typed {
    Typed {
        name: name.to_owned(),
        kind: "String".to_owned(),
        default: None,
        value,
        description: description.map(str::to_owned),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use flue_proto::{PROTOCOL_VERSION, ServerId, TenantId};
    use serde_json::json;
    use time::OffsetDateTime;

    /// A request for `config` (a ConfigSpec as JSON) with `values` as input values.
    pub(crate) fn request(config: Value, values: Value) -> DeploymentRequest {
        let spec: flue_proto::ConfigSpec = serde_json::from_value(config).expect("spec");
        DeploymentRequest {
            hidden_inputs: Vec::new(),
            v: PROTOCOL_VERSION,
            tenant: TenantId::new("acme").expect("id"),
            server: ServerId::new("web1").expect("id"),
            deployment_id: "d1".parse().expect("id"),
            name: "deploy-one".into(),
            action: flue_proto::Action::create(),
            config: spec.into_config("c1".parse().expect("id"), OffsetDateTime::UNIX_EPOCH),
            input_values: serde_json::from_value(values).expect("values"),
            stack_id: None,
            resource_name: None,
            created_at: OffsetDateTime::UNIX_EPOCH,
            expires_at: OffsetDateTime::now_utc() + time::Duration::hours(1),
            agent_jwt: None,
        }
    }

    #[test]
    fn item_has_the_heat_shape() {
        let mut req = request(
            json!({
                "group": "script",
                "config": "echo hi",
                "inputs": [
                    {"name": "count", "type": "Number"},
                    {"name": "flag", "default": true},
                    {"name": "unset"},
                    {"name": "list"},
                    {"name": "nothing"},
                    {"name": "deploy_action", "default": "SPOOF"}
                ],
                "outputs": [{"name": "result"}, {"name": "err", "error_output": true, "description": "why"}]
            }),
            json!({"count": 3, "list": [1, "a"], "nothing": null, "extra": 1.5}),
        );
        req.config.options = Value::Null;
        req.resource_name = Some("web_config".into());
        let item = serde_json::to_value(from_request(&req)).expect("ser");
        assert_eq!(
            item,
            json!({
                "id": "d1",
                "name": "deploy-one",
                "group": "script",
                "creation_time": "1970-01-01T00:00:00Z",
                "config": "echo hi",
                "options": {},
                "inputs": [
                    {"name": "count", "type": "Number", "value": 3},
                    {"name": "flag", "type": "String", "default": "True", "value": "True"},
                    {"name": "unset", "type": "String", "value": "None"},
                    {"name": "list", "type": "String", "value": "[1, \"a\"]"},
                    {"name": "nothing", "type": "String", "value": "None"},
                    {"name": "extra", "type": "String", "value": "1.5"},
                    {"name": "deploy_server_id", "type": "String", "value": "web1",
                     "description": "ID of the server being deployed to"},
                    {"name": "deploy_action", "type": "String", "value": "CREATE",
                     "description": "Name of the current action being deployed"},
                    {"name": "deploy_stack_id", "type": "String", "value": "",
                     "description": "ID of the stack this deployment belongs to"},
                    {"name": "deploy_resource_name", "type": "String", "value": "web_config",
                     "description": "Name of this deployment resource in the stack"},
                    {"name": "deploy_signal_transport", "type": "String", "value": "NO_SIGNAL",
                     "description": "How the server should signal to heat with the deployment output values."}
                ],
                "outputs": [
                    {"name": "result", "type": "String", "error_output": false},
                    {"name": "err", "type": "String", "error_output": true, "description": "why"}
                ]
            })
        );
    }

    #[test]
    fn inputs_keep_their_declared_types_as_heat_sends_them() {
        let req = request(
            json!({
                "group": "ansible",
                "inputs": [
                    {"name": "app_port", "type": "Number"},
                    {"name": "enabled", "type": "Boolean"},
                    {"name": "settings", "type": "Json"},
                    {"name": "hosts", "type": "CommaDelimitedList"},
                    {"name": "ratio", "type": "Number", "default": "0.5"},
                    {"name": "unset_number", "type": "Number"},
                    {"name": "label", "type": "String"},
                    {"name": "odd", "type": "Number"}
                ]
            }),
            json!({
                "app_port": "8080", "enabled": "true", "settings": "{\"a\": [1]}",
                "hosts": "a, b", "label": false, "odd": "not a number"
            }),
        );
        let item = from_request(&req);
        let value = |n: &str| {
            let input = item.inputs.iter().find(|i| i.name == n).expect(n);
            input.value.clone()
        };
        assert_eq!(value("app_port"), json!(8080));
        assert_eq!(value("enabled"), json!(true));
        assert_eq!(value("settings"), json!({"a": [1]}));
        assert_eq!(value("hosts"), json!(["a", "b"]));
        assert_eq!(value("ratio"), json!(0.5), "defaults are typed too");
        assert_eq!(value("unset_number"), json!(null), "Heat's None");
        assert_eq!(value("label"), json!("False"), "Python's str(False)");
        assert_eq!(
            value("odd"),
            json!("not a number"),
            "unchecked (an older gateway): handed over as Heat would"
        );
    }

    #[test]
    fn resource_name_defaults_to_the_deployment_name() {
        let mut req = request(json!({"group": "script"}), json!({}));
        req.stack_id = Some("st1".parse().expect("id"));
        let item = from_request(&req);
        let get = |n: &str| {
            item.inputs
                .iter()
                .find(|i| i.name == n)
                .map(|i| i.value.clone())
        };
        assert_eq!(get("deploy_resource_name"), Some(json!("deploy-one")));
        assert_eq!(
            get("deploy_stack_id"),
            Some(json!("st1/st1")),
            "Heat's <stack name>/<stack id>; a Flue stack's id is its name"
        );
        assert_eq!(item.options, json!({}));
    }
    #[test]
    fn the_body_is_the_one_for_the_action() {
        let spec = json!({
            "group": "script",
            "config": "echo create",
            "hooks": {"DELETE": "echo bye"},
            "actions": {"backup": {"config": "tar c /srv"}}
        });
        let mut req = request(spec, json!({}));
        let body = |req: &DeploymentRequest| from_request(req).config;
        assert_eq!(body(&req), json!("echo create"));
        req.action = flue_proto::Action::new("DELETE").expect("action");
        assert_eq!(body(&req), json!("echo bye"));
        req.action = flue_proto::Action::new("UPDATE").expect("action");
        assert_eq!(
            body(&req),
            json!("echo create"),
            "no UPDATE hook: the config's body"
        );
        req.action = flue_proto::Action::new("backup").expect("action");
        assert_eq!(body(&req), json!("tar c /srv"));
    }

    #[test]
    fn a_component_runs_the_config_listing_the_action_with_its_tool() {
        let spec = json!({
            "group": "component",
            "config": {"configs": [
                {"actions": ["CREATE", "UPDATE"], "tool": "script", "config": "echo up"},
                {"actions": ["DELETE"], "tool": "ansible", "config": "- hosts: all"},
                {"actions": ["DELETE"], "tool": "script", "config": "never: the first wins"}
            ]}
        });
        let mut req = request(spec, json!({}));
        let picked = |req: &DeploymentRequest| {
            let item = from_request(req);
            (item.group, item.config)
        };
        assert_eq!(picked(&req), ("script".into(), json!("echo up")));
        req.action = flue_proto::Action::new("DELETE").expect("action");
        assert_eq!(picked(&req), ("ansible".into(), json!("- hosts: all")));
        req.action = flue_proto::Action::new("SUSPEND").expect("action");
        assert_eq!(picked(&req).0, COMPONENT_GROUP, "nothing for SUSPEND");
    }

    #[test]
    fn get_input_is_substituted_anywhere_when_asked() {
        let body = json!({
            "port": {"get_input": "port"},
            "nested": [{"host": {"get_input": "deploy_server_id"}}, "plain"],
            "missing": {"get_input": "nope"},
            "list": {"get_input": "list"},
            "not_exact": {"get_input": "port", "other": 1},
            "not_a_name": {"get_input": 5}
        });
        let spec = json!({
            "group": "apply-config",
            "config": body,
            "inputs": [{"name": "port", "type": "Number"}, {"name": "list"}],
            "substitute_inputs": true
        });
        let item = from_request(&request(spec.clone(), json!({"port": 80, "list": [1, 2]})));
        assert_eq!(
            item.config,
            json!({
                "port": 80,
                "nested": [{"host": "web1"}, "plain"],
                "missing": null,
                "list": [1, 2],
                "not_exact": {"get_input": "port", "other": 1},
                "not_a_name": {"get_input": 5}
            })
        );
        // A whole body that is one get_input is replaced too.
        let mut whole = json!({"get_input": "port"});
        substitute_inputs(&mut whole, &item.inputs);
        assert_eq!(whole, json!(80));

        let mut spec = spec;
        spec["substitute_inputs"] = json!(false);
        let item = from_request(&request(spec, json!({"port": 80})));
        assert_eq!(item.config, body, "left alone unless the config asks");
    }
}
