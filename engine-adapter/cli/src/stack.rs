//! `flue stack …`: submits stack operations to the gateway's engine workers (or, with
//! `--local`, drives them in this process) and prints their progress as it happens.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write;
use std::sync::Arc;

use flue_proto::{Action, OpStatus, Stack, StackId};
use tokio::sync::mpsc;

use super::args::{StackApplyArgs, StackCommand};
use super::{CliError, Outcome, render, submit};
use flue_client::Client;
use flue_proto::operation::{OperationKind, SubmitOperation};
use flue_stack::driver::{self, EngineError, Event, Options, Source};
use flue_stack::environment::Environment;
use flue_stack::template::Template;

/// Runs one `flue stack` command.
pub async fn run(
    client: &Client,
    command: StackCommand,
    out: &mut impl Write,
) -> Result<Outcome, CliError> {
    match command {
        StackCommand::Create(args) => apply(client, args, true, out).await,
        StackCommand::Update(args) => apply(client, args, false, out).await,
        StackCommand::Delete(args) if !args.local => {
            submitted(client, &args.name, OperationKind::Delete, args.force, out).await
        }
        StackCommand::Suspend(args) if !args.local => {
            submitted(client, &args.name, OperationKind::Suspend, args.force, out).await
        }
        StackCommand::Resume(args) if !args.local => {
            submitted(client, &args.name, OperationKind::Resume, args.force, out).await
        }
        StackCommand::Action {
            name,
            resource,
            action,
            force,
            local: false,
            ..
        } => {
            let mut body = SubmitOperation::new(OperationKind::Action);
            body.resource = Some(resource);
            body.action = Some(action);
            body.force = force;
            submit::run(client, &name, &body, submit::Ending::ActionResults, out).await
        }
        StackCommand::Delete(args) => {
            let name = args.name.clone();
            let stack = drive(out, &name, args.force, |opts| async move {
                driver::delete(client, &args.name, &opts).await
            })
            .await?;
            Ok(match stack {
                None => Outcome::Success,
                Some(s) => outcome(&s),
            })
        }
        StackCommand::Suspend(args) => {
            let name = args.name.clone();
            let stack = drive(out, &name, args.force, |opts| async move {
                driver::suspend(client, &args.name, &opts).await
            })
            .await?;
            Ok(outcome(&stack))
        }
        StackCommand::Resume(args) => {
            let name = args.name.clone();
            let stack = drive(out, &name, args.force, |opts| async move {
                driver::resume(client, &args.name, &opts).await
            })
            .await?;
            Ok(outcome(&stack))
        }
        StackCommand::Action {
            name,
            resource,
            action,
            force,
            local: true,
            ..
        } => {
            let action = Action::new(action.as_str())
                .map_err(|e| CliError::Usage(format!("action {action:?}: {e}")))?;
            let id = name.clone();
            let stack = drive(out, &name, force, |opts| async move {
                driver::action(client, &id, &resource, &action, &opts).await
            })
            .await?;
            if let Some(run) = stack.state.actions.last() {
                for (unit, r) in &run.results {
                    writeln!(
                        out,
                        "  {unit}: {} (deployment {})",
                        r.status, r.deployment_id
                    )?;
                }
            }
            Ok(outcome(&stack))
        }
        StackCommand::Show { name, json } => {
            let stack = client.get_stack(&name).await?;
            let text = if json {
                render::pretty_json(&stack)
            } else {
                show(&stack)
            };
            out.write_all(text.as_bytes())?;
            Ok(Outcome::Success)
        }
        StackCommand::Validate(args) => super::validate::run(&args, out),
        StackCommand::Abandon {
            name,
            out: file,
            force,
        } => super::transfer::abandon(client, &name, file, force, out).await,
        StackCommand::Check {
            name,
            json,
            timeout_secs,
        } => super::check::run(client, &name, json, timeout_secs, out).await,
        StackCommand::Converge {
            name,
            timeout_secs,
            force,
            no_follow,
        } => {
            let dependents = if no_follow {
                flue_stack::driver::Dependents::Report
            } else {
                flue_stack::driver::Dependents::Follow
            };
            let converge = super::check::Converge {
                timeout_secs,
                force,
                dependents,
            };
            super::check::converge(client, &name, converge, out).await
        }
        StackCommand::Adopt { name, from } => {
            super::transfer::adopt(client, &name, &from, out).await
        }
        StackCommand::Operations { name, limit, json } => {
            let ops = client.list_operations_up_to(&name, limit as usize).await?;
            let text = if json {
                render::pretty_json(&ops)
            } else {
                submit::table(&name, &ops)
            };
            out.write_all(text.as_bytes())?;
            Ok(Outcome::Success)
        }
        StackCommand::List { json } => {
            let stacks = client.list_stacks().await?;
            let text = if json {
                render::pretty_json(&stacks)
            } else {
                list(&stacks)
            };
            out.write_all(text.as_bytes())?;
            Ok(Outcome::Success)
        }
    }
}

async fn apply(
    client: &Client,
    args: StackApplyArgs,
    creating: bool,
    out: &mut impl Write,
) -> Result<Outcome, CliError> {
    let env = Environment::load_all(&args.environments).map_err(CliError::from_environment)?;
    let template = Template::load_with(&args.template, &env).map_err(|error| {
        // A file that cannot be read names itself already.
        if error.path == args.template.display().to_string() {
            CliError::Usage(error.to_string())
        } else {
            CliError::Template {
                path: args.template.clone(),
                error,
            }
        }
    })?;
    for note in template.notes().iter().chain(&env.notes) {
        writeln!(out, "note: {note}")?;
    }
    let mut given = env
        .given_text(&template)
        .map_err(|error| CliError::Template {
            path: args.template.clone(),
            error,
        })?;
    // -P and --parameter-file win over the environments' `parameters`.
    let mut cli_given = parameters(&args.parameters)?;
    add_parameter_files(&mut cli_given, &args.parameter_files)?;
    given.extend(cli_given);
    let mapped = super::mapping::parse(&args.servers, &args.attrs)?;
    if !args.local {
        let kind = if creating {
            OperationKind::Create
        } else {
            OperationKind::Update
        };
        let text = std::fs::read_to_string(&args.template).map_err(|source| CliError::Read {
            path: args.template.clone(),
            source,
        })?;
        let files = flue_stack::submitted::files_of(&args.template).map_err(|error| {
            CliError::Template {
                path: args.template.clone(),
                error,
            }
        })?;
        let mut body = SubmitOperation::with_template(kind, text);
        body.files = files;
        body.converge = args.converge;
        // The environments' values are in `given` already; what is left of them holds none.
        body.environments = vec![serde_json::json!({
            "parameter_defaults": env.parameter_defaults,
            "resource_registry": env.resource_registry,
        })];
        body.parameters = given
            .into_iter()
            .map(|(k, v)| (k, serde_json::Value::String(v)))
            .collect();
        body.mapped = mapped;
        body.force = args.force;
        return submit::run(client, &args.name, &body, submit::Ending::Outputs, out).await;
    }
    let name = args.name.clone();
    let source = Source {
        template: &template,
        given: &given,
        mapped: &mapped,
        converge: args.converge,
    };
    let stack = drive(out, &name, args.force, |opts| async move {
        if creating {
            driver::create(client, &args.name, source, &opts).await
        } else {
            driver::update(client, &args.name, source, &opts).await
        }
    })
    .await
    .map_err(|e| match e {
        CliError::Engine(EngineError::Template(error)) => CliError::Template {
            path: args.template.clone(),
            error,
        },
        other => other,
    })?;
    if stack.status.status == OpStatus::Complete && !stack.state.outputs.is_empty() {
        writeln!(out, "outputs:")?;
        for (k, v) in &stack.state.outputs {
            writeln!(out, "  {k}: {}", render::output_value(v))?;
        }
    }
    Ok(outcome(&stack))
}

/// `--parameter-file NAME=PATH`: each file's contents (one trailing newline dropped)
/// added to `given`.
pub(super) fn add_parameter_files(
    given: &mut BTreeMap<String, String>,
    pairs: &[String],
) -> Result<(), CliError> {
    for pair in pairs {
        let Some((name, path)) = pair.split_once('=') else {
            return Err(CliError::Usage(format!(
                "--parameter-file expects NAME=PATH, got {pair:?}"
            )));
        };
        let mut text = std::fs::read_to_string(path).map_err(|source| CliError::Read {
            path: path.into(),
            source,
        })?;
        // `echo secret > file` leaves a newline that is not part of the value.
        if text.ends_with('\n') {
            text.pop();
        }
        if given.insert(name.to_owned(), text).is_some() {
            return Err(CliError::Usage(format!(
                "parameter {name:?} is given twice"
            )));
        }
    }
    Ok(())
}

/// `-P name=value` pairs.
pub(super) fn parameters(pairs: &[String]) -> Result<BTreeMap<String, String>, CliError> {
    let mut out = BTreeMap::new();
    for pair in pairs {
        let Some((k, v)) = pair.split_once('=') else {
            return Err(CliError::Usage(format!(
                "-P expects NAME=VALUE, got {pair:?}"
            )));
        };
        if out.insert(k.to_owned(), v.to_owned()).is_some() {
            return Err(CliError::Usage(format!("parameter {k:?} is given twice")));
        }
    }
    Ok(out)
}

fn outcome(stack: &Stack) -> Outcome {
    match stack.status.status {
        OpStatus::Complete => Outcome::Success,
        _ => Outcome::Failed,
    }
}

/// A delete, suspend or resume handed to the gateway's engine workers and followed.
async fn submitted(
    client: &Client,
    name: &StackId,
    kind: OperationKind,
    force: bool,
    out: &mut impl Write,
) -> Result<Outcome, CliError> {
    let mut body = SubmitOperation::new(kind);
    body.force = force;
    submit::run(client, name, &body, submit::Ending::Nothing, out).await
}

/// Runs an operation, printing its events to `out` as they come.
async fn drive<T, F, Fut>(
    out: &mut impl Write,
    name: &StackId,
    force: bool,
    op: F,
) -> Result<T, CliError>
where
    F: FnOnce(Options) -> Fut,
    Fut: Future<Output = Result<T, EngineError>>,
{
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    let stack = name.clone();
    let opts = Options {
        force,
        report: Arc::new(move |e: &Event| {
            // The receiver lives until the operation ends; a send cannot fail before.
            let _ = tx.send(event_line(&stack, e));
        }),
    };
    let fut = op(opts);
    tokio::pin!(fut);
    let result = loop {
        tokio::select! {
            biased;
            Some(line) = rx.recv() => {
                out.write_all(line.as_bytes())?;
                out.flush()?;
            }
            r = &mut fut => break r,
        }
    };
    while let Ok(line) = rx.try_recv() {
        out.write_all(line.as_bytes())?;
    }
    out.flush()?;
    Ok(result?)
}

/// One progress line (or block) for an event (the engine's own wording, the same
/// whether it ran here or in a gateway's engine worker).
pub fn event_line(stack: &StackId, e: &Event) -> String {
    flue_stack::progress::line(stack, e)
}

fn show(stack: &Stack) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "stack {}: {}", stack.id, stack.status);
    if let Some(reason) = &stack.status.reason {
        for line in reason.lines() {
            let _ = writeln!(s, "  {line}");
        }
    }
    let _ = writeln!(s, "updated {}", render::timestamp(stack.updated_at));
    let state = &stack.state;
    if !state.parameters.is_empty() || !state.hidden_parameters.is_empty() {
        let _ = writeln!(s, "parameters:");
        for (k, v) in &state.parameters {
            let _ = writeln!(s, "  {k} = {}", render::output_value(v));
        }
        for k in &state.hidden_parameters {
            let _ = writeln!(s, "  {k} = <hidden>");
        }
    }
    if !state.mapped.is_empty() {
        let _ = writeln!(s, "mapped (not created by Flue):");
        for (name, m) in &state.mapped {
            let mut line = format!("  {name}");
            if let Some(id) = &m.server_id {
                let _ = write!(line, " = server {id}");
            }
            if let Some(r) = &m.reference {
                let _ = write!(line, " = {r}");
            }
            for (attr, v) in &m.attributes {
                let _ = write!(line, ", {attr}: {}", render::output_value(v));
            }
            let _ = writeln!(s, "{line}");
        }
    }
    if !state.units.is_empty() {
        let _ = writeln!(
            s,
            "{:<28} {:<12} {:<8} {:<12} DEPLOYMENT",
            "UNIT", "SERVER", "ACTION", "STATUS"
        );
        for (key, u) in &state.units {
            let deployment = u
                .pending
                .as_ref()
                .map(|p| p.deployment_id.to_string())
                .or_else(|| u.current.as_ref().map(ToString::to_string))
                .or_else(|| u.last.as_ref().map(ToString::to_string))
                .unwrap_or_else(|| "-".into());
            let action = match &u.pending {
                Some(p) => p.action.as_str(),
                None => u.action.as_str(),
            };
            // A unit that never ran has no status of its own.
            let status = if action == driver::INIT {
                "-".to_owned()
            } else {
                u.status.to_string()
            };
            let _ = writeln!(
                s,
                "{key:<28} {:<12} {action:<8} {status:<12} {deployment}",
                u.server_id.as_str(),
            );
            if let Some(r) = &u.status_reason {
                let first = r.lines().next().unwrap_or_default();
                let _ = writeln!(s, "    {first}");
            }
        }
    }
    if !state.outputs.is_empty() {
        let _ = writeln!(s, "outputs:");
        for (k, v) in &state.outputs {
            let _ = writeln!(s, "  {k}: {}", render::output_value(v));
        }
    }
    if !state.actions.is_empty() {
        let _ = writeln!(s, "actions:");
        for run in &state.actions {
            let _ = writeln!(s, "  {} on {}: {}", run.name, run.resource, run.status);
            for (unit, r) in &run.results {
                let _ = writeln!(
                    s,
                    "    {unit}: {} (deployment {})",
                    r.status, r.deployment_id
                );
            }
        }
    }
    s
}

fn list(stacks: &[Stack]) -> String {
    if stacks.is_empty() {
        return "no stacks\n".to_owned();
    }
    let mut s = format!("{:<24} {:<22} UPDATED\n", "STACK", "STATUS");
    for st in stacks {
        let _ = writeln!(
            s,
            "{:<24} {:<22} {}",
            st.id.as_str(),
            st.status.to_string(),
            render::timestamp(st.updated_at)
        );
    }
    s
}
