//! Keeping a finished deployment's record within one broker message.
//!
//! The agent fits its result into one message, and the gateway refuses at accept time a
//! record that would not fit; but a record holds both the input values and the result,
//! so together they may not. Rather than fail to store the result (and retry it
//! forever), the gateway shortens `deploy_stdout` and `deploy_stderr` the way the agent
//! does, and if the rest alone is too large, drops the outputs and fails the deployment.

use flue_proto::DeploymentStatus;
use flue_proto::output::{TRUNCATED_MARKER, json_len, shorten_streams};

use crate::record::DeploymentRecord;

/// Shortens `record`'s streams until its JSON takes at most `limit` bytes, sharing the
/// room fairly (a short stream is kept whole); when that is not enough, drops its
/// outputs and fails it, saying why. Input values are never touched.
pub fn fit_record(record: &mut DeploymentRecord, limit: usize) {
    let size = |r: &DeploymentRecord| serde_json::to_vec(r).map_or(usize::MAX, |b| b.len());
    // One pass is exact; the next ones only run after the outputs were dropped.
    for _ in 0..3 {
        let len = size(record);
        if len <= limit {
            return;
        }
        let d = &mut record.deployment;
        let room =
            (json_len(&d.deploy_stdout) + json_len(&d.deploy_stderr)).saturating_sub(len - limit);
        if room < 4 * json_len(TRUNCATED_MARKER) {
            d.outputs.clear();
            d.deploy_stdout.clear();
            d.deploy_stderr.clear();
            d.status = DeploymentStatus::Failed;
            d.status_reason = Some(format!(
                "the result and the input values take {len} bytes together, more than a deployment record may ({limit} bytes)"
            ));
            continue;
        }
        shorten_streams(&mut d.deploy_stdout, &mut d.deploy_stderr, room);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use flue_proto::{Action, ConfigId, Deployment, DeploymentId, ServerId, TenantId};
    use serde_json::json;
    use time::OffsetDateTime;

    use super::*;

    fn record(input: usize, stdout: usize, stderr: usize) -> DeploymentRecord {
        let t = OffsetDateTime::UNIX_EPOCH;
        DeploymentRecord {
            deployment: Deployment {
                id: DeploymentId::new("d1").expect("id"),
                tenant: TenantId::new("t").expect("id"),
                server_id: ServerId::new("s").expect("id"),
                config_id: ConfigId::new("c").expect("id"),
                group: "script".into(),
                name: "d1".into(),
                action: Action::create(),
                input_values: BTreeMap::from([("a".to_owned(), json!("i".repeat(input)))]),
                stack_id: None,
                resource_name: None,
                status: DeploymentStatus::Complete,
                status_reason: None,
                outputs: BTreeMap::from([("o".to_owned(), json!("v"))]),
                deploy_stdout: "o".repeat(stdout),
                deploy_stderr: "\u{1}".repeat(stderr),
                deploy_status_code: Some(0),
                timeout_secs: 60,
                created_at: t,
                updated_at: t,
                delivered_at: None,
                started_at: None,
                finished_at: Some(t),
                expires_at: t,
            },
            request_published: true,
            hidden_inputs: Vec::new(),
            hidden_outputs: Vec::new(),
            request_digest: None,
            agent_jwt: None,
            polled: false,
            skipped: Default::default(),
        }
    }

    fn len(r: &DeploymentRecord) -> usize {
        serde_json::to_vec(r).expect("ser").len()
    }

    #[test]
    fn a_record_that_fits_is_left_alone() {
        let r = record(10, 10, 10);
        let mut fitted = r.clone();
        fit_record(&mut fitted, 10_000);
        assert_eq!(fitted, r);
    }

    #[test]
    fn streams_are_shortened_until_the_record_fits_and_inputs_stay_whole() {
        let limit = 1 << 20;
        let mut r = record(500_000, 900_000, 100);
        fit_record(&mut r, limit);
        assert!(len(&r) <= limit && len(&r) > limit - 64, "{}", len(&r));
        assert_eq!(r.deployment.status, DeploymentStatus::Complete);
        assert!(r.deployment.deploy_stdout.ends_with(TRUNCATED_MARKER));
        assert_eq!(
            r.deployment.deploy_stderr,
            "\u{1}".repeat(100),
            "short stream kept"
        );
        assert_eq!(r.deployment.input_values["a"], json!("i".repeat(500_000)));
        assert_eq!(r.deployment.outputs["o"], json!("v"));
    }

    #[test]
    fn a_record_too_large_without_its_streams_fails_without_outputs() {
        let mut r = record(5_000, 10, 10);
        r.deployment
            .outputs
            .insert("big".into(), json!("x".repeat(5_000)));
        fit_record(&mut r, 7_000);
        assert!(len(&r) <= 7_000, "{}", len(&r));
        assert_eq!(r.deployment.status, DeploymentStatus::Failed);
        assert!(r.deployment.outputs.is_empty());
        let reason = r.deployment.status_reason.clone().unwrap_or_default();
        assert!(reason.contains("7000 bytes"), "{reason}");
    }
}
