//! Run-time values of Heat's utility resources: `OS::Heat::Value`, the attributes of an
//! `OS::Heat::ResourceGroup`, and an `OS::Heat::RandomString`'s keeper deployment.

use std::collections::BTreeMap;

use flue_proto::Deployment;
use serde_json::Value;

use super::{Resolved, RuntimeResolver, deployment_attr};
use crate::stack::functions;
use crate::stack::random;
use crate::stack::template::TemplateError;
use crate::stack::units::DesiredUnit;

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
        let key = |m: &str| crate::stack::units::member_key(resource, m);
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
                    let d = self.completed(&key(index))?;
                    if rest.is_empty() {
                        deployment_view(d)
                    } else {
                        deployment_attr(d, rest)
                    }
                }
                None => Value::Array(
                    members
                        .iter()
                        .map(|(m, _)| Ok(deployment_attr(self.completed(&key(m))?, other)))
                        .collect::<Result<_, String>>()?,
                ),
            },
        })
    }
}

/// Every attribute of a completed deployment as one map (outputs and `deploy_*`), for
/// `get_attr` paths through a `ResourceGroup`.
fn deployment_view(d: &Deployment) -> Value {
    let mut map: serde_json::Map<String, Value> = d
        .outputs
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for attr in crate::stack::template::DEPLOYMENT_ATTRIBUTES {
        map.insert(attr.to_owned(), deployment_attr(d, attr));
    }
    Value::Object(map)
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
        timeout_secs: None,
        name: unit.resource.clone(),
    })
}
