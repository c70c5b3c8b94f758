//! The resources' dependency graph: who waits for whom, an order that respects it,
//! and the cycle that makes such an order impossible.

use std::collections::{BTreeMap, BTreeSet};

use super::functions;
use super::template::Template;

/// Each resource's direct dependencies: its `depends_on` names plus every resource
/// its properties reference through `get_resource` or `get_attr`.
pub fn dependencies(t: &Template) -> BTreeMap<String, BTreeSet<String>> {
    t.resources
        .iter()
        .map(|(name, r)| {
            let mut deps: BTreeSet<String> = r.depends_on.iter().cloned().collect();
            for value in r.properties.values() {
                deps.extend(functions::references(value));
            }
            (name.clone(), deps)
        })
        .collect()
}

/// The reverse graph: for each resource, the resources that depend on it directly.
pub fn dependents(deps: &BTreeMap<String, BTreeSet<String>>) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> =
        deps.keys().map(|k| (k.clone(), BTreeSet::new())).collect();
    for (name, ds) in deps {
        for d in ds {
            if let Some(set) = out.get_mut(d) {
                set.insert(name.clone());
            }
        }
    }
    out
}

/// Every key of `deps`, each after everything it depends on; among resources that are
/// ready together, alphabetical. Names that are not keys are ignored. On a cycle,
/// `Err` holds it, starting and ending with the same name: `[a, b, c, a]` reads
/// "a depends on b, b on c, c on a".
pub fn topological_order(
    deps: &BTreeMap<String, BTreeSet<String>>,
) -> Result<Vec<String>, Vec<String>> {
    let known = |d: &&String| deps.contains_key(*d);
    let mut waiting: BTreeMap<&str, usize> = deps
        .iter()
        .map(|(name, ds)| (name.as_str(), ds.iter().filter(known).count()))
        .collect();
    let reverse = dependents(deps);
    let mut ready: BTreeSet<&str> = waiting
        .iter()
        .filter(|(_, n)| **n == 0)
        .map(|(name, _)| *name)
        .collect();
    let mut order = Vec::with_capacity(deps.len());
    while let Some(name) = ready.pop_first() {
        waiting.remove(name);
        order.push(name.to_owned());
        for dependent in &reverse[name] {
            if let Some(n) = waiting.get_mut(dependent.as_str()) {
                *n -= 1;
                if *n == 0 {
                    ready.insert(dependent.as_str());
                }
            }
        }
    }
    if waiting.is_empty() {
        return Ok(order);
    }
    Err(find_cycle(deps, &waiting.keys().copied().collect()))
}

/// A cycle among `stuck`: every stuck resource still waits for another stuck one, so
/// following the first stuck dependency from any of them must come back round.
fn find_cycle(deps: &BTreeMap<String, BTreeSet<String>>, stuck: &BTreeSet<&str>) -> Vec<String> {
    let mut path: Vec<&str> = Vec::new();
    let mut current = stuck.first().copied();
    while let Some(name) = current {
        if let Some(start) = path.iter().position(|n| *n == name) {
            let mut cycle: Vec<&str> = path.split_off(start);
            // Start the cycle at its smallest name, so the same cycle always reads the same.
            let min = cycle
                .iter()
                .enumerate()
                .min_by_key(|(_, n)| **n)
                .map_or(0, |(i, _)| i);
            cycle.rotate_left(min);
            let first = cycle[0];
            cycle.push(first);
            return cycle.into_iter().map(str::to_owned).collect();
        }
        path.push(name);
        current = deps[name]
            .iter()
            .map(String::as_str)
            .find(|d| stuck.contains(d));
    }
    Vec::new()
}

#[cfg(test)]
mod tests;
