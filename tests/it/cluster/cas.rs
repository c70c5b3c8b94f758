//! A compare-and-set that loses its race on a replicated KV bucket is told apart from a
//! failed write. While another write of the key is still being proposed, a cluster
//! answers with JetStream error 10164 rather than 10071, which the client does not map
//! to a stale revision by itself.

use async_nats::jetstream::{self, kv};
use flue_gateway::store::lost_race;
use flue_tests::Cluster;
use futures_util::future::join_all;

use super::REPLICAS;

#[tokio::test]
async fn updates_racing_on_one_revision_of_a_replicated_bucket_are_one_write_and_lost_races() {
    let cluster = Cluster::start(3, REPLICAS).await;
    let js = jetstream::new(cluster.flue.nats.client().await);
    let bucket = js
        .create_key_value(kv::Config {
            bucket: "cas_probe".into(),
            num_replicas: 3,
            ..Default::default()
        })
        .await
        .expect("a replicated bucket");
    let mut revision = bucket.put("k", "0".into()).await.expect("put");
    for round in 0..20 {
        let racers = (0..32).map(|i| bucket.update("k", format!("{round}.{i}").into(), revision));
        let results = join_all(racers).await;
        let won: Vec<u64> = results
            .iter()
            .filter_map(|r| r.as_ref().ok().copied())
            .collect();
        assert_eq!(won.len(), 1, "round {round}: one update wins: {results:?}");
        for lost in results.iter().filter_map(|r| r.as_ref().err()) {
            assert!(
                lost_race(lost),
                "round {round}: not recognised as a lost race: {lost:?}"
            );
        }
        revision = won[0];
    }
}
