//! Checks that look across resources: `depends_on` names, what `config`, `server` and
//! `servers` point at, and every function call's shape, parameter and target.

use flue_proto::ServerId;
use serde_json::Value;

use super::{Resource, ResourceKind, Template, TemplateError, check_keys};
use crate::functions::{
    self, FUNCTIONS, GET_ATTR, GET_FILE, GET_PARAM, GET_RESOURCE, LIST_JOIN, PSEUDO_PARAMETERS,
    STR_REPLACE, UNSUPPORTED, as_call, kind_of, references,
};

/// Attributes of a `SoftwareDeployment`, besides its config's outputs.
pub const DEPLOYMENT_ATTRIBUTES: [&str; 3] =
    ["deploy_stdout", "deploy_stderr", "deploy_status_code"];
/// Attributes of a `SoftwareDeploymentGroup` (maps member -> value), besides its
/// config's outputs.
pub const GROUP_ATTRIBUTES: [&str; 3] = ["deploy_stdouts", "deploy_stderrs", "deploy_status_codes"];
/// Attributes of an `OS::Flue::Server`.
pub const SERVER_ATTRIBUTES: [&str; 1] = ["server_id"];
/// Heat's attributes of an `OS::Nova::Server` (which of them resolve depends on what
/// the server's mapping gives).
pub const NOVA_SERVER_ATTRIBUTES: [&str; 12] = [
    "name",
    "show",
    "first_address",
    "networks",
    "addresses",
    "accessIPv4",
    "accessIPv6",
    "instance_name",
    "console_urls",
    "tags",
    "os_collect_config",
    "server_id",
];
/// Attributes of an `OS::Heat::ResourceGroup` besides `resource.N` and its members'
/// attributes (each a list in index order).
pub const RESOURCE_GROUP_ATTRIBUTES: [&str; 4] =
    ["refs", "refs_map", "attributes", "removed_rsrc_list"];

pub(super) fn check(t: &Template) -> Result<(), TemplateError> {
    for (name, r) in &t.resources {
        let path = format!("resources.{name}");
        for dep in &r.depends_on {
            let at = format!("{path}.depends_on");
            if dep == name {
                return Err(TemplateError::new(at, "a resource cannot depend on itself"));
            }
            if !t.resources.contains_key(dep) {
                return Err(TemplateError::new(
                    at,
                    format!("resource {dep:?} does not exist"),
                ));
            }
        }
        let props = format!("{path}.properties");
        let prop = |key: &str| (r.properties.get(key), format!("{props}.{key}"));
        match r.kind {
            ResourceKind::SoftwareDeployment | ResourceKind::ResourceGroup => {
                let (config, at) = prop("config");
                check_config_ref(t, config, &at)?;
                let (server, at) = prop("server");
                // A ResourceGroup member's server is checked as member 0 would have it.
                let server = match (&r.group, server) {
                    (Some(g), Some(s)) => Some(super::substitute_index(s, &g.index_var, "0")),
                    (_, s) => s.cloned(),
                };
                check_server(t, server.as_ref(), &at)?;
            }
            ResourceKind::SoftwareDeploymentGroup => {
                let (config, at) = prop("config");
                check_config_ref(t, config, &at)?;
                let (servers, at) = prop("servers");
                check_servers(t, servers, &at)?;
            }
            ResourceKind::Server => {
                let (id, at) = prop("server_id");
                check_server_id(id, &at)?;
            }
            // Never resolved: a mapped server's or an external resource's properties
            // (image, flavor, user_data, …) are accepted and ignored.
            kind if kind.is_infrastructure() || kind == ResourceKind::HeatNone => continue,
            _ => {}
        }
        if let Some(group) = &r.group {
            walk(t, &group.count, &format!("{props}.count"))?;
            if !functions::references(&group.count).is_empty() {
                return Err(TemplateError::new(
                    format!("{props}.count"),
                    "must be known before anything runs: a number or {get_param: …}",
                ));
            }
        }
        for (key, value) in &r.properties {
            walk(t, value, &format!("{props}.{key}"))?;
        }
    }
    for (name, output) in &t.outputs {
        walk(t, &output.value, &format!("outputs.{name}.value"))?;
    }
    Ok(())
}

/// `config` must be `{get_resource: <config resource>}`.
fn check_config_ref(t: &Template, value: Option<&Value>, path: &str) -> Result<(), TemplateError> {
    let target = match value.and_then(as_call) {
        Some((GET_RESOURCE, Value::String(target))) => target,
        _ => {
            return Err(TemplateError::new(
                path,
                "must be {get_resource: <a SoftwareConfig or StructuredConfig resource>}",
            ));
        }
    };
    match t.resources.get(target) {
        None => Err(TemplateError::new(
            path,
            format!("get_resource: resource {target:?} does not exist"),
        )),
        Some(r) if !r.kind.is_config() => Err(TemplateError::new(
            path,
            format!("resource {target:?} is a {}, not a software config", r.kind),
        )),
        Some(_) => Ok(()),
    }
}

/// A server: `{get_resource: <OS::Flue::Server>}`, a literal server id, or `get_param`.
fn check_server(t: &Template, value: Option<&Value>, path: &str) -> Result<(), TemplateError> {
    let refused = || {
        TemplateError::new(
            path,
            "must be {get_resource: <an OS::Nova::Server or OS::Flue::Server resource>}, a server id, or \
             {get_param: …}; servers must be known before anything runs, so no get_attr",
        )
    };
    match value {
        Some(Value::String(id)) => ServerId::new(id.as_str())
            .map(|_| ())
            .map_err(|e| TemplateError::new(path, format!("server id {id:?} {e}"))),
        Some(v) => match as_call(v) {
            Some((GET_RESOURCE, Value::String(target))) => match t.resources.get(target) {
                None => Err(TemplateError::new(
                    path,
                    format!("get_resource: resource {target:?} does not exist"),
                )),
                Some(r) if !matches!(r.kind, ResourceKind::Server | ResourceKind::NovaServer) => {
                    Err(TemplateError::new(
                        path,
                        format!(
                            "resource {target:?} is a {}, not an OS::Nova::Server or OS::Flue::Server",
                            r.kind
                        ),
                    ))
                }
                Some(_) => Ok(()),
            },
            Some((GET_PARAM, _)) if references(v).is_empty() => Ok(()),
            _ => Err(refused()),
        },
        None => Err(refused()),
    }
}

/// A group's `servers`: a map member name -> server, or `get_param` of a json map.
fn check_servers(t: &Template, value: Option<&Value>, path: &str) -> Result<(), TemplateError> {
    let Some(value) = value else {
        return Err(TemplateError::new(path, "required"));
    };
    match as_call(value) {
        Some((GET_PARAM, _)) if references(value).is_empty() => return Ok(()),
        Some(_) => {
            return Err(TemplateError::new(
                path,
                "must be a map of member name to server, or {get_param: <json parameter>}",
            ));
        }
        None => {}
    }
    let Value::Object(members) = value else {
        return Err(TemplateError::new(
            path,
            format!(
                "must be a map of member name to server, got {}",
                kind_of(value)
            ),
        ));
    };
    for (member, server) in members {
        let at = format!("{path}.{member}");
        if let Err(e) = flue_proto::ids::validate(member) {
            return Err(TemplateError::new(at, format!("member name {e}")));
        }
        check_server(t, Some(server), &at)?;
    }
    Ok(())
}

/// `server_id`: a literal server id or `get_param`.
fn check_server_id(value: Option<&Value>, path: &str) -> Result<(), TemplateError> {
    match value {
        Some(Value::String(id)) => ServerId::new(id.as_str())
            .map(|_| ())
            .map_err(|e| TemplateError::new(path, format!("server id {id:?} {e}"))),
        Some(v) if matches!(as_call(v), Some((GET_PARAM, _))) && references(v).is_empty() => Ok(()),
        _ => Err(TemplateError::new(
            path,
            "must be a server id or {get_param: …}",
        )),
    }
}

/// Checks every call inside `value`: argument shapes, parameters and targets.
fn walk(t: &Template, value: &Value, path: &str) -> Result<(), TemplateError> {
    if let Some((name, args)) = as_call(value) {
        return check_call(t, name, args, path);
    }
    match value {
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                walk(t, v, &format!("{path}[{i}]"))?;
            }
        }
        Value::Object(map) => {
            if map.len() == 1
                && let Some(name) = map.keys().next()
                && UNSUPPORTED.contains(&name.as_str())
            {
                return Err(TemplateError::new(
                    path,
                    format!(
                        "function {name:?} is not supported; Flue supports {}",
                        FUNCTIONS.join(", ")
                    ),
                ));
            }
            for (k, v) in map {
                walk(t, v, &format!("{path}.{k}"))?;
            }
        }
        _ => {}
    }
    Ok(())
}

fn check_call(t: &Template, name: &str, args: &Value, path: &str) -> Result<(), TemplateError> {
    let fail = |message: String| TemplateError::new(path, format!("{name}: {message}"));
    let args_path = format!("{path}.{name}");
    match name {
        GET_PARAM => {
            let (param, rest) = match args {
                Value::String(p) => (p, &[][..]),
                Value::Array(items) => match items.split_first() {
                    Some((Value::String(p), rest)) => (p, rest),
                    _ => return Err(fail("expected [parameter name, key…]".to_owned())),
                },
                _ => return Err(fail("expected a parameter name".to_owned())),
            };
            if !t.parameters.contains_key(param) && !PSEUDO_PARAMETERS.contains(&param.as_str()) {
                return Err(fail(format!(
                    "parameter {param:?} does not exist{}",
                    declared(t)
                )));
            }
            walk_list(t, rest, &args_path, 1)
        }
        GET_RESOURCE => match args {
            Value::String(target) if t.resources.contains_key(target) => Ok(()),
            Value::String(target) => Err(fail(format!("resource {target:?} does not exist"))),
            _ => Err(fail("expected a resource name".to_owned())),
        },
        GET_ATTR => {
            let Some([Value::String(target), Value::String(attr), rest @ ..]) =
                args.as_array().map(Vec::as_slice)
            else {
                return Err(fail("expected [resource, attribute, key…]".to_owned()));
            };
            let resource = t
                .resources
                .get(target)
                .ok_or_else(|| fail(format!("resource {target:?} does not exist")))?;
            check_attr(resource, attr).map_err(fail)?;
            walk_list(t, rest, &args_path, 2)
        }
        STR_REPLACE => {
            let Value::Object(map) = args else {
                return Err(fail("expected {template: …, params: {…}}".to_owned()));
            };
            check_keys(map, &args_path, &["template", "params"])?;
            let (Some(template), Some(params)) = (map.get("template"), map.get("params")) else {
                return Err(fail("needs both template and params".to_owned()));
            };
            if !template.is_string() && as_call(template).is_none() {
                return Err(fail(format!(
                    "template must be a string, got {}",
                    kind_of(template)
                )));
            }
            if !params.is_object() {
                return Err(fail(format!(
                    "params must be a map, got {}",
                    kind_of(params)
                )));
            }
            walk(t, template, &format!("{args_path}.template"))?;
            walk(t, params, &format!("{args_path}.params"))
        }
        LIST_JOIN => {
            let Some((delim, lists)) = args.as_array().and_then(|a| a.split_first()) else {
                return Err(fail("expected [delimiter, list, …]".to_owned()));
            };
            if !delim.is_string() && as_call(delim).is_none() {
                return Err(fail(format!(
                    "the delimiter must be a string, got {}",
                    kind_of(delim)
                )));
            }
            if lists.is_empty() {
                return Err(fail(
                    "expected at least one list after the delimiter".to_owned(),
                ));
            }
            if let Some(bad) = lists.iter().find(|l| !l.is_array() && as_call(l).is_none()) {
                return Err(fail(format!(
                    "expected lists to join, got {}",
                    kind_of(bad)
                )));
            }
            walk_list(
                t,
                args.as_array().map_or(&[][..], Vec::as_slice),
                &args_path,
                0,
            )
        }
        GET_FILE => Err(fail(
            "not allowed here; it is only read in resource properties and outputs".to_owned(),
        )),
        // `if`'s first argument is a condition, checked with the conditions.
        "if" => walk_list(
            t,
            args.as_array().and_then(|a| a.get(1..)).unwrap_or_default(),
            &args_path,
            1,
        ),
        _ => walk(t, args, &args_path),
    }
}

fn walk_list(
    t: &Template,
    items: &[Value],
    path: &str,
    offset: usize,
) -> Result<(), TemplateError> {
    for (i, v) in items.iter().enumerate() {
        walk(t, v, &format!("{path}[{}]", i + offset))?;
    }
    Ok(())
}

fn declared(t: &Template) -> String {
    if t.parameters.is_empty() {
        " (the template declares no parameters)".to_owned()
    } else {
        let names: Vec<&str> = t.parameters.keys().map(String::as_str).collect();
        format!(" (declared: {})", names.join(", "))
    }
}

/// Whether `attr` is an attribute of `resource`. A deployment's attributes, like a
/// group's (passed through from its members as a map or a list), are any name: Heat
/// validates them so (an output the config does not declare reads null), since a hook
/// may answer outputs nobody declared.
fn check_attr(resource: &Resource, attr: &str) -> Result<(), String> {
    let name = &resource.name;
    let builtin: &[&str] = match resource.kind {
        ResourceKind::Server => &SERVER_ATTRIBUTES,
        ResourceKind::SoftwareDeployment
        | ResourceKind::SoftwareDeploymentGroup
        | ResourceKind::ResourceGroup => return Ok(()),
        ResourceKind::NovaServer => &NOVA_SERVER_ATTRIBUTES,
        // An external resource's attributes are whatever the user gives (checked
        // before anything runs); OS::Heat::None answers every attribute with null.
        ResourceKind::External(_) | ResourceKind::HeatNone => return Ok(()),
        ResourceKind::RandomString | ResourceKind::HeatValue => &["value"],
        kind => {
            return Err(format!(
                "resource {name:?} is a {kind}; get_attr works on deployments, deployment \
                 groups, resource groups, servers and values"
            ));
        }
    };
    if builtin.contains(&attr) {
        return Ok(());
    }
    Err(format!(
        "resource {name:?} ({}) has no attribute {attr:?}; it has {}",
        resource.kind,
        builtin.join(", ")
    ))
}

/// Output names declared by the config of deployment `r`, when they are literal.
pub fn config_outputs(t: &Template, r: &Resource) -> Option<Vec<String>> {
    let config = match as_call(r.properties.get("config")?)? {
        (GET_RESOURCE, Value::String(c)) => t.resources.get(c)?,
        _ => return None,
    };
    match config.properties.get("outputs") {
        None | Some(Value::Null) => Some(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|o| o.get("name")?.as_str().map(str::to_owned))
            .collect(),
        Some(_) => None,
    }
}
