//! Operations submitted over HTTP ([`SubmitOperation`]): checked before they are queued
//! (the checks `flue stack validate` makes, each error naming the field), and run by an
//! engine worker through the driver's entry points, so a worker that takes over from a
//! dead one resumes the operation exactly as `flue stack …` run again would.

use std::collections::{BTreeMap, BTreeSet};

use flue_client::Client;
use flue_proto::operation::{OperationKind, SubmitOperation};
use flue_proto::{Action, MappedResource, Stack, StackId, StackState};
use serde_json::Value;

use crate::driver::{self, EngineError, Options, Source};
use crate::environment::Environment;
use crate::functions::Files;
use crate::template::{Template, TemplateError};
use crate::{infra, units};

/// A submitted operation, parsed and checked: what a worker runs.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// What runs.
    pub kind: OperationKind,
    /// For create and update: the template, its parameters as `-P` text (the
    /// environments' first, the body's winning) and the infrastructure map.
    pub apply: Option<Apply>,
    /// For an ad-hoc action: the resource and the action.
    pub action: Option<(String, Action)>,
    /// Take over from an unfinished operation of another kind.
    pub force: bool,
    /// For a converge: the units to re-apply.
    pub units: Vec<String>,
    /// For a converge: what becomes of the units whose inputs read outputs it changes.
    pub dependents: driver::Dependents,
    /// For create and update: the converge policy to keep.
    pub converge: Option<flue_proto::ConvergePolicy>,
    /// Things Flue read but does not act on (ignored environment sections, …).
    pub notes: Vec<String>,
}

/// The template side of a create or update. Its `Debug` form names the parameters
/// without their values (hidden ones are among them).
#[derive(Clone)]
pub struct Apply {
    /// The parsed template (`get_file` inlined from the body's `files`).
    pub template: Template,
    /// Parameter values as text, hidden ones included.
    pub given: BTreeMap<String, String>,
    /// `servers` and `mapped` of the body, merged.
    pub mapped: BTreeMap<String, MappedResource>,
    /// The environments merged, without their `parameters` (moved into `given`).
    pub environment: Environment,
}

impl std::fmt::Debug for Apply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Apply")
            .field("given", &self.given.keys().collect::<Vec<_>>())
            .field("mapped", &self.mapped)
            .finish_non_exhaustive()
    }
}

impl Apply {
    /// The names of the template's hidden parameters.
    pub fn hidden(&self) -> BTreeSet<String> {
        self.template
            .parameters
            .iter()
            .filter(|(_, d)| d.hidden)
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// The environment as a document (`parameter_defaults`, `resource_registry`), to
    /// queue in place of the ones given: it holds no parameter value.
    pub fn environment_document(&self) -> Value {
        serde_json::json!({
            "parameter_defaults": self.environment.parameter_defaults,
            "resource_registry": self.environment.resource_registry,
        })
    }
}

/// Parses and checks `body` for `stack` of tenant `project`, as `flue stack validate`
/// would, against the stack's current state when it exists (kept parameters and
/// mapping). Nothing is contacted; whether servers are registered is the worker's check.
pub fn prepare(
    body: &SubmitOperation,
    stack: &StackId,
    project: &str,
    previous: Option<&StackState>,
) -> Result<Prepared, TemplateError> {
    let takes_template = body.operation.takes_template();
    let refuse_unless = |given: bool, field: &str| {
        if given {
            Err(TemplateError::new(
                field,
                format!("not taken by a {} operation", body.operation),
            ))
        } else {
            Ok(())
        }
    };
    if !takes_template {
        refuse_unless(body.converge.is_some(), "converge")?;
        refuse_unless(body.template.is_some(), "template")?;
        refuse_unless(!body.files.is_empty(), "files")?;
        refuse_unless(!body.environments.is_empty(), "environments")?;
        refuse_unless(!body.parameters.is_empty(), "parameters")?;
        refuse_unless(!body.servers.is_empty(), "servers")?;
        refuse_unless(!body.mapped.is_empty(), "mapped")?;
    }
    let converging = body.operation == OperationKind::Converge;
    if !converging {
        refuse_unless(!body.units.is_empty(), "units")?;
        refuse_unless(body.no_follow, "no_follow")?;
    } else if body.units.is_empty() {
        return Err(TemplateError::new(
            "units",
            "required for a converge (the units to re-apply)",
        ));
    }
    let is_action = body.operation == OperationKind::Action;
    if !is_action {
        refuse_unless(body.resource.is_some(), "resource")?;
        refuse_unless(body.action.is_some(), "action")?;
    }
    let action = match (is_action, &body.resource, &body.action) {
        (false, _, _) => None,
        (true, None, _) => return Err(TemplateError::new("resource", "required for an action")),
        (true, _, None) => return Err(TemplateError::new("action", "required for an action")),
        (true, Some(resource), Some(name)) => {
            let name = Action::new(name.as_str())
                .map_err(|e| TemplateError::new("action", format!("{name:?}: {e}")))?;
            Some((resource.clone(), name))
        }
    };
    let (apply, notes) = if takes_template {
        let (apply, notes) = prepare_apply(body, stack, project, previous)?;
        (Some(apply), notes)
    } else {
        (None, Vec::new())
    };
    Ok(Prepared {
        kind: body.operation,
        apply,
        action,
        force: body.force,
        units: body.units.clone(),
        dependents: if body.no_follow {
            driver::Dependents::Report
        } else {
            driver::Dependents::Follow
        },
        converge: body.converge,
        notes,
    })
}

fn prepare_apply(
    body: &SubmitOperation,
    stack: &StackId,
    project: &str,
    previous: Option<&StackState>,
) -> Result<(Apply, Vec<String>), TemplateError> {
    let mut environment = Environment::default();
    for (i, env) in body.environments.iter().enumerate() {
        let text = document_text(env, &format!("environments[{i}]"))?;
        let one = Environment::parse(&text).map_err(|e| TemplateError {
            path: format!("environments[{i}].{}", e.path),
            message: e.message,
        })?;
        environment.merge(one);
    }
    let Some(template) = &body.template else {
        return Err(TemplateError::new(
            "template",
            format!("required for a {} operation", body.operation),
        ));
    };
    let text = document_text(template, "template")?;
    let template = Template::parse_files(&text, Files::Given(&body.files), &environment)
        .map_err(in_template)?;
    let mut given = environment.given_text(&template).map_err(in_template)?;
    for (name, value) in &body.parameters {
        given.insert(name.clone(), parameter_text(name, value)?);
    }
    let mut mapped = body.mapped.clone();
    for (resource, server) in &body.servers {
        mapped.entry(resource.clone()).or_default().server_id = Some(server.clone());
    }
    // What `validate` checks: the parameters bound (over the ones the stack keeps),
    // the conditions decided, the mapping against the template, the units expanded.
    let kept = previous.map(|s| s.parameters.clone()).unwrap_or_default();
    let never_stored = |h: &str| TemplateError {
        path: format!("parameters.{h}"),
        message: format!(
            "hidden parameter {h:?} is never stored; pass it again with -P {h}=… or --parameter-file {h}=PATH"
        ),
    };
    // As the driver refuses it (`driver::apply`): a hidden parameter given before must be
    // given again, never fall back to its default without a word.
    if let Some(h) = previous
        .into_iter()
        .flat_map(|p| &p.hidden_parameters)
        .find(|h| template.parameters.get(*h).is_some_and(|d| d.hidden) && !given.contains_key(*h))
    {
        return Err(in_template(never_stored(h)));
    }
    let mut params = template.bind_parameters_over(&given, &kept).map_err(|e| {
        let hidden = previous
            .into_iter()
            .flat_map(|p| &p.hidden_parameters)
            .find(|h| e.path == format!("parameters.{h}"));
        in_template(hidden.map_or(e, |h| never_stored(h)))
    })?;
    params.add_pseudo(stack.as_str(), Some(project));
    let (instantiated, _) = template.instantiate(&params).map_err(in_template)?;
    let kept_mapped = previous.map(|s| s.mapped.clone()).unwrap_or_default();
    let merged = infra::merge(&template, &kept_mapped, &mapped)
        .map_err(|m| TemplateError::new("mapped", m))?;
    let creating = previous.is_none();
    units::expand_mapped(&instantiated, &params, &merged, creating).map_err(in_template)?;
    let mut notes = template.notes();
    notes.extend(environment.notes.iter().cloned());
    environment.parameters.clear();
    Ok((
        Apply {
            template,
            given,
            mapped,
            environment,
        },
        notes,
    ))
}

/// A template error's path, said to be inside the body's `template`.
fn in_template(e: TemplateError) -> TemplateError {
    if e.path == "template" || e.path.starts_with("template.") || e.path.starts_with("environment")
    {
        return e;
    }
    TemplateError {
        path: format!("template.{}", e.path),
        message: e.message,
    }
}

/// A document given as text, or as the document itself (written out as JSON, which
/// YAML 1.2 reads as it is).
fn document_text(value: &Value, field: &str) -> Result<String, TemplateError> {
    match value {
        Value::String(text) => Ok(text.clone()),
        Value::Object(_) => Ok(value.to_string()),
        _ => Err(TemplateError::new(
            field,
            "must be YAML text or a JSON object",
        )),
    }
}

/// A parameter's value as `-P` text: strings as they are, numbers and booleans as
/// written, lists and maps as JSON.
fn parameter_text(name: &str, value: &Value) -> Result<String, TemplateError> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Null => Err(TemplateError::new(
            format!("parameters.{name}"),
            "must be a value, not null",
        )),
        other => Ok(other.to_string()),
    }
}

/// The files the template at `path` reads with `get_file`, by the name it gives, read
/// relative to its directory (as the engine reads them): what a client sends along.
pub fn files_of(path: &std::path::Path) -> Result<BTreeMap<String, String>, TemplateError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| TemplateError::new(path.display().to_string(), format!("cannot read: {e}")))?;
    let doc = crate::template::parse_yaml(&text)?;
    let mut names = BTreeSet::new();
    crate::functions::file_names(&doc, &mut names);
    let base_dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    let mut files = BTreeMap::new();
    for name in names {
        let mut call = serde_json::json!({ crate::functions::GET_FILE: name.clone() });
        crate::functions::inline_files(&mut call, base_dir, "template")?;
        if let Value::String(text) = call {
            files.insert(name, text);
        }
    }
    Ok(files)
}

/// Runs `prepared` on `stack` through `client`: the driver's create, update, delete,
/// suspend, resume or action, which resume an interrupted operation of the same kind.
/// `Ok(None)` once a delete removed the stack.
pub async fn run(
    client: &Client,
    stack: &StackId,
    prepared: &Prepared,
    report: driver::Reporter,
) -> Result<Option<Stack>, EngineError> {
    let opts = Options {
        force: prepared.force,
        report,
    };
    match (prepared.kind, &prepared.apply, &prepared.action) {
        (OperationKind::Create | OperationKind::Update, Some(apply), _) => {
            let source = Source {
                template: &apply.template,
                given: &apply.given,
                mapped: &apply.mapped,
                converge: prepared.converge,
            };
            if prepared.kind == OperationKind::Create {
                driver::create(client, stack, source, &opts).await.map(Some)
            } else {
                driver::update(client, stack, source, &opts).await.map(Some)
            }
        }
        (OperationKind::Delete, _, _) => driver::delete(client, stack, &opts).await,
        (OperationKind::Suspend, _, _) => driver::suspend(client, stack, &opts).await.map(Some),
        (OperationKind::Resume, _, _) => driver::resume(client, stack, &opts).await.map(Some),
        (OperationKind::Converge, _, _) => {
            driver::converge(client, stack, &prepared.units, prepared.dependents, &opts)
                .await
                .map(Some)
        }
        (OperationKind::Action, _, Some((resource, name))) => {
            driver::action(client, stack, resource, name, &opts)
                .await
                .map(Some)
        }
        _ => Err(EngineError::Refused(
            "the operation was queued without what it needs (not expected)".to_owned(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEMPLATE: &str = "heat_template_version: 2018-08-31
parameters:
  secret: {type: string, hidden: true}
  port: {type: number, default: 80}
resources:
  config:
    type: OS::Heat::SoftwareConfig
    properties: {config: {get_file: run.sh}}
  deploy:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: config}
      server: web1
      input_values: {secret: {get_param: secret}, port: {get_param: port}}
";

    fn stack() -> StackId {
        "shop".parse().expect("stack id")
    }

    fn body() -> SubmitOperation {
        let mut body = SubmitOperation::with_template(OperationKind::Create, TEMPLATE);
        body.files.insert("run.sh".into(), "#!/bin/sh\n".into());
        body.parameters
            .insert("secret".into(), Value::from("s3cret"));
        body.parameters.insert("port".into(), Value::from(8080));
        body
    }

    #[test]
    fn a_create_reads_its_files_and_types_its_parameters() {
        let prepared = prepare(&body(), &stack(), "t1", None).expect("valid");
        let apply = prepared.apply.expect("a template");
        assert_eq!(apply.given["port"], "8080");
        assert_eq!(apply.hidden(), BTreeSet::from(["secret".to_owned()]));
    }

    #[test]
    fn each_mistake_names_its_field() {
        let mut missing_file = body();
        missing_file.files.clear();
        let e = prepare(&missing_file, &stack(), "t1", None).expect_err("no file");
        assert!(e.path.starts_with("template.resources.config"), "{e}");
        let mut bad_param = body();
        bad_param
            .parameters
            .insert("port".into(), Value::from("eighty"));
        let e = prepare(&bad_param, &stack(), "t1", None).expect_err("not a number");
        assert!(e.path.contains("port"), "{e}");
        let mut no_secret = body();
        no_secret.parameters.remove("secret");
        let e = prepare(&no_secret, &stack(), "t1", None).expect_err("required");
        assert!(e.path.contains("secret"), "{e}");
        let mut delete = SubmitOperation::new(OperationKind::Delete);
        delete.parameters.insert("x".into(), Value::from(1));
        let e = prepare(&delete, &stack(), "t1", None).expect_err("no parameters");
        assert_eq!(e.path, "parameters");
        let action = SubmitOperation::new(OperationKind::Action);
        let e = prepare(&action, &stack(), "t1", None).expect_err("no resource");
        assert_eq!(e.path, "resource");
    }
}
