//! HOT intrinsic functions: `get_param`, `get_resource`, `get_attr`, `str_replace`
//! (and its strict variants), `list_join`, `get_file` (inlined when the template is
//! loaded), the value functions of [`data`], and `if` with the [`conditions`].
//!
//! A one-key map whose key is a function name is a call; everything else is data.
//! `get_input` is not a function here: it stays in the config body for the agent.
//! `if` never reaches [`resolve`]: conditions only read parameters, so
//! [`crate::template::Template::instantiate`] picks its branches first.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path};

use serde_json::Value;

use super::template::TemplateError;

mod check;
pub mod conditions;
pub mod data;
mod text;
pub use text::{str_replace, str_replace_counting, to_text};
pub mod versions;
pub use check::CallCheck;

/// `get_param: name` or `get_param: [name, key-or-index, …]`.
pub const GET_PARAM: &str = "get_param";
/// `get_resource: name`.
pub const GET_RESOURCE: &str = "get_resource";
/// `get_attr: [resource, attribute, key-or-index, …]`.
pub const GET_ATTR: &str = "get_attr";
/// `str_replace: {template: …, params: {…}}`.
pub const STR_REPLACE: &str = "str_replace";
/// `list_join: [delimiter, list, more lists…]`.
pub const LIST_JOIN: &str = "list_join";
/// `get_file: relative/path`, replaced by the file's content at load time.
pub const GET_FILE: &str = "get_file";

/// The functions Flue evaluates (each from the version [`versions::function_since`]
/// names).
pub const FUNCTIONS: [&str; 18] = [
    GET_PARAM,
    GET_RESOURCE,
    GET_ATTR,
    STR_REPLACE,
    LIST_JOIN,
    GET_FILE,
    "str_replace_strict",
    "str_replace_vstrict",
    "str_split",
    "map_merge",
    "map_replace",
    "repeat",
    "list_concat",
    "list_concat_unique",
    "contains",
    "filter",
    "digest",
    conditions::IF,
];

/// Heat functions Flue does not evaluate; a template using one is refused rather than
/// having the call passed on as if it were data. `equals`, `not`, `and` and `or` are
/// condition functions: fine in conditions, refused elsewhere.
pub const UNSUPPORTED: [&str; 8] = [
    "and",
    "equals",
    "get_server",
    "make_url",
    "not",
    "or",
    "resource_facade",
    "yaql",
];

/// Pseudo-parameters every stack has: `get_param: OS::stack_name` and so on.
pub const PSEUDO_PARAMETERS: [&str; 3] = ["OS::stack_name", "OS::stack_id", "OS::project_id"];

/// What a template's values are resolved against: the bound parameters and the
/// resources' run-time values, supplied by the engine.
pub trait Resolver {
    /// A parameter's value, `None` when there is no such parameter.
    fn param(&self, name: &str) -> Option<&Value>;
    /// True when the parameter is hidden.
    fn param_hidden(&self, name: &str) -> bool;
    /// What `get_resource: name` stands for.
    fn get_resource(&self, name: &str) -> Result<Value, String>;
    /// What `get_attr: [resource, attr, path…]` stands for; `path` is already resolved.
    fn get_attr(&self, resource: &str, attr: &str, path: &[Value]) -> Result<Value, String>;
}

/// A resolved value.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// The value with every call replaced by its result.
    pub value: Value,
    /// True when a hidden parameter contributed to it.
    pub hidden: bool,
}

/// If `value` is a call (a one-key map whose key is in [`FUNCTIONS`]), its function
/// name and argument.
pub fn as_call(value: &Value) -> Option<(&str, &Value)> {
    let map = value.as_object()?;
    if map.len() != 1 {
        return None;
    }
    let (name, args) = map.iter().next()?;
    FUNCTIONS
        .contains(&name.as_str())
        .then_some((name.as_str(), args))
}

/// Like [`resolve`], for a value that is stored and shown as it is (a server, a
/// name, a timeout): one derived from a hidden parameter is refused.
pub fn resolve_visible(
    value: &Value,
    r: &dyn Resolver,
    path: &str,
) -> Result<Value, TemplateError> {
    let out = resolve(value, r, path)?;
    if out.hidden {
        return Err(TemplateError::new(
            path,
            "uses a hidden parameter; it would be shown as it is",
        ));
    }
    Ok(out.value)
}

/// Replaces every call inside `value` by its result; `path` names `value` in errors
/// (`resources.web.properties.input_values.db_host`).
pub fn resolve(value: &Value, r: &dyn Resolver, path: &str) -> Result<Resolved, TemplateError> {
    let mut hidden = false;
    let value = eval(value, r, path, &mut hidden)?;
    Ok(Resolved { value, hidden })
}

/// Every resource named by a `get_resource` or `get_attr` anywhere inside `value`,
/// function arguments included.
pub fn references(value: &Value) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    collect_references(value, &mut found);
    found
}

fn collect_references(value: &Value, found: &mut BTreeSet<String>) {
    if let Some((name, args)) = as_call(value) {
        let target = match name {
            GET_RESOURCE => args.as_str(),
            GET_ATTR => args
                .as_array()
                .and_then(|a| a.first())
                .and_then(Value::as_str),
            _ => None,
        };
        if let Some(t) = target {
            found.insert(t.to_owned());
        }
    }
    match value {
        Value::Array(items) => items.iter().for_each(|v| collect_references(v, found)),
        Value::Object(map) => map.values().for_each(|v| collect_references(v, found)),
        _ => {}
    }
}

/// Follows `path` (object keys and array indexes) into `value`, as `get_param` and
/// `get_attr` do with their extra arguments.
pub fn select(value: &Value, path: &[Value]) -> Result<Value, String> {
    let mut current = value;
    for step in path {
        current = match (current, step) {
            (Value::Object(map), Value::String(key)) => map.get(key),
            (Value::Object(map), Value::Number(n)) => map.get(&n.to_string()),
            (Value::Array(items), Value::Number(n)) => {
                n.as_u64().and_then(|i| items.get(usize::try_from(i).ok()?))
            }
            (Value::Array(items), Value::String(s)) => {
                s.parse::<usize>().ok().and_then(|i| items.get(i))
            }
            _ => None,
        }
        .ok_or_else(|| format!("no element {step} in the value"))?;
    }
    Ok(current.clone())
}

/// How a value is described in errors: its kind, never its content, which may come
/// from a hidden parameter.
pub fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a map",
    }
}

fn eval(
    value: &Value,
    r: &dyn Resolver,
    path: &str,
    hidden: &mut bool,
) -> Result<Value, TemplateError> {
    if let Some((name, args)) = as_call(value) {
        return call(name, args, r, path, hidden);
    }
    match value {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, v)| eval(v, r, &format!("{path}[{i}]"), hidden))
            .collect::<Result<_, _>>()
            .map(Value::Array),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| Ok((k.clone(), eval(v, r, &format!("{path}.{k}"), hidden)?)))
            .collect::<Result<_, _>>()
            .map(Value::Object),
        other => Ok(other.clone()),
    }
}

fn call(
    name: &str,
    args: &Value,
    r: &dyn Resolver,
    path: &str,
    hidden: &mut bool,
) -> Result<Value, TemplateError> {
    let fail = |message: String| TemplateError::new(path, format!("{name}: {message}"));
    let args_path = format!("{path}.{name}");
    let args = eval(args, r, &args_path, hidden)?;
    match name {
        GET_PARAM => {
            let (param, keys) = match &args {
                Value::String(p) => (p.as_str(), &[][..]),
                Value::Array(items) => match items.split_first() {
                    Some((Value::String(p), keys)) => (p.as_str(), keys),
                    _ => return Err(fail(format!("expected [name, key…], got {}", kind_of(&args)))),
                },
                other => {
                    return Err(fail(format!(
                        "expected a parameter name, got {}",
                        kind_of(other)
                    )));
                }
            };
            let value = r
                .param(param)
                .ok_or_else(|| fail(format!("parameter {param:?} does not exist")))?;
            *hidden |= r.param_hidden(param);
            select(value, keys).map_err(|e| fail(format!("parameter {param:?}: {e}")))
        }
        GET_RESOURCE => {
            let target = args
                .as_str()
                .ok_or_else(|| fail(format!("expected a resource name, got {}", kind_of(&args))))?;
            r.get_resource(target).map_err(fail)
        }
        GET_ATTR => match args.as_array().map(Vec::as_slice) {
            Some([Value::String(res), Value::String(attr), rest @ ..]) => {
                r.get_attr(res, attr, rest).map_err(fail)
            }
            _ => Err(fail(format!(
                "expected [resource, attribute, key…], got {}",
                kind_of(&args)
            ))),
        },
        STR_REPLACE | "str_replace_strict" | "str_replace_vstrict" => {
            let (template, params) = match (args.get("template"), args.get("params")) {
                (Some(Value::String(t)), Some(Value::Object(p))) => (t, p),
                _ => {
                    return Err(fail(
                        "expected {template: <string>, params: <map>}".to_owned(),
                    ));
                }
            };
            match name {
                STR_REPLACE => Ok(Value::String(str_replace(template, params))),
                "str_replace_strict" => {
                    data::str_replace_checked(template, params, data::Strictness::Strict)
                        .map_err(fail)
                }
                _ => data::str_replace_checked(template, params, data::Strictness::VeryStrict)
                    .map_err(fail),
            }
        }
        "str_split" => data::str_split(&args).map_err(fail),
        "map_merge" => data::map_merge(&args).map_err(fail),
        "map_replace" => data::map_replace(&args).map_err(fail),
        "repeat" => data::repeat(&args).map_err(fail),
        "list_concat" => data::list_concat(&args, false).map_err(fail),
        "list_concat_unique" => data::list_concat(&args, true).map_err(fail),
        "contains" => data::contains(&args).map(Value::Bool).map_err(fail),
        "filter" => data::filter(&args).map_err(fail),
        "digest" => data::digest(&args).map_err(fail),
        conditions::IF => Err(fail(
            "conditions are decided before the stack runs; this if was left undecided".to_owned(),
        )),
        LIST_JOIN => {
            let Some((Value::String(delim), lists)) =
                args.as_array().and_then(|a| a.split_first())
            else {
                return Err(fail(format!(
                    "expected [delimiter, list, …], got {}",
                    kind_of(&args)
                )));
            };
            let mut parts = Vec::new();
            for list in lists {
                let items = list
                    .as_array()
                    .ok_or_else(|| fail(format!("expected a list to join, got {}", kind_of(list))))?;
                parts.extend(items.iter().map(to_text));
            }
            Ok(Value::String(parts.join(delim)))
        }
        _ => Err(fail(
            "only allowed in a template file; it is replaced by the file's content when the template is loaded"
                .to_owned(),
        )),
    }
}

/// Where `get_file` reads from: the template's directory (the CLI), or the files a
/// client sent with the template (an operation submitted over HTTP, as Heat's client
/// sends them).
#[derive(Debug, Clone, Copy)]
pub enum Files<'a> {
    /// Paths relative to this directory.
    Dir(&'a Path),
    /// Only these, by the path the template names.
    Given(&'a BTreeMap<String, String>),
}

impl<'a> From<&'a Path> for Files<'a> {
    fn from(dir: &'a Path) -> Self {
        Files::Dir(dir)
    }
}

/// Replaces every `{get_file: relative/path}` inside `value` by that file's content,
/// read from `files`. Absolute paths and URLs are refused; a relative path may leave
/// the template's directory (`../scripts/x.sh`), as heatclient reads it.
pub fn inline_files<'a>(
    value: &mut Value,
    files: impl Into<Files<'a>>,
    path: &str,
) -> Result<(), TemplateError> {
    inline_from(value, files.into(), path)
}

fn inline_from(value: &mut Value, files: Files<'_>, path: &str) -> Result<(), TemplateError> {
    if let Some((GET_FILE, args)) = as_call(value) {
        let text = match files {
            Files::Dir(base_dir) => read_file(args, base_dir),
            Files::Given(given) => given_file(args, given),
        }
        .map_err(|m| TemplateError::new(path, format!("{GET_FILE}: {m}")))?;
        *value = Value::String(text);
        return Ok(());
    }
    match value {
        Value::Array(items) => {
            for (i, v) in items.iter_mut().enumerate() {
                inline_from(v, files, &format!("{path}[{i}]"))?;
            }
        }
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                inline_from(v, files, &format!("{path}.{k}"))?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// The names every `get_file` in `value` reads, for a client that sends them along.
pub fn file_names(value: &Value, out: &mut BTreeSet<String>) {
    if let Some((GET_FILE, Value::String(name))) = as_call(value) {
        out.insert(name.clone());
        return;
    }
    match value {
        Value::Array(items) => items.iter().for_each(|v| file_names(v, out)),
        Value::Object(map) => map.values().for_each(|v| file_names(v, out)),
        _ => {}
    }
}

fn given_file(args: &Value, given: &BTreeMap<String, String>) -> Result<String, String> {
    let Value::String(name) = args else {
        return Err(format!(
            "expected a relative file path, got {}",
            kind_of(args)
        ));
    };
    given
        .get(name)
        .cloned()
        .ok_or_else(|| format!("{name:?} is not among the files sent with the template"))
}

/// Reads `get_file`'s path relative to `base_dir` (the template's directory), as
/// heatclient joins it to the template's URL: `..` leads out of the directory, an
/// absolute path or a URL is refused.
fn read_file(args: &Value, base_dir: &Path) -> Result<String, String> {
    let Value::String(name) = args else {
        return Err(format!(
            "expected a relative file path, got {}",
            kind_of(args)
        ));
    };
    let rel = Path::new(name);
    if name.is_empty() || name.contains("://") {
        return Err(format!(
            "{name:?} is not a relative file path; give it relative to the template's directory"
        ));
    }
    if rel
        .components()
        .any(|c| matches!(c, Component::RootDir | Component::Prefix(_)))
    {
        return Err(format!(
            "{name:?} is absolute; give it relative to the template's directory"
        ));
    }
    let full = lexical(&base_dir.join(rel));
    std::fs::read_to_string(&full).map_err(|e| format!("cannot read {}: {e}", full.display()))
}

/// `path` made absolute with its `..` taken lexically, as heatclient joins URLs: a
/// `..` after a symlinked directory leads back beside the link, not beside its target.
fn lexical(path: &Path) -> std::path::PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    let mut out = std::path::PathBuf::new();
    for part in absolute.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod hot_tests;
