//! The record of a deployment just accepted, built in one place rather than as a wide
//! struct literal wherever a deployment is created.

use std::collections::BTreeMap;
use std::time::Duration;

use flue_proto::{
    Action, Config, Deployment, DeploymentId, DeploymentStatus, ServerId, StackId, TenantId,
};
use time::OffsetDateTime;

use super::{DeploymentRecord, hidden_outputs};

/// What a caller decides about a new deployment; everything else follows from the config
/// and the time of acceptance.
#[derive(Debug, Clone)]
pub struct NewDeployment {
    /// Its id (given by the client, or random).
    pub id: DeploymentId,
    /// Its name; the id when none is given.
    pub name: Option<String>,
    /// Its tenant.
    pub tenant: TenantId,
    /// The server that runs it.
    pub server_id: ServerId,
    /// What it does.
    pub action: Action,
    /// Its input values, resolved and with defaults, hidden ones sealed at rest.
    pub input_values: BTreeMap<String, serde_json::Value>,
    /// Names of its hidden inputs (declared, inherited or filled from a hidden output).
    pub hidden_inputs: Vec<String>,
    /// The stack it belongs to, if any.
    pub stack_id: Option<StackId>,
    /// Its resource's name in that stack.
    pub resource_name: Option<String>,
    /// Seconds it may take from acceptance.
    pub timeout_secs: u64,
}

impl DeploymentRecord {
    /// The record of `new`, a deployment of `config` accepted at `now`: QUEUED, its
    /// request not published yet, no request digest or agent JWT yet (both are set before
    /// it is stored), expiring `timeout_secs` after `now`.
    pub fn queued(new: NewDeployment, config: &Config, now: OffsetDateTime) -> Self {
        Self {
            deployment: Deployment {
                name: new.name.unwrap_or_else(|| new.id.to_string()),
                id: new.id,
                tenant: new.tenant,
                server_id: new.server_id,
                config_id: config.id.clone(),
                group: config.group.clone(),
                action: new.action,
                input_values: new.input_values,
                stack_id: new.stack_id,
                resource_name: new.resource_name,
                status: DeploymentStatus::Queued,
                status_reason: None,
                outputs: Default::default(),
                deploy_stdout: String::new(),
                deploy_stderr: String::new(),
                deploy_status_code: None,
                timeout_secs: new.timeout_secs,
                created_at: now,
                updated_at: now,
                delivered_at: None,
                started_at: None,
                finished_at: None,
                expires_at: now + Duration::from_secs(new.timeout_secs),
            },
            request_published: false,
            hidden_inputs: new.hidden_inputs,
            hidden_outputs: hidden_outputs(config),
            request_digest: None,
            agent_jwt: None,
            polled: false,
            skipped: Default::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::record::tests::{config, record};
    use crate::record::{hidden_inputs, with_defaults};

    #[test]
    fn a_queued_record_is_named_after_its_id_and_expires_its_timeout_after_acceptance() {
        let config = config();
        let new = NewDeployment {
            id: DeploymentId::new("d1").expect("id"),
            name: None,
            tenant: TenantId::new("t").expect("id"),
            server_id: ServerId::new("s1").expect("id"),
            action: Action::create(),
            input_values: with_defaults(&config, [("foo".into(), json!("given"))].into()),
            hidden_inputs: hidden_inputs(&config),
            stack_id: None,
            resource_name: None,
            timeout_secs: 60,
        };
        let queued = DeploymentRecord::queued(new, &config, OffsetDateTime::UNIX_EPOCH);
        assert_eq!(queued, record());
    }
}
