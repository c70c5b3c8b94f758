//! Inputs that follow data: how the inputs a unit last applied compare with the
//! outputs they read, as the units they read stand now.
//!
//! A unit records which outputs of which deployments its inputs were made of
//! ([`flue_proto::Unit::inputs_read`]). Once one of those units has a newer completed
//! deployment (a converge re-ran it, say), the input may be stale: [`inputs_now`]
//! compares the output read then with the one there now and says, per input, what a
//! re-run would take instead. It needs no template, so a converge and `flue stack
//! check` can both use it. Hidden outputs are never compared here (no API read shows
//! them): a newer deployment counts as a change, and the gateway, which compares the
//! values themselves (`skip_if_unchanged_from`), runs nothing when none changed.

use std::collections::{BTreeMap, HashMap};

use flue_proto::{
    Deployment, DeploymentId, InputMade, InputSource, OutputRead, OutputRef, StackState,
};
use serde_json::Value;

use crate::resolve::{deployment_attr, deployment_view, follow};
use flue_client::{Client, ClientError};

/// Deployments read so far, by id (`None`: not found).
pub type Fetched = HashMap<DeploymentId, Option<Deployment>>;

/// A unit's inputs as the outputs they read stand now.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Inputs {
    /// Inputs whose value is an output that changed: the new value, by input name.
    pub values: BTreeMap<String, Value>,
    /// Inputs whose value is a hidden output of a unit with a newer deployment: that
    /// deployment's output, for the gateway to hand on.
    pub refs: BTreeMap<String, OutputRef>,
    /// What the unit has read once it runs with `values` and `refs` (the inputs in
    /// `stuck` as they were).
    pub reads: BTreeMap<String, InputSource>,
    /// The inputs that changed, each as `input (unit.output)`.
    pub changed: Vec<String>,
    /// Inputs an expression of the template made of outputs that changed: only
    /// `flue stack update` makes them again. Each as `input (unit.output)`.
    pub stuck: Vec<String>,
}

impl Inputs {
    /// True when no input read an output that changed.
    pub fn is_current(&self) -> bool {
        self.changed.is_empty() && self.stuck.is_empty()
    }
}

/// The inputs of unit `key` of `state` against the outputs they read as those units
/// stand now (each unit's baseline). `fetched` caches the deployments read.
pub async fn inputs_now(
    client: &Client,
    state: &StackState,
    key: &str,
    fetched: &mut Fetched,
) -> Result<Inputs, ClientError> {
    let mut out = Inputs::default();
    let Some(unit) = state.units.get(key) else {
        return Ok(out);
    };
    for (name, source) in &unit.inputs_read {
        let mut reads = Vec::with_capacity(source.reads.len());
        let mut moved: Vec<&OutputRead> = Vec::new();
        for read in &source.reads {
            let now = state.units.get(&read.unit).and_then(|u| u.baseline.clone());
            match now {
                Some(now) if now != read.deployment_id => {
                    let changed = match &source.made {
                        InputMade::Hidden => true,
                        InputMade::Output { path } => {
                            differs(client, fetched, read, &now, path).await?
                        }
                        InputMade::Expression => differs(client, fetched, read, &now, &[]).await?,
                    };
                    if changed {
                        moved.push(read);
                    }
                    reads.push(OutputRead {
                        deployment_id: now,
                        ..read.clone()
                    });
                }
                // Never completed, gone, or the same deployment: nothing newer to read.
                _ => reads.push(read.clone()),
            }
        }
        if moved.is_empty() {
            out.reads.insert(
                name.clone(),
                InputSource {
                    reads,
                    made: source.made.clone(),
                },
            );
            continue;
        }
        let what = format!("{name} ({})", described(&moved));
        match &source.made {
            InputMade::Output { path } => {
                let read = &reads[0];
                let value = value_of(client, fetched, read, path)
                    .await?
                    .unwrap_or(Value::Null);
                out.values.insert(name.clone(), value);
            }
            InputMade::Hidden => {
                let read = &reads[0];
                out.refs.insert(
                    name.clone(),
                    OutputRef {
                        deployment_id: read.deployment_id.clone(),
                        output: read.output.clone().unwrap_or_default(),
                    },
                );
            }
            InputMade::Expression => {
                out.stuck.push(what);
                out.reads.insert(name.clone(), source.clone());
                continue;
            }
        }
        out.changed.push(what);
        out.reads.insert(
            name.clone(),
            InputSource {
                reads,
                made: source.made.clone(),
            },
        );
    }
    Ok(out)
}

/// `unit.output, …` of `reads`.
fn described(reads: &[&OutputRead]) -> String {
    let names: Vec<String> = reads
        .iter()
        .map(|r| match &r.output {
            Some(o) => format!("{}.{o}", r.unit),
            None => r.unit.clone(),
        })
        .collect();
    names.join(", ")
}

/// True when `read`'s output (at `path`) differs in deployment `now` of the same unit,
/// or either deployment cannot be read any more.
async fn differs(
    client: &Client,
    fetched: &mut Fetched,
    read: &OutputRead,
    now: &DeploymentId,
    path: &[Value],
) -> Result<bool, ClientError> {
    let then = value_of(client, fetched, read, path).await?;
    let now = OutputRead {
        deployment_id: now.clone(),
        ..read.clone()
    };
    let now = value_of(client, fetched, &now, path).await?;
    Ok(then.is_none() || then != now)
}

/// The output `read` names in its deployment, at `path`; `None` when the deployment is
/// gone.
async fn value_of(
    client: &Client,
    fetched: &mut Fetched,
    read: &OutputRead,
    path: &[Value],
) -> Result<Option<Value>, ClientError> {
    let id = &read.deployment_id;
    if !fetched.contains_key(id) {
        let d = match client.get_deployment(id).await {
            Ok(d) => Some(d),
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(e),
        };
        fetched.insert(id.clone(), d);
    }
    let Some(d) = &fetched[id] else {
        return Ok(None);
    };
    let value = match &read.output {
        Some(output) => deployment_attr(d, output),
        None => deployment_view(d),
    };
    Ok(Some(follow(value, path)))
}
