//! `flue stack validate`: everything `flue stack create` checks before it contacts the
//! gateway (the template, its environments, the parameters, the conditions, each
//! deployment's server and the `--server` / `--attr` map), and a summary of what the stack would
//! hold: per resource, what Flue will do with it (`describe`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;

use serde_json::Value;

use super::args::StackValidateArgs;
use super::stack::{add_parameter_files, parameters};
use super::{CliError, Outcome};
use flue_stack::environment::Environment;
use flue_stack::infra;
use flue_stack::template::{Template, TemplateError};
use flue_stack::units;

/// Runs `flue stack validate`: prints the summary and returns success, or the first
/// error as [`CliError::Invalid`] (exit code 1).
pub fn run(args: &StackValidateArgs, out: &mut impl Write) -> Result<Outcome, CliError> {
    let invalid = |path: &Path, error: TemplateError| CliError::Invalid {
        path: path.to_owned(),
        error,
    };
    let env = Environment::load_all(&args.environments).map_err(|e| {
        match args
            .environments
            .iter()
            .find(|p| e.path.starts_with(&format!("{}: ", p.display())))
        {
            Some(p) => invalid(
                p,
                TemplateError::new(
                    e.path
                        .trim_start_matches(&format!("{}: ", p.display()))
                        .to_owned(),
                    e.message,
                ),
            ),
            None => CliError::Usage(e.to_string()),
        }
    })?;
    let template = Template::load_with(&args.template, &env).map_err(|e| {
        if e.path == args.template.display().to_string() {
            CliError::Usage(e.to_string())
        } else {
            invalid(&args.template, e)
        }
    })?;
    let mut given = env
        .given_text(&template)
        .map_err(|e| invalid(&args.template, e))?;
    let mut cli_given = parameters(&args.parameters)?;
    add_parameter_files(&mut cli_given, &args.parameter_files)?;
    given.extend(cli_given);
    let mut params = template
        .bind_parameters(&given)
        .map_err(|e| invalid(&args.template, e))?;
    params.add_pseudo(args.stack_name.as_str(), Some(args.project_id.as_str()));
    let (instantiated, decided) = template
        .instantiate(&params)
        .map_err(|e| invalid(&args.template, e))?;
    // The server map as `create` takes it: checked against the whole template, then
    // used to resolve every server and infrastructure attribute the stack would read.
    let given_map = super::mapping::parse(&args.servers, &args.attrs)?;
    let mapped = infra::merge(&template, &BTreeMap::new(), &given_map).map_err(CliError::Usage)?;
    let plan = units::expand_mapped(&instantiated, &params, &mapped, true)
        .map_err(|e| invalid(&args.template, e))?;

    let mut text = String::new();
    let _ = writeln!(
        text,
        "{}: valid (heat_template_version {})",
        args.template.display(),
        template.version
    );
    if !template.parameters.is_empty() {
        text.push_str("parameters:\n");
        for (name, decl) in &template.parameters {
            let value = if decl.hidden {
                "<hidden>".to_owned()
            } else {
                match &params.values[name] {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                }
            };
            let from = if params.given.contains(name) {
                "given"
            } else {
                "default"
            };
            let _ = writeln!(text, "  {name} ({}) = {value} [{from}]", decl.kind.name());
        }
    }
    if !decided.conditions.is_empty() {
        text.push_str("conditions:\n");
        for (name, on) in &decided.conditions {
            let _ = writeln!(text, "  {name}: {on}");
        }
    }
    text.push_str("resources:\n");
    for line in super::describe::resource_lines(&template, &decided, &plan) {
        let _ = writeln!(text, "  {line}");
    }
    if !template.outputs.is_empty() {
        text.push_str("outputs:\n");
        for name in template.outputs.keys() {
            if decided.skipped_outputs.contains(name) {
                let _ = writeln!(text, "  {name}: not shown, its condition is false");
            } else {
                let _ = writeln!(text, "  {name}");
            }
        }
    }
    let notes: Vec<String> = template.notes().into_iter().chain(env.notes).collect();
    if !notes.is_empty() {
        text.push_str("notes:\n");
        for n in notes {
            let _ = writeln!(text, "  {n}");
        }
    }
    out.write_all(text.as_bytes())?;
    Ok(Outcome::Success)
}
