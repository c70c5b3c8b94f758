//! Units of Heat's utility resources: the members of an `OS::Heat::ResourceGroup` and
//! the keeper of each `OS::Heat::RandomString` a deployment takes.

use std::collections::{BTreeMap, BTreeSet};

use flue_proto::{ServerId, StackState};

use super::{DEFAULT_ACTIONS, DesiredUnit, Plan, StaticResolver, server_id};
use crate::functions;
use crate::template::{
    GroupDef, Resource, ResourceKind, Template, TemplateError, substitute_index,
};

/// A `ResourceGroup`'s members `0`…`count-1`, each on the server its definition names
/// once the index variable is replaced by its index.
pub(super) fn resource_group_members(
    name: &str,
    res: &Resource,
    group: &GroupDef,
    statics: &StaticResolver<'_>,
) -> Result<Vec<(String, ServerId)>, TemplateError> {
    let count_path = format!("resources.{name}.properties.count");
    let count = functions::resolve_visible(&group.count, statics, &count_path)?;
    let count = count
        .as_u64()
        .or_else(|| count.as_str().and_then(|s| s.trim().parse().ok()))
        .ok_or_else(|| TemplateError::new(&count_path, "must be a whole number, 0 or more"))?;
    let server_path = format!("resources.{name}.properties.resource_def.properties.server");
    let server = res
        .properties
        .get("server")
        .ok_or_else(|| TemplateError::new(&server_path, "required"))?;
    (0..count)
        .map(|i| {
            let index = i.to_string();
            let server = substitute_index(server, &group.index_var, &index);
            let at = format!("{server_path} (member {index})");
            let id = server_id(&functions::resolve_visible(&server, statics, &at)?, &at)?;
            Ok((index, id))
        })
        .collect()
}

/// A unit keeping each `OS::Heat::RandomString` that a deployment takes (see
/// [`super::random`]), on the first of those deployments' servers.
pub(super) fn add_keepers(
    template: &Template,
    plan: &mut Plan,
    keys_of: &mut BTreeMap<String, Vec<String>>,
) {
    for (name, res) in &template.resources {
        if res.kind != ResourceKind::RandomString {
            continue;
        }
        let server = plan
            .units
            .values()
            .filter(|u| {
                template.resources[&u.resource]
                    .properties
                    .get("input_values")
                    .is_some_and(|v| functions::references(v).contains(name))
            })
            .map(|u| u.server_id.clone())
            .min();
        let Some(server_id) = server else { continue };
        keys_of.insert(name.clone(), vec![name.clone()]);
        plan.units.insert(
            name.clone(),
            DesiredUnit {
                key: name.clone(),
                resource: name.clone(),
                member: None,
                server_id,
                actions: DEFAULT_ACTIONS.iter().map(|a| (*a).to_owned()).collect(),
                depends_on: BTreeSet::new(),
                batch: None,
            },
        );
    }
}

/// A value's keeper stays on the server it was kept on while that server is still in
/// the stack: moving it would make a new value.
pub fn keep_keepers_in_place(template: &Template, plan: &mut Plan, state: &StackState) {
    let servers: BTreeSet<ServerId> = plan.units.values().map(|u| u.server_id.clone()).collect();
    for unit in plan.units.values_mut() {
        if template.resources[&unit.resource].kind != ResourceKind::RandomString {
            continue;
        }
        if let Some(old) = state.units.get(&unit.key)
            && old.baseline.is_some()
            && servers.contains(&old.server_id)
        {
            unit.server_id = old.server_id.clone();
        }
    }
}
