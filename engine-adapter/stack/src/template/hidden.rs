//! Hidden outputs: where a template may use one. The gateway never shows a hidden
//! output's value, so the engine cannot compute with it: it can only hand it on whole,
//! as an input value of a deployment (the gateway fills it in), or show it as
//! `<hidden>` among the stack's outputs. Any other use is refused when the template
//! loads, before anything runs.

use serde_json::Value;

use super::{ResourceKind, Template, TemplateError};
use crate::functions;
use crate::units::config_resource;

/// True when `attr` is an output that the config of deployment or group `resource`
/// declares hidden.
pub fn is_hidden_output(template: &Template, resource: &str, attr: &str) -> bool {
    // An OS::Heat::RandomString's value is kept as a hidden output (see `random`).
    if template
        .resources
        .get(resource)
        .is_some_and(|r| r.kind == ResourceKind::RandomString)
    {
        return attr == "value";
    }
    let Some(config) = config_resource(template, resource) else {
        return false;
    };
    template.resources[config]
        .properties
        .get("outputs")
        .and_then(Value::as_array)
        .is_some_and(|outputs| {
            outputs.iter().any(|o| {
                o.get("name").and_then(Value::as_str) == Some(attr)
                    && o.get("hidden").and_then(Value::as_bool) == Some(true)
            })
        })
}

/// Refuses every use of a hidden output other than a whole input value
/// (`input_values: {name: {get_attr: [deployment, output]}}`) or a stack output.
pub(super) fn check(t: &Template) -> Result<(), TemplateError> {
    for (name, res) in &t.resources {
        for (prop, value) in &res.properties {
            let path = format!("resources.{name}.properties.{prop}");
            let runs = matches!(
                res.kind,
                ResourceKind::SoftwareDeployment
                    | ResourceKind::SoftwareDeploymentGroup
                    | ResourceKind::ResourceGroup
            );
            match value {
                Value::Object(inputs) if runs && prop == "input_values" => {
                    for (input, v) in inputs {
                        let at = format!("{path}.{input}");
                        match whole_ref(t, v) {
                            Some(Ok(())) => {}
                            Some(Err(message)) => return Err(TemplateError::new(at, message)),
                            None => refuse_inside(t, v, &at)?,
                        }
                    }
                }
                other => refuse_inside(t, other, &path)?,
            }
        }
    }
    Ok(())
}

/// `Some` when `v` is exactly `{get_attr: [resource, output]}` of a hidden output:
/// fine for a single deployment, refused for a group (members' values cannot be
/// handed on one by one yet).
fn whole_ref(t: &Template, v: &Value) -> Option<Result<(), String>> {
    let (resource, attr, rest) = hidden_attr(t, v)?;
    if !rest {
        return None;
    }
    Some(match t.resources[resource].kind {
        ResourceKind::SoftwareDeployment | ResourceKind::RandomString => Ok(()),
        _ => Err(format!(
            "output {attr:?} of group {resource} is hidden: hidden outputs of a group cannot be passed on"
        )),
    })
}

/// Refuses any hidden output used anywhere inside `v`.
fn refuse_inside(t: &Template, v: &Value, path: &str) -> Result<(), TemplateError> {
    // In Heat, get_resource of a RandomString is its value: hidden here.
    if let Some(("get_resource", Value::String(target))) = functions::as_call(v)
        && t.resources
            .get(target)
            .is_some_and(|r| r.kind == ResourceKind::RandomString)
    {
        return Err(TemplateError::new(
            path,
            format!(
                "the value of {target} (OS::Heat::RandomString) is hidden: pass it whole as an input value with {{get_attr: [{target}, value]}}"
            ),
        ));
    }
    if let Some((resource, attr, _)) = hidden_attr(t, v) {
        return Err(TemplateError::new(
            path,
            format!(
                "output {attr:?} of {resource} is hidden: it can only be passed whole as an input value ({{get_attr: [{resource}, {attr}]}}), not used in another value"
            ),
        ));
    }
    match v {
        Value::Object(map) => map
            .iter()
            .try_for_each(|(k, v)| refuse_inside(t, v, &format!("{path}.{k}"))),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .try_for_each(|(i, v)| refuse_inside(t, v, &format!("{path}[{i}]"))),
        _ => Ok(()),
    }
}

/// `(resource, output)` when `v` is exactly `{get_attr: [resource, output]}` of a
/// hidden output of a single deployment: the one use that passes it on whole.
pub fn hidden_output_ref<'v>(t: &Template, v: &'v Value) -> Option<(&'v str, &'v str)> {
    let (resource, attr, whole) = hidden_attr(t, v)?;
    (whole
        && matches!(
            t.resources[resource].kind,
            ResourceKind::SoftwareDeployment | ResourceKind::RandomString
        ))
    .then_some((resource, attr))
}

/// `(resource, output, whole)` when `v` is a `get_attr` of a hidden output; `whole`
/// is false when it also names a path into the value.
fn hidden_attr<'v>(t: &Template, v: &'v Value) -> Option<(&'v str, &'v str, bool)> {
    let (name, args) = functions::as_call(v)?;
    if name != "get_attr" {
        return None;
    }
    let args = args.as_array()?;
    let resource = args.first()?.as_str()?;
    let attr = args.get(1)?.as_str()?;
    is_hidden_output(t, resource, attr).then_some((resource, attr, args.len() == 2))
}
