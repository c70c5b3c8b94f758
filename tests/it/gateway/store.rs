//! JetStream state against a real nats-server: compare-and-set never loses a concurrent
//! change; the streams follow the configured max age.

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
    assert!(store.create_deployment(&r).await.expect("create"));
    assert!(!store.create_deployment(&r).await.expect("second create"));

    let (tenant, id) = (&r.deployment.tenant, &r.deployment.id);
    let writers = (0..16).map(|i| {
        let store = store.clone();
        async move {
            store
                .update_deployment(tenant, id, |rec| {
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
        .deployment(tenant, id)
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
        .index_deployment(tenant, server, id)
        .await
        .expect("index");
    let mut other = record("d2");
    other.deployment.server_id = ServerId::new("s2").expect("id");
    assert!(store.create_deployment(&other).await.expect("create"));
    store
        .index_deployment(tenant, &other.deployment.server_id, &other.deployment.id)
        .await
        .expect("index");
    let listed = store
        .server_deployments(tenant, server)
        .await
        .expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].deployment.id, *id);
    let mut all = store.deployment_ids(tenant).await.expect("ids");
    all.sort();
    assert_eq!(all, vec![id.clone(), other.deployment.id.clone()]);
    assert!(
        store
            .deployment_ids(&TenantId::new("t2").expect("id"))
            .await
            .expect("ids")
            .is_empty()
    );
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
