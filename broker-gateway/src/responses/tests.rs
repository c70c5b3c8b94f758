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

/// [`apply_answer`] on an in-memory store ([`crate::store::Store::in_memory`]).
mod applying {
    use flue_proto::digest::RequestDigest;
    use flue_proto::{DeploymentResult, DeploymentStatus, PROTOCOL_VERSION};

    use super::*;
    use crate::record::tests::record;
    use crate::store::Store;

    const LIMIT: usize = 1 << 20;

    fn at(s: i64) -> OffsetDateTime {
        OffsetDateTime::UNIX_EPOCH + time::Duration::seconds(s)
    }

    fn digest() -> RequestDigest {
        RequestDigest::of(b"the request")
    }

    fn started(digest: Option<RequestDigest>) -> AgentMessage {
        AgentMessage::Started {
            v: PROTOCOL_VERSION,
            deployment_id: DeploymentId::new("d1").expect("id"),
            at: at(2),
            request_digest: digest,
        }
    }

    fn finished(status: DeploymentStatus) -> AgentMessage {
        AgentMessage::Finished {
            v: PROTOCOL_VERSION,
            deployment_id: DeploymentId::new("d1").expect("id"),
            result: DeploymentResult {
                status,
                status_reason: None,
                outputs: [("out".to_owned(), serde_json::json!("x"))].into(),
                deploy_stdout: "done".into(),
                deploy_stderr: String::new(),
                deploy_status_code: Some(0),
                started_at: Some(at(2)),
                finished_at: at(3),
            },
            request_digest: Some(digest()),
        }
    }

    /// A store holding [`record`] (QUEUED on `s1`, its request's digest [`digest`]).
    async fn store() -> Store {
        let store = Store::in_memory();
        let mut r = record();
        r.request_digest = Some(digest());
        assert!(store.deployments.create(&r).await.expect("store"));
        store
    }

    async fn apply(store: &Store, server: &str, message: &AgentMessage) -> Applied {
        apply_together(store, server, &[message]).await
    }

    /// [`apply_answers`] of `messages` together, as one pull's answers of a deployment.
    async fn apply_together(store: &Store, server: &str, messages: &[&AgentMessage]) -> Applied {
        let (t, s) = (
            TenantId::new("t").expect("id"),
            ServerId::new(server).expect("id"),
        );
        let id = DeploymentId::new("d1").expect("id");
        let none = BTreeSet::new();
        let answers: Vec<_> = messages.iter().map(|m| (*m, &none)).collect();
        apply_answers(&store.deployments, (&t, &s), &id, &answers, LIMIT, at(10))
            .await
            .expect("applied")
    }

    async fn stored(store: &Store) -> crate::record::DeploymentRecord {
        let (t, id) = (
            TenantId::new("t").expect("id"),
            DeploymentId::new("d1").expect("id"),
        );
        store
            .deployments
            .get(&t, &id)
            .await
            .expect("store")
            .expect("record")
    }

    #[tokio::test]
    async fn started_then_finished_move_the_record_forward_once_each() {
        let store = store().await;
        let Applied::Done(u, _) = apply(&store, "s1", &started(Some(digest()))).await else {
            panic!("not applied");
        };
        assert!(u.changed);
        assert_eq!(u.record.deployment.status, DeploymentStatus::InProgress);
        assert_eq!(stored(&store).await.deployment.started_at, Some(at(2)));
        let Applied::Done(u, _) = apply(&store, "s1", &finished(DeploymentStatus::Complete)).await
        else {
            panic!("not applied");
        };
        assert!(u.changed);
        let d = stored(&store).await.deployment;
        assert_eq!(d.status, DeploymentStatus::Complete);
        assert_eq!(d.deploy_stdout, "done");
        assert_eq!(d.outputs.get("out"), Some(&serde_json::json!("x")));
        // Terminal: off the pending index.
        let t = TenantId::new("t").expect("id");
        assert!(
            store
                .deployments
                .pending_ids(&t)
                .await
                .expect("store")
                .is_empty()
        );
        // The same answer again (a redelivery) changes nothing, nor does a late `started`.
        for again in [
            finished(DeploymentStatus::Complete),
            started(Some(digest())),
        ] {
            let Applied::Done(u, _) = apply(&store, "s1", &again).await else {
                panic!("not applied");
            };
            assert!(!u.changed);
            assert_eq!(u.record.deployment.status, DeploymentStatus::Complete);
        }
    }

    fn delivered() -> AgentMessage {
        AgentMessage::Delivered {
            v: PROTOCOL_VERSION,
            deployment_id: DeploymentId::new("d1").expect("id"),
            at: at(1),
            request_digest: Some(digest()),
        }
    }

    /// The steps `messages`, applied in turn to a fresh record, skipped, each as
    /// `Skipped::events` lists them.
    async fn skipped_by(messages: &[AgentMessage]) -> Vec<Vec<EventType>> {
        let store = store().await;
        let mut all = Vec::new();
        for message in messages {
            let Applied::Done(_, steps) = apply(&store, "s1", message).await else {
                panic!("not applied");
            };
            let [Step::Applied { changed, record }] = &steps[..] else {
                panic!("one step: {steps:?}");
            };
            all.push(match changed {
                true => record.skipped.events().collect(),
                false => Vec::new(),
            });
        }
        all
    }

    #[tokio::test]
    async fn an_answer_that_comes_before_the_steps_it_follows_names_them_in_order_once() {
        use EventType::{DeploymentDelivered as D, DeploymentStarted as S};
        let done = finished(DeploymentStatus::Complete);
        // In order: nothing skipped.
        assert_eq!(
            skipped_by(&[delivered(), started(Some(digest())), done.clone()]).await,
            [vec![], vec![], vec![]]
        );
        // The result first: both steps, then the late ones change nothing.
        assert_eq!(
            skipped_by(&[done.clone(), delivered(), started(Some(digest()))]).await,
            [vec![D, S], vec![], vec![]]
        );
        // `started` before `delivered`: `delivered` once, not again with the result.
        assert_eq!(
            skipped_by(&[started(Some(digest())), done.clone(), delivered()]).await,
            [vec![D], vec![], vec![]]
        );
        // `delivered`, then the result: only `started`.
        assert_eq!(
            skipped_by(&[delivered(), done.clone()]).await,
            [vec![], vec![S]]
        );
        // A result whose hook never started (the agent refused the request) skips no
        // `started`.
        let mut refused = done.clone();
        if let AgentMessage::Finished { result, .. } = &mut refused {
            result.status = DeploymentStatus::Failed;
            result.started_at = None;
        }
        assert_eq!(skipped_by(&[refused]).await, [vec![D]]);
        // The same result again (a redelivery) skips nothing.
        assert_eq!(
            skipped_by(&[done.clone(), done]).await,
            [vec![D, S], vec![]]
        );
    }

    #[tokio::test]
    async fn an_answer_from_a_server_that_does_not_own_the_deployment_changes_nothing() {
        let store = store().await;
        let before = stored(&store).await;
        let applied = apply(&store, "s2", &started(Some(digest()))).await;
        assert!(
            matches!(&applied, Applied::Foreign(u) if !u.changed && u.record == before),
            "{applied:?}"
        );
        assert_eq!(stored(&store).await, before);
    }

    #[tokio::test]
    async fn an_answer_to_another_request_changes_nothing() {
        let store = store().await;
        let before = stored(&store).await;
        for digest in [Some(RequestDigest::of(b"another request")), None] {
            let applied = apply(&store, "s1", &started(digest)).await;
            assert!(
                matches!(&applied, Applied::Done(u, steps) if !u.changed && matches!(steps[..], [Step::Stray])),
                "{applied:?}"
            );
        }
        assert_eq!(stored(&store).await, before);
    }

    #[tokio::test]
    async fn an_answer_for_an_unknown_deployment_is_reported_so() {
        let store = Store::in_memory();
        let applied = apply(&store, "s1", &started(Some(digest()))).await;
        assert!(matches!(applied, Applied::Unknown), "{applied:?}");
    }

    /// What [`reports`] gives for `messages` applied together (each handled before or
    /// not): (event type, reported as a step, the deployment's status in the event).
    async fn reported_by(
        store: &Store,
        messages: &[&AgentMessage],
        handled_before: bool,
    ) -> Vec<(EventType, bool, DeploymentStatus)> {
        let Applied::Done(_, steps) = apply_together(store, "s1", messages).await else {
            panic!("not applied");
        };
        let before = vec![handled_before; messages.len()];
        reports(messages, &before, &steps, true)
            .into_iter()
            .map(|r| {
                let event = match r.step {
                    true => r.record.step_event(r.ty),
                    false => r.record.event(r.ty),
                };
                assert_eq!(
                    event.id,
                    format!("deployment:d1:{}", r.ty.name()),
                    "stable id"
                );
                let status = serde_json::from_value(event.data["status"].clone()).expect("status");
                (r.ty, r.step, status)
            })
            .collect()
    }

    #[tokio::test]
    async fn a_redelivered_started_reports_the_delivered_it_went_past_again_under_the_same_ids() {
        use DeploymentStatus::{InProgress, Queued};
        use EventType::{DeploymentDelivered as D, DeploymentStarted as S};
        let store = store().await;
        let started = started(Some(digest()));
        // The agent started the hook at once: no `delivered` of its own.
        assert_eq!(
            reported_by(&store, &[&started], false).await,
            [(D, true, Queued), (S, false, InProgress)]
        );
        let record = stored(&store).await;
        assert_eq!(
            record.deployment.delivered_at,
            Some(at(2)),
            "delivered when started"
        );
        // The gateway died after the write, before the events: the redelivery reports
        // both again (the broker drops copies of those that were out, by id).
        assert_eq!(
            reported_by(&store, &[&started], true).await,
            [(D, true, Queued), (S, false, InProgress)]
        );
        // A copy the agent sent again reports nothing.
        assert_eq!(reported_by(&store, &[&started], false).await, []);
        // Once the result moved the record on, the result reports only itself, also when
        // redelivered.
        let done = finished(DeploymentStatus::Complete);
        for again in [false, true] {
            assert_eq!(
                reported_by(&store, &[&done], again).await,
                [(
                    EventType::DeploymentCompleted,
                    false,
                    DeploymentStatus::Complete
                )]
            );
        }
    }

    #[tokio::test]
    async fn answers_applied_together_write_once_and_report_each_step_as_the_record_stood() {
        use DeploymentStatus::{Complete, InProgress, Queued};
        use EventType::{
            DeploymentCompleted as C, DeploymentDelivered as D, DeploymentStarted as S,
        };
        let store = store().await;
        let started = started(Some(digest()));
        let done = finished(DeploymentStatus::Complete);
        let before = stored(&store).await;
        let Applied::Done(u, steps) = apply_together(&store, "s1", &[&started, &done]).await else {
            panic!("not applied");
        };
        assert!(u.changed);
        assert_eq!(u.record, stored(&store).await, "one write: the last record");
        assert_eq!(u.record.deployment.status, Complete);
        assert_ne!(before, u.record);
        assert_eq!(steps.len(), 2);
        assert_eq!(
            reports(&[&started, &done], &[false, false], &steps, true)
                .iter()
                .map(|r| (r.ty, r.step, r.record.deployment.status))
                .collect::<Vec<_>>(),
            [
                (D, true, InProgress),
                (S, false, InProgress),
                (C, false, Complete)
            ]
        );
        // The gateway died after the write, before the events: redelivered, `started`
        // finds the deployment ended (its event would come late), and the result reports
        // every step the write went past first, under the same ids.
        let store2 = self::store().await;
        apply_together(&store2, "s1", &[&started, &done]).await;
        assert_eq!(
            reported_by(&store2, &[&started, &done], true).await,
            [
                (D, true, Queued),
                (S, true, InProgress),
                (C, false, Complete)
            ]
        );
        assert_eq!(reported_by(&store2, &[&started, &done], false).await, []);
        // A stray answer among them changes nothing and reports nothing.
        let store3 = self::store().await;
        let stray = self::started(Some(RequestDigest::of(b"another request")));
        assert_eq!(
            reported_by(&store3, &[&stray, &started], false).await,
            [(D, true, Queued), (S, false, InProgress)]
        );
    }
}
