//! A polled deployment as Heat puts it into a server's metadata: the item
//! `55-heat-config` hands to the hook, with the derived inputs of Heat's
//! `TEMP_URL_SIGNAL` transport (where `heat-config-notify` puts the result).
//!
//! Values keep their types, as Heat's metadata does (`55-heat-config` turns `String`
//! inputs into strings itself); hidden values arrive here opened, for this server only.

use std::collections::BTreeMap;

use flue_proto::heat::{self, InputType};
use flue_proto::poll::{HeatInput, HeatItem, HeatOutput, SIGNAL_VERB, TEMP_URL_SIGNAL};
use flue_proto::{Config, Deployment};
use serde_json::Value;
use time::format_description::well_known::Rfc3339;

/// The item for deployment `d` of `config`, with input values `values` (hidden ones
/// opened) and `signal_url` as its `deploy_signal_id`.
pub fn item(
    d: &Deployment,
    config: &Config,
    values: &BTreeMap<String, Value>,
    signal_url: &str,
) -> HeatItem {
    let mut inputs: Vec<HeatInput> = config
        .inputs
        .iter()
        .map(|decl| {
            let kind = InputType::parse(&decl.kind);
            HeatInput {
                name: decl.name.clone(),
                kind: decl.kind.clone(),
                default: heat::item_default(kind, decl.default.as_ref()),
                // Declared types as the agent's item has them (`flue_proto::heat`): a
                // Number given as text on the command line still reaches the hook as a
                // number. No value is null, as in Heat's metadata (the dispatcher hands a
                // `String` hook `None`).
                value: values
                    .get(&decl.name)
                    .or(decl.default.as_ref())
                    .map_or(Value::Null, |v| heat::typed_or_as_is(kind, v)),
                description: decl.description.clone(),
            }
        })
        .collect();
    for (name, value) in values {
        if !config.inputs.iter().any(|decl| &decl.name == name) {
            inputs.push(string_input(name, value.clone(), None));
        }
    }
    // Heat's `<stack name>/<stack id>`; a Flue stack's id is its name (as the agent forms it).
    let stack_id = d
        .stack_id
        .as_ref()
        .map_or(String::new(), |s| format!("{s}/{s}"));
    let resource_name = d.resource_name.as_deref().unwrap_or(&d.name);
    // Heat's own descriptions of its derived inputs, in Heat's order.
    let derived = [
        (
            "deploy_server_id",
            d.server_id.as_str(),
            "ID of the server being deployed to",
        ),
        (
            "deploy_action",
            d.action.as_str(),
            "Name of the current action being deployed",
        ),
        (
            "deploy_stack_id",
            stack_id.as_str(),
            "ID of the stack this deployment belongs to",
        ),
        (
            "deploy_resource_name",
            resource_name,
            "Name of this deployment resource in the stack",
        ),
        (
            "deploy_signal_transport",
            TEMP_URL_SIGNAL,
            "How the server should signal to heat with the deployment output values.",
        ),
        (
            "deploy_signal_id",
            signal_url,
            "ID of signal to use for signalling output values",
        ),
        (
            "deploy_signal_verb",
            SIGNAL_VERB,
            "HTTP verb to use for signaling outputvalues",
        ),
    ];
    // The gateway knows these better than any caller: a same-named value is replaced.
    inputs.retain(|i| !derived.iter().any(|(name, _, _)| *name == i.name));
    inputs.extend(derived.iter().map(|(name, value, description)| {
        string_input(name, Value::String((*value).to_owned()), Some(description))
    }));
    let mut body = config.body_for(&d.action).clone();
    if config.substitute_inputs {
        substitute(&mut body, &inputs);
    }
    let options = match &config.options {
        Value::Null => Value::Object(serde_json::Map::new()),
        other => other.clone(),
    };
    HeatItem {
        id: d.id.to_string(),
        name: d.name.clone(),
        group: config.group.clone(),
        creation_time: d
            .created_at
            .format(&Rfc3339)
            .unwrap_or_else(|_| d.created_at.unix_timestamp().to_string()),
        config: body,
        options,
        inputs,
        outputs: config
            .outputs
            .iter()
            .map(|o| HeatOutput {
                name: o.name.clone(),
                kind: o.kind.clone(),
                error_output: o.error_output,
                description: o.description.clone(),
            })
            .collect(),
    }
}

fn string_input(name: &str, value: Value, description: Option<&str>) -> HeatInput {
    HeatInput {
        name: name.to_owned(),
        kind: "String".to_owned(),
        default: None,
        value,
        description: description.map(str::to_owned),
    }
}

/// Replaces every `{"get_input": NAME}` in `body` with that input's value (the config's
/// `substitute_inputs`, as the agent does); an unknown name is left as it is.
fn substitute(body: &mut Value, inputs: &[HeatInput]) {
    match body {
        Value::Object(map) => {
            if map.len() == 1
                && let Some(Value::String(name)) = map.get("get_input")
                && let Some(input) = inputs.iter().find(|i| &i.name == name)
            {
                *body = input.value.clone();
                return;
            }
            map.values_mut().for_each(|v| substitute(v, inputs));
        }
        Value::Array(items) => items.iter_mut().for_each(|v| substitute(v, inputs)),
        _ => {}
    }
}
