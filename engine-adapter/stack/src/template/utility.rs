//! The shape of Heat's utility resources: `OS::Heat::RandomString`, `OS::Heat::Value`,
//! `OS::Heat::CloudConfig`, `OS::Heat::MultipartMime` and `OS::Heat::ResourceGroup`.
//! Values written with functions are checked when they are resolved.

use serde_json::{Map, Value};

use super::resources::{check_deployment, is_call, require};
use super::{ResourceKind, TemplateError, check_keys};
use crate::functions::kind_of;

/// Heat's named character sets of `OS::Heat::RandomString` (`sequence`, `class`).
pub const CHARACTER_CLASSES: [&str; 7] = [
    "lettersdigits",
    "letters",
    "lowercase",
    "uppercase",
    "digits",
    "hexdigits",
    "octdigits",
];
/// The longest `OS::Heat::RandomString` Heat makes.
pub const MAX_RANDOM_LENGTH: u64 = 512;
/// `OS::Heat::Value` types.
pub const VALUE_TYPES: [&str; 5] = [
    "string",
    "number",
    "comma_delimited_list",
    "json",
    "boolean",
];
/// The default `index_var` of a `ResourceGroup`.
pub const INDEX_VAR: &str = "%index%";

pub(super) fn check_random_string(
    props: &Map<String, Value>,
    path: &str,
) -> Result<(), TemplateError> {
    check_keys(
        props,
        path,
        &[
            "length",
            "sequence",
            "character_classes",
            "character_sequences",
            "salt",
        ],
    )?;
    let at = |key: &str| format!("{path}.{key}");
    match props.get("length") {
        None => {}
        Some(v) if is_call(v) => {}
        Some(v)
            if v.as_u64()
                .is_some_and(|n| (1..=MAX_RANDOM_LENGTH).contains(&n)) => {}
        Some(_) => {
            return Err(TemplateError::new(
                at("length"),
                format!("must be a whole number from 1 to {MAX_RANDOM_LENGTH}"),
            ));
        }
    }
    if let Some(v) = props.get("sequence")
        && !is_call(v)
        && !v.as_str().is_some_and(|s| CHARACTER_CLASSES.contains(&s))
    {
        return Err(TemplateError::new(
            at("sequence"),
            format!("must be one of {}", CHARACTER_CLASSES.join(", ")),
        ));
    }
    for (key, field) in [
        ("character_classes", "class"),
        ("character_sequences", "sequence"),
    ] {
        let Some(v) = props.get(key) else { continue };
        if is_call(v) {
            continue;
        }
        let Value::Array(items) = v else {
            return Err(TemplateError::new(
                at(key),
                format!(
                    "must be a list of {{{field}, min}} maps, got {}",
                    kind_of(v)
                ),
            ));
        };
        for (i, item) in items.iter().enumerate() {
            let item_path = format!("{}[{i}]", at(key));
            let Value::Object(item) = item else {
                return Err(TemplateError::new(
                    item_path,
                    format!("must be a map with `{field}`"),
                ));
            };
            check_keys(item, &item_path, &[field, "min"])?;
            match (field, item.get(field)) {
                (_, Some(v)) if is_call(v) => {}
                ("class", Some(Value::String(c))) if CHARACTER_CLASSES.contains(&c.as_str()) => {}
                ("class", None) => {}
                ("class", Some(_)) => {
                    return Err(TemplateError::new(
                        format!("{item_path}.class"),
                        format!("must be one of {}", CHARACTER_CLASSES.join(", ")),
                    ));
                }
                (_, Some(Value::String(s))) if !s.is_empty() => {}
                _ => {
                    return Err(TemplateError::new(
                        format!("{item_path}.sequence"),
                        "must be a non-empty string of characters",
                    ));
                }
            }
            if let Some(min) = item.get("min")
                && !is_call(min)
                && !min
                    .as_u64()
                    .is_some_and(|n| (1..=MAX_RANDOM_LENGTH).contains(&n))
            {
                return Err(TemplateError::new(
                    format!("{item_path}.min"),
                    format!("must be a whole number from 1 to {MAX_RANDOM_LENGTH}"),
                ));
            }
        }
    }
    Ok(())
}

pub(super) fn check_value(props: &Map<String, Value>, path: &str) -> Result<(), TemplateError> {
    check_keys(props, path, &["value", "type"])?;
    require(props, path, &["value"])?;
    match props.get("type") {
        None => Ok(()),
        Some(Value::String(t)) if VALUE_TYPES.contains(&t.as_str()) => Ok(()),
        Some(_) => Err(TemplateError::new(
            format!("{path}.type"),
            format!("must be one of {}", VALUE_TYPES.join(", ")),
        )),
    }
}

pub(super) fn check_cloud_config(
    props: &Map<String, Value>,
    path: &str,
) -> Result<(), TemplateError> {
    check_keys(props, path, &["cloud_config"])?;
    match props.get("cloud_config") {
        None | Some(Value::Object(_)) => Ok(()),
        Some(v) if is_call(v) => Ok(()),
        Some(v) => Err(TemplateError::new(
            format!("{path}.cloud_config"),
            format!("must be a map, got {}", kind_of(v)),
        )),
    }
}

pub(super) fn check_multipart(props: &Map<String, Value>, path: &str) -> Result<(), TemplateError> {
    check_keys(props, path, &["parts", "group"])?;
    match props.get("parts") {
        None | Some(Value::Array(_)) => Ok(()),
        Some(v) if is_call(v) => Ok(()),
        Some(v) => Err(TemplateError::new(
            format!("{path}.parts"),
            format!(
                "must be a list of {{config, filename, type, subtype}}, got {}",
                kind_of(v)
            ),
        )),
    }
}

pub(super) fn check_resource_group(
    props: &Map<String, Value>,
    path: &str,
) -> Result<(), TemplateError> {
    check_keys(
        props,
        path,
        &[
            "count",
            "resource_def",
            "index_var",
            "removal_policies",
            "removal_policies_mode",
        ],
    )?;
    require(props, path, &["resource_def"])?;
    let at = |key: &str| format!("{path}.{key}");
    match props.get("count") {
        None => {}
        Some(v) if is_call(v) => {}
        Some(v) if v.as_u64().is_some() => {}
        Some(_) => {
            return Err(TemplateError::new(
                at("count"),
                "must be a whole number, 0 or more",
            ));
        }
    }
    if let Some(v) = props.get("index_var")
        && v.as_str().is_none_or(str::is_empty)
    {
        return Err(TemplateError::new(
            at("index_var"),
            "must be a non-empty string",
        ));
    }
    let def_path = at("resource_def");
    let Some(Value::Object(def)) = props.get("resource_def") else {
        return Err(TemplateError::new(
            def_path,
            "must be a map with `type` and `properties`",
        ));
    };
    check_keys(def, &def_path, &["type", "properties", "metadata"])?;
    let kind = def
        .get("type")
        .and_then(Value::as_str)
        .and_then(ResourceKind::from_type);
    if kind != Some(ResourceKind::SoftwareDeployment) {
        return Err(TemplateError::new(
            format!("{def_path}.type"),
            "Flue runs ResourceGroups of OS::Heat::SoftwareDeployment or \
             OS::Heat::StructuredDeployment only (servers are registered, not created: \
             map each one, or use an OS::Heat::SoftwareDeploymentGroup over them)",
        ));
    }
    let inner = match def.get("properties") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(v) => {
            return Err(TemplateError::new(
                format!("{def_path}.properties"),
                format!("must be a map, got {}", kind_of(v)),
            ));
        }
    };
    check_deployment(&inner, &format!("{def_path}.properties"))
}

/// A `ResourceGroup`'s `resource_def.properties` (empty when absent).
pub fn group_def_properties(props: &Map<String, Value>) -> Map<String, Value> {
    props
        .get("resource_def")
        .and_then(|d| d.get("properties"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// `value` with every occurrence of `index_var` in its strings (keys included)
/// replaced by `index`, as Heat does for each member of a `ResourceGroup`.
pub fn substitute_index(value: &Value, index_var: &str, index: &str) -> Value {
    match value {
        Value::String(s) => Value::String(s.replace(index_var, index)),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|v| substitute_index(v, index_var, index))
                .collect(),
        ),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    (
                        k.replace(index_var, index),
                        substitute_index(v, index_var, index),
                    )
                })
                .collect(),
        ),
        other => other.clone(),
    }
}
