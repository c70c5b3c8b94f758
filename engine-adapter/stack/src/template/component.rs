//! `OS::Heat::SoftwareComponent`: one config per lifecycle action. Its `configs` list
//! entries `{actions, config, tool}`; it is deployed with hook group `component` and the
//! body `{"configs": [...]}`, from which the agent runs the entry listing the
//! deployment's action with its `tool` as the group (as heat-agents' dispatcher does).

use std::collections::BTreeSet;

use flue_proto::LIFECYCLE_ACTIONS;
use serde_json::{Map, Value};

use super::{Resource, TemplateError, check_keys};
use crate::functions::kind_of;
use crate::units::DEFAULT_ACTIONS;

/// The hook group a component is deployed with.
pub const COMPONENT_GROUP: &str = "component";

const ENTRY_KEYS: [&str; 3] = ["actions", "config", "tool"];

/// Checks `configs` as Heat does: a list of `{actions, config, tool}`, `tool` a hook
/// group name, `actions` lifecycle actions (Heat's default `[CREATE, UPDATE]`), and no
/// action listed by two entries.
pub(super) fn check_configs(props: &Map<String, Value>, path: &str) -> Result<(), TemplateError> {
    let at = format!("{path}.configs");
    let Some(configs) = props.get("configs") else {
        return Err(TemplateError::new(
            at,
            "required: a list of {actions, config, tool}",
        ));
    };
    let Value::Array(entries) = configs else {
        return Err(TemplateError::new(
            at,
            format!(
                "must be a list of {{actions, config, tool}}, got {}",
                kind_of(configs)
            ),
        ));
    };
    let mut seen = BTreeSet::new();
    for (i, entry) in entries.iter().enumerate() {
        let entry_path = format!("{at}[{i}]");
        let Value::Object(entry) = entry else {
            return Err(TemplateError::new(
                entry_path,
                "must be a map with actions, config and tool",
            ));
        };
        check_keys(entry, &entry_path, &ENTRY_KEYS)?;
        match entry.get("tool") {
            Some(Value::String(t)) if super::resources::is_group_name(t) => {}
            Some(_) => {
                return Err(TemplateError::new(
                    format!("{entry_path}.tool"),
                    "must be a hook group name of letters, digits, '_', '-' or '.' (script, ansible, puppet, …)",
                ));
            }
            None => {
                return Err(TemplateError::new(
                    format!("{entry_path}.tool"),
                    "required: the hook group that runs this config",
                ));
            }
        }
        for action in entry_actions(entry, &entry_path)? {
            if !seen.insert(action.clone()) {
                return Err(TemplateError::new(
                    format!("{entry_path}.actions"),
                    format!(
                        "{action} is listed by an earlier entry too; Heat allows one config per action"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// An entry's `actions`, Heat's default when it has none.
fn entry_actions(entry: &Map<String, Value>, path: &str) -> Result<Vec<String>, TemplateError> {
    let Some(actions) = entry.get("actions") else {
        return Ok(DEFAULT_ACTIONS.iter().map(|a| (*a).to_owned()).collect());
    };
    let refused = || {
        TemplateError::new(
            format!("{path}.actions"),
            format!("must be a list of {}", LIFECYCLE_ACTIONS.join(", ")),
        )
    };
    let items = actions.as_array().ok_or_else(refused)?;
    items
        .iter()
        .map(|a| match a.as_str() {
            Some(a) if LIFECYCLE_ACTIONS.contains(&a) => Ok(a.to_owned()),
            _ => Err(refused()),
        })
        .collect()
}

/// The lifecycle actions a component runs for: every action some entry lists. Heat
/// runs a component's deployment for exactly those, whatever the deployment's own
/// `actions` say.
pub fn component_actions(component: &Resource) -> Vec<String> {
    let mut out = Vec::new();
    for entry in component
        .properties
        .get("configs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object)
    {
        out.extend(entry_actions(entry, "").unwrap_or_default());
    }
    let mut seen = BTreeSet::new();
    out.retain(|a| seen.insert(a.clone()));
    out
}

/// The body a component is deployed with, from its resolved `configs`: every entry
/// with its `actions` made explicit (the agent reads them).
pub fn component_body(configs: Value) -> Value {
    let entries = match configs {
        Value::Array(entries) => entries,
        other => vec![other],
    };
    let entries = entries
        .into_iter()
        .map(|mut entry| {
            if let Value::Object(map) = &mut entry
                && !map.contains_key("actions")
            {
                map.insert("actions".to_owned(), Value::from(DEFAULT_ACTIONS.to_vec()));
            }
            entry
        })
        .collect();
    let mut body = Map::new();
    body.insert("configs".to_owned(), Value::Array(entries));
    Value::Object(body)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::template::Template;

    fn refused(configs: &str) -> String {
        let text = format!(
            "heat_template_version: 2018-08-31\nresources:\n  c:\n    type: OS::Heat::SoftwareComponent\n    properties:\n      configs: {configs}\n"
        );
        Template::parse(&text, Path::new("."))
            .expect_err("refused")
            .to_string()
    }

    #[test]
    fn a_component_is_refused_where_heat_refuses_it_naming_the_entry() {
        let e = refused("[{tool: script, config: a}, {actions: [UPDATE], tool: script}]");
        assert!(
            e.starts_with(
                "resources.c.properties.configs[1].actions: UPDATE is listed by an earlier entry"
            ),
            "{e}"
        );
        let e = refused("[{config: a}]");
        assert!(
            e.starts_with("resources.c.properties.configs[0].tool: required"),
            "{e}"
        );
        let e = refused("[{tool: 'a b', config: a}]");
        assert!(
            e.contains("configs[0].tool: must be a hook group name"),
            "{e}"
        );
        let e = refused("[{tool: script, actions: [BOOT]}]");
        assert!(
            e.contains("configs[0].actions: must be a list of CREATE"),
            "{e}"
        );
        let e = refused("[{tool: script, when: now}]");
        assert!(e.contains("configs[0].when: unknown key"), "{e}");
        let e = refused("script");
        assert!(
            e.contains("configs: must be a list of {actions, config, tool}"),
            "{e}"
        );
    }
}
