//! HOT templates: a YAML (or JSON) text turned into a checked [`Template`].
//!
//! Parsing checks everything that does not need a running stack: the sections, each
//! resource's type and properties, every function call's shape and target, and that
//! the resources' dependencies form no cycle. Functions stay unresolved (except
//! `get_file`, inlined here); the engine resolves them with [`super::functions::resolve`].

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;
use std::time::Duration;

use serde_json::{Map, Value};

use super::environment::Environment;
use super::functions::Files;
use super::functions::versions::TemplateVersion;
use super::{functions, graph};

mod checks;
mod component;
pub use checks::{
    DEPLOYMENT_ATTRIBUTES, GROUP_ATTRIBUTES, NOVA_SERVER_ATTRIBUTES, RESOURCE_GROUP_ATTRIBUTES,
    SERVER_ATTRIBUTES, config_outputs,
};
pub use component::{COMPONENT_GROUP, component_actions, component_body};
mod conditions;
pub use conditions::Decided;
mod constraints;
pub use constraints::{Constraint, Rule};
mod hidden;
pub use hidden::{hidden_output_ref, is_hidden_output};
#[cfg(test)]
mod hot_tests;
mod params;
mod pattern;
mod policy;
mod resources;
pub use resources::HEAT_UNGROUPED;
mod utility;
pub use utility::{INDEX_VAR, MAX_RANDOM_LENGTH, substitute_index};
#[cfg(test)]
mod tests;

/// A parsed, statically checked template.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    /// The template's description.
    pub description: Option<String>,
    /// Declared parameters by name.
    pub parameters: BTreeMap<String, ParamDecl>,
    /// Resources by name (never empty).
    pub resources: BTreeMap<String, Resource>,
    /// Outputs by name.
    pub outputs: BTreeMap<String, OutputDef>,
    /// Its `heat_template_version`.
    pub version: TemplateVersion,
    /// The `conditions` section: name to definition.
    pub conditions: BTreeMap<String, Value>,
    /// The `condition` of each resource that has one.
    pub resource_conditions: BTreeMap<String, Value>,
    /// The `condition` of each output that has one.
    pub output_conditions: BTreeMap<String, Value>,
}

/// One declared parameter.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamDecl {
    /// Its type.
    pub kind: ParamType,
    /// Default, already converted to the type (a list for `comma_delimited_list`).
    pub default: Option<Value>,
    /// A hidden parameter's value is never shown or stored.
    pub hidden: bool,
    /// Human description.
    pub description: Option<String>,
    /// Human label.
    pub label: Option<String>,
    /// An update may not change its value.
    pub immutable: bool,
    /// Checked on every value it gets.
    pub constraints: Vec<Constraint>,
}

/// A parameter type, spelt in templates `string`, `number`, `boolean`, `json`,
/// `comma_delimited_list`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ParamType {
    /// A string.
    String,
    /// A JSON number.
    Number,
    /// `true` or `false`.
    Boolean,
    /// A map or a list.
    Json,
    /// A list of strings, given as `a,b,c`.
    CommaDelimitedList,
}

/// One resource.
#[derive(Debug, Clone, PartialEq)]
pub struct Resource {
    /// Its name in the template.
    pub name: String,
    /// Its type.
    pub kind: ResourceKind,
    /// Properties as written, `get_file` inlined, other functions unresolved.
    pub properties: Map<String, Value>,
    /// Explicit `depends_on` names.
    pub depends_on: Vec<String>,
    /// Batching of a deployment group (empty for other kinds).
    pub update_policy: UpdatePolicy,
    /// For an `OS::Heat::ResourceGroup`: its own properties; `properties` then holds
    /// its `resource_def`'s (a deployment's), with the index variable unreplaced.
    pub group: Option<GroupDef>,
}

/// An `OS::Heat::ResourceGroup`'s own properties.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupDef {
    /// `count`, functions unresolved (it must be known before anything runs).
    pub count: Value,
    /// The text replaced by each member's index (`%index%` by default).
    pub index_var: String,
}

/// A deployment group's `update_policy`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UpdatePolicy {
    /// Batches used when the group is created.
    pub batch_create: Option<Batching>,
    /// Batches used when the group is updated.
    pub rolling_update: Option<Batching>,
}

/// How many members run at once, and the pause between batches.
#[derive(Debug, Clone, PartialEq)]
pub struct Batching {
    /// Members per batch, at least 1.
    pub max_batch_size: usize,
    /// Pause between the end of one batch and the start of the next.
    pub pause_time: Duration,
    /// Heat's `min_in_service` (a rolling update): members that stay out of each batch.
    pub min_in_service: usize,
}

/// The resource types Flue understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResourceKind {
    /// `OS::Heat::SoftwareConfig`.
    SoftwareConfig,
    /// `OS::Heat::StructuredConfig` (a map body with `get_input` substitution).
    StructuredConfig,
    /// `OS::Heat::SoftwareComponent`: one config per lifecycle action (group `component`).
    SoftwareComponent,
    /// `OS::Heat::SoftwareDeployment` or `OS::Heat::StructuredDeployment`.
    SoftwareDeployment,
    /// `OS::Heat::SoftwareDeploymentGroup` or `OS::Heat::StructuredDeploymentGroup`.
    SoftwareDeploymentGroup,
    /// `OS::Flue::Server`: a server already registered with the gateway.
    Server,
    /// `OS::Nova::Server`: not Flue's to create; mapped onto a registered server.
    NovaServer,
    /// An infrastructure resource Flue never creates (a Neutron port, a Cinder
    /// volume, …): the type as written in the template.
    External(&'static str),
    /// `OS::Heat::RandomString`: a value generated once, kept hidden.
    RandomString,
    /// `OS::Heat::Value`: a value computed from the template.
    HeatValue,
    /// `OS::Heat::None`: accepts anything, does nothing.
    HeatNone,
    /// `OS::Heat::ResourceGroup` of deployments.
    ResourceGroup,
    /// `OS::Heat::CloudConfig`: a `#cloud-config` body.
    CloudConfig,
    /// `OS::Heat::MultipartMime`: parts for a server's `user_data`.
    MultipartMime,
}

/// Infrastructure types a software-config template may reference that Flue never
/// creates: accepted, listed, and given values only by the user.
pub const EXTERNAL_TYPES: [&str; 22] = [
    "OS::Nova::ServerGroup",
    "OS::Nova::KeyPair",
    "OS::Nova::Flavor",
    "OS::Neutron::Port",
    "OS::Neutron::FloatingIP",
    "OS::Neutron::FloatingIPAssociation",
    "OS::Neutron::SecurityGroup",
    "OS::Neutron::SecurityGroupRule",
    "OS::Neutron::Net",
    "OS::Neutron::Subnet",
    "OS::Neutron::Router",
    "OS::Neutron::RouterInterface",
    "OS::Neutron::RouterGateway",
    "OS::Neutron::ProviderNet",
    "OS::Cinder::Volume",
    "OS::Cinder::VolumeAttachment",
    "OS::Glance::WebImage",
    "OS::Heat::WaitCondition",
    "OS::Heat::WaitConditionHandle",
    "OS::Heat::SwiftSignal",
    "OS::Heat::SwiftSignalHandle",
    "OS::Swift::Container",
];

impl ResourceKind {
    /// The kind for a template's `type` string.
    pub fn from_type(type_name: &str) -> Option<Self> {
        if let Some(t) = EXTERNAL_TYPES.iter().find(|t| **t == type_name) {
            return Some(Self::External(t));
        }
        Some(match type_name {
            "OS::Heat::SoftwareConfig" => Self::SoftwareConfig,
            "OS::Heat::StructuredConfig" => Self::StructuredConfig,
            "OS::Heat::SoftwareComponent" => Self::SoftwareComponent,
            "OS::Heat::SoftwareDeployment" | "OS::Heat::StructuredDeployment" => {
                Self::SoftwareDeployment
            }
            "OS::Heat::SoftwareDeploymentGroup"
            | "OS::Heat::StructuredDeploymentGroup"
            | "OS::Heat::SoftwareDeployments"
            | "OS::Heat::StructuredDeployments" => Self::SoftwareDeploymentGroup,
            "OS::Flue::Server" => Self::Server,
            "OS::Nova::Server" => Self::NovaServer,
            "OS::Heat::RandomString" => Self::RandomString,
            "OS::Heat::Value" => Self::HeatValue,
            "OS::Heat::None" => Self::HeatNone,
            "OS::Heat::ResourceGroup" => Self::ResourceGroup,
            "OS::Heat::CloudConfig" => Self::CloudConfig,
            "OS::Heat::MultipartMime" => Self::MultipartMime,
            _ => return None,
        })
    }

    /// The canonical type string.
    pub fn type_name(self) -> &'static str {
        match self {
            Self::SoftwareConfig => "OS::Heat::SoftwareConfig",
            Self::StructuredConfig => "OS::Heat::StructuredConfig",
            Self::SoftwareComponent => "OS::Heat::SoftwareComponent",
            Self::SoftwareDeployment => "OS::Heat::SoftwareDeployment",
            Self::SoftwareDeploymentGroup => "OS::Heat::SoftwareDeploymentGroup",
            Self::Server => "OS::Flue::Server",
            Self::NovaServer => "OS::Nova::Server",
            Self::External(t) => t,
            Self::RandomString => "OS::Heat::RandomString",
            Self::HeatValue => "OS::Heat::Value",
            Self::HeatNone => "OS::Heat::None",
            Self::ResourceGroup => "OS::Heat::ResourceGroup",
            Self::CloudConfig => "OS::Heat::CloudConfig",
            Self::MultipartMime => "OS::Heat::MultipartMime",
        }
    }

    /// True for the kinds a deployment's `config` may name.
    pub fn is_config(self) -> bool {
        matches!(
            self,
            Self::SoftwareConfig
                | Self::StructuredConfig
                | Self::SoftwareComponent
                | Self::CloudConfig
                | Self::MultipartMime
        )
    }

    /// True for the kinds that stand for something outside Flue (a mapped server, an
    /// external resource): their properties are accepted and never read.
    pub fn is_infrastructure(self) -> bool {
        matches!(self, Self::NovaServer | Self::External(_))
    }
}

impl fmt::Display for ResourceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.type_name())
    }
}

/// One template output.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputDef {
    /// The value, functions unresolved.
    pub value: Value,
    /// Human description.
    pub description: Option<String>,
}

/// Parameter values bound for one stack operation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Parameters {
    /// Every parameter's typed value.
    pub values: BTreeMap<String, Value>,
    /// Names of the hidden ones.
    pub hidden: BTreeSet<String>,
    /// Names whose value was given (now or by an earlier run), not taken from a default.
    pub given: BTreeSet<String>,
}

impl Parameters {
    /// The values of the parameters that are not hidden (what may be stored or shown).
    pub fn visible(&self) -> BTreeMap<String, Value> {
        self.values
            .iter()
            .filter(|(k, _)| !self.hidden.contains(*k) && !k.starts_with("OS::"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Adds the pseudo-parameters `OS::stack_name`, `OS::stack_id` (Flue's stack id
    /// is its name) and, when known, `OS::project_id` (the tenant).
    pub fn add_pseudo(&mut self, stack: &str, project: Option<&str>) {
        let [name, id, project_id] = functions::PSEUDO_PARAMETERS;
        self.values.insert(name.to_owned(), Value::from(stack));
        self.values.insert(id.to_owned(), Value::from(stack));
        if let Some(p) = project {
            self.values.insert(project_id.to_owned(), Value::from(p));
        }
    }

    /// The values a user gave that are not hidden: what a stack keeps for its next
    /// update. Defaults are left out, so a changed default takes effect.
    pub fn to_keep(&self) -> BTreeMap<String, Value> {
        self.visible()
            .into_iter()
            .filter(|(k, _)| self.given.contains(k))
            .collect()
    }
}

/// Why a template or its parameters were refused: where, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct TemplateError {
    /// Where: `resources.web.properties.server`, `parameters.db_password`, …
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl TemplateError {
    /// An error at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

const SECTIONS: [&str; 7] = [
    "heat_template_version",
    "conditions",
    "description",
    "parameters",
    "parameter_groups",
    "resources",
    "outputs",
];

impl Template {
    /// Reads and parses the template at `path`; `get_file` paths are relative to its
    /// directory.
    pub fn load(path: &Path) -> Result<Template, TemplateError> {
        Self::load_with(path, &Environment::default())
    }

    /// [`Template::load`] with an environment: its `resource_registry` maps resource
    /// types and its `parameter_defaults` replace the template's defaults.
    pub fn load_with(path: &Path, env: &Environment) -> Result<Template, TemplateError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            TemplateError::new(path.display().to_string(), format!("cannot read: {e}"))
        })?;
        let base_dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        Self::parse_with(&text, base_dir, env)
    }

    /// Parses and checks a template; `get_file` paths are relative to `base_dir`.
    pub fn parse(text: &str, base_dir: &Path) -> Result<Template, TemplateError> {
        Self::parse_with(text, base_dir, &Environment::default())
    }

    /// [`Template::parse`] with an environment (see [`Template::load_with`]).
    pub fn parse_with(
        text: &str,
        base_dir: &Path,
        env: &Environment,
    ) -> Result<Template, TemplateError> {
        Self::parse_files(text, Files::Dir(base_dir), env)
    }

    /// Parses and checks a template whose `get_file` reads from `files` (the files a
    /// client sent with it, or a directory).
    pub fn parse_files(
        text: &str,
        files: Files<'_>,
        env: &Environment,
    ) -> Result<Template, TemplateError> {
        let doc = parse_document(text)?;
        let Value::Object(doc) = doc else {
            return Err(TemplateError::new(
                "template",
                "must be a map with heat_template_version and resources",
            ));
        };
        conditions::refuse_cfn(&doc)?;
        for key in doc.keys() {
            if !SECTIONS.contains(&key.as_str()) {
                return Err(TemplateError::new(
                    key.as_str(),
                    format!("unknown section; a template has {}", SECTIONS.join(", ")),
                ));
            }
        }
        let version = match doc.get("heat_template_version") {
            Some(Value::String(v)) if !v.is_empty() => TemplateVersion::parse(v)
                .map_err(|m| TemplateError::new("heat_template_version", m))?,
            Some(_) => {
                return Err(TemplateError::new(
                    "heat_template_version",
                    "must be a version such as 2018-08-31",
                ));
            }
            None => return Err(TemplateError::new("heat_template_version", "required")),
        };
        let description = optional_string(doc.get("description"), "description")?;
        let mut parameters = params::parse_all(doc.get("parameters"), version)?;
        params::apply_defaults(&mut parameters, &env.parameter_defaults)?;
        conditions::check_parameter_groups(doc.get("parameter_groups"), &parameters)?;
        let condition_defs = conditions::parse_section(doc.get("conditions"), version)?;
        let mut resource_conditions = BTreeMap::new();
        let resources = match doc.get("resources") {
            Some(Value::Object(map)) if !map.is_empty() => map
                .iter()
                .map(|(name, def)| {
                    let def =
                        conditions::prepare_resource(name, def, env, &mut resource_conditions)?;
                    let r = resources::parse(name, &def, files)?;
                    Ok((name.clone(), r))
                })
                .collect::<Result<BTreeMap<_, _>, TemplateError>>()?,
            Some(Value::Object(_)) | None => {
                return Err(TemplateError::new(
                    "resources",
                    "required: a template needs at least one resource",
                ));
            }
            Some(_) => {
                return Err(TemplateError::new(
                    "resources",
                    "must be a map of resource name to definition",
                ));
            }
        };
        let mut output_conditions = BTreeMap::new();
        let outputs = parse_outputs(doc.get("outputs"), files, &mut output_conditions)?;
        let template = Template {
            description,
            parameters,
            resources,
            outputs,
            version,
            conditions: condition_defs,
            resource_conditions,
            output_conditions,
        };
        conditions::check_calls(&template)?;
        checks::check(&template)?;
        hidden::check(&template)?;
        graph::topological_order(&graph::dependencies(&template)).map_err(|cycle| {
            TemplateError::new(
                "resources",
                format!("dependency cycle: {}", cycle.join(" -> ")),
            )
        })?;
        Ok(template)
    }

    /// Turns `-P name=value` strings into typed values, adds defaults, and refuses
    /// unknown names, badly typed values and missing required parameters.
    pub fn bind_parameters(
        &self,
        given: &BTreeMap<String, String>,
    ) -> Result<Parameters, TemplateError> {
        params::bind(&self.parameters, given, &BTreeMap::new())
    }

    /// Like [`Template::bind_parameters`], with the typed values an earlier run kept
    /// (see [`Parameters::to_keep`]) standing for the parameters not given now. A kept
    /// value the template no longer declares is dropped.
    pub fn bind_parameters_over(
        &self,
        given: &BTreeMap<String, String>,
        kept: &BTreeMap<String, Value>,
    ) -> Result<Parameters, TemplateError> {
        params::bind(&self.parameters, given, kept)
    }
}

/// Reads YAML (or JSON) as templates are read; environment files use it too.
pub(crate) fn parse_yaml(text: &str) -> Result<Value, TemplateError> {
    parse_document(text)
}

/// JSON when it looks like JSON and parses as such, YAML otherwise.
fn parse_document(text: &str) -> Result<Value, TemplateError> {
    if text.trim_start().starts_with('{')
        && let Ok(v) = serde_json::from_str(text)
    {
        return Ok(v);
    }
    // YAML 1.2 scalars: only `true` / `false` are booleans (not `y`, `n`, `yes`, `off`, …)
    // and `012` stays the string it looks like, so a name or a value is never changed.
    let mut options = serde_saphyr::Options::default();
    options.strict_booleans = true;
    options.leading_zero_numbers_as_strings = true;
    serde_saphyr::from_str_with_options::<Value>(text, options).map_err(|e| {
        let message = e
            .without_snippet()
            .to_string()
            .replace(", set DuplicateKeyPolicy in Options if acceptable", "");
        TemplateError::new("template", format!("not valid YAML: {message}"))
    })
}

fn parse_outputs(
    section: Option<&Value>,
    files: Files<'_>,
    output_conditions: &mut BTreeMap<String, Value>,
) -> Result<BTreeMap<String, OutputDef>, TemplateError> {
    let map = match section {
        None | Some(Value::Null) => return Ok(BTreeMap::new()),
        Some(Value::Object(map)) => map,
        Some(_) => {
            return Err(TemplateError::new(
                "outputs",
                "must be a map of output name to {value, description}",
            ));
        }
    };
    let mut outputs = BTreeMap::new();
    for (name, def) in map {
        let path = format!("outputs.{name}");
        let Value::Object(def) = def else {
            return Err(TemplateError::new(path, "must be a map with `value`"));
        };
        check_keys(def, &path, &["value", "description", "condition"])?;
        if let Some(c) = def.get("condition") {
            output_conditions.insert(name.clone(), c.clone());
        }
        let mut value = def
            .get("value")
            .cloned()
            .ok_or_else(|| TemplateError::new(format!("{path}.value"), "required"))?;
        functions::inline_files(&mut value, files, &format!("{path}.value"))?;
        let description = optional_string(def.get("description"), &format!("{path}.description"))?;
        outputs.insert(name.clone(), OutputDef { value, description });
    }
    Ok(outputs)
}

/// Refuses any key of `map` not in `allowed`, naming it and the allowed ones.
fn check_keys(map: &Map<String, Value>, path: &str, allowed: &[&str]) -> Result<(), TemplateError> {
    match map.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(TemplateError::new(
            format!("{path}.{k}"),
            format!("unknown key; allowed here: {}", allowed.join(", ")),
        )),
        None => Ok(()),
    }
}

fn optional_string(value: Option<&Value>, path: &str) -> Result<Option<String>, TemplateError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(TemplateError::new(
            path,
            format!("must be a string, got {}", functions::kind_of(other)),
        )),
    }
}
