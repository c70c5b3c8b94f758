//! A new deployment's input values: given, inherited (`inputs_from`), taken from other
//! deployments' outputs (`input_refs`) or defaulted; which of them are hidden; all checked
//! as the hook will get them, and the hidden ones sealed at rest.
//!
//! Pure apart from the gateway's sealing key: the referenced deployments are read by the
//! caller.

use std::collections::{BTreeMap, BTreeSet};

use flue_proto::heat::{self, InputType};
use flue_proto::limits::check_input_values;
use flue_proto::{Config, DeploymentStatus, OutputRef, seal};
use nkeys::XKey;
use serde_json::Value;

use super::AcceptError;
use crate::record::{DeploymentRecord, hidden_inputs, hidden_union, with_defaults};
use crate::sealing::{opened_values, seal_at_rest};

/// Where a new deployment's values come from, the referenced deployments read already.
pub struct Sources<'a> {
    /// Its config.
    pub config: &'a Config,
    /// The body's `input_values`.
    pub given: BTreeMap<String, Value>,
    /// The `inputs_from` deployment.
    pub inputs_from: Option<DeploymentRecord>,
    /// Each `input_refs` entry: the input it fills, the output it names, and that
    /// output's deployment.
    pub refs: Vec<(&'a String, &'a OutputRef, DeploymentRecord)>,
}

/// A new deployment's input values as they are stored (hidden ones sealed to the
/// gateway), and the names of its hidden inputs.
#[derive(Debug)]
pub struct Resolved {
    /// Every value, defaults included.
    pub values: BTreeMap<String, Value>,
    /// The hidden inputs' names.
    pub hidden: Vec<String>,
}

/// Resolves the values of `sources`; refused (422 naming the field, never the value)
/// when a referenced output's deployment is not COMPLETE, or when a value breaks a
/// limit or is not its declared type.
pub fn resolve(sources: Sources<'_>, gateway: &XKey) -> Result<Resolved, AcceptError> {
    let Sources {
        config,
        given: given_values,
        inputs_from,
        refs,
    } = sources;
    // Where each input value came from, to name it when it breaks a limit.
    let given: BTreeSet<String> = given_values.keys().cloned().collect();
    let referenced: BTreeSet<String> = refs.iter().map(|(name, ..)| (*name).clone()).collect();
    let mut inherited = BTreeSet::new();
    // Inputs whose value is a hidden value the gateway stored, hence already sealed to it;
    // every other hidden value is sealed below, before anything is stored.
    let mut sealed_at_rest = BTreeSet::new();
    let (mut values, mut hidden) = match inputs_from {
        Some(from) => {
            let mut values = from.deployment.input_values;
            inherited.extend(values.keys().cloned());
            sealed_at_rest.extend(
                from.hidden_inputs
                    .iter()
                    .filter(|name| values.contains_key(*name) && !given.contains(*name))
                    .cloned(),
            );
            values.extend(given_values);
            (
                values,
                hidden_union(hidden_inputs(config), &from.hidden_inputs),
            )
        }
        None => (given_values, hidden_inputs(config)),
    };
    // Outputs of other deployments, hidden ones included, resolved here so that no
    // client ever reads them; the inputs they fill are hidden in turn.
    for (name, output, from) in refs {
        if from.deployment.status != DeploymentStatus::Complete {
            return Err(AcceptError::Invalid(format!(
                "input_refs.{name}: deployment {:?} is {}, not COMPLETE",
                output.deployment_id.as_str(),
                from.deployment.status
            )));
        }
        let value = from
            .deployment
            .outputs
            .get(&output.output)
            .cloned()
            .unwrap_or(Value::Null);
        if from.hidden_outputs.contains(&output.output)
            && from.deployment.outputs.contains_key(&output.output)
        {
            sealed_at_rest.insert(name.clone());
        } else {
            sealed_at_rest.remove(name);
        }
        values.insert(name.clone(), value);
        if !hidden.contains(name) {
            hidden.push(name.clone());
        }
    }
    // Hidden defaults were sealed when the config was stored (those of older configs
    // were not: they are sealed now like a given value).
    sealed_at_rest.extend(
        config
            .inputs
            .iter()
            .filter(|i| i.hidden && !values.contains_key(&i.name))
            .filter(|i| i.default.as_ref().is_some_and(seal::is_sealed))
            .map(|i| i.name.clone()),
    );
    let mut input_values = with_defaults(config, values);
    // The limits are about what the hook gets: carried hidden values are checked opened.
    let opened = opened_values(&input_values, &sealed_at_rest, gateway)?;
    let field = |name: &str| {
        if referenced.contains(name) {
            format!("input_refs.{name}")
        } else if given.contains(name) {
            format!("input_values.{name}")
        } else if inherited.contains(name) {
            format!("inputs_from.{name}")
        } else {
            let i = config.inputs.iter().position(|i| i.name == name);
            format!("inputs[{}].default", i.unwrap_or_default())
        }
    };
    let as_hook_gets = as_declared(config, &opened, field)?;
    check_input_values(&config.group, &as_hook_gets, field)?;
    let fresh: Vec<String> = hidden
        .iter()
        .filter(|name| !sealed_at_rest.contains(*name))
        .cloned()
        .collect();
    seal_at_rest(&mut input_values, &fresh, gateway)?;
    Ok(Resolved {
        values: input_values,
        hidden,
    })
}

/// The values as the agent hands them to the hook (`flue_proto::heat`): each read as its
/// declared type (an undeclared one is a `String`), then a `String`'s made text. A value
/// that cannot be its declared type is refused (naming the field, never the value, which
/// may be hidden), as Heat refuses a parameter that is not its type.
fn as_declared(
    config: &Config,
    values: &BTreeMap<String, Value>,
    field: impl Fn(&str) -> String,
) -> Result<BTreeMap<String, Value>, AcceptError> {
    values
        .iter()
        .map(|(name, value)| {
            let kind = config
                .inputs
                .iter()
                .find(|i| &i.name == name)
                .map_or(InputType::String, |i| InputType::parse(&i.kind));
            let typed = heat::typed(kind, value)
                .map_err(|e| AcceptError::Invalid(e.at(field(name)).to_string()))?;
            Ok((name.clone(), heat::dispatched(kind, typed)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use flue_proto::{ConfigId, ConfigSpec, DeploymentId};
    use serde_json::json;
    use time::OffsetDateTime;

    use super::*;
    use crate::record::tests::{config, record};

    fn typed_config() -> Config {
        let spec: ConfigSpec = serde_json::from_value(json!({
            "group": "script",
            "inputs": [{"name": "n", "type": "Number"}]
        }))
        .expect("spec");
        spec.into_config(ConfigId::new("c2").expect("id"), OffsetDateTime::UNIX_EPOCH)
    }

    fn given(pairs: &[(&str, Value)]) -> BTreeMap<String, Value> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }

    fn refused(e: AcceptError) -> String {
        match e {
            AcceptError::Invalid(text) => text,
            other => panic!("expected a refusal naming a field, got {other:?}"),
        }
    }

    #[test]
    fn a_given_value_overrides_a_default_and_a_hidden_one_is_stored_sealed() {
        let gateway = XKey::new();
        let config = config();
        let sources = Sources {
            config: &config,
            given: given(&[("foo", json!("mine")), ("secret", json!("x"))]),
            inputs_from: None,
            refs: Vec::new(),
        };
        let resolved = resolve(sources, &gateway).expect("resolved");
        assert_eq!(resolved.values["foo"], json!("mine"));
        assert_eq!(resolved.hidden, vec!["secret".to_owned()]);
        assert!(seal::is_sealed(&resolved.values["secret"]));
        let opened = opened_values(&resolved.values, &resolved.hidden, &gateway).expect("opens");
        assert_eq!(opened["secret"], json!("x"));
    }

    #[test]
    fn a_value_that_is_not_its_declared_type_is_refused_naming_the_field_never_the_value() {
        let config = typed_config();
        let sources = Sources {
            config: &config,
            given: given(&[("n", json!("not-a-number-s3cret"))]),
            inputs_from: None,
            refs: Vec::new(),
        };
        let text = refused(resolve(sources, &XKey::new()).expect_err("refused"));
        assert!(text.contains("input_values.n"), "{text}");
        assert!(!text.contains("s3cret"), "{text}");
    }

    #[test]
    fn an_inherited_value_is_named_as_inherited_when_refused() {
        let config = typed_config();
        let mut from = record();
        from.deployment.input_values = given(&[("n", json!("abc"))]);
        from.hidden_inputs.clear();
        let sources = Sources {
            config: &config,
            given: BTreeMap::new(),
            inputs_from: Some(from),
            refs: Vec::new(),
        };
        let text = refused(resolve(sources, &XKey::new()).expect_err("refused"));
        assert!(text.contains("inputs_from.n"), "{text}");
    }

    #[test]
    fn an_output_of_a_deployment_that_did_not_complete_is_refused() {
        let config = config();
        let (name, output) = (
            "x".to_owned(),
            OutputRef {
                deployment_id: DeploymentId::new("d1").expect("id"),
                output: "out".to_owned(),
            },
        );
        let sources = Sources {
            config: &config,
            given: BTreeMap::new(),
            inputs_from: None,
            refs: vec![(&name, &output, record())],
        };
        let text = refused(resolve(sources, &XKey::new()).expect_err("refused"));
        assert!(text.contains("input_refs.x"), "{text}");
        assert!(text.contains("not COMPLETE"), "{text}");
    }

    #[test]
    fn a_referenced_output_fills_its_input_as_a_hidden_value() {
        let gateway = XKey::new();
        let config = config();
        let mut from = record();
        from.deployment.status = DeploymentStatus::Complete;
        from.deployment.outputs = given(&[("out", json!(5))]);
        let (name, output) = (
            "x".to_owned(),
            OutputRef {
                deployment_id: from.deployment.id.clone(),
                output: "out".to_owned(),
            },
        );
        let sources = Sources {
            config: &config,
            given: BTreeMap::new(),
            inputs_from: None,
            refs: vec![(&name, &output, from)],
        };
        let resolved = resolve(sources, &gateway).expect("resolved");
        assert!(resolved.hidden.contains(&name));
        assert!(seal::is_sealed(&resolved.values["x"]));
        let opened = opened_values(&resolved.values, &resolved.hidden, &gateway).expect("opens");
        assert_eq!(opened["x"], json!(5));
    }
}
