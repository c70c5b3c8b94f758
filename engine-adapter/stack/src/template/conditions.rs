//! The parts of a template that Heat decides from parameters alone: the `conditions`
//! section, `condition` keys on resources and outputs, and `if`. Loading checks their
//! shape and the version; [`Template::instantiate`] decides them once the parameters
//! are bound, giving the template the engine runs: resources and outputs whose
//! condition is false are gone, every `if` is replaced by its branch.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::{OutputDef, ParamDecl, Parameters, Resource, Template, TemplateError, check_keys};
use crate::environment::Environment;
use crate::functions::conditions::{Conditions, choose_branches};
use crate::functions::versions::TemplateVersion;
use crate::functions::{self, CallCheck, Resolver};
use crate::graph;

/// Refuses CloudFormation-format templates by name, before anything else is read.
pub(super) fn refuse_cfn(doc: &Map<String, Value>) -> Result<(), TemplateError> {
    for key in ["AWSTemplateFormatVersion", "HeatTemplateFormatVersion"] {
        if doc.contains_key(key) {
            return Err(TemplateError::new(
                key,
                "CloudFormation-format (CFN) templates are not supported by Flue; write a HOT \
                 template (heat_template_version)",
            ));
        }
    }
    Ok(())
}

/// `parameter_groups`: a list of `{label, description, parameters: [names]}`; each
/// name declared, and in one group only (Heat's rules).
pub(super) fn check_parameter_groups(
    section: Option<&Value>,
    params: &BTreeMap<String, ParamDecl>,
) -> Result<(), TemplateError> {
    let groups = match section {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Array(groups)) => groups,
        Some(_) => {
            return Err(TemplateError::new(
                "parameter_groups",
                "must be a list of {label, description, parameters}",
            ));
        }
    };
    let mut seen = BTreeSet::new();
    for (i, group) in groups.iter().enumerate() {
        let path = format!("parameter_groups[{i}]");
        let Value::Object(group) = group else {
            return Err(TemplateError::new(path, "must be a map"));
        };
        check_keys(group, &path, &["label", "description", "parameters"])?;
        let names = match group.get("parameters") {
            Some(Value::Array(names)) => names,
            _ => {
                return Err(TemplateError::new(
                    format!("{path}.parameters"),
                    "must be a list of parameter names",
                ));
            }
        };
        for name in names {
            let name = name.as_str().unwrap_or_default();
            if !params.contains_key(name) {
                return Err(TemplateError::new(
                    format!("{path}.parameters"),
                    format!("The grouped parameter {name} does not reference a valid parameter."),
                ));
            }
            if !seen.insert(name) {
                return Err(TemplateError::new(
                    format!("{path}.parameters"),
                    format!("The {name} parameter must be assigned to one parameter group only."),
                ));
            }
        }
    }
    Ok(())
}

/// The `conditions` section (2016-10-14 and later).
pub(super) fn parse_section(
    section: Option<&Value>,
    version: TemplateVersion,
) -> Result<BTreeMap<String, Value>, TemplateError> {
    let map = match section {
        None | Some(Value::Null) => return Ok(BTreeMap::new()),
        Some(_) if !version.has_conditions() => {
            return Err(TemplateError::new(
                "conditions",
                format!(
                    "the conditions section needs heat_template_version {} or later",
                    TemplateVersion::NEWTON
                ),
            ));
        }
        Some(Value::Object(map)) => map,
        Some(_) => {
            return Err(TemplateError::new(
                "conditions",
                "must be a map of condition name to definition",
            ));
        }
    };
    Ok(map.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
}

/// A resource definition as the resource parser sees it: its `condition` taken out
/// (into `conditions`) and its `type` passed through the environment's registry.
pub(super) fn prepare_resource(
    name: &str,
    def: &Value,
    env: &Environment,
    conditions: &mut BTreeMap<String, Value>,
) -> Result<Value, TemplateError> {
    let Value::Object(map) = def else {
        return Ok(def.clone());
    };
    let mut map = map.clone();
    if let Some(c) = map.remove("condition") {
        conditions.insert(name.to_owned(), c);
    }
    if let Some(Value::String(t)) = map.get("type") {
        let resolved = env
            .resolve_type(t)
            .map_err(|m| TemplateError::new(format!("resources.{name}.type"), m))?;
        let resolved = resolved.into_owned();
        map.insert("type".to_owned(), Value::String(resolved));
    }
    Ok(Value::Object(map))
}

/// Checks every call against the version and every condition's shape and names.
pub(super) fn check_calls(t: &Template) -> Result<(), TemplateError> {
    let check = CallCheck {
        version: t.version,
        conditions: &t.conditions,
    };
    for (name, def) in &t.conditions {
        check.condition(def, &format!("conditions.{name}"))?;
    }
    for (name, c) in &t.resource_conditions {
        check.condition(c, &format!("resources.{name}.condition"))?;
    }
    for (name, c) in &t.output_conditions {
        check.condition(c, &format!("outputs.{name}.condition"))?;
    }
    for (name, r) in &t.resources {
        for (key, value) in &r.properties {
            check.value(value, &format!("resources.{name}.properties.{key}"))?;
        }
    }
    for (name, o) in &t.outputs {
        check.value(&o.value, &format!("outputs.{name}.value"))?;
    }
    Ok(())
}

/// Parameters only: what conditions may read.
struct ParamsOnly<'a>(&'a Parameters);

impl Resolver for ParamsOnly<'_> {
    fn param(&self, name: &str) -> Option<&Value> {
        self.0.values.get(name)
    }
    fn param_hidden(&self, name: &str) -> bool {
        self.0.hidden.contains(name)
    }
    fn get_resource(&self, _: &str) -> Result<Value, String> {
        Err("not allowed in a condition".to_owned())
    }
    fn get_attr(&self, _: &str, _: &str, _: &[Value]) -> Result<Value, String> {
        Err("not allowed in a condition".to_owned())
    }
}

/// What [`Template::instantiate`] decided.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Decided {
    /// Each named condition's value.
    pub conditions: BTreeMap<String, bool>,
    /// Resources left out, each with the condition (as written) that is false.
    pub skipped_resources: BTreeMap<String, String>,
    /// Outputs left out.
    pub skipped_outputs: BTreeSet<String>,
}

impl Template {
    /// The template as it runs with `params`: conditions decided, resources and
    /// outputs whose condition is false left out, `if` replaced by its branch (a
    /// property an `if` sets to null is left unset, as Heat does). A resource that is
    /// left out may still be named in `depends_on` (the dependency is dropped), but
    /// not referenced by `get_resource` or `get_attr` from one that exists.
    pub fn instantiate(&self, params: &Parameters) -> Result<(Template, Decided), TemplateError> {
        let resolver = ParamsOnly(params);
        let mut conds = Conditions::new(&self.conditions, &resolver, self.version);
        let decided_conditions = conds
            .decide_all()
            .map_err(|m| split_path(&m, "conditions"))?;
        let mut decided = Decided {
            conditions: decided_conditions,
            ..Decided::default()
        };
        for (name, c) in &self.resource_conditions {
            let on = conds
                .is_enabled(c)
                .map_err(|m| TemplateError::new(format!("resources.{name}.condition"), m))?;
            if !on {
                decided
                    .skipped_resources
                    .insert(name.clone(), condition_text(c));
            }
        }
        for (name, c) in &self.output_conditions {
            let on = conds
                .is_enabled(c)
                .map_err(|m| TemplateError::new(format!("outputs.{name}.condition"), m))?;
            if !on {
                decided.skipped_outputs.insert(name.clone());
            }
        }
        let branch = |v: &Value, path: &str, conds: &mut Conditions<'_>| {
            choose_branches(v, conds, path).map_err(|(p, m)| TemplateError::new(p, m))
        };
        let mut resources = BTreeMap::new();
        for (name, r) in &self.resources {
            if decided.skipped_resources.contains_key(name) {
                continue;
            }
            let mut properties = Map::new();
            for (key, value) in &r.properties {
                let v = branch(
                    value,
                    &format!("resources.{name}.properties.{key}"),
                    &mut conds,
                )?;
                if !v.is_null() || value.is_null() {
                    properties.insert(key.clone(), v);
                }
            }
            let depends_on = r
                .depends_on
                .iter()
                .filter(|d| !decided.skipped_resources.contains_key(*d))
                .cloned()
                .collect();
            resources.insert(
                name.clone(),
                Resource {
                    properties,
                    depends_on,
                    ..r.clone()
                },
            );
        }
        let mut outputs = BTreeMap::new();
        for (name, o) in &self.outputs {
            if decided.skipped_outputs.contains(name) {
                continue;
            }
            let value = branch(&o.value, &format!("outputs.{name}.value"), &mut conds)?;
            outputs.insert(name.clone(), OutputDef { value, ..o.clone() });
        }
        let t = Template {
            resources,
            outputs,
            conditions: BTreeMap::new(),
            resource_conditions: BTreeMap::new(),
            output_conditions: BTreeMap::new(),
            ..self.clone()
        };
        refuse_skipped_references(&t, &decided.skipped_resources)?;
        if t.resources.is_empty() {
            return Err(TemplateError::new(
                "resources",
                "every resource's condition is false: nothing would exist",
            ));
        }
        super::checks::check(&t)?;
        super::hidden::check(&t)?;
        graph::topological_order(&graph::dependencies(&t)).map_err(|cycle| {
            TemplateError::new(
                "resources",
                format!("dependency cycle: {}", cycle.join(" -> ")),
            )
        })?;
        Ok((t, decided))
    }

    /// What a reader should know about this template that is not an error: checks
    /// Flue cannot make.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        for (name, decl) in &self.parameters {
            for c in super::constraints::custom(&decl.constraints) {
                notes.push(format!(
                    "parameters.{name}: custom_constraint {c} is not checked by Flue (it needs an OpenStack service)"
                ));
            }
        }
        notes
    }
}

/// `get_resource` / `get_attr` of a resource left out, from one that exists.
fn refuse_skipped_references(
    t: &Template,
    skipped: &BTreeMap<String, String>,
) -> Result<(), TemplateError> {
    let refuse = |path: String, value: &Value| -> Result<(), TemplateError> {
        match functions::references(value)
            .into_iter()
            .find(|r| skipped.contains_key(r))
        {
            Some(r) => Err(TemplateError::new(
                path,
                format!(
                    "The specified reference \"{r}\" is incorrect: resource {r} is not created, \
                     its condition {} is false",
                    skipped[&r]
                ),
            )),
            None => Ok(()),
        }
    };
    for (name, r) in &t.resources {
        for (key, value) in &r.properties {
            refuse(format!("resources.{name}.properties.{key}"), value)?;
        }
    }
    for (name, o) in &t.outputs {
        refuse(format!("outputs.{name}.value"), &o.value)?;
    }
    Ok(())
}

fn condition_text(c: &Value) -> String {
    match c {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `conditions.x: message` from the evaluator, as a path and a message.
fn split_path(message: &str, fallback: &str) -> TemplateError {
    match message.split_once(": ") {
        Some((path, m)) if path.starts_with("conditions.") => TemplateError::new(path, m),
        _ => TemplateError::new(fallback, message),
    }
}
