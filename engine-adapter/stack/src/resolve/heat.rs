//! Run-time values of Heat's utility resources: `OS::Heat::Value`, the attributes of an
//! `OS::Heat::ResourceGroup`, an `OS::Heat::RandomString`'s keeper deployment, and the
//! bodies of `OS::Heat::CloudConfig` and `OS::Heat::MultipartMime`.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{Resolved, RuntimeResolver, deployment_attr, deployment_view};
use crate::functions;
use crate::functions::{GET_RESOURCE, as_call};
use crate::random;
use crate::template::{COMPONENT_GROUP, ResourceKind, TemplateError};
use crate::units::DesiredUnit;

impl RuntimeResolver<'_> {
    /// An `OS::Heat::Value`'s `value`, converted to its `type`. A value derived from a
    /// hidden parameter is refused: the result of `get_attr` carries no hidden mark.
    pub(super) fn value_attr(&self, resource: &str) -> Result<Value, String> {
        let res = &self.template.resources[resource];
        let path = format!("resources.{resource}.properties.value");
        let raw = res.properties.get("value").cloned().unwrap_or(Value::Null);
        let out = functions::resolve(&raw, self, &path).map_err(|e| e.to_string())?;
        if out.hidden {
            return Err(format!(
                "{path} uses a hidden parameter; pass the parameter itself where it is needed"
            ));
        }
        let kind = res.properties.get("type").and_then(Value::as_str);
        Ok(match (kind, out.value) {
            (Some("number"), Value::String(s)) => s
                .trim()
                .parse::<serde_json::Number>()
                .map(Value::Number)
                .map_err(|_| format!("{path}: {s:?} is not a number"))?,
            (Some("boolean"), Value::String(s)) => match s.to_ascii_lowercase().as_str() {
                "true" | "yes" | "on" | "1" | "t" | "y" => Value::Bool(true),
                "false" | "no" | "off" | "0" | "f" | "n" => Value::Bool(false),
                _ => return Err(format!("{path}: {s:?} is not a boolean")),
            },
            (Some("comma_delimited_list"), Value::String(s)) => Value::Array(
                s.split(',')
                    .map(|p| Value::String(p.trim().to_owned()))
                    .collect(),
            ),
            (Some("string"), v @ (Value::Number(_) | Value::Bool(_))) => {
                Value::String(v.to_string())
            }
            (_, v) => v,
        })
    }

    /// A `ResourceGroup`'s attribute: `refs` / `refs_map` (the members' deployment
    /// ids), `resource.N` (one member's deployment, `resource.N.OUTPUT` one of its
    /// outputs), or an output of every member as a list in index order.
    pub(super) fn group_attr(&self, resource: &str, attr: &str) -> Result<Value, String> {
        let members = self
            .plan
            .members
            .get(resource)
            .map_or(&[][..], Vec::as_slice);
        let key = |m: &str| crate::units::member_key(resource, m);
        let reference = |m: &str| -> Value {
            self.state
                .units
                .get(&key(m))
                .and_then(|u| u.baseline.as_ref())
                .map_or(Value::Null, |d| Value::String(d.to_string()))
        };
        Ok(match attr {
            "refs" => Value::Array(members.iter().map(|(m, _)| reference(m)).collect()),
            "refs_map" => Value::Object(
                members
                    .iter()
                    .map(|(m, _)| (m.clone(), reference(m)))
                    .collect(),
            ),
            "removed_rsrc_list" => Value::Array(Vec::new()),
            other => match other.strip_prefix("resource.") {
                Some(n) => {
                    let (index, rest) = n.split_once('.').unwrap_or((n, ""));
                    let read = Some(rest).filter(|r| !r.is_empty());
                    let d = self.completed(&key(index), read)?;
                    if rest.is_empty() {
                        deployment_view(d)
                    } else {
                        deployment_attr(d, rest)
                    }
                }
                None => Value::Array(
                    members
                        .iter()
                        .map(|(m, _)| {
                            Ok(deployment_attr(
                                self.completed(&key(m), Some(other))?,
                                other,
                            ))
                        })
                        .collect::<Result<_, String>>()?,
                ),
            },
        })
    }
}

/// An `OS::Heat::RandomString`'s keeper: a fresh value and the properties it was made
/// from (the driver keeps the old value when those did not change).
pub(super) fn keeper_deployment(
    r: &RuntimeResolver<'_>,
    unit: &DesiredUnit,
) -> Result<Resolved, TemplateError> {
    let res = &r.template.resources[&unit.resource];
    let path = format!("resources.{}.properties", unit.resource);
    let props = functions::resolve_visible(&Value::Object(res.properties.clone()), r, &path)?;
    let props = props.as_object().cloned().unwrap_or_default();
    let value = random::generate(&props).map_err(|e| TemplateError {
        path: path.clone(),
        message: e.to_string(),
    })?;
    let mut input_values = BTreeMap::new();
    input_values.insert(random::PROPERTIES.to_owned(), Value::Object(props));
    input_values.insert(random::VALUE.to_owned(), Value::String(value));
    Ok(Resolved {
        spec: random::keeper_config(&unit.resource),
        input_values,
        input_refs: BTreeMap::new(),
        inputs_read: BTreeMap::new(),
        timeout_secs: None,
        name: unit.resource.clone(),
    })
}

/// Heat's default group, `Heat::Ungrouped`: sent as it is, and the agent treats it as
/// heat-agents' dispatcher does (no hook runs; the deployment completes).
pub use flue_proto::heat::group::UNGROUPED;

/// The hook group a config of `kind` is deployed with, given its `group` property.
/// With none, Heat's default [`UNGROUPED`] (the only one of a `CloudConfig` or a
/// `MultipartMime`). A component is group `component`.
pub fn hook_group(kind: ResourceKind, given: Option<&str>) -> String {
    match given {
        None if kind == ResourceKind::SoftwareComponent => COMPONENT_GROUP.to_owned(),
        None => UNGROUPED.to_owned(),
        Some(g) => g.to_owned(),
    }
}

/// The body of config resource `name` as text: a `SoftwareConfig`'s `config` (a
/// `StructuredConfig`'s as JSON), a `CloudConfig`'s `#cloud-config` document, a
/// `MultipartMime`'s MIME message.
pub(super) fn config_text(r: &RuntimeResolver<'_>, name: &str) -> Result<String, TemplateError> {
    let res = &r.template.resources[name];
    let path = |key: &str| format!("resources.{name}.properties.{key}");
    let prop = |key: &str| -> Result<Value, TemplateError> {
        let v = res.properties.get(key).cloned().unwrap_or(Value::Null);
        functions::resolve_visible(&v, r, &path(key))
    };
    match res.kind {
        // JSON is YAML: Heat writes `#cloud-config` and the map as YAML, the same data.
        ResourceKind::CloudConfig => {
            let body = match prop("cloud_config")? {
                Value::Null => Value::Object(serde_json::Map::new()),
                v => v,
            };
            let text = serde_json::to_string_pretty(&body)
                .map_err(|e| TemplateError::new(path("cloud_config"), e.to_string()))?;
            Ok(format!("#cloud-config\n{text}\n"))
        }
        ResourceKind::MultipartMime => {
            let mut parts = Vec::new();
            mime_parts(r, name, &mut parts, 0)?;
            Ok(mime_message(&parts))
        }
        _ => match prop("config")? {
            Value::String(s) => Ok(s),
            Value::Null => Ok(String::new()),
            other => Ok(other.to_string()),
        },
    }
}

/// One part of a MIME message: its subtype, file name and text.
struct MimePart {
    subtype: String,
    filename: String,
    text: String,
}

/// The parts of `MultipartMime` `name`, a `multipart` part's own parts spliced in (as
/// Heat does), each `config` either text or `get_resource` of a config resource.
fn mime_parts(
    r: &RuntimeResolver<'_>,
    name: &str,
    out: &mut Vec<MimePart>,
    depth: usize,
) -> Result<(), TemplateError> {
    let parts_path = format!("resources.{name}.properties.parts");
    if depth > 8 {
        return Err(TemplateError::new(
            parts_path,
            "multipart parts nest too deep",
        ));
    }
    let raw = r.template.resources[name]
        .properties
        .get("parts")
        .cloned()
        .unwrap_or(Value::Array(Vec::new()));
    // Each part's `config` is read on its own: `get_resource` of a config here means
    // its body, not its name.
    let items = match raw {
        Value::Array(items) => items,
        other => match functions::resolve_visible(&other, r, &parts_path)? {
            Value::Array(items) => items,
            _ => return Err(TemplateError::new(parts_path, "must be a list of parts")),
        },
    };
    for (i, item) in items.iter().enumerate() {
        let at = format!("{parts_path}[{i}]");
        let field = |key: &str| -> Result<String, TemplateError> {
            match item.get(key) {
                None => Ok(String::new()),
                Some(v) => match functions::resolve_visible(v, r, &format!("{at}.{key}"))? {
                    Value::String(s) => Ok(s),
                    Value::Null => Ok(String::new()),
                    other => Ok(other.to_string()),
                },
            }
        };
        let target = item
            .get("config")
            .and_then(as_call)
            .and_then(|(f, arg)| (f == GET_RESOURCE).then_some(arg))
            .and_then(Value::as_str)
            .filter(|t| {
                r.template.resources.get(*t).is_some_and(|res| {
                    res.kind.is_config() || res.kind == ResourceKind::MultipartMime
                })
            });
        if field("type")? == "multipart" {
            match target {
                Some(t) if r.template.resources[t].kind == ResourceKind::MultipartMime => {
                    mime_parts(r, t, out, depth + 1)?;
                    continue;
                }
                _ => {
                    return Err(TemplateError::new(
                        format!("{at}.config"),
                        "a multipart part must be {get_resource: <an OS::Heat::MultipartMime>}",
                    ));
                }
            }
        }
        let text = match target {
            Some(t) => config_text(r, t)?,
            None => field("config")?,
        };
        let filename = field("filename")?;
        let mut subtype = field("subtype")?;
        // Heat: without a subtype, a file name's stem names it.
        if subtype.is_empty() && !filename.is_empty() {
            subtype = filename
                .rsplit_once('.')
                .map_or(filename.as_str(), |(stem, _)| stem)
                .to_owned();
        }
        if subtype.is_empty() {
            subtype = "plain".to_owned();
        }
        out.push(MimePart {
            subtype,
            filename,
            text,
        });
    }
    Ok(())
}

/// A `multipart/mixed` message of `parts`. The boundary is derived from the content,
/// so the same parts always give the same text (an update finds it unchanged).
fn mime_message(parts: &[MimePart]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for byte in p
            .subtype
            .bytes()
            .chain(p.filename.bytes())
            .chain(p.text.bytes())
        {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    let boundary = format!("==============={hash:016x}==");
    let mut out =
        format!("Content-Type: multipart/mixed; boundary=\"{boundary}\"\nMIME-Version: 1.0\n\n");
    for p in parts {
        let charset = if p.text.is_ascii() {
            "us-ascii"
        } else {
            "utf-8"
        };
        let encoding = if p.text.is_ascii() { "7bit" } else { "8bit" };
        out.push_str(&format!(
            "--{boundary}\nContent-Type: text/{}; charset=\"{charset}\"\nMIME-Version: 1.0\n\
             Content-Transfer-Encoding: {encoding}\n",
            p.subtype
        ));
        if !p.filename.is_empty() {
            out.push_str(&format!(
                "Content-Disposition: attachment; filename=\"{}\"\n",
                p.filename
            ));
        }
        out.push('\n');
        out.push_str(&p.text);
        if !p.text.ends_with('\n') {
            out.push('\n');
        }
    }
    out.push_str(&format!("--{boundary}--\n"));
    out
}
