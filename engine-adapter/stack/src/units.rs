//! From a template to deployment units: one per `SoftwareDeployment`, one per member
//! of a `SoftwareDeploymentGroup`, each with the server it runs on, the lifecycle
//! actions it runs for and the units it waits for.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use flue_proto::{LIFECYCLE_ACTIONS, ServerId};
use serde_json::Value;

use flue_proto::MappedResource;

use super::functions::{self, Resolver};
use super::graph;
use super::infra::{self, MappedServer};
use super::template::{Parameters, ResourceKind, Template, TemplateError, component_actions};

mod heat;
pub use heat::keep_keepers_in_place;
#[cfg(test)]
mod tests;

/// Heat's default `actions` of a software deployment.
pub const DEFAULT_ACTIONS: [&str; 2] = ["CREATE", "UPDATE"];

/// Key of a group member's unit.
pub fn member_key(group: &str, member: &str) -> String {
    format!("{group}/{member}")
}

/// One unit the template asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct DesiredUnit {
    /// `resource` or `group/member`.
    pub key: String,
    /// Template resource.
    pub resource: String,
    /// Group member name.
    pub member: Option<String>,
    /// Server it runs on.
    pub server_id: ServerId,
    /// Lifecycle actions it runs for.
    pub actions: Vec<String>,
    /// Units it waits for.
    pub depends_on: BTreeSet<String>,
    /// Position in its group's rolling order: batch number and the pause before it.
    pub batch: Option<Batch>,
}

/// A group member's place in a batched create or rolling update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batch {
    /// 0 for the first batch.
    pub index: usize,
    /// Pause between the end of the previous batch and this one.
    pub pause: Duration,
}

/// All units of a template, and each group's members.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// Units by key.
    pub units: BTreeMap<String, DesiredUnit>,
    /// Members of each group, sorted by name (a `ResourceGroup`'s by index):
    /// (member name, server).
    pub members: BTreeMap<String, Vec<(String, ServerId)>>,
    /// Each `OS::Nova::Server` resource and the registered server it stands for.
    pub servers: BTreeMap<String, MappedServer>,
    /// What the template's infrastructure resources were given (see [`infra`]).
    pub mapped: BTreeMap<String, MappedResource>,
}

impl Plan {
    /// Keys of the units of `resource`.
    pub fn unit_keys(&self, resource: &str) -> Vec<String> {
        self.units
            .values()
            .filter(|u| u.resource == resource)
            .map(|u| u.key.clone())
            .collect()
    }
}

/// True for the resource kinds that run deployments.
pub fn runs_deployments(kind: ResourceKind) -> bool {
    matches!(
        kind,
        ResourceKind::SoftwareDeployment
            | ResourceKind::SoftwareDeploymentGroup
            | ResourceKind::ResourceGroup
            | ResourceKind::RandomString
    )
}

/// Expands `template` into units, with no infrastructure mapping given. `creating`
/// picks the group's `batch_create` policy, otherwise `rolling_update` applies.
pub fn expand(
    template: &Template,
    params: &Parameters,
    creating: bool,
) -> Result<Plan, TemplateError> {
    expand_mapped(template, params, &BTreeMap::new(), creating)
}

/// Expands `template` into units, its `OS::Nova::Server`s mapped with `mapped` (see
/// [`infra::merge`]) and every `get_attr` of its infrastructure checked.
pub fn expand_mapped(
    template: &Template,
    params: &Parameters,
    mapped: &BTreeMap<String, MappedResource>,
    creating: bool,
) -> Result<Plan, TemplateError> {
    let unmapped = StaticResolver {
        template,
        params,
        servers: None,
    };
    let mut servers = BTreeMap::new();
    for (name, res) in &template.resources {
        if res.kind == ResourceKind::NovaServer {
            servers.insert(
                name.clone(),
                infra::map_server(template, name, mapped, &unmapped)?,
            );
        }
    }
    infra::check_attributes(template, &servers, mapped)?;
    let statics = StaticResolver {
        template,
        params,
        servers: Some(&servers),
    };
    let deps = graph::dependencies(template);
    let mut plan = Plan::default();
    let mut keys_of: BTreeMap<String, Vec<String>> = BTreeMap::new();

    for (name, res) in &template.resources {
        if !runs_deployments(res.kind) || res.kind == ResourceKind::RandomString {
            continue;
        }
        let path = format!("resources.{name}.properties");
        let actions = actions(template, name, &statics)?;
        if let Some(group) = &res.group {
            let members = heat::resource_group_members(name, res, group, &statics)?;
            add_members(
                &mut plan,
                &mut keys_of,
                name,
                res,
                members,
                &actions,
                creating,
            );
            continue;
        }
        if res.kind == ResourceKind::SoftwareDeployment {
            let server = res.properties.get("server").ok_or_else(|| TemplateError {
                path: format!("{path}.server"),
                message: "required".into(),
            })?;
            let server_id = server_id(
                &functions::resolve_visible(server, &statics, &format!("{path}.server"))?,
                &format!("{path}.server"),
            )?;
            keys_of.insert(name.clone(), vec![name.clone()]);
            plan.units.insert(
                name.clone(),
                DesiredUnit {
                    key: name.clone(),
                    resource: name.clone(),
                    member: None,
                    server_id,
                    actions,
                    depends_on: BTreeSet::new(),
                    batch: None,
                },
            );
            continue;
        }
        // A group: `servers` is a map member name -> server.
        let servers_path = format!("{path}.servers");
        let servers = res.properties.get("servers").ok_or_else(|| TemplateError {
            path: servers_path.clone(),
            message: "required".into(),
        })?;
        let servers = functions::resolve_visible(servers, &statics, &servers_path)?;
        let Value::Object(map) = servers else {
            return Err(TemplateError {
                path: servers_path,
                message: format!("must be a map of member name to server, got {servers}"),
            });
        };
        let mut members = Vec::new();
        for (member, server) in map {
            let mpath = format!("{servers_path}.{member}");
            if flue_proto::ids::validate(&member).is_err() {
                return Err(TemplateError {
                    path: mpath,
                    message: "member names may only hold letters, digits, '_' and '-'".into(),
                });
            }
            members.push((member, server_id(&server, &mpath)?));
        }
        members.sort();
        add_members(
            &mut plan,
            &mut keys_of,
            name,
            res,
            members,
            &actions,
            creating,
        );
    }
    plan.servers = servers;
    plan.mapped = mapped.clone();
    heat::add_keepers(template, &mut plan, &mut keys_of);

    // A unit waits for every unit of the deployment resources its resource depends on,
    // directly or through configs and servers.
    let exec_deps: BTreeMap<String, BTreeSet<String>> = keys_of
        .keys()
        .map(|r| (r.clone(), exec_dependencies(template, &deps, r)))
        .collect();
    for unit in plan.units.values_mut() {
        for dep in &exec_deps[&unit.resource] {
            unit.depends_on
                .extend(keys_of.get(dep).into_iter().flatten().cloned());
        }
    }
    Ok(plan)
}

/// Adds a group's members, in the order given (their rolling order), as units.
fn add_members(
    plan: &mut Plan,
    keys_of: &mut BTreeMap<String, Vec<String>>,
    name: &str,
    res: &super::template::Resource,
    members: Vec<(String, ServerId)>,
    actions: &[String],
    creating: bool,
) {
    let policy = if creating {
        res.update_policy.batch_create.as_ref()
    } else {
        res.update_policy.rolling_update.as_ref()
    };
    // At most max_batch_size at once, and never so many that fewer than
    // min_in_service members stay untouched (at least one at a time).
    let batch_size = policy.map_or(1, |p| {
        p.max_batch_size
            .min(members.len().saturating_sub(p.min_in_service))
            .max(1)
    });
    let mut keys = Vec::new();
    for (i, (member, server_id)) in members.iter().enumerate() {
        let key = member_key(name, member);
        keys.push(key.clone());
        plan.units.insert(
            key.clone(),
            DesiredUnit {
                key,
                resource: name.to_owned(),
                member: Some(member.clone()),
                server_id: server_id.clone(),
                actions: actions.to_vec(),
                depends_on: BTreeSet::new(),
                batch: policy.map(|p| Batch {
                    index: i / batch_size,
                    pause: p.pause_time,
                }),
            },
        );
    }
    keys_of.insert(name.to_owned(), keys);
    plan.members.insert(name.to_owned(), members);
}

/// The deployment resources `resource` depends on, looking through resources that run
/// nothing (configs, servers).
pub fn exec_dependencies(
    template: &Template,
    deps: &BTreeMap<String, BTreeSet<String>>,
    resource: &str,
) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut seen = BTreeSet::new();
    let mut todo: Vec<&str> = deps
        .get(resource)
        .into_iter()
        .flatten()
        .map(String::as_str)
        .collect();
    while let Some(r) = todo.pop() {
        if !seen.insert(r) {
            continue;
        }
        match template.resources.get(r) {
            Some(res) if runs_deployments(res.kind) => {
                found.insert(r.to_owned());
            }
            Some(_) => todo.extend(deps.get(r).into_iter().flatten().map(String::as_str)),
            None => {}
        }
    }
    found
}

/// The lifecycle actions a deployment resource runs for: its `actions` property (Heat's
/// default CREATE and UPDATE), plus every action its config has a dedicated hook for.
fn actions(
    template: &Template,
    name: &str,
    statics: &StaticResolver<'_>,
) -> Result<Vec<String>, TemplateError> {
    let res = &template.resources[name];
    let path = format!("resources.{name}.properties.actions");
    // Heat runs a component's deployment for the actions its configs list, whatever
    // the deployment's own `actions` say.
    if let Some(config) = config_resource(template, name)
        && template.resources[config].kind == ResourceKind::SoftwareComponent
    {
        return Ok(component_actions(&template.resources[config]));
    }
    let mut actions: Vec<String> = match res.properties.get("actions") {
        None => DEFAULT_ACTIONS.iter().map(|a| (*a).to_owned()).collect(),
        Some(v) => {
            let v = functions::resolve_visible(v, statics, &path)?;
            let list = v.as_array().ok_or_else(|| TemplateError {
                path: path.clone(),
                message: format!("must be a list of actions, got {v}"),
            })?;
            let mut out = Vec::new();
            for a in list {
                match a.as_str() {
                    Some(a) if LIFECYCLE_ACTIONS.contains(&a) => out.push(a.to_owned()),
                    _ => {
                        return Err(TemplateError {
                            path,
                            message: format!("{a} is not one of {}", LIFECYCLE_ACTIONS.join(", ")),
                        });
                    }
                }
            }
            out
        }
    };
    if let Some(config) = config_resource(template, name)
        && let Some(Value::Object(hooks)) = template.resources[config].properties.get("hooks")
    {
        actions.extend(hooks.keys().cloned());
    }
    let mut seen = BTreeSet::new();
    actions.retain(|a| seen.insert(a.clone()));
    Ok(actions)
}

/// The config resource a deployment resource names in `config: {get_resource: …}`.
pub fn config_resource<'t>(template: &'t Template, deployment: &str) -> Option<&'t str> {
    let config = template
        .resources
        .get(deployment)?
        .properties
        .get("config")?;
    let target = config.as_object()?.get("get_resource")?.as_str()?;
    template
        .resources
        .get_key_value(target)
        .map(|(k, _)| k.as_str())
}

pub(super) fn server_id(v: &Value, path: &str) -> Result<ServerId, TemplateError> {
    let s = v.as_str().ok_or_else(|| TemplateError {
        path: path.to_owned(),
        message: format!("must be a server id, got {v}"),
    })?;
    ServerId::new(s).map_err(|e| TemplateError {
        path: path.to_owned(),
        message: format!("server id {s:?} {e}"),
    })
}

/// The server id an `OS::Flue::Server` resource names (`get_resource` of it). A hidden
/// parameter may not name a server: server ids are shown everywhere.
pub fn server_resource_id(
    template: &Template,
    name: &str,
    r: &dyn Resolver,
) -> Result<Value, String> {
    let id = template
        .resources
        .get(name)
        .and_then(|res| res.properties.get("server_id"))
        .ok_or_else(|| format!("resource {name:?} has no server_id"))?;
    let path = format!("resources.{name}.properties.server_id");
    functions::resolve_visible(id, r, &path).map_err(|e| e.to_string())
}

/// Resolves what must be known before anything runs: parameters and servers.
pub(super) struct StaticResolver<'a> {
    template: &'a Template,
    params: &'a Parameters,
    /// The mapped `OS::Nova::Server`s, once known.
    servers: Option<&'a BTreeMap<String, MappedServer>>,
}

impl Resolver for StaticResolver<'_> {
    fn param(&self, name: &str) -> Option<&Value> {
        self.params.values.get(name)
    }

    fn param_hidden(&self, name: &str) -> bool {
        self.params.hidden.contains(name)
    }

    fn get_resource(&self, name: &str) -> Result<Value, String> {
        match self.template.resources.get(name) {
            Some(r) if r.kind == ResourceKind::Server => {
                server_resource_id(self.template, name, self)
            }
            Some(r) if r.kind == ResourceKind::NovaServer => self
                .servers
                .and_then(|s| s.get(name))
                .map(|s| Value::String(s.server_id.to_string()))
                .ok_or_else(|| format!("OS::Nova::Server {name:?} is not mapped yet")),
            Some(_) => Err(format!(
                "resource {name:?} is not a server; only servers can be used here"
            )),
            None => Err(format!("resource {name:?} does not exist")),
        }
    }

    fn get_attr(&self, resource: &str, _attr: &str, _path: &[Value]) -> Result<Value, String> {
        Err(format!(
            "get_attr of {resource:?} cannot be used here: servers and actions must be known before anything runs"
        ))
    }
}
