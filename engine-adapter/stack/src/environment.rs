//! Environment files (`flue stack create|update|validate -e env.yaml`, repeatable), as
//! Heat reads them: `parameters` (values, as if given with `-P`), `parameter_defaults`
//! (new defaults), `resource_registry` (resource type aliases). Files are merged in
//! order, a later one winning. `event_sinks` and `encrypted_param_names` mean nothing
//! to Flue: they are ignored, with a note.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value};

use super::functions::kind_of;
use super::template::{Template, TemplateError};

const SECTIONS: [&str; 6] = [
    "parameters",
    "parameter_defaults",
    "resource_registry",
    "event_sinks",
    "encrypted_param_names",
    "parameter_merge_strategies",
];

/// How many aliases a type may go through before Flue calls it a loop.
const MAX_ALIASES: usize = 16;

/// One or more environment files, merged.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Environment {
    /// `parameters`: values for the template's parameters.
    pub parameters: Map<String, Value>,
    /// `parameter_defaults`: defaults that replace the template's.
    pub parameter_defaults: Map<String, Value>,
    /// `resource_registry`: type name to the type it stands for.
    pub resource_registry: BTreeMap<String, String>,
    /// Things Flue read but does not act on, worth telling the user.
    pub notes: Vec<String>,
}

impl Environment {
    /// Reads the files in order, each overriding what the ones before set.
    pub fn load_all(paths: &[impl AsRef<Path>]) -> Result<Self, TemplateError> {
        let mut env = Self::default();
        for path in paths {
            let path = path.as_ref();
            let text = std::fs::read_to_string(path).map_err(|e| {
                TemplateError::new(path.display().to_string(), format!("cannot read: {e}"))
            })?;
            let one = Self::parse(&text).map_err(|e| TemplateError {
                path: format!("{}: {}", path.display(), e.path),
                message: e.message,
            })?;
            env.merge(one);
        }
        Ok(env)
    }

    /// Parses one environment file.
    pub fn parse(text: &str) -> Result<Self, TemplateError> {
        let doc = super::template::parse_yaml(text)?;
        let doc = match doc {
            Value::Null => return Ok(Self::default()),
            Value::Object(doc) => doc,
            other => {
                return Err(TemplateError::new(
                    "environment",
                    format!("must be a map of sections, got {}", kind_of(&other)),
                ));
            }
        };
        let mut env = Self::default();
        for (key, value) in &doc {
            if !SECTIONS.contains(&key.as_str()) {
                return Err(TemplateError::new(
                    key.as_str(),
                    format!(
                        "environment has wrong section \"{key}\"; an environment has {}",
                        SECTIONS.join(", ")
                    ),
                ));
            }
            match (key.as_str(), value) {
                (_, Value::Null) => {}
                ("parameters", Value::Object(m)) => env.parameters = m.clone(),
                ("parameter_defaults", Value::Object(m)) => env.parameter_defaults = m.clone(),
                ("resource_registry", Value::Object(m)) => env.resource_registry = registry(m)?,
                ("parameters" | "parameter_defaults" | "resource_registry", other) => {
                    return Err(TemplateError::new(
                        key.as_str(),
                        format!("must be a map, got {}", kind_of(other)),
                    ));
                }
                (other, _) => env
                    .notes
                    .push(format!("environment section {other} is ignored by Flue")),
            }
        }
        Ok(env)
    }

    /// Adds `later` over `self`: its entries win.
    pub fn merge(&mut self, later: Environment) {
        self.parameters.extend(later.parameters);
        self.parameter_defaults.extend(later.parameter_defaults);
        self.resource_registry.extend(later.resource_registry);
        self.notes.extend(later.notes);
    }

    /// The type a template's `type` stands for, through the `resource_registry`'s
    /// aliases (followed until a name is not an alias). This is where every resource
    /// type goes before it is resolved to a resource kind.
    pub fn resolve_type<'a>(&'a self, type_name: &'a str) -> Result<Cow<'a, str>, String> {
        let mut current = type_name;
        for _ in 0..MAX_ALIASES {
            match self.resource_registry.get(current) {
                Some(next) if next == current => break,
                Some(next) => current = next,
                None => break,
            }
        }
        if self
            .resource_registry
            .get(current)
            .is_some_and(|n| n != current)
        {
            return Err(format!(
                "resource_registry: the aliases of {type_name:?} go round in a loop"
            ));
        }
        if current == type_name {
            Ok(Cow::Borrowed(type_name))
        } else {
            Ok(Cow::Owned(current.to_owned()))
        }
    }

    /// The environment's `parameters` as `-P` text, typed by the template's
    /// declarations: a json value as JSON, a list as `a,b,c`.
    pub fn given_text(
        &self,
        template: &Template,
    ) -> Result<BTreeMap<String, String>, TemplateError> {
        let mut out = BTreeMap::new();
        for (name, value) in &self.parameters {
            let path = format!("environment parameters.{name}");
            let text = match (template.parameters.get(name).map(|d| d.kind), value) {
                (None, _) => {
                    return Err(TemplateError::new(
                        path,
                        format!("The Parameter ({name}) was not defined in template."),
                    ));
                }
                (Some(_), Value::String(s)) => s.clone(),
                (Some(super::template::ParamType::CommaDelimitedList), Value::Array(items)) => {
                    let items: Vec<String> = items.iter().map(super::functions::to_text).collect();
                    if items.iter().any(|i| i.contains(',')) {
                        return Err(TemplateError::new(
                            path,
                            "a comma_delimited_list item cannot hold a comma",
                        ));
                    }
                    items.join(",")
                }
                (Some(_), other) => other.to_string(),
            };
            out.insert(name.clone(), text);
        }
        Ok(out)
    }
}

/// `resource_registry`: `Type: OtherType` aliases. A mapping to a template file would
/// make a nested stack, which Flue does not run; per-resource `resources:` entries
/// (hooks) are ignored.
fn registry(map: &Map<String, Value>) -> Result<BTreeMap<String, String>, TemplateError> {
    let mut out = BTreeMap::new();
    for (from, to) in map {
        let path = format!("resource_registry.{from}");
        if from == "resources" {
            continue;
        }
        let Value::String(to) = to else {
            return Err(TemplateError::new(
                path,
                format!("must be a resource type, got {}", kind_of(to)),
            ));
        };
        if from.contains('*') {
            return Err(TemplateError::new(
                path,
                "wildcard mappings are not supported by Flue; map each type by name",
            ));
        }
        if !to.contains("::") {
            return Err(TemplateError::new(
                path,
                format!(
                    "{to:?} is a template file: nested templates are not supported by Flue; map \
                     {from} to a resource type instead (an image that already has its agent: \
                     OS::Heat::SoftwareConfig, as heat-templates' boot-config/none_env.yaml does)"
                ),
            ));
        }
        out.insert(from.clone(), to.clone());
    }
    Ok(out)
}
