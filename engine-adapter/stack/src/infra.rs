//! Infrastructure resources Flue never creates. An `OS::Nova::Server` is mapped onto a
//! registered server: by an explicit map (`--server NAME=ID`), else by its `name`
//! property when that resolves to a registered server id, else by its resource name.
//! Other infrastructure (Neutron ports, Cinder volumes, …) is external: `get_resource`
//! of one is its name (or the value given with `--attr NAME=VALUE`), and `get_attr` of
//! one only resolves when given (`--attr NAME.ATTR=VALUE`). Every such `get_attr` is
//! checked before anything runs.

use std::collections::BTreeMap;

use flue_proto::{MappedResource, ServerId};
use serde_json::{Map, Value};

use super::functions::{self, GET_ATTR, Resolver, as_call};
use super::template::{ResourceKind, Template, TemplateError};

/// How an `OS::Nova::Server` was mapped onto its registered server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MappedBy {
    /// `--server NAME=ID`, now or at an earlier create or update.
    Explicit,
    /// Its `name` property.
    NameProperty,
    /// Its resource name.
    ResourceName,
}

/// A mapped `OS::Nova::Server`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappedServer {
    /// The registered server it stands for.
    pub server_id: ServerId,
    /// How that was decided.
    pub by: MappedBy,
    /// The name it was registered with, once read from the gateway (when not empty).
    pub registered_name: Option<String>,
}

/// The mapping an operation runs with: what a stack kept, with what was given now on
/// top (per field; attributes are merged). Names the template no longer has as
/// infrastructure are dropped; a name given now must be one.
pub fn merge(
    template: &Template,
    kept: &BTreeMap<String, MappedResource>,
    given: &BTreeMap<String, MappedResource>,
) -> Result<BTreeMap<String, MappedResource>, String> {
    for (name, m) in given {
        let kind = template.resources.get(name).map(|r| r.kind);
        let flag = if m.server_id.is_some() {
            "--server"
        } else {
            "--attr"
        };
        match kind {
            None => {
                return Err(format!(
                    "{flag} {name}: the template has no resource {name:?}"
                ));
            }
            Some(ResourceKind::NovaServer) if m.reference.is_some() => {
                return Err(format!(
                    "--attr {name}=…: {name} is an OS::Nova::Server; map it with --server {name}=SERVER_ID"
                ));
            }
            Some(ResourceKind::NovaServer) => {}
            Some(ResourceKind::External(_)) if m.server_id.is_some() => {
                return Err(format!(
                    "--server {name}: {name} is not an OS::Nova::Server but a {}",
                    kind.expect("some")
                ));
            }
            Some(ResourceKind::External(_)) => {}
            Some(other) => {
                return Err(format!(
                    "{flag} {name}: {name} is a {other}, which Flue runs itself; only \
                     OS::Nova::Server and external resources are given values"
                ));
            }
        }
    }
    let mut out = BTreeMap::new();
    for (name, res) in &template.resources {
        if !res.kind.is_infrastructure() {
            continue;
        }
        let mut m = kept.get(name).cloned().unwrap_or_default();
        if let Some(g) = given.get(name) {
            if g.server_id.is_some() {
                m.server_id.clone_from(&g.server_id);
            }
            if g.reference.is_some() {
                m.reference.clone_from(&g.reference);
            }
            m.attributes
                .extend(g.attributes.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        if m != MappedResource::default() {
            out.insert(name.clone(), m);
        }
    }
    Ok(out)
}

/// The registered server `OS::Nova::Server` `name` stands for. `r` resolves its `name`
/// property (parameters only).
pub fn map_server(
    template: &Template,
    name: &str,
    mapped: &BTreeMap<String, MappedResource>,
    r: &dyn Resolver,
) -> Result<MappedServer, TemplateError> {
    if let Some(id) = mapped.get(name).and_then(|m| m.server_id.clone()) {
        return Ok(MappedServer {
            server_id: id,
            by: MappedBy::Explicit,
            registered_name: None,
        });
    }
    let named = template.resources[name]
        .properties
        .get("name")
        .and_then(|v| functions::resolve_visible(v, r, "").ok())
        .and_then(|v| v.as_str().and_then(|s| ServerId::new(s).ok()));
    if let Some(id) = named {
        return Ok(MappedServer {
            server_id: id,
            by: MappedBy::NameProperty,
            registered_name: None,
        });
    }
    ServerId::new(name)
        .map(|id| MappedServer {
            server_id: id,
            by: MappedBy::ResourceName,
            registered_name: None,
        })
        .map_err(|e| {
            TemplateError::new(
                format!("resources.{name}"),
                format!(
                    "OS::Nova::Server cannot be mapped by its name ({e}); map it with --server {name}=SERVER_ID"
                ),
            )
        })
}

/// What `get_resource` of infrastructure resource `name` gives.
pub fn reference(
    name: &str,
    kind: ResourceKind,
    servers: &BTreeMap<String, MappedServer>,
    mapped: &BTreeMap<String, MappedResource>,
) -> Result<Value, String> {
    match kind {
        ResourceKind::NovaServer => servers
            .get(name)
            .map(|s| Value::String(s.server_id.to_string()))
            .ok_or_else(|| format!("OS::Nova::Server {name:?} is not mapped")),
        _ => Ok(Value::String(
            mapped
                .get(name)
                .and_then(|m| m.reference.clone())
                .unwrap_or_else(|| name.to_owned()),
        )),
    }
}

/// What `get_attr: [name, attr]` of infrastructure resource `name` gives: a mapped
/// server's id stands for its `name` (unless given), `show` gathers what is known;
/// anything else must be given with `--attr NAME.ATTR=VALUE`.
pub fn attribute(
    name: &str,
    kind: ResourceKind,
    attr: &str,
    servers: &BTreeMap<String, MappedServer>,
    mapped: &BTreeMap<String, MappedResource>,
) -> Result<Value, String> {
    let given = mapped.get(name).map(|m| &m.attributes);
    if let Some(v) = given.and_then(|a| a.get(attr)) {
        return Ok(v.clone());
    }
    if kind == ResourceKind::NovaServer {
        let id = reference(name, kind, servers, mapped)?;
        // Its name: as given, else as registered, else its id.
        let server_name = || {
            servers
                .get(name)
                .and_then(|s| s.registered_name.clone())
                .map_or_else(|| id.clone(), Value::String)
        };
        match attr {
            "server_id" => return Ok(id),
            "name" => return Ok(server_name()),
            "show" => {
                let mut show = Map::new();
                show.insert("name".into(), server_name());
                show.insert("id".into(), id);
                show.extend(
                    given
                        .into_iter()
                        .flatten()
                        .map(|(k, v)| (k.clone(), v.clone())),
                );
                return Ok(Value::Object(show));
            }
            _ => {}
        }
    }
    Err(format!(
        "{name} ({kind}) is not created by Flue, so its attribute {attr:?} is only known when given: \
         --attr {name}.{attr}=VALUE"
    ))
}

/// Refuses, before anything runs, a `get_attr` of an infrastructure resource whose
/// value is not known, anywhere the engine resolves (deployments, values, configs,
/// outputs; not the ignored properties of infrastructure resources).
pub fn check_attributes(
    template: &Template,
    servers: &BTreeMap<String, MappedServer>,
    mapped: &BTreeMap<String, MappedResource>,
) -> Result<(), TemplateError> {
    let check = |value: &Value, path: &str| -> Result<(), TemplateError> {
        let mut found = Vec::new();
        infra_attrs(template, value, path, &mut found);
        for (path, name, attr) in found {
            let kind = template.resources[&name].kind;
            attribute(&name, kind, &attr, servers, mapped)
                .map_err(|m| TemplateError::new(path, format!("get_attr: {m}")))?;
        }
        Ok(())
    };
    for (name, res) in &template.resources {
        if res.kind.is_infrastructure() || res.kind == ResourceKind::HeatNone {
            continue;
        }
        for (key, value) in &res.properties {
            check(value, &format!("resources.{name}.properties.{key}"))?;
        }
    }
    for (name, out) in &template.outputs {
        check(&out.value, &format!("outputs.{name}.value"))?;
    }
    Ok(())
}

/// Every literal `get_attr: [infra resource, attr, …]` inside `value`.
fn infra_attrs(t: &Template, value: &Value, path: &str, found: &mut Vec<(String, String, String)>) {
    if let Some((GET_ATTR, Value::Array(args))) = as_call(value)
        && let [Value::String(res), Value::String(attr), ..] = args.as_slice()
        && t.resources
            .get(res)
            .is_some_and(|r| r.kind.is_infrastructure())
    {
        found.push((path.to_owned(), res.clone(), attr.clone()));
    }
    match value {
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                infra_attrs(t, v, &format!("{path}[{i}]"), found);
            }
        }
        Value::Object(map) => {
            for (k, v) in map {
                infra_attrs(t, v, &format!("{path}.{k}"), found);
            }
        }
        _ => {}
    }
}

/// One line per infrastructure resource, saying what it stands for and what of it is
/// ignored (printed once per operation).
pub fn notes(
    template: &Template,
    servers: &BTreeMap<String, MappedServer>,
    mapped: &BTreeMap<String, MappedResource>,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (name, res) in &template.resources {
        let ignored: Vec<&str> = res.properties.keys().map(String::as_str).collect();
        let ignored = if ignored.is_empty() {
            String::new()
        } else {
            format!("; {} ignored", ignored.join("/"))
        };
        let note = match (res.kind, servers.get(name)) {
            (ResourceKind::NovaServer, Some(s)) => {
                let how = match s.by {
                    MappedBy::Explicit => "",
                    MappedBy::NameProperty => " (by its name property)",
                    MappedBy::ResourceName => " (by its resource name)",
                };
                format!(
                    "OS::Nova::Server mapped to registered server {}{how}{ignored}",
                    s.server_id
                )
            }
            (ResourceKind::External(t), _) => {
                let given = mapped.get(name);
                let reference = given
                    .and_then(|m| m.reference.clone())
                    .unwrap_or_else(|| name.clone());
                format!(
                    "{t} is external: not created by Flue (get_resource gives {reference:?}){ignored}"
                )
            }
            (ResourceKind::HeatNone, _) => "OS::Heat::None: nothing to do".to_owned(),
            _ => continue,
        };
        out.push((name.clone(), note));
    }
    out
}

/// The error for a mapped server that is not registered: which resource, how it was
/// mapped, and how to map it.
pub fn not_registered(name: &str, s: &MappedServer) -> String {
    let how = match s.by {
        MappedBy::Explicit => "mapped with --server",
        MappedBy::NameProperty => "mapped by its name property",
        MappedBy::ResourceName => "mapped by its resource name",
    };
    format!(
        "resources.{name}: OS::Nova::Server {how} to server {:?}, which is not registered; \
         register it (flue server register {}) or map the resource onto a registered server \
         with --server {name}=SERVER_ID",
        s.server_id.as_str(),
        s.server_id
    )
}

#[cfg(test)]
mod tests;
