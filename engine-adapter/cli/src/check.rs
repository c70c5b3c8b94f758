//! `flue stack check NAME`: asks each unit's server whether what the unit last applied
//! is still in place, changing nothing.
//!
//! For each unit that completed a deployment (its baseline) and whose config declares a
//! `CHECK` hook, a deployment with action `CHECK` runs that hook with the baseline's
//! inputs (hidden ones handed on by the gateway) on the unit's server: COMPLETE means in
//! place, FAILED drifted (its reason and output say how). A config without a `CHECK`
//! hook is not checked (the gateway refuses the action for it, so a check never runs a
//! config's main body); a unit that never completed a deployment is reported missing.
//! Each check is a recorded deployment of the stack, with its lifecycle events.
//!
//! Before any hook, a unit whose inputs read outputs of other units that changed since
//! it ran (`flue_stack::follow`) is reported `inputs_changed`, without running anything
//! on its server: its server may be as it was applied, but what it was applied with is
//! stale. A converge re-runs it with the new values. A unit whose only stale inputs were
//! made by an expression of the template is `needs_update`: no converge can make them
//! again without the template, `flue stack update` does.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};

use flue_client::Client;
use flue_proto::operation::{OperationKind, SubmitOperation};
use flue_proto::{
    Action, CHECK_ACTION, Config, ConfigId, CreateDeployment, DeploymentStatus, OpStatus, Presence,
    PresenceStatus, ServerId, StackId,
};
use flue_stack::driver::Dependents;
use flue_stack::follow;
use serde::Serialize;

use super::{CliError, Outcome};

/// How much of a drifted check's output the table quotes.
const OUTPUT_TAIL_BYTES: usize = 300;

/// One unit's answer.
#[derive(Debug, Clone, Serialize)]
struct UnitCheck {
    unit: String,
    server_id: String,
    /// `in_place`, `drifted`, `missing`, `inputs_changed`, `needs_update`, `not_checked`,
    /// `offline`.
    result: &'static str,
    detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    deployment_id: Option<String>,
}

/// Runs the checks and prints one line per unit (or JSON).
pub async fn run(
    client: &Client,
    name: &StackId,
    json: bool,
    timeout_secs: u64,
    out: &mut impl Write,
) -> Result<Outcome, CliError> {
    let results = check_units(client, name, timeout_secs).await?;
    let text = if json {
        let mut t = serde_json::to_string_pretty(&results)
            .map_err(|e| CliError::Usage(format!("cannot encode: {e}")))?;
        t.push('\n');
        t
    } else {
        table(name, &results)
    };
    out.write_all(text.as_bytes())?;
    let unknown = results.iter().any(|r| r.result == "offline");
    let stale = results.iter().any(|r| r.result == NEEDS_UPDATE);
    Ok(if to_converge(&results).is_empty() && !unknown && !stale {
        Outcome::Success
    } else {
        Outcome::Failed
    })
}

/// How `flue stack converge` runs.
#[derive(Debug, Clone, Copy)]
pub struct Converge {
    /// How long to wait for every check, in seconds.
    pub timeout_secs: u64,
    /// Take over from another operation still marked in progress.
    pub force: bool,
    /// What becomes of the units whose inputs read outputs the converge changes.
    pub dependents: Dependents,
}

/// `flue stack converge NAME`: the check, then the drifted, missing and stale units
/// re-applied by the gateway's engine workers (dependencies first, the units reading
/// outputs that changed followed or reported), followed.
pub async fn converge(
    client: &Client,
    name: &StackId,
    how: Converge,
    out: &mut impl Write,
) -> Result<Outcome, CliError> {
    let Converge {
        timeout_secs,
        force,
        dependents,
    } = how;
    let results = check_units(client, name, timeout_secs).await?;
    out.write_all(table(name, &results).as_bytes())?;
    let units = to_converge(&results);
    if units.is_empty() {
        writeln!(out, "nothing to converge")?;
        return Ok(Outcome::Success);
    }
    writeln!(out, "converging {}", units.join(", "))?;
    let mut body = SubmitOperation::new(OperationKind::Converge);
    body.units = units;
    body.force = force;
    body.no_follow = dependents == Dependents::Report;
    super::submit::run(client, name, &body, super::submit::Ending::Nothing, out).await
}

/// The results a converge acts on.
const TO_CONVERGE: [&str; 3] = ["drifted", "missing", "inputs_changed"];
/// A unit whose stale inputs only `flue stack update` makes again.
const NEEDS_UPDATE: &str = "needs_update";

/// The units a converge re-applies: drifted, missing and stale ones.
fn to_converge(results: &[UnitCheck]) -> Vec<String> {
    results
        .iter()
        .filter(|r| TO_CONVERGE.contains(&r.result))
        .map(|r| r.unit.clone())
        .collect()
}

/// Each unit's check, sorted by unit.
async fn check_units(
    client: &Client,
    name: &StackId,
    timeout_secs: u64,
) -> Result<Vec<UnitCheck>, CliError> {
    let stack = client.get_stack(name).await?;
    if stack.status.status == OpStatus::InProgress {
        return Err(CliError::Usage(format!(
            "stack {name} is {}: check it once that operation ended",
            stack.status
        )));
    }
    let mut configs: BTreeMap<ConfigId, Config> = BTreeMap::new();
    let mut online: BTreeMap<ServerId, Option<Presence>> = BTreeMap::new();
    let mut checks = Vec::new();
    let mut results = Vec::new();
    let mut fetched = follow::Fetched::new();
    let check = Action::new(CHECK_ACTION).map_err(|e| CliError::Usage(e.to_string()))?;
    for (key, unit) in &stack.state.units {
        let base = UnitCheck {
            unit: key.clone(),
            server_id: unit.server_id.to_string(),
            result: "missing",
            detail: String::new(),
            deployment_id: None,
        };
        let (Some(baseline), Some(config_id)) = (&unit.baseline, &unit.baseline_config) else {
            results.push(UnitCheck {
                detail: format!("never applied ({} {})", unit.action, unit.status),
                ..base
            });
            continue;
        };
        let now = follow::inputs_now(client, &stack.state, key, &mut fetched).await?;
        if !now.changed.is_empty() {
            let mut inputs = now.changed;
            inputs.extend(now.stuck);
            results.push(UnitCheck {
                result: "inputs_changed",
                detail: format!(
                    "read outputs that changed since it ran: {}",
                    inputs.join(", ")
                ),
                ..base
            });
            continue;
        }
        if !now.stuck.is_empty() {
            results.push(UnitCheck {
                result: NEEDS_UPDATE,
                detail: format!(
                    "made by an expression of outputs that changed since it ran: {}; `flue stack update` makes them again",
                    now.stuck.join(", ")
                ),
                ..base
            });
            continue;
        }
        if !configs.contains_key(config_id) {
            configs.insert(config_id.clone(), client.get_config(config_id).await?);
        }
        if !configs[config_id].hooks.contains_key(CHECK_ACTION) {
            results.push(UnitCheck {
                result: "not_checked",
                detail: "its config declares no CHECK hook".to_owned(),
                ..base
            });
            continue;
        }
        // A server whose agent is not online would hold the check until it comes back:
        // say so instead of waiting.
        if !online.contains_key(&unit.server_id) {
            let server = client.get_server(&unit.server_id).await?;
            online.insert(unit.server_id.clone(), server.presence);
        }
        if let Some(p) = online[&unit.server_id]
            .as_ref()
            .filter(|p| p.status != PresenceStatus::Online)
        {
            results.push(UnitCheck {
                result: "offline",
                detail: format!(
                    "not checked: its server's agent is {}{}",
                    match p.status {
                        PresenceStatus::Offline => "offline",
                        _ => "not heard from yet",
                    },
                    p.since.map(|t| format!(" since {t}")).unwrap_or_default()
                ),
                ..base
            });
            continue;
        }
        let created = client
            .create_deployment(&CreateDeployment {
                action: check.clone(),
                name: Some(format!("check {key}")),
                stack_id: Some(name.clone()),
                resource_name: Some(unit.member.clone().unwrap_or(unit.resource.clone())),
                inputs_from: Some(baseline.clone()),
                ..CreateDeployment::new(config_id.clone(), unit.server_id.clone())
            })
            .await?;
        checks.push((base, created.id));
    }
    // Every check is already on its way: waiting for them one after the other takes as
    // long as the slowest.
    let deadline = Instant::now() + Duration::from_secs(timeout_secs);
    for (base, id) in checks {
        let left = deadline.saturating_duration_since(Instant::now());
        let d = client.wait_until_terminal(&id, left, |_| {}).await?;
        let (result, detail) = match d.status {
            DeploymentStatus::Complete => ("in_place", "CHECK hook exited 0".to_owned()),
            _ => ("drifted", drift_detail(&d)),
        };
        results.push(UnitCheck {
            result,
            detail,
            deployment_id: Some(id.to_string()),
            ..base
        });
    }
    results.sort_by(|a, b| a.unit.cmp(&b.unit));
    Ok(results)
}

/// Why a check failed, with the end of what the hook printed.
fn drift_detail(d: &flue_proto::Deployment) -> String {
    let mut detail = d
        .status_reason
        .clone()
        .unwrap_or_else(|| "CHECK hook failed".to_owned());
    let printed = format!("{}{}", d.deploy_stdout, d.deploy_stderr);
    let printed = printed.trim();
    if !printed.is_empty() {
        detail.push_str(": ");
        let end = flue_proto::text::tail(printed, OUTPUT_TAIL_BYTES);
        detail.push_str(&end.replace('\n', " | "));
    }
    detail
}

fn table(name: &StackId, results: &[UnitCheck]) -> String {
    let width = results
        .iter()
        .map(|r| r.unit.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let server = results
        .iter()
        .map(|r| r.server_id.len())
        .max()
        .unwrap_or(6)
        .max(6);
    let mut t = format!("stack {name}: checked {} units\n", results.len());
    t.push_str(&format!(
        "{:width$}  {:server$}  {:14}  DETAIL\n",
        "UNIT", "SERVER", "RESULT"
    ));
    for r in results {
        t.push_str(&format!(
            "{:width$}  {:server$}  {:14}  {}\n",
            r.unit, r.server_id, r.result, r.detail
        ));
    }
    let drifted = results
        .iter()
        .filter(|r| TO_CONVERGE.contains(&r.result) || r.result == NEEDS_UPDATE)
        .count();
    t.push_str(&match drifted {
        0 => "nothing drifted".to_owned(),
        n => format!("{n} unit(s) drifted or missing"),
    });
    match results.iter().filter(|r| r.result == "offline").count() {
        0 => t.push('\n'),
        n => t.push_str(&format!("; {n} not checked: their server is offline\n")),
    }
    t
}
