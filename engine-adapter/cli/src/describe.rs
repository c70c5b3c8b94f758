//! What `flue stack validate` says Flue will do with each resource of a template: the
//! deployments it runs (where, with which hook group, for which actions), the servers
//! and external resources it maps, the values it makes, and what it ignores, so a Heat
//! user sees the mapping before anything runs.

use std::collections::BTreeMap;

use flue_stack::infra;
use flue_stack::resolve::{UNGROUPED, hook_group};
use flue_stack::template::{Decided, Resource, ResourceKind, Template, component_actions};
use flue_stack::units::{self, Plan};
use serde_json::Value;

/// One line per resource, `NAME (TYPE): what Flue does with it`, in name order.
pub(crate) fn resource_lines(template: &Template, decided: &Decided, plan: &Plan) -> Vec<String> {
    let infra_notes: BTreeMap<String, String> = infra::notes(template, &plan.servers, &plan.mapped)
        .into_iter()
        .collect();
    template
        .resources
        .iter()
        .map(|(name, r)| {
            let what = match decided.skipped_resources.get(name) {
                Some(c) => format!("not created, condition {c} is false"),
                None => describe(template, plan, &infra_notes, name, r),
            };
            format!("{name} ({}): {what}", r.kind)
        })
        .collect()
}

fn describe(
    template: &Template,
    plan: &Plan,
    infra_notes: &BTreeMap<String, String>,
    name: &str,
    r: &Resource,
) -> String {
    match r.kind {
        ResourceKind::SoftwareDeployment
        | ResourceKind::SoftwareDeploymentGroup
        | ResourceKind::ResourceGroup => deployment(template, plan, name, r),
        kind if kind.is_config() => config(template, name, r),
        ResourceKind::NovaServer | ResourceKind::External(_) | ResourceKind::HeatNone => {
            let note = infra_notes.get(name).cloned().unwrap_or_default();
            // The type is already on the line.
            let note = note
                .strip_prefix(r.kind.type_name())
                .map_or(note.as_str(), str::trim_start)
                .trim_start_matches(':')
                .trim_start()
                .to_owned();
            match given_attributes(plan, name) {
                Some(attrs) => format!("{note}; attributes from --attr: {attrs}"),
                None => note,
            }
        }
        ResourceKind::RandomString => match plan.units.values().find(|u| u.resource == name) {
            Some(u) => format!(
                "a hidden value made once, kept by a deployment on server {}",
                u.server_id
            ),
            None => "no deployment takes its value, so none is made".to_owned(),
        },
        ResourceKind::HeatValue => "a value computed from the template".to_owned(),
        ResourceKind::Server => "a server registered with Flue".to_owned(),
        _ => "nothing to do".to_owned(),
    }
}

/// `deploys CONFIG on SERVERS with hook group G for ACTIONS`.
fn deployment(template: &Template, plan: &Plan, name: &str, r: &Resource) -> String {
    let units: Vec<_> = plan.units.values().filter(|u| u.resource == name).collect();
    let on: Vec<String> = units
        .iter()
        .map(|u| match &u.member {
            Some(m) => format!("{m}={}", u.server_id),
            None => u.server_id.to_string(),
        })
        .collect();
    let config = units::config_resource(template, name).unwrap_or("?");
    let group = template
        .resources
        .get(config)
        .map_or_else(String::new, group_text);
    let actions = units
        .first()
        .map_or_else(String::new, |u| u.actions.join(", "));
    let on = if on.is_empty() {
        "no server (the group has no members)".to_owned()
    } else {
        format!("server {}", on.join(", "))
    };
    let mut text = format!("deploys {config} on {on} with {group} for {actions}");
    // The agent answers on the broker: there is no signal to send.
    if r.properties.contains_key("signal_transport") {
        text.push_str("; signal_transport ignored");
    }
    text
}

/// A config: its hook group and the deployments that run it.
fn config(template: &Template, name: &str, r: &Resource) -> String {
    let users: Vec<&str> = template
        .resources
        .keys()
        .filter(|d| units::config_resource(template, d) == Some(name))
        .map(String::as_str)
        .collect();
    let mut text = format!("a config with {}", group_text(r));
    if r.kind == ResourceKind::SoftwareComponent {
        text.push_str(&format!(" (runs for {})", component_actions(r).join(", ")));
    }
    if users.is_empty() {
        text.push_str("; no deployment runs it (a server's user_data is ignored with the server)");
    } else {
        text.push_str(&format!("; deployed by {}", users.join(", ")));
    }
    text
}

/// `hook group G`, saying what Heat's `Heat::Ungrouped` means.
fn group_text(config: &Resource) -> String {
    let group = match config.properties.get("group") {
        None => hook_group(config.kind, None),
        Some(Value::String(g)) => hook_group(config.kind, Some(g)),
        Some(_) => return "the hook group a function gives".to_owned(),
    };
    if group == UNGROUPED {
        format!("hook group {group} (Heat's default: no hook runs, the deployment completes)")
    } else {
        format!("hook group {group}")
    }
}

/// The attribute names given with `--attr NAME.ATTR=VALUE`, when any.
fn given_attributes(plan: &Plan, name: &str) -> Option<String> {
    let attrs = &plan.mapped.get(name)?.attributes;
    (!attrs.is_empty()).then(|| attrs.keys().cloned().collect::<Vec<_>>().join(", "))
}
