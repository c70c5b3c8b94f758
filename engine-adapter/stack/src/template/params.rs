//! The `parameters` section, and binding command-line values to it.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::constraints;
use super::{ParamDecl, ParamType, Parameters, TemplateError, check_keys, optional_string};
use crate::functions::kind_of;
use crate::functions::versions::TemplateVersion;

const ATTRIBUTES: [&str; 8] = [
    "type",
    "default",
    "hidden",
    "description",
    "label",
    "constraints",
    "immutable",
    "tags",
];

impl ParamType {
    /// The type for a template's spelling (`comma_delimited_list`, …).
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "string" => Self::String,
            "number" => Self::Number,
            "boolean" => Self::Boolean,
            "json" => Self::Json,
            "comma_delimited_list" => Self::CommaDelimitedList,
            _ => return None,
        })
    }

    /// The template's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Self::String => "string",
            Self::Number => "number",
            Self::Boolean => "boolean",
            Self::Json => "json",
            Self::CommaDelimitedList => "comma_delimited_list",
        }
    }

    /// Converts a command-line string to a value of this type.
    pub fn parse_text(self, text: &str) -> Result<Value, String> {
        match self {
            Self::String => Ok(Value::String(text.to_owned())),
            Self::Number => parse_number(text),
            Self::Boolean => parse_bool(text),
            Self::Json => match serde_json::from_str(text) {
                Ok(v @ (Value::Object(_) | Value::Array(_))) => Ok(v),
                Ok(_) => Err("must be a JSON map or list".to_owned()),
                Err(e) => Err(format!("not valid JSON: {e}")),
            },
            Self::CommaDelimitedList => Ok(split_list(text)),
        }
    }

    /// Converts a template value (a default) to this type; strings are read as
    /// [`ParamType::parse_text`] does.
    pub fn coerce(self, value: &Value) -> Result<Value, String> {
        match (self, value) {
            (_, Value::String(s)) => self.parse_text(s),
            (Self::String, Value::Number(n)) => Ok(Value::String(n.to_string())),
            (Self::String, Value::Bool(b)) => Ok(Value::String(b.to_string())),
            (Self::Number, Value::Number(_))
            | (Self::Boolean, Value::Bool(_))
            | (Self::Json, Value::Object(_) | Value::Array(_)) => Ok(value.clone()),
            (Self::CommaDelimitedList, Value::Array(items)) => items
                .iter()
                .map(|item| match item {
                    Value::String(_) => Ok(item.clone()),
                    Value::Number(_) | Value::Bool(_) => Ok(Value::String(item.to_string())),
                    other => Err(format!(
                        "list items must be strings, got {}",
                        kind_of(other)
                    )),
                })
                .collect::<Result<_, _>>()
                .map(Value::Array),
            (_, other) => Err(format!("must be a {}, got {}", self.name(), kind_of(other))),
        }
    }
}

fn parse_number(text: &str) -> Result<Value, String> {
    let t = text.trim();
    if let Ok(i) = t.parse::<i64>() {
        return Ok(Value::from(i));
    }
    t.parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
        .map(Value::Number)
        .ok_or_else(|| "not a number".to_owned())
}

fn parse_bool(text: &str) -> Result<Value, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        // Heat's (oslo's `bool_from_string`) spellings.
        "true" | "t" | "yes" | "y" | "on" | "1" => Ok(Value::Bool(true)),
        "false" | "f" | "no" | "n" | "off" | "0" => Ok(Value::Bool(false)),
        _ => Err("must be true or false".to_owned()),
    }
}

fn split_list(text: &str) -> Value {
    if text.trim().is_empty() {
        return Value::Array(Vec::new());
    }
    Value::Array(
        text.split(',')
            .map(|s| Value::String(s.trim().to_owned()))
            .collect(),
    )
}

/// Parses the `parameters` section.
pub(super) fn parse_all(
    section: Option<&Value>,
    version: TemplateVersion,
) -> Result<BTreeMap<String, ParamDecl>, TemplateError> {
    let map = match section {
        None | Some(Value::Null) => return Ok(BTreeMap::new()),
        Some(Value::Object(map)) => map,
        Some(_) => {
            return Err(TemplateError::new(
                "parameters",
                "must be a map of parameter name to declaration",
            ));
        }
    };
    map.iter()
        .map(|(name, decl)| Ok((name.clone(), parse_one(name, decl, version)?)))
        .collect()
}

/// Applies an environment's `parameter_defaults`: they replace the template's
/// defaults; names the template does not declare are ignored, as Heat does.
pub(super) fn apply_defaults(
    decls: &mut BTreeMap<String, ParamDecl>,
    defaults: &Map<String, Value>,
) -> Result<(), TemplateError> {
    for (name, value) in defaults {
        let Some(decl) = decls.get_mut(name) else {
            continue;
        };
        let value = decl
            .kind
            .coerce(value)
            .map_err(|m| TemplateError::new(format!("environment parameter_defaults.{name}"), m))?;
        decl.default = Some(value);
    }
    Ok(())
}

fn parse_one(
    name: &str,
    decl: &Value,
    version: TemplateVersion,
) -> Result<ParamDecl, TemplateError> {
    let path = format!("parameters.{name}");
    if let Err(e) = flue_proto::ids::validate(name) {
        return Err(TemplateError::new(path, format!("parameter name {e}")));
    }
    let Value::Object(decl) = decl else {
        return Err(TemplateError::new(
            path,
            "must be a map with at least `type`",
        ));
    };
    check_keys(decl, &path, &ATTRIBUTES)?;
    let kind = match decl.get("type") {
        None => return Err(TemplateError::new(format!("{path}.type"), "required")),
        Some(Value::String(t)) => ParamType::from_name(t),
        Some(_) => None,
    }
    .ok_or_else(|| {
        TemplateError::new(
            format!("{path}.type"),
            "must be one of string, number, boolean, json, comma_delimited_list",
        )
    })?;
    let hidden = match decl.get("hidden") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(TemplateError::new(
                format!("{path}.hidden"),
                "must be true or false",
            ));
        }
    };
    let default = match decl.get("default") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            kind.coerce(v)
                .map_err(|m| TemplateError::new(format!("{path}.default"), m))?,
        ),
    };
    let label = optional_string(decl.get("label"), &format!("{path}.label"))?;
    let immutable = match decl.get("immutable") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(TemplateError::new(
                format!("{path}.immutable"),
                "must be true or false",
            ));
        }
    };
    let constraints = constraints::parse(
        decl.get("constraints"),
        kind,
        version,
        &format!("{path}.constraints"),
    )?;
    Ok(ParamDecl {
        kind,
        default,
        hidden,
        description: optional_string(decl.get("description"), &format!("{path}.description"))?,
        label,
        immutable,
        constraints,
    })
}

/// See [`super::Template::bind_parameters`].
pub(super) fn bind(
    decls: &BTreeMap<String, ParamDecl>,
    given: &BTreeMap<String, String>,
    kept: &BTreeMap<String, Value>,
) -> Result<Parameters, TemplateError> {
    let mut params = Parameters::default();
    for (name, text) in given {
        let path = format!("parameters.{name}");
        let Some(decl) = decls.get(name) else {
            let known: Vec<&str> = decls.keys().map(String::as_str).collect();
            let message = if known.is_empty() {
                "unknown parameter; the template declares none".to_owned()
            } else {
                format!(
                    "unknown parameter; the template declares {}",
                    known.join(", ")
                )
            };
            return Err(TemplateError::new(path, message));
        };
        let value = decl.kind.parse_text(text).map_err(|m| {
            // The value itself is never echoed: it may be a password.
            TemplateError::new(&path, format!("{m} (expected a {})", decl.kind.name()))
        })?;
        if decl.immutable
            && let Some(before) = kept.get(name)
            && decl.kind.coerce(before).ok().as_ref() != Some(&value)
        {
            return Err(TemplateError::new(
                path,
                format!("The following parameters are immutable and may not be updated: {name}"),
            ));
        }
        params.values.insert(name.clone(), value);
        params.given.insert(name.clone());
    }
    for (name, decl) in decls {
        if decl.hidden {
            params.hidden.insert(name.clone());
        }
        if params.values.contains_key(name) {
            continue;
        }
        if let Some(value) = kept.get(name).filter(|_| !decl.hidden) {
            let value = decl.kind.coerce(value).map_err(|m| {
                TemplateError::new(
                    format!("parameters.{name}"),
                    format!(
                        "the value kept from the last run no longer fits: {m}; pass -P {name}=…"
                    ),
                )
            })?;
            params.values.insert(name.clone(), value);
            params.given.insert(name.clone());
            continue;
        }
        let Some(default) = &decl.default else {
            return Err(TemplateError::new(
                format!("parameters.{name}"),
                format!("required, no default; pass -P {name}=…"),
            ));
        };
        params.values.insert(name.clone(), default.clone());
        // An immutable parameter's first value is kept even when it is the default,
        // so a later default cannot change it either.
        if decl.immutable {
            params.given.insert(name.clone());
        }
    }
    for (name, decl) in decls {
        let value = &params.values[name];
        constraints::check(&decl.constraints, value, decl.hidden)
            .map_err(|m| TemplateError::new(format!("parameters.{name}"), m))?;
    }
    Ok(params)
}
