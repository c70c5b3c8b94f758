//! Tests of the ledger: durability, request keys, pruning.

use super::*;
use crate::item::tests::request;
use flue_proto::{DeploymentRequest, DeploymentStatus};
use serde_json::json;

/// When the requests of these tests were created, unless a test says otherwise.
const CREATED: OffsetDateTime = OffsetDateTime::UNIX_EPOCH.saturating_add(time::Duration::DAY);

/// A request for deployment `id` created at `created_at`.
fn request_at(id: &str, created_at: OffsetDateTime) -> DeploymentRequest {
    DeploymentRequest {
        deployment_id: id.parse().expect("id"),
        created_at,
        ..request(json!({"group": "script", "config": "true"}), json!({}))
    }
}

/// The ledger key of the request for deployment `id` created at [`CREATED`].
fn key(id: &str) -> LedgerKey {
    LedgerKey::of_request(&request_at(id, CREATED))
}

fn result() -> DeploymentResult {
    DeploymentResult {
        status: DeploymentStatus::Complete,
        status_reason: None,
        outputs: [("out".to_owned(), serde_json::json!("v"))].into(),
        deploy_stdout: "hi\n".into(),
        deploy_stderr: String::new(),
        deploy_status_code: Some(0),
        started_at: Some(CREATED),
        finished_at: CREATED,
    }
}

#[tokio::test]
async fn transitions_survive_reopening_the_database() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ledger");
    let at = OffsetDateTime::UNIX_EPOCH + time::Duration::seconds(7);
    {
        let ledger = Ledger::open(&path).expect("open");
        assert_eq!(ledger.get(&key("d1")).expect("get"), None);
        ledger
            .record_started(&key("d1"), at, None, None)
            .await
            .expect("started");
        ledger
            .record_started(&key("d2"), at, None, None)
            .await
            .expect("started");
        ledger
            .record_done(&key("d2"), &result(), None, None)
            .await
            .expect("done");
    }
    let ledger = Ledger::open(&path).expect("reopen");
    assert_eq!(
        ledger.get(&key("d1")).expect("get"),
        Some(Entry::Started {
            at: Some(at),
            hook: None,
            digest: None,
            stream_seq: None,
        })
    );
    assert_eq!(
        ledger.get(&key("d2")).expect("get"),
        Some(Entry::Done {
            result: result(),
            digest: None,
            stream_seq: None,
        })
    );
    assert_eq!(ledger.get(&key("d3")).expect("get"), None);
}

#[tokio::test]
async fn a_new_request_reusing_a_deployment_id_does_not_see_the_old_entry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ledger = Ledger::open(&dir.path().join("ledger")).expect("open");
    let first = request_at("job-1", CREATED);
    ledger
        .record_done(&LedgerKey::of_request(&first), &result(), None, None)
        .await
        .expect("done");
    ledger
        .record_started(&key("job-2"), CREATED, None, None)
        .await
        .expect("started");

    // The same request redelivered is answered from the ledger.
    let redelivered: DeploymentRequest =
        serde_json::from_slice(&serde_json::to_vec(&first).expect("ser")).expect("de");
    assert_eq!(
        ledger
            .get(&LedgerKey::of_request(&redelivered))
            .expect("get"),
        Some(Entry::Done {
            result: result(),
            digest: None,
            stream_seq: None,
        })
    );
    // A later request with the same id (the broker lost its state) is new.
    let reused = request_at("job-1", CREATED + time::Duration::hours(1));
    assert_eq!(
        ledger.get(&LedgerKey::of_request(&reused)).expect("get"),
        None
    );
    let reused = request_at("job-2", CREATED + time::Duration::hours(1));
    assert_eq!(
        ledger.get(&LedgerKey::of_request(&reused)).expect("get"),
        None
    );
    // So is the same id for another server or tenant (a reused state dir).
    let elsewhere = DeploymentRequest {
        server: "web2".parse().expect("id"),
        ..first.clone()
    };
    assert_eq!(
        ledger.get(&LedgerKey::of_request(&elsewhere)).expect("get"),
        None
    );
    let other_tenant = DeploymentRequest {
        tenant: "other".parse().expect("id"),
        ..first
    };
    assert_eq!(
        ledger
            .get(&LedgerKey::of_request(&other_tenant))
            .expect("get"),
        None
    );
}

const CUTOFF: OffsetDateTime = OffsetDateTime::UNIX_EPOCH.saturating_add(time::Duration::days(30));
const BEFORE: OffsetDateTime = CUTOFF.saturating_sub(time::Duration::SECOND);
const AFTER: OffsetDateTime = CUTOFF.saturating_add(time::Duration::SECOND);

async fn record_done_at(ledger: &Ledger, name: &str, at: OffsetDateTime) {
    let result = DeploymentResult {
        finished_at: at,
        ..result()
    };
    ledger
        .record_done(&key(name), &result, None, None)
        .await
        .expect("done");
}

#[tokio::test]
async fn old_done_entries_are_pruned_durably_and_counted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ledger");
    {
        let ledger = Ledger::open(&path).expect("open");
        for name in ["d1", "d2", "d3"] {
            record_done_at(&ledger, name, BEFORE).await;
        }
        assert_eq!(ledger.prune_done_before(CUTOFF).await.expect("prune"), 3);
        assert_eq!(ledger.prune_done_before(CUTOFF).await.expect("prune"), 0);
    }
    // Reopened: the removal was flushed.
    let ledger = Ledger::open(&path).expect("reopen");
    for name in ["d1", "d2", "d3"] {
        assert_eq!(ledger.get(&key(name)).expect("get"), None, "{name}");
    }
    assert_eq!(ledger.db.len(), 0);
}

#[tokio::test]
async fn recent_done_entries_are_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ledger = Ledger::open(&dir.path().join("ledger")).expect("open");
    record_done_at(&ledger, "old", BEFORE).await;
    record_done_at(&ledger, "at_cutoff", CUTOFF).await;
    record_done_at(&ledger, "recent", AFTER).await;
    assert_eq!(ledger.prune_done_before(CUTOFF).await.expect("prune"), 1);
    assert_eq!(ledger.get(&key("old")).expect("get"), None);
    for (name, at) in [("at_cutoff", CUTOFF), ("recent", AFTER)] {
        let Some(Entry::Done { result, .. }) = ledger.get(&key(name)).expect("get") else {
            panic!("{name} was not kept as done");
        };
        assert_eq!(result.finished_at, at, "{name}");
    }
}

#[tokio::test]
async fn started_and_unreadable_entries_are_kept_however_old() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ledger = Ledger::open(&dir.path().join("ledger")).expect("open");
    let long_ago = OffsetDateTime::UNIX_EPOCH;
    ledger
        .record_started(&key("s_old"), long_ago, None, None)
        .await
        .expect("started");
    ledger
        .record_started(&key("s_recent"), AFTER, None, None)
        .await
        .expect("started");
    ledger
        .db
        .insert(key("unreadable").as_str(), b"not json".as_slice())
        .expect("insert");
    record_done_at(&ledger, "done_old", BEFORE).await;
    assert_eq!(ledger.prune_done_before(CUTOFF).await.expect("prune"), 1);
    assert_eq!(
        ledger.get(&key("s_old")).expect("get"),
        Some(Entry::Started {
            at: Some(long_ago),
            hook: None,
            digest: None,
            stream_seq: None,
        })
    );
    assert_eq!(
        ledger.get(&key("s_recent")).expect("get"),
        Some(Entry::Started {
            at: Some(AFTER),
            hook: None,
            digest: None,
            stream_seq: None,
        })
    );
    assert_eq!(
        ledger.get(&key("unreadable")).expect("get"),
        Some(Entry::Started {
            at: None,
            hook: None,
            digest: None,
            stream_seq: None,
        })
    );
    assert_eq!(ledger.get(&key("done_old")).expect("get"), None);
}

#[tokio::test]
async fn pruning_an_empty_ledger_removes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ledger = Ledger::open(&dir.path().join("ledger")).expect("open");
    let now = OffsetDateTime::now_utc();
    assert_eq!(ledger.prune_done_before(now).await.expect("prune"), 0);
}

#[tokio::test]
async fn an_unreadable_entry_counts_as_interrupted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ledger = Ledger::open(&dir.path().join("ledger")).expect("open");
    ledger
        .db
        .insert(key("d1").as_str(), b"not json".as_slice())
        .expect("insert");
    assert_eq!(
        ledger.get(&key("d1")).expect("get"),
        Some(Entry::Started {
            at: None,
            hook: None,
            digest: None,
            stream_seq: None,
        })
    );
}

#[tokio::test]
async fn a_started_entry_keeps_its_hook_process_and_old_entries_still_decode() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ledger = Ledger::open(&dir.path().join("ledger")).expect("open");
    let hook = HookProcess {
        pid: 4242,
        start_time: 987_654,
        boot_id: "b00t".into(),
    };
    ledger
        .record_started(&key("d1"), CREATED, None, None)
        .await
        .expect("started");
    assert_eq!(ledger.unfinished_hooks().expect("scan"), []);
    ledger
        .record_hook(&key("d1"), CREATED, hook.clone(), None, None)
        .await
        .expect("hook");
    ledger
        .record_started(&key("d2"), CREATED, None, None)
        .await
        .expect("started");
    assert_eq!(
        ledger.get(&key("d1")).expect("get"),
        Some(Entry::Started {
            at: Some(CREATED),
            hook: Some(hook.clone()),
            digest: None,
            stream_seq: None,
        })
    );
    assert_eq!(
        ledger.unfinished_hooks().expect("scan"),
        [(key("d1").to_string(), hook)]
    );
    ledger
        .record_done(&key("d1"), &result(), None, None)
        .await
        .expect("done");
    assert_eq!(ledger.unfinished_hooks().expect("scan"), []);

    // An entry written before hooks were recorded.
    let old: Entry =
        serde_json::from_str(r#"{"state":"started","at":"1970-01-02T00:00:00Z"}"#).expect("old");
    assert_eq!(
        old,
        Entry::Started {
            at: Some(CREATED),
            hook: None,
            digest: None,
            stream_seq: None,
        }
    );
}

#[tokio::test]
async fn entries_keep_the_digest_of_their_request_and_old_entries_still_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ledger = Ledger::open(&dir.path().join("ledger")).expect("open");
    let digest = RequestDigest::of(b"request");
    ledger
        .record_done(&key("d1"), &result(), Some(&digest), None)
        .await
        .expect("done");
    let entry = ledger.get(&key("d1")).expect("get").expect("entry");
    assert_eq!(entry.digest(), Some(&digest));
    // An entry written before digests existed.
    let old = serde_json::json!({"state": "done", "result": result()});
    ledger
        .db
        .insert(key("d2").as_str(), serde_json::to_vec(&old).expect("json"))
        .expect("insert");
    assert_eq!(
        ledger.get(&key("d2")).expect("get"),
        Some(Entry::Done {
            result: result(),
            digest: None,
            stream_seq: None,
        })
    );
}

#[tokio::test]
async fn two_messages_with_one_request_identity_are_kept_apart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ledger = Ledger::open(&dir.path().join("ledger")).expect("open");
    let (real, forged) = (RequestDigest::of(b"real"), RequestDigest::of(b"forged"));
    let apart = key("d1").with_digest(&forged);
    assert_ne!(apart, key("d1"));
    assert_eq!(apart.deployment_id(), key("d1").deployment_id());
    assert_eq!(
        apart,
        key("d1").with_digest(&forged),
        "stable across redeliveries"
    );
    ledger
        .record_done(&key("d1"), &result(), Some(&real), None)
        .await
        .expect("done");
    ledger
        .record_started(&apart, CREATED, Some(&forged), None)
        .await
        .expect("started");
    let first = ledger.get(&key("d1")).expect("get").expect("entry");
    assert_eq!(first.digest(), Some(&real), "the first entry is left alone");
    assert!(matches!(first, Entry::Done { .. }));
}

#[tokio::test]
async fn a_new_ledger_records_when_it_was_created_and_an_older_filled_one_says_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ledger");
    let first = {
        let ledger = Ledger::open(&path).expect("open");
        let at = ledger
            .created_at()
            .expect("created_at")
            .expect("a new ledger says");
        ledger
            .record_done(&key("d1"), &result(), None, None)
            .await
            .expect("done");
        at
    };
    // Reopened: the same time, not a new one.
    let ledger = Ledger::open(&path).expect("reopen");
    assert_eq!(ledger.created_at().expect("created_at"), Some(first));
    drop(ledger);

    // A ledger filled before creation times were recorded (no `meta` entry) says nothing.
    let old = dir.path().join("old");
    {
        let ledger = Ledger::open(&old).expect("open");
        ledger
            .record_done(&key("d1"), &result(), None, None)
            .await
            .expect("done");
    }
    let ledger = Ledger::open(&old).expect("reopen");
    assert_eq!(ledger.created_at().expect("created_at"), None);
}
