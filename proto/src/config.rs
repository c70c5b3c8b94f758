//! Software configs: what to apply, with which hook, taking which inputs and giving which outputs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::deployment::Action;
use crate::ids::ConfigId;
use crate::limits::{self, LimitError, check_depth};

/// Lifecycle actions a config may carry a dedicated hook body for, in [`ConfigSpec::hooks`].
pub const LIFECYCLE_ACTIONS: [&str; 5] = [
    Action::CREATE,
    Action::UPDATE,
    Action::SUSPEND,
    Action::RESUME,
    Action::DELETE,
];

/// The action of a convergence check (`flue stack check`): it runs the config's `CHECK`
/// hook, which exits 0 when what the config applied is still in place and non-zero when
/// it drifted. A config without a `CHECK` hook is never run with it (the action is
/// refused), so a check never runs a config's main body.
pub const CHECK_ACTION: &str = "CHECK";

/// The keys [`ConfigSpec::hooks`] takes: the lifecycle actions and [`CHECK_ACTION`].
pub fn is_hook_key(key: &str) -> bool {
    LIFECYCLE_ACTIONS.contains(&key) || key == CHECK_ACTION
}

/// An ad-hoc action declared on a config (for example `backup`), run on demand.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AdhocAction {
    /// The body handed to the hook instead of the config's own `config` for this action.
    pub config: serde_json::Value,
    /// Human description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// One declared input of a config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InputDecl {
    /// Input name; for the `script` group it becomes an environment variable.
    #[cfg_attr(feature = "openapi", schema(pattern = "^[A-Za-z_][A-Za-z0-9_]*$"))]
    pub name: String,
    /// Heat parameter type (`String`, `Number`, `Json`, …); informative.
    #[serde(rename = "type", default = "default_type")]
    pub kind: String,
    /// Human description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Value used when a deployment supplies none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<serde_json::Value>,
    /// A hidden input's value never appears in logs, events or API reads.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hidden: bool,
}

/// One declared output of a config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OutputDecl {
    /// Output name; the `script` group reads it from `${heat_outputs_path}.<name>`.
    #[cfg_attr(feature = "openapi", schema(pattern = "^[A-Za-z_][A-Za-z0-9_]*$"))]
    pub name: String,
    /// Heat type; informative.
    #[serde(rename = "type", default = "default_type")]
    pub kind: String,
    /// Human description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// When true, a non-empty value of this output fails the deployment (Heat semantics).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub error_output: bool,
    /// A hidden output's value (a generated password, say) never appears in API reads;
    /// it reaches another deployment only as an input reference (`input_refs`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hidden: bool,
}

fn default_type() -> String {
    "String".to_owned()
}

/// What an engine sends to create a config. Configs are immutable once created.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ConfigSpec {
    /// Id to use; the gateway picks a random one when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<ConfigId>,
    /// Human name.
    #[serde(default)]
    pub name: String,
    /// Hook group that applies the config (`script`, or an executable's name in a hook dir),
    /// or Heat's `Heat::Ungrouped` (no group: [`crate::heat::group`]).
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^([A-Za-z0-9_.-]{1,64}|Heat::Ungrouped)$")
    )]
    pub group: String,
    /// The config body handed to the hook: a script for `script`, any JSON for others.
    #[serde(default)]
    pub config: serde_json::Value,
    /// Declared inputs.
    #[serde(default)]
    pub inputs: Vec<InputDecl>,
    /// Declared outputs.
    #[serde(default)]
    pub outputs: Vec<OutputDecl>,
    /// Hook options, passed through as the item's `options` (an object, never null).
    #[serde(default = "empty_object")]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub options: serde_json::Value,
    /// Dedicated bodies for lifecycle actions (keys from [`LIFECYCLE_ACTIONS`]): a
    /// deployment with that action hands this body to the hook instead of `config`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub hooks: BTreeMap<String, serde_json::Value>,
    /// Ad-hoc actions by name; a deployment may use one of these names as its action.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub actions: BTreeMap<String, AdhocAction>,
    /// When true the agent replaces every `{"get_input": NAME}` in the body with that
    /// input's value before running the hook (Heat's `OS::Heat::StructuredConfig`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub substitute_inputs: bool,
}

impl Default for ConfigSpec {
    /// An empty spec (no group yet) whose `options` is `{}`.
    fn default() -> Self {
        Self {
            id: None,
            name: String::new(),
            group: String::new(),
            config: serde_json::Value::Null,
            inputs: Vec::new(),
            outputs: Vec::new(),
            options: empty_object(),
            hooks: BTreeMap::new(),
            actions: BTreeMap::new(),
            substitute_inputs: false,
        }
    }
}

pub(crate) fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

/// A stored config, as read back from the gateway and as carried in a request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Config {
    /// Config id.
    pub id: ConfigId,
    /// Human name.
    #[serde(default)]
    pub name: String,
    /// Hook group.
    pub group: String,
    /// Config body.
    #[serde(default)]
    pub config: serde_json::Value,
    /// Declared inputs.
    #[serde(default)]
    pub inputs: Vec<InputDecl>,
    /// Declared outputs.
    #[serde(default)]
    pub outputs: Vec<OutputDecl>,
    /// Hook options (an object).
    #[serde(default = "empty_object")]
    pub options: serde_json::Value,
    /// Dedicated bodies for lifecycle actions (keys from [`LIFECYCLE_ACTIONS`]): a
    /// deployment with that action hands this body to the hook instead of `config`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub hooks: BTreeMap<String, serde_json::Value>,
    /// Ad-hoc actions by name; a deployment may use one of these names as its action.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub actions: BTreeMap<String, AdhocAction>,
    /// When true the agent replaces every `{"get_input": NAME}` in the body with that
    /// input's value before running the hook (Heat's `OS::Heat::StructuredConfig`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub substitute_inputs: bool,
    /// When the gateway accepted it.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

impl Config {
    /// True when a deployment of this config may run `action`: every lifecycle action,
    /// the ad-hoc actions the config declares, and [`CHECK_ACTION`] when it has a `CHECK`
    /// hook.
    pub fn allows(&self, action: &Action) -> bool {
        let a = action.as_str();
        LIFECYCLE_ACTIONS.contains(&a)
            || self.actions.contains_key(a)
            || (a == CHECK_ACTION && self.hooks.contains_key(CHECK_ACTION))
    }

    /// The body the hook gets for `action`: the dedicated hook or ad-hoc body when the
    /// config has one, else `config`.
    pub fn body_for(&self, action: &Action) -> &serde_json::Value {
        self.hooks
            .get(action.as_str())
            .or_else(|| self.actions.get(action.as_str()).map(|a| &a.config))
            .unwrap_or(&self.config)
    }
}

/// Why a config spec was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `group` was empty or not a plain file name.
    #[error(
        "group {0:?} must be Heat::Ungrouped or a non-empty name of letters, digits, '_', '-' or '.' (not '.' or '..')"
    )]
    BadGroup(String),
    /// An input name that no environment entry can carry, or an output name that is no
    /// shell variable name (outputs become file suffixes).
    #[error("{what} name {name:?} {}", name_rule(what))]
    BadName {
        /// `input` or `output`.
        what: &'static str,
        /// The refused name.
        name: String,
    },
    /// Two inputs or two outputs share a name.
    #[error("{what} {name:?} is declared twice")]
    Duplicate {
        /// `input` or `output`.
        what: &'static str,
        /// The repeated name.
        name: String,
    },
    /// `options` was not a JSON object.
    #[error("options must be a JSON object")]
    OptionsNotObject,
    /// A `hooks` key that is not a lifecycle action.
    #[error(
        "hooks key {0:?} is not a lifecycle action (CREATE, UPDATE, SUSPEND, RESUME, DELETE) or CHECK"
    )]
    BadHookAction(String),
    /// An ad-hoc action name that is a lifecycle action or not a valid action name.
    #[error("ad-hoc action {name:?} {reason}")]
    BadAdhocAction {
        /// The refused name.
        name: String,
        /// Why.
        reason: String,
    },
    /// A body, default or `options` that could not be read back or run ([`crate::limits`]).
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// A default that is not its input's declared type ([`crate::heat`]), as Heat
    /// refuses it.
    #[error(transparent)]
    Type(#[from] crate::heat::TypeMismatch),
}

/// What a name of an input or of an output must be, for [`ConfigError::BadName`].
fn name_rule(what: &str) -> &'static str {
    if what == "input" {
        "must be non-empty and hold no '=' or NUL"
    } else {
        "must match [A-Za-z_][A-Za-z0-9_]*"
    }
}

/// True for names usable as a shell variable and as an output file suffix: what an
/// output name must be (the `script` group reads `${heat_outputs_path}.<name>`).
pub fn is_plain_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// True for names an input may have: any name an environment entry can carry (not
/// empty, no `=`, no NUL), as Heat takes any string and `hook-script.py` exports each
/// input as it is named (`pkg-redhat` included). Input names never reach a subject.
pub fn is_input_name(s: &str) -> bool {
    !s.is_empty() && !s.contains(['=', '\0'])
}

impl ConfigSpec {
    /// Checks everything that does not need the gateway's state.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let g = &self.group;
        // Heat's own name for "no group" is the one name with a ':' (Heat's default).
        let group_ok = g == crate::heat::group::UNGROUPED
            || (!g.is_empty()
                && g.len() <= 64
                && g != "."
                && g != ".."
                && g.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')));
        if !group_ok {
            return Err(ConfigError::BadGroup(g.clone()));
        }
        if !self.options.is_object() {
            return Err(ConfigError::OptionsNotObject);
        }
        check_names(
            "input",
            is_input_name,
            self.inputs.iter().map(|i| i.name.as_str()),
        )?;
        check_names(
            "output",
            is_plain_name,
            self.outputs.iter().map(|o| o.name.as_str()),
        )?;
        if let Some(bad) = self.hooks.keys().find(|k| !is_hook_key(k)) {
            return Err(ConfigError::BadHookAction(bad.clone()));
        }
        for name in self.actions.keys() {
            let reason = if is_hook_key(name) {
                Some("is a lifecycle action or CHECK; give its body in `hooks`".to_owned())
            } else {
                Action::new(name.as_str()).err().map(|e| e.to_string())
            };
            if let Some(reason) = reason {
                return Err(ConfigError::BadAdhocAction {
                    name: name.clone(),
                    reason,
                });
            }
        }
        self.check_limits()?;
        self.check_default_types()?;
        Ok(())
    }

    /// Every default readable as its input's declared type, as Heat checks a software
    /// config's defaults. A hidden one is checked when a deployment uses it (a spec may
    /// carry it sealed).
    fn check_default_types(&self) -> Result<(), crate::heat::TypeMismatch> {
        for (i, input) in self.inputs.iter().enumerate() {
            if let Some(default) = input.default.as_ref().filter(|_| !input.hidden) {
                let kind = crate::heat::InputType::parse(&input.kind);
                crate::heat::typed(kind, default)
                    .map_err(|e| e.at(format!("inputs[{i}].default")))?;
            }
        }
        Ok(())
    }

    /// Every value of the spec within [`limits::MAX_VALUE_DEPTH`], and for the `script`
    /// group every default usable as an environment variable.
    fn check_limits(&self) -> Result<(), LimitError> {
        check_depth(|| "config".to_owned(), &self.config)?;
        check_depth(|| "options".to_owned(), &self.options)?;
        for (action, body) in &self.hooks {
            check_depth(|| format!("hooks.{action}"), body)?;
        }
        for (name, action) in &self.actions {
            check_depth(|| format!("actions.{name}.config"), &action.config)?;
        }
        for (i, input) in self.inputs.iter().enumerate() {
            let Some(default) = &input.default else {
                continue;
            };
            let field = || format!("inputs[{i}].default");
            check_depth(field, default)?;
            if self.group == limits::SCRIPT_GROUP {
                limits::check_env_var(field, &input.name, default)?;
            }
        }
        Ok(())
    }

    /// Turns the spec into a stored config with the given id and time.
    pub fn into_config(self, id: ConfigId, created_at: OffsetDateTime) -> Config {
        Config {
            id,
            name: self.name,
            group: self.group,
            config: self.config,
            inputs: self.inputs,
            outputs: self.outputs,
            options: self.options,
            hooks: self.hooks,
            actions: self.actions,
            substitute_inputs: self.substitute_inputs,
            created_at,
        }
    }
}

fn check_names<'a>(
    what: &'static str,
    valid: fn(&str) -> bool,
    names: impl Iterator<Item = &'a str>,
) -> Result<(), ConfigError> {
    let mut seen = std::collections::HashSet::new();
    for name in names {
        if !valid(name) {
            return Err(ConfigError::BadName {
                what,
                name: name.to_owned(),
            });
        }
        if !seen.insert(name) {
            return Err(ConfigError::Duplicate {
                what,
                name: name.to_owned(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec() -> ConfigSpec {
        serde_json::from_value(json!({
            "group": "script",
            "config": "#!/bin/sh\necho hi",
            "inputs": [{"name": "foo"}, {"name": "secret", "hidden": true}],
            "outputs": [{"name": "result"}, {"name": "err", "error_output": true}]
        }))
        .expect("valid spec")
    }

    #[test]
    fn spec_defaults_and_round_trip() {
        let s = spec();
        assert_eq!(s.options, json!({}));
        assert_eq!(s.inputs[0].kind, "String");
        s.validate().expect("valid");
        let c = s.into_config(ConfigId::new("c1").expect("id"), OffsetDateTime::UNIX_EPOCH);
        let text = serde_json::to_string(&c).expect("ser");
        let back: Config = serde_json::from_str(&text).expect("de");
        assert_eq!(back, c);
        assert!(
            text.contains("\"created_at\":\"1970-01-01T00:00:00Z\""),
            "{text}"
        );
    }

    #[test]
    fn rejects_bad_specs() {
        let mut s = spec();
        s.group = "../x".into();
        assert!(matches!(s.validate(), Err(ConfigError::BadGroup(_))));
        s.group = "Heat::Other".into();
        assert!(matches!(s.validate(), Err(ConfigError::BadGroup(_))));
        s.group = "Heat::Ungrouped".into();
        assert_eq!(s.validate(), Ok(()), "Heat's default group");
        // Heat takes any input name an environment entry can carry.
        let mut s = spec();
        s.inputs[0].name = "pkg-redhat".into();
        s.validate().expect("a Heat input name");
        s.inputs[0].name = "a=b".into();
        let e = s.validate().expect_err("no '=' in an input name");
        assert!(matches!(e, ConfigError::BadName { what: "input", .. }));
        assert!(e.to_string().contains("hold no '=' or NUL"), "{e}");
        let mut s = spec();
        s.outputs[0].name = "with-dash".into();
        let e = s.validate().expect_err("outputs stay plain");
        assert!(e.to_string().contains("must match [A-Za-z_]"), "{e}");
        let mut s = spec();
        s.outputs[1].name = "result".into();
        assert!(matches!(
            s.validate(),
            Err(ConfigError::Duplicate { what: "output", .. })
        ));
        let mut s = spec();
        s.options = json!(null);
        assert_eq!(s.validate(), Err(ConfigError::OptionsNotObject));
    }

    #[test]
    fn action_bodies_are_chosen_per_action() {
        let mut s = spec();
        s.hooks.insert("DELETE".into(), json!("echo bye"));
        s.actions.insert(
            "backup".into(),
            AdhocAction {
                config: json!("tar c /srv"),
                description: None,
            },
        );
        s.validate().expect("valid");
        let c = s.into_config(ConfigId::new("c1").expect("id"), OffsetDateTime::UNIX_EPOCH);
        let a = |n: &str| Action::new(n).expect("action");
        assert_eq!(c.body_for(&a("DELETE")), &json!("echo bye"));
        assert_eq!(c.body_for(&a("backup")), &json!("tar c /srv"));
        assert_eq!(c.body_for(&a("CREATE")), &json!("#!/bin/sh\necho hi"));
        assert!(c.allows(&a("SUSPEND")) && c.allows(&a("backup")));
        assert!(!c.allows(&a("restore")));
    }

    #[test]
    fn bad_action_declarations_are_refused() {
        let mut s = spec();
        s.hooks.insert("backup".into(), json!("x"));
        assert_eq!(
            s.validate(),
            Err(ConfigError::BadHookAction("backup".into()))
        );
        let mut s = spec();
        s.actions.insert(
            "DELETE".into(),
            AdhocAction {
                config: json!("x"),
                description: None,
            },
        );
        assert!(matches!(
            s.validate(),
            Err(ConfigError::BadAdhocAction { .. })
        ));
        let mut s = spec();
        s.actions.insert(
            "back up".into(),
            AdhocAction {
                config: json!("x"),
                description: None,
            },
        );
        assert!(matches!(
            s.validate(),
            Err(ConfigError::BadAdhocAction { .. })
        ));
    }

    #[test]
    fn unknown_spec_fields_are_refused() {
        let err = serde_json::from_value::<ConfigSpec>(json!({"group": "script", "grup": 1}))
            .expect_err("typo refused");
        assert!(err.to_string().contains("grup"), "{err}");
        let err = serde_json::from_value::<ConfigSpec>(json!({"config": "x"})).expect_err("group");
        assert!(err.to_string().contains("group"), "{err}");
    }
}
