//! Counting the reads of deployment records the broker is asked for: how the long-poll
//! test and bench tell a shared read from one per poll.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures_util::StreamExt;

use crate::{Flue, broker_has_read};

/// How many direct gets of the deployments bucket's stream (one key or a batch, in either
/// API spelling) the broker was asked for since [`RecordReads::count`].
#[derive(Debug, Clone)]
pub struct RecordReads(Arc<AtomicUsize>);

impl RecordReads {
    /// Counts from now on: the subscriptions are the broker's before this returns.
    pub async fn count(flue: &Flue) -> Self {
        let client = flue.nats.client().await;
        let stream = format!("KV_{}", flue_proto::subject::DEPLOYMENTS_BUCKET);
        let mut subscriptions = Vec::new();
        for prefix in flue_proto::jsapi::api_prefixes() {
            for subject in [
                format!("{prefix}.DIRECT.GET.{stream}"),
                format!("{prefix}.DIRECT.GET.{stream}.>"),
            ] {
                subscriptions.push(client.subscribe(subject).await.expect("subscribe"));
            }
        }
        broker_has_read(&client, &client.new_inbox()).await;
        let reads = Arc::new(AtomicUsize::new(0));
        let counted = reads.clone();
        tokio::spawn(async move {
            let _client = client;
            let mut requests = futures_util::stream::select_all(subscriptions);
            while requests.next().await.is_some() {
                counted.fetch_add(1, Ordering::SeqCst);
            }
        });
        Self(reads)
    }

    /// The reads counted so far.
    pub fn so_far(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}
