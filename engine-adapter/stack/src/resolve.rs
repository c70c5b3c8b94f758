//! Resolving a template at run time: `get_attr` reads the outputs of deployments that
//! have completed, `get_resource` names servers, configs and deployments.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};

use flue_proto::{
    ConfigSpec, Deployment, DeploymentId, InputDecl, InputMade, InputSource, OutputDecl,
    OutputRead, OutputRef, StackState,
};
use serde_json::{Value, json};

use super::functions::{self, Resolver};
use super::infra;
use super::template::{
    Parameters, ResourceKind, Template, TemplateError, component_body, substitute_index,
};
pub use super::template::{hidden_output_ref, is_hidden_output};
use super::units::{DesiredUnit, Plan, config_resource, server_resource_id};

mod heat;
pub use heat::{UNGROUPED, hook_group};
#[cfg(test)]
mod tests;

/// Everything `get_param`, `get_resource` and `get_attr` may read.
pub struct RuntimeResolver<'a> {
    /// The template.
    pub template: &'a Template,
    /// Bound parameters.
    pub params: &'a Parameters,
    /// Units and group members.
    pub plan: &'a Plan,
    /// Stored unit state: each unit's completed deployment.
    pub state: &'a StackState,
    /// Completed deployments already fetched, by id.
    pub deployments: &'a HashMap<DeploymentId, Deployment>,
    /// How `get_attr` of a hidden output resolves: refused (inside a unit, where it
    /// may only be passed whole as an input value), or `"<hidden>"` (stack outputs).
    pub hidden_outputs: HiddenOutputs,
    /// The deployment outputs read so far, in order: what a unit's inputs were made of
    /// ([`Resolved::inputs_read`]).
    pub reads: RefCell<Vec<OutputRead>>,
}

/// See [`RuntimeResolver::hidden_outputs`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HiddenOutputs {
    /// `get_attr` of a hidden output is an error.
    Refuse,
    /// `get_attr` of a hidden output reads `"<hidden>"`.
    Placeholder,
}

impl RuntimeResolver<'_> {
    /// The completed deployment of unit `key`, whose `output` (`None`: every output) is
    /// about to be read; the read is noted in [`RuntimeResolver::reads`].
    pub(super) fn completed(&self, key: &str, output: Option<&str>) -> Result<&Deployment, String> {
        let id = self
            .state
            .units
            .get(key)
            .and_then(|u| u.baseline.as_ref())
            .ok_or_else(|| format!("{key} has not completed"))?;
        let d = self
            .deployments
            .get(id)
            .ok_or_else(|| format!("deployment {id} of {key} was not fetched"))?;
        self.reads.borrow_mut().push(OutputRead {
            unit: key.to_owned(),
            output: output.map(str::to_owned),
            deployment_id: id.clone(),
        });
        Ok(d)
    }
}

/// Every attribute of a completed deployment as one map (outputs and `deploy_*`), for
/// `get_attr` paths through a `ResourceGroup` and a converge re-reading a whole deployment.
pub(crate) fn deployment_view(d: &Deployment) -> Value {
    let mut map: serde_json::Map<String, Value> = d
        .outputs
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for attr in crate::template::DEPLOYMENT_ATTRIBUTES {
        map.insert(attr.to_owned(), deployment_attr(d, attr));
    }
    Value::Object(map)
}

/// The value of a deployment attribute: an output, or one of Heat's `deploy_*`.
pub fn deployment_attr(d: &Deployment, attr: &str) -> Value {
    match attr {
        "deploy_stdout" => Value::String(d.deploy_stdout.clone()),
        "deploy_stderr" => Value::String(d.deploy_stderr.clone()),
        "deploy_status_code" => d.deploy_status_code.map_or(Value::Null, Value::from),
        other => d.outputs.get(other).cloned().unwrap_or(Value::Null),
    }
}

/// Follows `path` (keys and indexes) into `value`; null where it leads nowhere.
pub(super) fn follow(mut value: Value, path: &[Value]) -> Value {
    for step in path {
        value = match (value, step) {
            (Value::Object(mut m), Value::String(k)) => m.remove(k).unwrap_or(Value::Null),
            (Value::Array(mut a), Value::Number(n)) => {
                let i = n.as_u64().and_then(|i| usize::try_from(i).ok());
                match i {
                    Some(i) if i < a.len() => a.swap_remove(i),
                    _ => Value::Null,
                }
            }
            (Value::Array(mut a), Value::String(s)) => match s.parse::<usize>() {
                Ok(i) if i < a.len() => a.swap_remove(i),
                _ => Value::Null,
            },
            _ => Value::Null,
        };
    }
    value
}

impl Resolver for RuntimeResolver<'_> {
    fn param(&self, name: &str) -> Option<&Value> {
        self.params.values.get(name)
    }

    fn param_hidden(&self, name: &str) -> bool {
        self.params.hidden.contains(name)
    }

    fn get_resource(&self, name: &str) -> Result<Value, String> {
        let res = self
            .template
            .resources
            .get(name)
            .ok_or_else(|| format!("resource {name:?} does not exist"))?;
        match res.kind {
            ResourceKind::Server => server_resource_id(self.template, name, self),
            kind if kind.is_infrastructure() => {
                infra::reference(name, kind, &self.plan.servers, &self.plan.mapped)
            }
            ResourceKind::SoftwareDeployment => Ok(self
                .state
                .units
                .get(name)
                .and_then(|u| u.baseline.as_ref())
                .map_or(Value::Null, |d| Value::String(d.to_string()))),
            _ => Ok(Value::String(name.to_owned())),
        }
    }

    fn get_attr(&self, resource: &str, attr: &str, path: &[Value]) -> Result<Value, String> {
        let res = self
            .template
            .resources
            .get(resource)
            .ok_or_else(|| format!("resource {resource:?} does not exist"))?;
        let hidden = match res.kind {
            ResourceKind::SoftwareDeployment
            | ResourceKind::SoftwareDeploymentGroup
            | ResourceKind::ResourceGroup
            | ResourceKind::RandomString => is_hidden_output(self.template, resource, attr),
            _ => false,
        };
        if hidden {
            return match self.hidden_outputs {
                HiddenOutputs::Placeholder => Ok(Value::String("<hidden>".into())),
                HiddenOutputs::Refuse => Err(format!(
                    "output {attr:?} of {resource} is hidden: it can only be passed whole as an input value of a deployment ({{get_attr: [{resource}, {attr}]}})"
                )),
            };
        }
        let value = match res.kind {
            ResourceKind::Server => match attr {
                "server_id" => self.get_resource(resource)?,
                other => return Err(format!("a server has no attribute {other:?}")),
            },
            ResourceKind::SoftwareDeployment => {
                deployment_attr(self.completed(resource, Some(attr))?, attr)
            }
            ResourceKind::SoftwareDeploymentGroup => {
                let single = match attr {
                    "deploy_stdouts" => "deploy_stdout",
                    "deploy_stderrs" => "deploy_stderr",
                    "deploy_status_codes" => "deploy_status_code",
                    other => other,
                };
                let mut map = serde_json::Map::new();
                for (member, _) in self.plan.members.get(resource).into_iter().flatten() {
                    let key = super::units::member_key(resource, member);
                    map.insert(
                        member.clone(),
                        deployment_attr(self.completed(&key, Some(single))?, single),
                    );
                }
                Value::Object(map)
            }
            // `get_attr: [group, attributes, output, …]`: each member's output.
            ResourceKind::ResourceGroup if attr == "attributes" => {
                let Some((Value::String(output), rest)) = path.split_first() else {
                    return Err(format!(
                        "get_attr of {resource}'s attributes needs an output name: [{resource}, attributes, OUTPUT]"
                    ));
                };
                let mut map = serde_json::Map::new();
                for (m, _) in self.plan.members.get(resource).into_iter().flatten() {
                    let key = super::units::member_key(resource, m);
                    let d = self.completed(&key, Some(output))?;
                    map.insert(m.clone(), deployment_attr(d, output));
                }
                return Ok(follow(Value::Object(map), rest));
            }
            ResourceKind::ResourceGroup => self.group_attr(resource, attr)?,
            kind if kind.is_infrastructure() => {
                infra::attribute(resource, kind, attr, &self.plan.servers, &self.plan.mapped)?
            }
            // OS::Heat::None stands in for anything: every attribute is null, as in Heat.
            ResourceKind::HeatNone => Value::Null,
            ResourceKind::HeatValue => self.value_attr(resource)?,
            _ => return Err(format!("resource {resource:?} has no attributes")),
        };
        Ok(follow(value, path))
    }
}

/// A deployment unit's resolved config and input values, ready to send.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// The config to create (its `id` is set by the caller).
    pub spec: ConfigSpec,
    /// Input values.
    pub input_values: BTreeMap<String, Value>,
    /// Inputs the gateway fills from other deployments' hidden outputs.
    pub input_refs: BTreeMap<String, OutputRef>,
    /// The inputs made of other units' outputs, and which (see [`flue_proto::Unit::inputs_read`]).
    pub inputs_read: BTreeMap<String, InputSource>,
    /// Seconds the gateway waits for the agent, if the template says.
    pub timeout_secs: Option<u64>,
    /// Name handed to the hook.
    pub name: String,
}

/// Resolves the config and input values of `unit` against completed deployments.
pub fn unit_deployment(
    r: &RuntimeResolver<'_>,
    unit: &DesiredUnit,
) -> Result<Resolved, TemplateError> {
    let t = r.template;
    let res = &t.resources[&unit.resource];
    if res.kind == ResourceKind::RandomString {
        return heat::keeper_deployment(r, unit);
    }
    // A ResourceGroup member's definition, its index variable replaced by its index.
    let member_props;
    let properties = match (&res.group, &unit.member) {
        (Some(group), Some(member)) => {
            let substituted = substitute_index(
                &Value::Object(res.properties.clone()),
                &group.index_var,
                member,
            );
            member_props = substituted.as_object().cloned().unwrap_or_default();
            &member_props
        }
        _ => &res.properties,
    };
    let props = |name: &str| format!("resources.{}.properties.{name}", unit.resource);
    let config_name = config_resource(t, &unit.resource).ok_or_else(|| TemplateError {
        path: props("config"),
        message: "must be {get_resource: <a config resource>}".into(),
    })?;
    let cres = &t.resources[config_name];
    let cprop = |name: &str| format!("resources.{config_name}.properties.{name}");
    let resolve_config_prop = |name: &str| -> Result<Option<Value>, TemplateError> {
        let Some(v) = cres.properties.get(name) else {
            return Ok(None);
        };
        let out = functions::resolve(v, r, &cprop(name))?;
        if out.hidden {
            return Err(TemplateError {
                path: cprop(name),
                message: "uses a hidden parameter; configs are readable, pass it as an input value instead".into(),
            });
        }
        Ok(Some(out.value))
    };

    let group = match resolve_config_prop("group")? {
        None => heat::hook_group(cres.kind, None),
        Some(Value::String(g)) => heat::hook_group(cres.kind, Some(&g)),
        Some(other) => {
            return Err(TemplateError {
                path: cprop("group"),
                message: format!("must be a string, got {other}"),
            });
        }
    };
    let mut inputs: Vec<InputDecl> = typed(resolve_config_prop("inputs")?, &cprop("inputs"))?;
    let outputs: Vec<OutputDecl> = typed(resolve_config_prop("outputs")?, &cprop("outputs"))?;
    let options = resolve_config_prop("options")?.unwrap_or_else(|| json!({}));
    let hooks = typed(resolve_config_prop("hooks")?, &cprop("hooks"))?;
    let actions = typed(resolve_config_prop("actions")?, &cprop("actions"))?;
    let config = match cres.kind {
        ResourceKind::CloudConfig | ResourceKind::MultipartMime => {
            Value::String(heat::config_text(r, config_name)?)
        }
        ResourceKind::SoftwareComponent => {
            component_body(resolve_config_prop("configs")?.unwrap_or(Value::Null))
        }
        _ => resolve_config_prop("config")?.unwrap_or(Value::Null),
    };

    let mut input_values = BTreeMap::new();
    let mut input_refs = BTreeMap::new();
    let mut inputs_read = BTreeMap::new();
    if let Some(v) = properties.get("input_values") {
        let Value::Object(map) = v else {
            return Err(TemplateError {
                path: props("input_values"),
                message: "must be a map of input name to value".into(),
            });
        };
        for (name, v) in map {
            if let Some((resource, attr)) = hidden_output_ref(t, v) {
                let deployment_id = r
                    .state
                    .units
                    .get(resource)
                    .and_then(|u| u.baseline.clone())
                    .ok_or_else(|| TemplateError {
                        path: format!("{}.{name}", props("input_values")),
                        message: format!("{resource} has not completed"),
                    })?;
                declare(&mut inputs, name, "String").hidden = true;
                let read = OutputRead {
                    unit: resource.to_owned(),
                    output: Some(attr.to_owned()),
                    deployment_id: deployment_id.clone(),
                };
                inputs_read.insert(
                    name.clone(),
                    InputSource {
                        reads: vec![read],
                        made: InputMade::Hidden,
                    },
                );
                input_refs.insert(
                    name.clone(),
                    OutputRef {
                        deployment_id,
                        output: attr.to_owned(),
                    },
                );
                continue;
            }
            r.reads.borrow_mut().clear();
            let out = functions::resolve(v, r, &format!("{}.{name}", props("input_values")))?;
            let reads = r.reads.take();
            if !reads.is_empty() {
                let made = match output_path(t, v) {
                    Some(path) if reads.len() == 1 => InputMade::Output { path },
                    _ => InputMade::Expression,
                };
                inputs_read.insert(name.clone(), InputSource { reads, made });
            }
            if out.hidden {
                declare(&mut inputs, name, "String").hidden = true;
            }
            input_values.insert(name.clone(), out.value);
        }
    }
    if let (Some(member_input), Some(members)) = (
        res.properties.get("members_input").and_then(Value::as_str),
        r.plan.members.get(&unit.resource),
    ) {
        let list: Vec<Value> = members
            .iter()
            .map(|(name, server)| json!({"name": name, "server_id": server}))
            .collect();
        declare(&mut inputs, member_input, "Json");
        input_values.insert(member_input.to_owned(), Value::Array(list));
    }
    for name in input_values.keys().chain(input_refs.keys()) {
        declare(&mut inputs, name, "String");
    }

    // Names and timeouts are stored and shown as they are: no hidden value may go there.
    let visible = |name: &str, v: &Value| functions::resolve_visible(v, r, &props(name));
    let timeout_secs = match properties.get("timeout") {
        None => None,
        Some(v) => {
            let v = visible("timeout", v)?;
            Some(v.as_u64().filter(|n| *n > 0).ok_or_else(|| TemplateError {
                path: props("timeout"),
                message: format!("must be a positive number of seconds, got {v}"),
            })?)
        }
    };
    let base_name = match properties.get("name") {
        Some(v) => match visible("name", v)? {
            Value::String(s) => s,
            other => other.to_string(),
        },
        None => unit.resource.clone(),
    };
    let name = match &unit.member {
        Some(m) => format!("{base_name}-{m}"),
        None => base_name,
    };
    let spec = ConfigSpec {
        id: None,
        name: config_name.to_owned(),
        group,
        config,
        inputs,
        outputs,
        options,
        hooks,
        actions,
        substitute_inputs: cres.kind == ResourceKind::StructuredConfig,
    };
    Ok(Resolved {
        spec,
        input_values,
        input_refs,
        inputs_read,
        timeout_secs,
        name,
    })
}

/// The path of `v` into one deployment's output when `v` is exactly
/// `get_attr: [deployment, output, path…]` with a literal path: a value a converge can
/// take again from the deployment's new output without the template.
fn output_path(t: &Template, v: &Value) -> Option<Vec<Value>> {
    let (name, args) = functions::as_call(v)?;
    let args = args.as_array().filter(|_| name == "get_attr")?;
    let resource = args.first()?.as_str()?;
    args.get(1)?.as_str()?;
    let deployment = t
        .resources
        .get(resource)
        .is_some_and(|r| r.kind == ResourceKind::SoftwareDeployment);
    let literal = |p: &Value| p.is_string() || p.is_u64();
    (deployment && args[2..].iter().all(literal)).then(|| args[2..].to_vec())
}

/// The input declaration `name`, added (with `kind`) when the config has none.
fn declare<'a>(inputs: &'a mut Vec<InputDecl>, name: &str, kind: &str) -> &'a mut InputDecl {
    let i = match inputs.iter().position(|i| i.name == name) {
        Some(i) => i,
        None => {
            inputs.push(InputDecl {
                name: name.to_owned(),
                kind: kind.to_owned(),
                description: None,
                default: None,
                hidden: false,
            });
            inputs.len() - 1
        }
    };
    &mut inputs[i]
}

fn typed<T: serde::de::DeserializeOwned + Default>(
    v: Option<Value>,
    path: &str,
) -> Result<T, TemplateError> {
    match v {
        None | Some(Value::Null) => Ok(T::default()),
        Some(v) => serde_json::from_value(v).map_err(|e| TemplateError {
            path: path.to_owned(),
            message: e.to_string(),
        }),
    }
}
