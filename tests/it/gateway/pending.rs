//! The pending index as the broker holds it: the states a crash can leave between a
//! record write and its index write are repaired by the next start's recovery, and no
//! pending deployment is lost. The states are written straight into the buckets, as the
//! interrupted gateway left them; what recovery made of them is read back the same way.

use flue_proto::{DeploymentStatus, subject};
use futures_util::TryStreamExt;
use serde_json::Value;

use super::fixture::Fixture;
use super::store::{record, record_with};

/// The pending index's bucket.
async fn pending_bucket(fx: &Fixture) -> async_nats::jetstream::kv::Store {
    fx.jetstream()
        .await
        .get_key_value(subject::PENDING_BUCKET)
        .await
        .expect("the pending bucket")
}

/// Marks deployment `id` of tenant `default` pending, as a gateway does before its record.
async fn mark_pending(fx: &Fixture, id: &str) {
    pending_bucket(fx)
        .await
        .put(format!("default.{id}"), bytes::Bytes::new())
        .await
        .expect("mark pending");
}

/// Writes `record` as deployment `id` of tenant `default`.
async fn write_record(fx: &Fixture, id: &str, record: &Value) {
    fx.deployments_bucket()
        .await
        .put(
            format!("default.{id}"),
            serde_json::to_vec(record).expect("json").into(),
        )
        .await
        .expect("write the record");
}

/// The ids the pending index holds for tenant `default`, sorted.
async fn pending_ids(fx: &Fixture) -> Vec<String> {
    let bucket = pending_bucket(fx).await;
    let mut ids = Vec::new();
    let keys: Vec<String> = bucket
        .keys()
        .await
        .expect("keys")
        .try_collect()
        .await
        .expect("keys");
    for key in keys {
        // Two tokens: the marker (`default.meta.indexed`) is not an entry.
        if let Some(id) = key.strip_prefix("default.").filter(|id| !id.contains('.'))
            && bucket.get(&key).await.expect("read").is_some()
        {
            ids.push(id.to_owned());
        }
    }
    ids.sort();
    ids
}

/// Whether tenant `default`'s deployments were indexed (the marker recovery leaves).
async fn indexed(fx: &Fixture) -> bool {
    pending_bucket(fx)
        .await
        .get("default.meta.indexed")
        .await
        .expect("read")
        .is_some()
}

#[tokio::test]
async fn recovery_keeps_every_pending_deployment_whatever_write_a_crash_interrupted() {
    let mut fx = Fixture::start().await;
    fx.gateway.take().expect("running").shutdown().await;

    // Killed after the pending entry, before the record: the entry stays (the record may
    // still be written, here or by another gateway) and nothing is watched.
    mark_pending(&fx, "no-record").await;
    // Killed after the record turned terminal, before the entry was removed.
    mark_pending(&fx, "finished").await;
    write_record(
        &fx,
        "finished",
        &record_with("finished", DeploymentStatus::Complete),
    )
    .await;
    // A deployment created whole: pending, and read by recovery.
    mark_pending(&fx, "queued").await;
    write_record(&fx, "queued", &record("queued")).await;
    // Finished whole: its entry went with its last write.
    write_record(&fx, "done", &record_with("done", DeploymentStatus::Failed)).await;
    assert_eq!(pending_ids(&fx).await, ["finished", "no-record", "queued"]);

    fx.restart_with(|_| {}).await;
    assert_eq!(
        pending_ids(&fx).await,
        ["no-record", "queued"],
        "the terminal record's entry is repaired, every pending one kept"
    );
    let (_, queued) = fx
        .call(axum::http::Method::GET, "/v1/deployments/queued", None)
        .await;
    assert_eq!(queued["status"], "QUEUED", "{queued}");
    fx.shutdown().await;
}

#[tokio::test]
async fn a_store_written_before_the_index_is_indexed_once_at_start() {
    let mut fx = Fixture::start().await;
    fx.gateway.take().expect("running").shutdown().await;

    // An older gateway's store: records only, no pending entries, no marker.
    write_record(&fx, "old-queued", &record("old-queued")).await;
    write_record(
        &fx,
        "old-done",
        &record_with("old-done", DeploymentStatus::Complete),
    )
    .await;
    let js = fx.jetstream().await;
    js.get_stream(format!("KV_{}", subject::PENDING_BUCKET))
        .await
        .expect("the pending bucket's stream")
        .purge()
        .filter(format!("$KV.{}.default.meta.>", subject::PENDING_BUCKET))
        .await
        .expect("forget the marker");
    assert!(!indexed(&fx).await);

    fx.restart_with(|_| {}).await;
    assert!(indexed(&fx).await, "indexed at the first start");
    assert_eq!(pending_ids(&fx).await, ["old-queued"]);

    // Once indexed, a start reads the index only: a record without an entry is not
    // looked for again.
    fx.gateway.take().expect("running").shutdown().await;
    write_record(&fx, "unindexed", &record("unindexed")).await;
    fx.restart_with(|_| {}).await;
    assert_eq!(
        pending_ids(&fx).await,
        ["old-queued"],
        "the second start did not index the records again"
    );
    fx.shutdown().await;
}
