//! The gateway's JetStream state as any client of the broker sees it: the streams follow
//! the max age of the latest start, and records written straight into the deployments
//! bucket (by an older gateway, or by a crash between two writes) in the stored form.
//!
//! Compare-and-set on the records is unit-tested in the gateway's crate
//! (`store::deployments::tests`, on in-memory buckets).

use flue_proto::{DeploymentStatus, subject};
use flue_tests::queued_deployment;
use serde_json::{Value, json};

use super::fixture::Fixture;

/// A queued deployment `id` of tenant `default` on `web1` (config `c1`) as the gateway
/// stores it in `flue_deployments` (`default.<id>`): the API's deployment and what only
/// the gateway keeps beside it. Published, expiring in an hour.
pub(super) fn record(id: &str) -> Value {
    json!({"deployment": queued_deployment(id, "web1", "c1"), "request_published": true})
}

/// `record(id)` with status `status`.
pub(super) fn record_with(id: &str, status: DeploymentStatus) -> Value {
    let mut r = record(id);
    r["deployment"]["status"] = serde_json::to_value(status).expect("json");
    r
}

#[tokio::test]
async fn streams_take_the_max_age_of_the_latest_start() {
    let mut fx = Fixture::start_with(|c| c.stream_max_age_secs = 3600).await;
    let js = fx.jetstream().await;
    for secs in [3600, 7200] {
        if secs != 3600 {
            fx.restart_with(|c| c.stream_max_age_secs = secs).await;
        }
        let max_age = std::time::Duration::from_secs(secs);
        for name in [subject::REQUEST_STREAM, subject::RESPONSE_STREAM] {
            let mut stream = js.get_stream(name).await.expect("stream");
            let info = stream.info().await.expect("info");
            assert_eq!(info.config.max_age, max_age, "{name}");
        }
    }
    fx.shutdown().await;
}
