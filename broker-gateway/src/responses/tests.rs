//! Unit tests of the response consumer: subjects, and when a message is reported.

use super::*;

#[test]
fn parses_only_response_subjects() {
    let (t, s) = parse_subject("flue.acme.resp.web-1").expect("valid");
    assert_eq!((t.as_str(), s.as_str()), ("acme", "web-1"));
    for bad in [
        "flue.acme.req.web1",
        "flue.acme.resp",
        "flue.acme.resp.a.b",
        "x.acme.resp.w",
    ] {
        assert!(parse_subject(bad).is_none(), "{bad}");
    }
}

#[test]
fn a_message_is_reported_when_the_record_shows_this_copy_of_it() {
    use flue_proto::{DeploymentResult, DeploymentStatus, PROTOCOL_VERSION};
    let t0 = OffsetDateTime::UNIX_EPOCH;
    let at = |s: i64| t0 + time::Duration::seconds(s);
    let mut d: Deployment = serde_json::from_value(serde_json::json!({
        "id": "d1", "tenant": "t", "server_id": "s1", "config_id": "c1", "group": "script",
        "name": "d1", "action": "CREATE", "status": "QUEUED", "timeout_secs": 60,
        "created_at": "1970-01-01T00:00:00Z", "updated_at": "1970-01-01T00:00:00Z",
        "expires_at": "1970-01-01T00:01:00Z"
    }))
    .expect("deployment");
    let id = d.id.clone();
    let delivered = |s| AgentMessage::Delivered {
        v: PROTOCOL_VERSION,
        deployment_id: id.clone(),
        at: at(s),
        request_digest: None,
    };
    let started = AgentMessage::Started {
        v: PROTOCOL_VERSION,
        deployment_id: id.clone(),
        at: at(2),
        request_digest: None,
    };
    let result = DeploymentResult {
        status: DeploymentStatus::Complete,
        status_reason: None,
        outputs: Default::default(),
        deploy_stdout: String::new(),
        deploy_stderr: String::new(),
        deploy_status_code: Some(0),
        started_at: Some(at(2)),
        finished_at: at(3),
    };
    let finished = AgentMessage::Finished {
        v: PROTOCOL_VERSION,
        deployment_id: id.clone(),
        result: result.clone(),
        request_digest: None,
    };
    let mine = true;
    assert_eq!(reported(&delivered(1), &d, mine), None);
    d.delivered_at = Some(at(1));
    assert_eq!(
        reported(&delivered(1), &d, mine),
        Some(EventType::DeploymentDelivered)
    );
    assert_eq!(reported(&delivered(9), &d, mine), None, "sent again later");
    assert_eq!(reported(&started, &d, mine), None);
    d.started_at = Some(at(2));
    assert_eq!(
        reported(&started, &d, mine),
        Some(EventType::DeploymentStarted)
    );
    assert_eq!(
        reported(&delivered(1), &d, mine),
        None,
        "redelivered once the deployment started: it would come after `started`"
    );
    assert_eq!(reported(&finished, &d, mine), None);
    d.status = DeploymentStatus::Failed;
    d.status_reason = Some(crate::record::TIMED_OUT.into());
    d.finished_at = Some(at(4));
    assert_eq!(
        reported(&finished, &d, mine),
        None,
        "the gateway timed it out"
    );
    d.status = DeploymentStatus::Complete;
    d.status_reason = None;
    d.finished_at = Some(at(3));
    assert_eq!(
        reported(&finished, &d, mine),
        Some(EventType::DeploymentCompleted)
    );
    assert_eq!(
        reported(&started, &d, mine),
        None,
        "redelivered once the deployment ended: it would come after `completed`"
    );
    assert_eq!(
        reported(&finished, &d, false),
        None,
        "a copy the agent sent again (its first copy is reported)"
    );
}
