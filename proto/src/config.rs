//! Software configs: what to apply, with which hook, taking which inputs and giving which outputs.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::ids::ConfigId;

/// One declared input of a config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputDecl {
    /// Input name; for the `script` group it becomes an environment variable.
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
pub struct OutputDecl {
    /// Output name; the `script` group reads it from `${heat_outputs_path}.<name>`.
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
}

fn default_type() -> String {
    "String".to_owned()
}

/// What an engine sends to create a config. Configs are immutable once created.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigSpec {
    /// Id to use; the gateway picks a random one when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<ConfigId>,
    /// Human name.
    #[serde(default)]
    pub name: String,
    /// Hook group that applies the config (`script`, or an executable's name in a hook dir).
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
    pub options: serde_json::Value,
}

pub(crate) fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

/// A stored config, as read back from the gateway and as carried in a request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// When the gateway accepted it.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

/// Why a config spec was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `group` was empty or not a plain file name.
    #[error(
        "group {0:?} must be a non-empty name of letters, digits, '_', '-' or '.' (not '.' or '..')"
    )]
    BadGroup(String),
    /// An input or output name is empty or not usable as an environment variable / file suffix.
    #[error("{what} name {name:?} must match [A-Za-z_][A-Za-z0-9_]*")]
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
}

/// True for names usable as an environment variable and as an output file suffix.
pub fn is_plain_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl ConfigSpec {
    /// Checks everything that does not need the gateway's state.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let g = &self.group;
        let group_ok = !g.is_empty()
            && g.len() <= 64
            && g != "."
            && g != ".."
            && g.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if !group_ok {
            return Err(ConfigError::BadGroup(g.clone()));
        }
        if !self.options.is_object() {
            return Err(ConfigError::OptionsNotObject);
        }
        check_names("input", self.inputs.iter().map(|i| i.name.as_str()))?;
        check_names("output", self.outputs.iter().map(|o| o.name.as_str()))?;
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
            created_at,
        }
    }
}

fn check_names<'a>(
    what: &'static str,
    names: impl Iterator<Item = &'a str>,
) -> Result<(), ConfigError> {
    let mut seen = std::collections::HashSet::new();
    for name in names {
        if !is_plain_name(name) {
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
        let mut s = spec();
        s.inputs[0].name = "with space".into();
        assert!(matches!(
            s.validate(),
            Err(ConfigError::BadName { what: "input", .. })
        ));
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
    fn unknown_spec_fields_are_refused() {
        let err = serde_json::from_value::<ConfigSpec>(json!({"group": "script", "grup": 1}))
            .expect_err("typo refused");
        assert!(err.to_string().contains("grup"), "{err}");
        let err = serde_json::from_value::<ConfigSpec>(json!({"config": "x"})).expect_err("group");
        assert!(err.to_string().contains("group"), "{err}");
    }
}
