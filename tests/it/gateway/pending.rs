//! The pending index against a real nats-server: the states a crash can leave between a
//! record write and its index write are repaired by recovery, and no pending deployment
//! is lost.

use flue_gateway::store::Store;
use flue_proto::{DeploymentId, DeploymentStatus, TenantId};

use super::fixture::Fixture;
use super::store::record;

fn id(s: &str) -> DeploymentId {
    DeploymentId::new(s).expect("id")
}

#[tokio::test]
async fn recovery_keeps_every_pending_deployment_whatever_write_a_crash_interrupted() {
    let fx = Fixture::start().await;
    let gateway = fx.gateway.as_ref().expect("gateway");
    let tenant: TenantId = gateway.tenants().default_tenant().clone();
    let runtime = gateway.tenants().get(&tenant).expect("runtime");
    let service = runtime.service();
    let store = Store::open(&fx.jetstream().await).await.expect("buckets");

    // Killed after the pending entry, before the record: the entry stays (the record may
    // still be written, here or by another gateway) and nothing is watched.
    store
        .deployments
        .mark_pending(&tenant, &id("no-record"))
        .await
        .expect("mark");
    // Killed after the record turned terminal, before the entry was removed.
    let mut finished = record("finished");
    finished.deployment.tenant = tenant.clone();
    finished.deployment.status = DeploymentStatus::Complete;
    store
        .deployments
        .mark_pending(&tenant, &id("finished"))
        .await
        .expect("mark");
    assert!(store.deployments.create(&finished).await.expect("create"));
    // A deployment created whole: pending, and read by recovery.
    let mut queued = record("queued");
    queued.deployment.tenant = tenant.clone();
    queued.deployment.expires_at += time::Duration::hours(1);
    assert!(store.deployments.create(&queued).await.expect("create"));
    // Finished through the store's own update: its entry goes at once.
    let mut done = record("done");
    done.deployment.tenant = tenant.clone();
    assert!(store.deployments.create(&done).await.expect("create"));
    store
        .deployments
        .update(&tenant, &id("done"), |r| {
            r.deployment.status = DeploymentStatus::Failed;
            true
        })
        .await
        .expect("update")
        .expect("exists");

    // A retry of the finished one leaves no entry behind.
    let mut retry = record("done");
    retry.deployment.tenant = tenant.clone();
    assert!(!store.deployments.create(&retry).await.expect("retry"));

    let mut pending = store
        .deployments
        .pending_ids(&tenant)
        .await
        .expect("pending");
    pending.sort();
    assert_eq!(pending, vec![id("finished"), id("no-record"), id("queued")]);

    let recovery = service.publisher.recover().await.expect("recover");
    assert_eq!(recovery.read, 3, "{recovery:?}");
    assert_eq!(recovery.pending, 1, "{recovery:?}");
    assert_eq!(recovery.repaired, 1, "{recovery:?}");
    let mut pending = store
        .deployments
        .pending_ids(&tenant)
        .await
        .expect("pending");
    pending.sort();
    assert_eq!(pending, vec![id("no-record"), id("queued")]);
    fx.shutdown().await;
}

#[tokio::test]
async fn a_store_written_before_the_index_is_indexed_once_at_start() {
    let fx = Fixture::start().await;
    let gateway = fx.gateway.as_ref().expect("gateway");
    let tenant: TenantId = gateway.tenants().default_tenant().clone();
    let service = gateway
        .tenants()
        .get(&tenant)
        .expect("runtime")
        .service()
        .clone();
    let store = Store::open(&fx.jetstream().await).await.expect("buckets");

    // An older gateway's store: records only, no pending entries, no marker.
    for (name, status) in [
        ("old-queued", DeploymentStatus::Queued),
        ("old-done", DeploymentStatus::Complete),
    ] {
        let mut r = record(name);
        r.deployment.tenant = tenant.clone();
        r.deployment.status = status;
        r.deployment.expires_at += time::Duration::hours(1);
        assert!(store.deployments.create(&r).await.expect("create"));
        store
            .deployments
            .clear_pending(&tenant, &id(name))
            .await
            .expect("clear");
    }
    let js = fx.jetstream().await;
    let pending_bucket = js
        .get_key_value(flue_gateway::store::PENDING_BUCKET)
        .await
        .expect("bucket");
    pending_bucket
        .stream
        .purge()
        .filter(format!(
            "$KV.{}.{tenant}.meta.>",
            flue_gateway::store::PENDING_BUCKET
        ))
        .await
        .expect("forget the marker");
    assert!(
        !store
            .deployments
            .pending_indexed(&tenant)
            .await
            .expect("marker")
    );

    let first = service.publisher.recover().await.expect("recover");
    assert_eq!((first.read, first.pending), (2, 1), "{first:?}");
    assert!(
        store
            .deployments
            .pending_indexed(&tenant)
            .await
            .expect("marker")
    );
    assert_eq!(
        store
            .deployments
            .pending_ids(&tenant)
            .await
            .expect("pending"),
        vec![id("old-queued")]
    );

    let second = service.publisher.recover().await.expect("recover");
    assert_eq!((second.read, second.pending), (1, 1), "{second:?}");
    drop(service);
    fx.shutdown().await;
}
