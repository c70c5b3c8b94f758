//! Static checks of calls that the cross-resource checks do not know: is each
//! function available in the template's version, is it one Flue evaluates, and does
//! each condition name an existing condition. Run when the template is loaded.

use std::collections::BTreeMap;

use serde_json::Value;

use super::conditions::IF;
use super::versions::{TemplateVersion, condition_function_since, function_since, not_in_version};
use crate::template::TemplateError;

/// Heat functions Flue refuses, with the reason.
fn refused(name: &str) -> Option<&'static str> {
    Some(match name {
        "yaql" => {
            "yaql is not supported by Flue (it would need a yaql interpreter); use the other functions"
        }
        "make_url" => {
            "make_url is not supported by Flue; build the URL with str_replace or list_join"
        }
        "resource_facade" => "resource_facade is not supported by Flue (no nested stacks)",
        _ => return None,
    })
}

/// What a walk needs: the version and the names in the `conditions` section.
pub struct CallCheck<'a> {
    /// The template's version.
    pub version: TemplateVersion,
    /// The `conditions` section.
    pub conditions: &'a BTreeMap<String, Value>,
}

impl CallCheck<'_> {
    /// Checks every call inside `value` (a property, an output value).
    pub fn value(&self, value: &Value, path: &str) -> Result<(), TemplateError> {
        if let Some((name, args)) = one_key(value) {
            let since = function_since(name);
            let condition_only = since.is_none() && condition_function_since(name).is_some();
            if condition_only {
                return Err(TemplateError::new(
                    path,
                    format!(
                        "{name}: a condition function; it is only allowed in the conditions \
                         section, in a condition key and as the first argument of if"
                    ),
                ));
            }
            if let Some(since) = since {
                if self.version < since {
                    return Err(TemplateError::new(
                        path,
                        not_in_version(name, self.version, since),
                    ));
                }
                if let Some(why) = refused(name) {
                    return Err(TemplateError::new(path, why));
                }
                let at = format!("{path}.{name}");
                return self.args(name, args, &at);
            }
        }
        match value {
            Value::Array(items) => items
                .iter()
                .enumerate()
                .try_for_each(|(i, v)| self.value(v, &format!("{path}[{i}]"))),
            Value::Object(map) => map
                .iter()
                .try_for_each(|(k, v)| self.value(v, &format!("{path}.{k}"))),
            _ => Ok(()),
        }
    }

    fn args(&self, name: &str, args: &Value, path: &str) -> Result<(), TemplateError> {
        let fail = |m: &str| TemplateError::new(path, format!("{name}: {m}"));
        match name {
            IF => {
                let items = args.as_array().map(Vec::as_slice).unwrap_or_default();
                let two = items.len() == 2 && self.version >= TemplateVersion::WALLABY;
                if items.len() != 3 && !two {
                    return Err(fail(&format!(
                        "expected [condition, value_if_true, value_if_false] (the last may be \
                         left out from heat_template_version {})",
                        TemplateVersion::WALLABY
                    )));
                }
                self.condition(&items[0], &format!("{path}[0]"))?;
                return items[1..]
                    .iter()
                    .enumerate()
                    .try_for_each(|(i, v)| self.value(v, &format!("{path}[{}]", i + 1)));
            }
            "repeat" => {
                if args.get("permutations").is_some() && self.version < TemplateVersion::PIKE {
                    return Err(fail(&format!(
                        "permutations needs heat_template_version {} or later",
                        TemplateVersion::PIKE
                    )));
                }
                if !args
                    .get("for_each")
                    .is_some_and(|f| f.is_object() || one_key(f).is_some())
                    || args.get("template").is_none()
                {
                    return Err(fail(
                        "expected {for_each: {<var>: <list>}, template: <body>}",
                    ));
                }
            }
            "list_join"
                if self.version < TemplateVersion::V2015_10_15
                    && args.as_array().is_some_and(|a| a.len() > 2) =>
            {
                return Err(fail(&format!(
                    "joining several lists needs heat_template_version {} or later",
                    TemplateVersion::V2015_10_15
                )));
            }
            _ => {}
        }
        self.value(args, path)
    }

    /// Checks a condition: `conditions.*`, a `condition` key, or `if`'s first argument.
    pub fn condition(&self, cond: &Value, path: &str) -> Result<(), TemplateError> {
        if !self.version.has_conditions() {
            return Err(TemplateError::new(
                path,
                format!(
                    "conditions need heat_template_version {} or later",
                    TemplateVersion::NEWTON
                ),
            ));
        }
        match cond {
            Value::Bool(_) => Ok(()),
            Value::String(n) if self.conditions.contains_key(n) => Ok(()),
            Value::String(n) => Err(TemplateError::new(
                path,
                format!("Invalid condition \"{n}\"{}", declared(self.conditions)),
            )),
            _ => {
                let Some((name, args)) = one_key(cond) else {
                    return Err(TemplateError::new(
                        path,
                        "a condition must be true, false, a condition name or a condition function",
                    ));
                };
                let Some(since) = condition_function_since(name) else {
                    return Err(TemplateError::new(
                        path,
                        format!("The function \"{name}\" is invalid in this context"),
                    ));
                };
                if self.version < since {
                    return Err(TemplateError::new(
                        path,
                        not_in_version(name, self.version, since),
                    ));
                }
                let at = format!("{path}.{name}");
                match (name, args) {
                    ("yaql", _) => Err(TemplateError::new(path, "yaql is not supported by Flue")),
                    ("not", c) => self.condition(c, &at),
                    ("and" | "or", Value::Array(items)) if items.len() >= 2 => items
                        .iter()
                        .enumerate()
                        .try_for_each(|(i, c)| self.condition(c, &format!("{at}[{i}]"))),
                    ("and" | "or", _) => Err(TemplateError::new(
                        at,
                        "expected a list of at least 2 conditions",
                    )),
                    (IF, Value::Array(items)) if items.len() == 3 => {
                        self.condition(&items[0], &format!("{at}[0]"))
                    }
                    (IF, _) => Err(TemplateError::new(
                        at,
                        "expected [condition, value_if_true, value_if_false]",
                    )),
                    ("equals" | "contains", Value::Array(items)) if items.len() == 2 => Ok(()),
                    ("equals", _) => Err(TemplateError::new(at, "expected [value_1, value_2]")),
                    ("contains", _) => Err(TemplateError::new(at, "expected [value, sequence]")),
                    _ => Ok(()),
                }
            }
        }
    }
}

fn declared(conditions: &BTreeMap<String, Value>) -> String {
    if conditions.is_empty() {
        " (the template has no conditions section)".to_owned()
    } else {
        let names: Vec<&str> = conditions.keys().map(String::as_str).collect();
        format!(" (conditions: {})", names.join(", "))
    }
}

fn one_key(v: &Value) -> Option<(&str, &Value)> {
    let map = v.as_object()?;
    if map.len() != 1 {
        return None;
    }
    map.iter().next().map(|(k, v)| (k.as_str(), v))
}
