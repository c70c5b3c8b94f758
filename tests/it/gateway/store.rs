//! JetStream state against a real nats-server: compare-and-set never loses a concurrent
//! change, not even one another gateway made; the streams follow the configured max age.

use std::collections::BTreeMap;

use flue_gateway::record::DeploymentRecord;
use flue_gateway::store::Store;
use flue_proto::{
    Action, ConfigId, Deployment, DeploymentId, DeploymentStatus, ServerId, TenantId,
};
use time::OffsetDateTime;

pub(super) fn record(id: &str) -> DeploymentRecord {
    let now = OffsetDateTime::now_utc();
    DeploymentRecord {
        deployment: Deployment {
            id: DeploymentId::new(id).expect("id"),
            tenant: TenantId::new("t1").expect("id"),
            server_id: ServerId::new("s1").expect("id"),
            config_id: ConfigId::new("c1").expect("id"),
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
            timeout_secs: 60,
            created_at: now,
            updated_at: now,
            delivered_at: None,
            started_at: None,
            finished_at: None,
            expires_at: now,
        },
        request_digest: None,
        agent_jwt: None,
        polled: false,
        request_published: false,
        hidden_inputs: Vec::new(),
        hidden_outputs: Vec::new(),
    }
}

#[tokio::test]
async fn concurrent_updates_are_all_kept_and_ids_are_listed_per_server() {
    let nats = flue_tests::Nats::start().await;
    let client = async_nats::connect(nats.url()).await.expect("connect");
    let store = Store::open(&async_nats::jetstream::new(client))
        .await
        .expect("buckets");
    let r = record("d1");
    assert!(store.deployments.create(&r).await.expect("create"));
    assert!(!store.deployments.create(&r).await.expect("second create"));

    let (tenant, id) = (&r.deployment.tenant, &r.deployment.id);
    let writers = (0..16).map(|i| {
        let store = store.clone();
        async move {
            store
                .deployments
                .update(tenant, id, |rec| {
                    rec.deployment.deploy_stdout.push_str(&format!("{i:02}."));
                    true
                })
                .await
                .expect("update")
                .expect("exists")
        }
    });
    futures_util::future::join_all(writers).await;
    let stored = store
        .deployments
        .get(tenant, id)
        .await
        .expect("read")
        .expect("exists");
    let mut parts: Vec<&str> = stored
        .deployment
        .deploy_stdout
        .split_terminator('.')
        .collect();
    parts.sort_unstable();
    let expected: Vec<String> = (0..16).map(|i| format!("{i:02}")).collect();
    assert_eq!(parts, expected, "every concurrent change survived");

    let server = &r.deployment.server_id;
    store
        .deployments
        .index(tenant, server, id)
        .await
        .expect("index");
    let mut other = record("d2");
    other.deployment.server_id = ServerId::new("s2").expect("id");
    assert!(store.deployments.create(&other).await.expect("create"));
    store
        .deployments
        .index(tenant, &other.deployment.server_id, &other.deployment.id)
        .await
        .expect("index");
    let listed = store
        .deployments
        .of_server(tenant, server)
        .await
        .expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].deployment.id, *id);
    let mut all = store.deployments.ids(tenant).await.expect("ids");
    all.sort();
    assert_eq!(all, vec![id.clone(), other.deployment.id.clone()]);
    assert!(
        store
            .deployments
            .ids(&TenantId::new("t2").expect("id"))
            .await
            .expect("ids")
            .is_empty()
    );
}

#[tokio::test]
async fn a_change_another_gateway_made_is_kept_when_this_one_writes_the_record_again() {
    // Two stores on one broker are two gateways: each remembers what it wrote last and
    // writes on it unread; the other's change in between must make that write read first.
    let nats = flue_tests::Nats::start().await;
    let open = || async {
        let client = async_nats::connect(nats.url()).await.expect("connect");
        Store::open(&async_nats::jetstream::new(client))
            .await
            .expect("buckets")
    };
    let (mine, theirs) = (open().await, open().await);
    let r = record("d1");
    let (tenant, id) = (&r.deployment.tenant, &r.deployment.id);
    assert!(mine.deployments.create(&r).await.expect("create"));
    let append = |store: &Store, part: &'static str| {
        let store = store.clone();
        async move {
            store
                .deployments
                .update(tenant, id, |rec| {
                    rec.deployment.deploy_stdout.push_str(part);
                    true
                })
                .await
                .expect("update")
                .expect("exists")
        }
    };
    append(&mine, "a.").await;
    append(&theirs, "b.").await;
    let updated = append(&mine, "c.").await;
    assert_eq!(updated.record.deployment.deploy_stdout, "a.b.c.");
    let stored = theirs
        .deployments
        .get(tenant, id)
        .await
        .expect("read")
        .expect("exists");
    assert_eq!(stored.deployment.deploy_stdout, "a.b.c.", "no change lost");

    // A change that does nothing on what this gateway wrote last is decided on the record
    // as stored: the caller is told the other gateway's change.
    append(&theirs, "d.").await;
    let unchanged = mine
        .deployments
        .update(tenant, id, |rec| rec.deployment.deploy_stdout.is_empty())
        .await
        .expect("update")
        .expect("exists");
    assert!(!unchanged.changed);
    assert_eq!(unchanged.record.deployment.deploy_stdout, "a.b.c.d.");
}

#[tokio::test]
async fn streams_take_the_max_age_of_the_latest_start() {
    let nats = flue_tests::Nats::start().await;
    let client = async_nats::connect(nats.url()).await.expect("connect");
    let js = async_nats::jetstream::new(client);
    let broker = flue_gateway::broker::Broker::new(js.clone());
    for secs in [3600, 7200] {
        let max_age = std::time::Duration::from_secs(secs);
        broker
            .ensure_streams(max_age, 100, 1)
            .await
            .expect("streams");
        for name in [
            flue_proto::subject::REQUEST_STREAM,
            flue_proto::subject::RESPONSE_STREAM,
        ] {
            let mut stream = js.get_stream(name).await.expect("stream");
            let info = stream.info().await.expect("info");
            assert_eq!(info.config.max_age, max_age, "{name}");
        }
    }
}
