//! A compare-and-set that loses its race on a replicated KV bucket is told apart from a
//! failed write. While another write of the key is still being proposed, a cluster
//! answers with JetStream error 10164 rather than 10071, which the client does not map
//! to a stale revision by itself: the gateway must, or a writer that merely lost a race
//! would get a server error instead of the stack's current revision.

use futures_util::future::join_all;
use reqwest::StatusCode;
use serde_json::{Value, json};

use flue_tests::Cluster;

use super::REPLICAS;

#[tokio::test]
async fn updates_racing_on_one_revision_of_a_replicated_bucket_are_one_write_and_lost_races() {
    let cluster = Cluster::start(3, REPLICAS).await;
    let http = cluster.flue.http();
    let url = format!("{}/v1/stacks/cas-probe", cluster.flue.gateway.url());
    let body = |step: String, expected: Option<u64>| {
        let mut body = json!({
            "status": {"action": "CREATE", "status": "IN_PROGRESS"},
            "state": {"parameters": {"step": step}}
        });
        if let Some(revision) = expected {
            body["expected_revision"] = json!(revision);
        }
        body
    };
    let put = async |body: Value| {
        let resp = http.put(&url).json(&body).send().await.expect("send");
        let status = resp.status();
        (status, resp.json::<Value>().await.expect("a JSON body"))
    };
    let (status, created) = put(body("0".into(), None)).await;
    assert_eq!(status, StatusCode::OK, "{created}");
    let mut revision = created["revision"].as_u64().expect("revision");
    for round in 0..20 {
        let racers = (0..32).map(|i| put(body(format!("{round}.{i}"), Some(revision))));
        let results = join_all(racers).await;
        let won: Vec<&Value> = results
            .iter()
            .filter(|(s, _)| *s == StatusCode::OK)
            .map(|(_, b)| b)
            .collect();
        assert_eq!(won.len(), 1, "round {round}: one update wins: {results:?}");
        for (status, lost) in results.iter().filter(|(s, _)| *s != StatusCode::OK) {
            assert_eq!(
                (*status, lost["error"]["code"].as_str()),
                (StatusCode::CONFLICT, Some("revision_mismatch")),
                "round {round}: not recognised as a lost race: {lost}"
            );
        }
        revision = won[0]["revision"].as_u64().expect("revision");
    }
}
