//! Records as the gateway stores them, for tests that write the broker's state directly
//! (a record an older gateway or a crash left behind).

use std::collections::BTreeMap;

use flue_proto::{
    Action, ConfigId, Deployment, DeploymentId, DeploymentStatus, ServerId, TenantId,
};
use time::OffsetDateTime;

/// A queued deployment `id` of tenant `default` on `server`, applying config `config`
/// (group `script`, no inputs), created now and expiring in an hour.
pub fn queued_deployment(id: &str, server: &str, config: &str) -> Deployment {
    let now = OffsetDateTime::now_utc();
    Deployment {
        id: DeploymentId::new(id).expect("id"),
        tenant: TenantId::new("default").expect("id"),
        server_id: ServerId::new(server).expect("id"),
        config_id: ConfigId::new(config).expect("id"),
        group: "script".into(),
        name: id.into(),
        action: Action::create(),
        input_values: BTreeMap::new(),
        stack_id: None,
        resource_name: None,
        status: DeploymentStatus::Queued,
        status_reason: None,
        outputs: BTreeMap::new(),
        deploy_stdout: String::new(),
        deploy_stderr: String::new(),
        deploy_status_code: None,
        timeout_secs: 3600,
        created_at: now,
        updated_at: now,
        delivered_at: None,
        started_at: None,
        finished_at: None,
        expires_at: now + time::Duration::hours(1),
    }
}
