//! Taking a stack out of Flue and bringing it back, without running anything:
//! `GET /v1/stacks/{id}/export` reads its whole record ([`StackExport`]),
//! `POST /v1/stacks/{id}/abandon` forgets it (no hook runs, its servers keep what they
//! run), `POST /v1/stacks/{id}/adopt` recreates it from an export. `flue stack abandon`
//! is the first two, with the record written to a file (and synced) in between, so a
//! stack is only forgotten once its record is safe; `flue stack adopt` is the third.
//!
//! Hidden values leave only in export envelopes ([`flue_proto::stack_export`]): opened
//! from their at-rest seal and sealed again, together with the tenant, by the gateway to
//! itself. Adopting opens each one, refuses it unless it is the caller's tenant's, and
//! seals it again at rest. Everything an adopt takes is checked before the first write,
//! so a refused adopt writes nothing; the stack's record is written last, so an adopt
//! that stopped half-way is finished by running it again.

use std::collections::{BTreeMap, BTreeSet};

use data_encoding::BASE64;
use flue_proto::event::StackEventData;
use flue_proto::seal;
use flue_proto::stack_export::{Envelope, ExportedDeployment, STACK_EXPORT_FORMAT, StackExport};
use flue_proto::{
    CloudEvent, Config, ConfigId, ConfigSpec, DeploymentId, EventType, OpStatus, Stack, StackId,
    TenantId, subject,
};
use futures_util::{StreamExt, TryStreamExt};
use nkeys::XKey;
use serde_json::Value;
use time::OffsetDateTime;
use tracing::info;

use super::{StackError, Stacks};
use crate::operations::Operations;
use crate::record::DeploymentRecord;
use crate::sealing::{seal_at_rest, seal_config_defaults};
use crate::store::StackWrite;

/// Records read at once while exporting or checking.
const READS_IN_FLIGHT: usize = 16;

impl Stacks {
    /// The stack's whole record, the configs and deployments its units name, and its
    /// data space; hidden values in export envelopes.
    pub async fn export(&self, id: &StackId) -> Result<StackExport, StackError> {
        let tenant = &self.tenant;
        let stack = self
            .stacks
            .get(tenant, id)
            .await?
            .ok_or_else(|| not_found(id))?;
        let gateway = &self.sealing;
        let (deployment_ids, mut config_ids) = named_by(&stack);
        let deployments: Vec<DeploymentRecord> = futures_util::stream::iter(deployment_ids)
            .map(|d| {
                let deployments = &self.deployments;
                async move { deployments.get(tenant, &d).await }
            })
            .buffered(READS_IN_FLIGHT)
            .try_filter_map(|r| async move { Ok(r) })
            .try_collect()
            .await?;
        config_ids.extend(deployments.iter().map(|r| r.deployment.config_id.clone()));
        let configs: Vec<Config> = futures_util::stream::iter(config_ids)
            .map(|c| {
                let configs = &self.configs;
                async move { configs.get(tenant, &c).await }
            })
            .buffered(READS_IN_FLIGHT)
            .try_filter_map(|c| async move { Ok(c) })
            .try_collect()
            .await?;
        let mut export = StackExport {
            format: STACK_EXPORT_FORMAT.to_owned(),
            tenant: tenant.clone(),
            exported_at: OffsetDateTime::now_utc(),
            stack,
            configs: BTreeMap::new(),
            deployments: BTreeMap::new(),
            data: BTreeMap::new(),
        };
        for mut config in configs {
            for input in config.inputs.iter_mut().filter(|i| i.hidden) {
                if let Some(default) = &mut input.default {
                    *default = envelope(&input.name, default, tenant, gateway)?;
                }
            }
            export.configs.insert(config.id.clone(), config);
        }
        for record in deployments {
            let mut d = record.deployment;
            for name in &record.hidden_inputs {
                if let Some(v) = d.input_values.get_mut(name) {
                    *v = envelope(name, v, tenant, gateway)?;
                }
            }
            for name in &record.hidden_outputs {
                if let Some(v) = d.outputs.get_mut(name) {
                    *v = envelope(name, v, tenant, gateway)?;
                }
            }
            export.deployments.insert(
                d.id.clone(),
                ExportedDeployment {
                    deployment: d,
                    hidden_inputs: record.hidden_inputs,
                    hidden_outputs: record.hidden_outputs,
                },
            );
        }
        for (key, value) in self.data.of_stack(tenant, id).await? {
            export.data.insert(key, BASE64.encode(&value));
        }
        Ok(export)
    }

    /// Forgets the stack (if still at revision `expected`) without running any hook: its
    /// record, its units and its data space go, its servers lose the rights to its data keys
    /// and keep running what they run; reported as `stack.abandoned`. Refused while an
    /// operation is queued or running on it (`operations`), or while it is `…_IN_PROGRESS`.
    pub async fn abandon(
        &self,
        operations: &Operations,
        id: &StackId,
        expected: u64,
    ) -> Result<(), StackError> {
        let tenant = &self.tenant;
        let head = self
            .stacks
            .head(tenant, id)
            .await?
            .ok_or_else(|| not_found(id))?;
        if let Some(op) = operations
            .busy(id)
            .await
            .map_err(|e| StackError::Internal(crate::error::chain(&e)))?
        {
            return Err(StackError::Conflict(format!(
                "stack {:?} has operation {op} queued or running; abandon it once that ended",
                id.as_str()
            )));
        }
        if head.status.status == OpStatus::InProgress {
            return Err(StackError::Conflict(format!(
                "stack {:?} is {}: abandon it once that operation ended",
                id.as_str(),
                head.status
            )));
        }
        let stack = match self.stacks.delete(tenant, id, Some(expected)).await? {
            StackWrite::Written(written) => written.stack,
            StackWrite::Missing => return Err(not_found(id)),
            StackWrite::Mismatch { current } => {
                return Err(StackError::Mismatch {
                    stack: id.clone(),
                    current,
                    expected: Some(expected),
                    again: "export it again",
                });
            }
            StackWrite::Exists => return Err(StackError::Internal("unexpected answer".to_owned())),
        };
        let purged = self.data.purge_stack(tenant, id).await?;
        info!(stack.id = %id, units = stack.state.units.len(), data_keys_purged = purged, "stack abandoned");
        let servers = stack.state.units.values().map(|unit| &unit.server_id);
        self.rights.leave(id, servers).await;
        self.events
            .emit(&stack_event(tenant, &stack, EventType::StackAbandoned))
            .await;
        Ok(())
    }

    /// Recreates the stack from `export` without running anything: its configs and
    /// deployments where this gateway does not have them, its data space, then its record;
    /// reported as `stack.adopted`. Everything is checked before the first write, so a
    /// refused adopt writes nothing; the record is written last, so an adopt that stopped
    /// half-way is finished by running it again.
    pub async fn adopt(&self, id: &StackId, export: StackExport) -> Result<Stack, StackError> {
        let tenant = &self.tenant;
        if export.format != STACK_EXPORT_FORMAT {
            return Err(StackError::Refused(format!(
                "format: {:?} is not {STACK_EXPORT_FORMAT:?}",
                export.format
            )));
        }
        let StackExport {
            stack,
            configs,
            deployments,
            data,
            ..
        } = export;
        self.check_adoptable(id, &stack, &deployments).await?;
        let data = adopted_data(data)?;
        let in_record = (
            deployments.keys().cloned().collect(),
            configs.keys().cloned().collect(),
        );
        let new_configs = self.configs_to_adopt(configs).await?;
        let new_records = self.deployments_to_adopt(id, deployments).await?;
        self.check_named(&stack, &in_record, &new_records).await?;
        for record in &new_records {
            self.broker.fits_json("deployment record", record)?;
        }
        self.broker.fits_json("stack record", &stack)?;

        // Checked: now the writes, the stack's record last.
        for config in &new_configs {
            self.configs.create(tenant, config).await?;
        }
        for record in &new_records {
            self.deployments.create(record).await?;
        }
        for (key, value) in data {
            self.data.put(tenant, id, &key, value).await?;
        }
        let now = OffsetDateTime::now_utc();
        let new = Stack {
            tenant: tenant.clone(),
            revision: 0,
            updated_at: now,
            ..stack
        };
        let stack = match self.stacks.create(&new).await? {
            StackWrite::Written(written) => written.stack,
            StackWrite::Exists => return Err(StackError::Exists(id.clone())),
            _ => return Err(StackError::Internal("unexpected answer".to_owned())),
        };
        info!(
            stack.id = %id,
            units = stack.state.units.len(),
            configs_created = new_configs.len(),
            deployments_created = new_records.len(),
            "stack adopted"
        );
        self.events
            .emit(&stack_event(tenant, &stack, EventType::StackAdopted))
            .await;
        Ok(stack)
    }

    /// The stack of an adopt's record can be adopted here: it is stack `id`, not here
    /// yet, between operations, and every server it (or a deployment of the record)
    /// names is registered here.
    async fn check_adoptable(
        &self,
        id: &StackId,
        stack: &Stack,
        deployments: &BTreeMap<DeploymentId, ExportedDeployment>,
    ) -> Result<(), StackError> {
        let tenant = &self.tenant;
        if &stack.id != id {
            return Err(StackError::Refused(format!(
                "stack.id: the record is of stack {:?}, not {:?} (a stack is adopted under its own name)",
                stack.id.as_str(),
                id.as_str()
            )));
        }
        if self.stacks.head(tenant, id).await?.is_some() {
            return Err(StackError::Exists(id.clone()));
        }
        if stack.status.status == OpStatus::InProgress
            || stack
                .state
                .operation
                .as_ref()
                .is_some_and(|o| o.finished_at.is_none())
        {
            return Err(StackError::Refused(format!(
                "stack.status: {} — a stack is adopted between operations",
                stack.status
            )));
        }
        // Every server the stack names must be registered here.
        let servers: BTreeSet<_> = stack
            .state
            .units
            .values()
            .map(|u| &u.server_id)
            .chain(deployments.values().map(|d| &d.deployment.server_id))
            .collect();
        for server in servers {
            if self.servers.get(tenant, server).await?.is_none() {
                return Err(StackError::Refused(format!(
                    "server {:?}: not registered in this tenant (register it first)",
                    server.as_str()
                )));
            }
        }
        for (key, unit) in &stack.state.units {
            if unit.pending.is_some() || unit.status == OpStatus::InProgress {
                return Err(StackError::Refused(format!(
                    "stack.state.units.{key}: a deployment is in flight; a stack is adopted between operations"
                )));
            }
        }
        Ok(())
    }

    /// The configs of an adopt's record that are not here yet, hidden defaults opened
    /// from their envelope, checked as a new config is, and sealed at rest; one already
    /// here must be the same.
    async fn configs_to_adopt(
        &self,
        configs: BTreeMap<ConfigId, Config>,
    ) -> Result<Vec<Config>, StackError> {
        let tenant = &self.tenant;
        let gateway = &self.sealing;
        let mut new_configs = Vec::new();
        for (cid, mut config) in configs {
            if config.id != cid {
                return Err(StackError::Refused(format!(
                    "configs.{cid}: holds config {:?}",
                    config.id.as_str()
                )));
            }
            for input in config.inputs.iter_mut().filter(|i| i.hidden) {
                if let Some(default) = &mut input.default {
                    let field = format!("configs.{cid}.inputs.{}.default", input.name);
                    *default = unwrap_envelope(&field, default, tenant, gateway)?;
                }
            }
            // Checked as a new config is, on the values in the clear, then sealed at rest.
            let created_at = config.created_at;
            let spec = ConfigSpec {
                id: Some(config.id.clone()),
                name: config.name,
                group: config.group,
                config: config.config,
                inputs: config.inputs,
                outputs: config.outputs,
                options: config.options,
                hooks: config.hooks,
                actions: config.actions,
                substitute_inputs: config.substitute_inputs,
            };
            spec.validate()
                .map_err(|e| StackError::Refused(format!("configs.{cid}: {e}")))?;
            let mut config = spec.into_config(cid.clone(), created_at);
            seal_config_defaults(&mut config, gateway)?;
            match self.configs.get(tenant, &cid).await? {
                Some(stored) if !same_config(&stored, &config) => {
                    return Err(StackError::Conflict(format!(
                        "config {:?} exists here with another content",
                        cid.as_str()
                    )));
                }
                Some(_) => {}
                None => new_configs.push(config),
            }
        }
        Ok(new_configs)
    }

    /// The deployment records of an adopt's record that are not here yet: ended ones of
    /// stack `id`, hidden values opened from their envelope and sealed at rest; one
    /// already here must be the same.
    async fn deployments_to_adopt(
        &self,
        id: &StackId,
        deployments: BTreeMap<DeploymentId, ExportedDeployment>,
    ) -> Result<Vec<DeploymentRecord>, StackError> {
        let tenant = &self.tenant;
        let gateway = &self.sealing;
        let mut new_records = Vec::new();
        for (did, exported) in deployments {
            let ExportedDeployment {
                deployment: mut d,
                hidden_inputs,
                hidden_outputs,
            } = exported;
            let at = format!("deployments.{did}");
            if d.id != did {
                return Err(StackError::Refused(format!(
                    "{at}: holds deployment {:?}",
                    d.id.as_str()
                )));
            }
            if d.stack_id.as_ref() != Some(id) {
                return Err(StackError::Refused(format!(
                    "{at}.stack_id: not a deployment of stack {:?}",
                    id.as_str()
                )));
            }
            if !d.status.is_terminal() {
                return Err(StackError::Refused(format!(
                    "{at}.status: {} — only ended deployments are adopted",
                    d.status
                )));
            }
            for name in &hidden_inputs {
                if let Some(v) = d.input_values.get_mut(name) {
                    *v = unwrap_envelope(&format!("{at}.input_values.{name}"), v, tenant, gateway)?;
                }
            }
            for name in &hidden_outputs {
                if let Some(v) = d.outputs.get_mut(name) {
                    *v = unwrap_envelope(&format!("{at}.outputs.{name}"), v, tenant, gateway)?;
                }
            }
            seal_at_rest(&mut d.input_values, &hidden_inputs, gateway)?;
            seal_at_rest(&mut d.outputs, &hidden_outputs, gateway)?;
            d.tenant = tenant.clone();
            match self.deployments.get(tenant, &did).await? {
                Some(stored) if !same_deployment(&stored, &d) => {
                    return Err(StackError::Conflict(format!(
                        "deployment {:?} exists here for another server, config, action or stack",
                        did.as_str()
                    )));
                }
                Some(_) => {}
                None => new_records.push(DeploymentRecord {
                    deployment: d,
                    request_published: true,
                    hidden_inputs,
                    hidden_outputs,
                    request_digest: None,
                    agent_jwt: None,
                    polled: false,
                    skipped: Default::default(),
                }),
            }
        }
        Ok(new_records)
    }

    /// What the units and deployments name must be in the record (`in_record`:
    /// deployments, configs) or here already: an update or delete reads them.
    async fn check_named(
        &self,
        stack: &Stack,
        in_record: &(BTreeSet<DeploymentId>, BTreeSet<ConfigId>),
        new_records: &[DeploymentRecord],
    ) -> Result<(), StackError> {
        let tenant = &self.tenant;
        let (named_deployments, mut named_configs) = named_by(stack);
        named_configs.extend(new_records.iter().map(|r| r.deployment.config_id.clone()));
        for did in named_deployments.difference(&in_record.0) {
            if self.deployments.get(tenant, did).await?.is_none() {
                return Err(StackError::Refused(format!(
                    "deployments: {:?}, named by the stack's units, is neither in the record nor here",
                    did.as_str()
                )));
            }
        }
        for cid in named_configs.difference(&in_record.1) {
            if self.configs.get(tenant, cid).await?.is_none() {
                return Err(StackError::Refused(format!(
                    "configs: {:?}, named by the stack, is neither in the record nor here",
                    cid.as_str()
                )));
            }
        }
        Ok(())
    }
}

/// An adopt's data space, each key checked and each value decoded.
fn adopted_data(data: BTreeMap<String, String>) -> Result<Vec<(String, bytes::Bytes)>, StackError> {
    for key in data.keys() {
        subject::validate_data_key(key)
            .map_err(|e| StackError::Refused(format!("data.{key}: {e}")))?;
    }
    data.into_iter()
        .map(|(key, text)| match BASE64.decode(text.as_bytes()) {
            Ok(value) => Ok((key, bytes::Bytes::from(value))),
            Err(_) => Err(StackError::Refused(format!("data.{key}: not base64"))),
        })
        .collect()
}

/// The deployments and configs a stack's units name.
fn named_by(stack: &Stack) -> (BTreeSet<DeploymentId>, BTreeSet<ConfigId>) {
    let mut deployments = BTreeSet::new();
    let mut configs = BTreeSet::new();
    for unit in stack.state.units.values() {
        deployments.extend(
            [&unit.baseline, &unit.last, &unit.current]
                .into_iter()
                .flatten()
                .cloned(),
        );
        configs.extend(
            [&unit.baseline_config, &unit.last_config]
                .into_iter()
                .flatten()
                .cloned(),
        );
        if let Some(pending) = &unit.pending {
            deployments.insert(pending.deployment_id.clone());
            configs.extend(pending.config_id.clone());
        }
    }
    for run in &stack.state.actions {
        deployments.extend(run.results.values().map(|r| r.deployment_id.clone()));
    }
    (deployments, configs)
}

/// A value sealed at rest, opened and sealed again with its tenant.
fn envelope(
    name: &str,
    value: &Value,
    tenant: &TenantId,
    gateway: &XKey,
) -> Result<Value, StackError> {
    let opened = seal::open(value, gateway, gateway).map_err(|_| {
        StackError::Conflict(format!(
            "stored hidden value {name:?} cannot be opened with the gateway's sealing key (was the state directory replaced?); it cannot be exported"
        ))
    })?;
    let plain = serde_json::to_value(Envelope {
        tenant: tenant.clone(),
        value: opened,
    })
    .map_err(|e| StackError::Internal(e.to_string()))?;
    seal::seal(&plain, gateway, gateway)
        .map_err(|_| StackError::Internal(format!("hidden value {name:?} cannot be sealed")))
}

/// An export envelope's value, opened, if it is `tenant`'s and was sealed by this
/// gateway; `field` names it in the refusal.
fn unwrap_envelope(
    field: &str,
    value: &Value,
    tenant: &TenantId,
    gateway: &XKey,
) -> Result<Value, StackError> {
    let opened = seal::open(value, gateway, gateway).map_err(|_| {
        StackError::Refused(format!(
            "{field}: this hidden value was not sealed by this gateway's key (exported from another Flue, or changed): it cannot be adopted here"
        ))
    })?;
    let envelope: Envelope = serde_json::from_value(opened)
        .map_err(|_| StackError::Refused(format!("{field}: not an export envelope")))?;
    if &envelope.tenant != tenant {
        return Err(StackError::Refused(format!(
            "{field}: this hidden value belongs to another tenant"
        )));
    }
    Ok(envelope.value)
}

/// Two configs are the same but for when they were stored and how hidden defaults are
/// sealed (each seal differs).
fn same_config(a: &Config, b: &Config) -> bool {
    let strip = |c: &Config| {
        let mut c = c.clone();
        c.created_at = OffsetDateTime::UNIX_EPOCH;
        for input in c.inputs.iter_mut().filter(|i| i.hidden) {
            input.default = input.default.as_ref().map(|_| Value::Null);
        }
        c
    };
    strip(a) == strip(b)
}

/// A deployment already here is the exported one: same server, config, action, stack.
fn same_deployment(stored: &DeploymentRecord, d: &flue_proto::Deployment) -> bool {
    let s = &stored.deployment;
    s.server_id == d.server_id
        && s.config_id == d.config_id
        && s.action == d.action
        && s.stack_id == d.stack_id
}

/// `stack.abandoned` / `stack.adopted`, named by the stack's revision at the time.
fn stack_event(tenant: &TenantId, stack: &Stack, ty: EventType) -> CloudEvent {
    let data = StackEventData {
        stack_id: stack.id.clone(),
        operation_id: stack
            .state
            .operation
            .as_ref()
            .map_or_else(String::new, |o| o.id.clone()),
        status: stack.status.to_string(),
        reason: stack.status.reason.clone(),
        unit: None,
        unit_status: None,
        deployment_id: None,
    };
    CloudEvent::new(
        ty,
        tenant,
        format!("stack:{}:{}:{}", stack.id, stack.revision, ty.name()),
        format!("stacks/{}", stack.id),
        &data,
    )
    .stack(Some(&stack.id))
}

fn not_found(id: &StackId) -> StackError {
    StackError::NotFound(id.clone())
}
