//! One resource definition: its type, its keys and the shape of each property.
//! Checks that need other resources (targets of `config`, `server`, `get_attr`, …)
//! live in `checks`.

use flue_proto::LIFECYCLE_ACTIONS;
use flue_proto::config::{is_input_name, is_plain_name};
use serde_json::{Map, Value};

use super::{
    GroupDef, Resource, ResourceKind, TemplateError, UpdatePolicy, check_keys, optional_string,
};
use crate::functions::{self, Files, as_call, kind_of};

const RESOURCE_KEYS: [&str; 5] = [
    "type",
    "properties",
    "depends_on",
    "update_policy",
    "metadata",
];
const CONFIG_PROPS: [&str; 7] = [
    "group", "config", "inputs", "outputs", "options", "hooks", "actions",
];
const DEPLOYMENT_PROPS: [&str; 7] = [
    "config",
    "server",
    "input_values",
    "actions",
    "name",
    "signal_transport",
    "timeout",
];
const GROUP_PROPS: [&str; 8] = [
    "config",
    "servers",
    "input_values",
    "actions",
    "name",
    "signal_transport",
    "timeout",
    "members_input",
];
const COMPONENT_PROPS: [&str; 4] = ["configs", "inputs", "outputs", "options"];
const SERVER_PROPS: [&str; 1] = ["server_id"];
const INPUT_KEYS: [&str; 5] = ["name", "type", "description", "default", "hidden"];
const OUTPUT_KEYS: [&str; 5] = ["name", "type", "description", "error_output", "hidden"];

/// Parses resource `name`, inlining `get_file` in its properties.
pub(super) fn parse(name: &str, def: &Value, files: Files<'_>) -> Result<Resource, TemplateError> {
    let path = format!("resources.{name}");
    if let Err(e) = flue_proto::ids::validate(name) {
        return Err(TemplateError::new(path, format!("resource name {e}")));
    }
    let Value::Object(def) = def else {
        return Err(TemplateError::new(path, "must be a map with `type`"));
    };
    // Flue never deletes infrastructure: a deletion_policy there is moot, and accepted.
    let never_deleted = def
        .get("type")
        .and_then(Value::as_str)
        .and_then(ResourceKind::from_type)
        .is_some_and(|k| k.is_infrastructure() || k == ResourceKind::HeatNone);
    if never_deleted {
        let mut keys = RESOURCE_KEYS.to_vec();
        keys.push("deletion_policy");
        check_keys(def, &path, &keys)?;
    } else {
        check_keys(def, &path, &RESOURCE_KEYS)?;
    }
    let kind = match def.get("type") {
        None => return Err(TemplateError::new(format!("{path}.type"), "required")),
        Some(Value::String(t)) => ResourceKind::from_type(t).ok_or_else(|| {
            TemplateError::new(
                format!("{path}.type"),
                format!(
                    "unsupported resource type {t:?}; supported: OS::Heat::SoftwareConfig, \
                     OS::Heat::StructuredConfig, OS::Heat::SoftwareComponent, \
                     OS::Heat::CloudConfig, \
                     OS::Heat::MultipartMime, OS::Heat::SoftwareDeployment, \
                     OS::Heat::StructuredDeployment, OS::Heat::SoftwareDeploymentGroup, \
                     OS::Heat::StructuredDeploymentGroup, OS::Heat::ResourceGroup (of \
                     deployments), OS::Heat::RandomString, OS::Heat::Value, OS::Heat::None, \
                     OS::Flue::Server, OS::Nova::Server (mapped onto a registered server), \
                     and as external resources (never created) {}",
                    super::EXTERNAL_TYPES.join(", ")
                ),
            )
        })?,
        Some(other) => {
            return Err(TemplateError::new(
                format!("{path}.type"),
                format!("must be a string, got {}", kind_of(other)),
            ));
        }
    };
    let props_path = format!("{path}.properties");
    let mut properties = match def.get("properties") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) => map.clone(),
        Some(other) => {
            return Err(TemplateError::new(
                props_path,
                format!("must be a map, got {}", kind_of(other)),
            ));
        }
    };
    for (key, value) in properties.iter_mut() {
        functions::inline_files(value, files, &format!("{props_path}.{key}"))?;
    }
    check_properties(kind, &properties, &props_path)?;
    let depends_on = parse_depends_on(def.get("depends_on"), &format!("{path}.depends_on"))?;
    let update_policy = match def.get("update_policy") {
        None | Some(Value::Null) => UpdatePolicy::default(),
        Some(policy)
            if matches!(
                kind,
                ResourceKind::SoftwareDeploymentGroup | ResourceKind::ResourceGroup
            ) =>
        {
            super::policy::parse_update_policy(policy, &format!("{path}.update_policy"))?
        }
        Some(_) => {
            return Err(TemplateError::new(
                format!("{path}.update_policy"),
                format!("only deployment groups have an update_policy, not {kind}"),
            ));
        }
    };
    // A ResourceGroup keeps its members' definition as its properties, so everything
    // that reads a deployment's `config`, `server` or `input_values` reads it the same.
    let (properties, group) = if kind == ResourceKind::ResourceGroup {
        let def = GroupDef {
            count: properties.get("count").cloned().unwrap_or(Value::from(1)),
            index_var: properties
                .get("index_var")
                .and_then(Value::as_str)
                .unwrap_or(super::INDEX_VAR)
                .to_owned(),
        };
        (super::utility::group_def_properties(&properties), Some(def))
    } else {
        (properties, None)
    };
    Ok(Resource {
        name: name.to_owned(),
        kind,
        properties,
        depends_on,
        update_policy,
        group,
    })
}

fn check_properties(
    kind: ResourceKind,
    props: &Map<String, Value>,
    path: &str,
) -> Result<(), TemplateError> {
    let at = |key: &str| format!("{path}.{key}");
    match kind {
        ResourceKind::SoftwareConfig | ResourceKind::StructuredConfig => {
            check_keys(props, path, &CONFIG_PROPS)?;
            check_config_props(kind, props, path)
        }
        ResourceKind::SoftwareComponent => {
            check_keys(props, path, &COMPONENT_PROPS)?;
            super::component::check_configs(props, path)?;
            check_config_props(kind, props, path)
        }
        ResourceKind::SoftwareDeployment => {
            check_keys(props, path, &DEPLOYMENT_PROPS)?;
            require(props, path, &["config", "server"])?;
            check_deployment_props(props, path)
        }
        ResourceKind::SoftwareDeploymentGroup => {
            check_keys(props, path, &GROUP_PROPS)?;
            require(props, path, &["config", "servers"])?;
            if let Some(input) = props.get("members_input") {
                match input.as_str() {
                    Some(s) if is_plain_name(s) => {}
                    _ => {
                        return Err(TemplateError::new(
                            at("members_input"),
                            "must be an input name matching [A-Za-z_][A-Za-z0-9_]*",
                        ));
                    }
                }
            }
            check_deployment_props(props, path)
        }
        ResourceKind::Server => {
            check_keys(props, path, &SERVER_PROPS)?;
            require(props, path, &["server_id"])
        }
        // Not Flue's to create: every property is accepted and ignored.
        ResourceKind::NovaServer | ResourceKind::External(_) | ResourceKind::HeatNone => Ok(()),
        ResourceKind::RandomString => super::utility::check_random_string(props, path),
        ResourceKind::HeatValue => super::utility::check_value(props, path),
        ResourceKind::CloudConfig => super::utility::check_cloud_config(props, path),
        ResourceKind::MultipartMime => super::utility::check_multipart(props, path),
        ResourceKind::ResourceGroup => super::utility::check_resource_group(props, path),
    }
}

/// Checks `props` as the properties of a deployment (for a `ResourceGroup`'s
/// `resource_def`).
pub(super) fn check_deployment(
    props: &Map<String, Value>,
    path: &str,
) -> Result<(), TemplateError> {
    check_properties(ResourceKind::SoftwareDeployment, props, path)
}

pub(super) fn require(
    props: &Map<String, Value>,
    path: &str,
    keys: &[&str],
) -> Result<(), TemplateError> {
    match keys.iter().find(|k| !props.contains_key(**k)) {
        Some(k) => Err(TemplateError::new(format!("{path}.{k}"), "required")),
        None => Ok(()),
    }
}

/// True when `value` is a function call, whose result is only known later.
pub(super) fn is_call(value: &Value) -> bool {
    as_call(value).is_some()
}

fn check_config_props(
    kind: ResourceKind,
    props: &Map<String, Value>,
    path: &str,
) -> Result<(), TemplateError> {
    let at = |key: &str| format!("{path}.{key}");
    if let Some(group) = props.get("group")
        && !is_call(group)
    {
        // Heat's own default spelled out is accepted too.
        let ok = group
            .as_str()
            .is_some_and(|g| is_group_name(g) || g == HEAT_UNGROUPED);
        if !ok {
            return Err(TemplateError::new(
                at("group"),
                "must be a hook group name of letters, digits, '_', '-' or '.'",
            ));
        }
    }
    match (kind, props.get("config")) {
        (_, None) => {}
        (_, Some(v)) if is_call(v) => {}
        (ResourceKind::SoftwareConfig, Some(Value::String(_))) => {}
        // Heat serialises a structured body whatever its shape; a list is a body too.
        (ResourceKind::StructuredConfig, Some(Value::Object(_) | Value::Array(_))) => {}
        (ResourceKind::SoftwareConfig, Some(v)) => {
            return Err(TemplateError::new(
                at("config"),
                format!(
                    "must be a string (use OS::Heat::StructuredConfig for a map), got {}",
                    kind_of(v)
                ),
            ));
        }
        (_, Some(v)) => {
            return Err(TemplateError::new(
                at("config"),
                format!("must be a map or a list, got {}", kind_of(v)),
            ));
        }
    }
    check_decls(
        props.get("inputs"),
        &at("inputs"),
        &INPUT_KEYS,
        &INPUT_NAMES,
    )?;
    check_decls(
        props.get("outputs"),
        &at("outputs"),
        &OUTPUT_KEYS,
        &OUTPUT_NAMES,
    )?;
    if let Some(options) = props.get("options")
        && !options.is_object()
    {
        return Err(TemplateError::new(
            at("options"),
            format!("must be a map, got {}", kind_of(options)),
        ));
    }
    if let Some(hooks) = props.get("hooks") {
        let Value::Object(hooks) = hooks else {
            return Err(TemplateError::new(
                at("hooks"),
                "must be a map of lifecycle action to hook body",
            ));
        };
        if let Some(bad) = hooks.keys().find(|k| !flue_proto::config::is_hook_key(k)) {
            return Err(TemplateError::new(
                format!("{}.{bad}", at("hooks")),
                format!(
                    "not a lifecycle action; use one of {} or CHECK",
                    LIFECYCLE_ACTIONS.join(", ")
                ),
            ));
        }
    }
    if let Some(actions) = props.get("actions") {
        check_adhoc_actions(actions, &at("actions"))?;
    }
    Ok(())
}

/// How the names of `inputs` or `outputs` are checked, and what the rule says.
struct NameRule {
    valid: fn(&str) -> bool,
    rule: &'static str,
}

/// Heat takes any input name; `hook-script.py` exports it as it is.
const INPUT_NAMES: NameRule = NameRule {
    valid: is_input_name,
    rule: "must be non-empty and hold no '=' or NUL (it becomes an environment entry)",
};
/// Output names become the `script` group's file suffixes.
const OUTPUT_NAMES: NameRule = NameRule {
    valid: is_plain_name,
    rule: "must match [A-Za-z_][A-Za-z0-9_]*",
};

/// Heat's default group of a config that names none.
pub use flue_proto::heat::group::UNGROUPED as HEAT_UNGROUPED;

/// True for a hook group name as the gateway takes it: a file name of letters, digits,
/// `_`, `-` and `.` (not `.` or `..`), at most 64 bytes.
pub(super) fn is_group_name(g: &str) -> bool {
    !g.is_empty()
        && g.len() <= 64
        && g != "."
        && g != ".."
        && g.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// `inputs` / `outputs`: a list of maps with a unique valid `name` and known keys.
fn check_decls(
    list: Option<&Value>,
    path: &str,
    keys: &[&str],
    names: &NameRule,
) -> Result<(), TemplateError> {
    let items = match list {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(TemplateError::new(
                path,
                format!("must be a list of {{name, …}} maps, got {}", kind_of(other)),
            ));
        }
    };
    let mut seen = std::collections::BTreeSet::new();
    for (i, item) in items.iter().enumerate() {
        let item_path = format!("{path}[{i}]");
        let Value::Object(item) = item else {
            return Err(TemplateError::new(item_path, "must be a map with `name`"));
        };
        check_keys(item, &item_path, keys)?;
        let name = match item.get("name") {
            Some(Value::String(n)) if (names.valid)(n) => n,
            Some(_) => {
                return Err(TemplateError::new(format!("{item_path}.name"), names.rule));
            }
            None => return Err(TemplateError::new(format!("{item_path}.name"), "required")),
        };
        if !seen.insert(name.as_str()) {
            return Err(TemplateError::new(
                format!("{item_path}.name"),
                format!("{name:?} is declared twice"),
            ));
        }
        optional_string(item.get("type"), &format!("{item_path}.type"))?;
        optional_string(item.get("description"), &format!("{item_path}.description"))?;
        for flag in ["hidden", "error_output"] {
            if let Some(v) = item.get(flag)
                && !v.is_boolean()
            {
                return Err(TemplateError::new(
                    format!("{item_path}.{flag}"),
                    "must be true or false",
                ));
            }
        }
    }
    Ok(())
}

fn check_adhoc_actions(actions: &Value, path: &str) -> Result<(), TemplateError> {
    let Value::Object(actions) = actions else {
        return Err(TemplateError::new(
            path,
            "must be a map of action name to {config, description}",
        ));
    };
    for (name, def) in actions {
        let action_path = format!("{path}.{name}");
        if flue_proto::config::is_hook_key(name) {
            return Err(TemplateError::new(
                action_path,
                "is a lifecycle action or CHECK; give its body in `hooks`",
            ));
        }
        if let Err(e) = flue_proto::Action::new(name.as_str()) {
            return Err(TemplateError::new(action_path, format!("action name {e}")));
        }
        let Value::Object(def) = def else {
            return Err(TemplateError::new(
                action_path,
                "must be a map with `config`",
            ));
        };
        check_keys(def, &action_path, &["config", "description"])?;
        if !def.contains_key("config") {
            return Err(TemplateError::new(
                format!("{action_path}.config"),
                "required",
            ));
        }
        optional_string(
            def.get("description"),
            &format!("{action_path}.description"),
        )?;
    }
    Ok(())
}

/// Properties shared by deployments and groups; `config`, `server` and `servers` are
/// checked against the other resources in `checks`.
fn check_deployment_props(props: &Map<String, Value>, path: &str) -> Result<(), TemplateError> {
    let at = |key: &str| format!("{path}.{key}");
    if let Some(v) = props.get("input_values")
        && (!v.is_object() || is_call(v))
    {
        return Err(TemplateError::new(
            at("input_values"),
            format!("must be a map of input name to value, got {}", kind_of(v)),
        ));
    }
    match props.get("actions") {
        None => {}
        Some(v) if is_call(v) => {}
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                match item.as_str() {
                    Some(a) if LIFECYCLE_ACTIONS.contains(&a) => {}
                    _ => {
                        return Err(TemplateError::new(
                            format!("{}[{i}]", at("actions")),
                            format!("must be one of {}", LIFECYCLE_ACTIONS.join(", ")),
                        ));
                    }
                }
            }
        }
        Some(v) => {
            return Err(TemplateError::new(
                at("actions"),
                format!("must be a list of lifecycle actions, got {}", kind_of(v)),
            ));
        }
    }
    match props.get("name") {
        None | Some(Value::String(_)) => {}
        Some(v) if is_call(v) => {}
        Some(v) => {
            return Err(TemplateError::new(
                at("name"),
                format!("must be a string, got {}", kind_of(v)),
            ));
        }
    }
    match props.get("timeout") {
        None => {}
        Some(v) if is_call(v) => {}
        Some(v) if v.as_u64().is_some_and(|t| t > 0) => {}
        Some(_) => {
            return Err(TemplateError::new(
                at("timeout"),
                "must be a positive whole number of seconds",
            ));
        }
    }
    Ok(())
}

fn parse_depends_on(value: Option<&Value>, path: &str) -> Result<Vec<String>, TemplateError> {
    let names: Vec<&Value> = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::String(s)) => return Ok(vec![s.clone()]),
        Some(Value::Array(items)) => items.iter().collect(),
        Some(_) => {
            return Err(TemplateError::new(
                path,
                "must be a resource name or a list of them",
            ));
        }
    };
    names
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_str().map(str::to_owned).ok_or_else(|| {
                TemplateError::new(format!("{path}[{i}]"), "must be a resource name")
            })
        })
        .collect()
}
