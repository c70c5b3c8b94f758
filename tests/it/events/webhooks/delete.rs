//! Events: webhooks deleted while their delivery task retries leave nothing behind.

use std::time::Duration;

use flue_proto::webhook::Webhook;
use flue_tests::{Flue, WAIT};
use serde_json::json;

use super::receiver::{Mode, Receiver};
use super::{SECRET, create, setup};

/// Names of the webhook consumers (`wh-…`) on the event stream.
async fn webhook_consumers(flue: &Flue) -> Vec<String> {
    use futures_util::TryStreamExt as _;
    let js = async_nats::jetstream::new(flue.nats.events_client().await);
    let stream = js
        .get_stream(flue_proto::event::EVENT_STREAM)
        .await
        .expect("event stream");
    let names: Vec<String> = stream
        .consumer_names()
        .try_collect()
        .await
        .expect("consumer names");
    names.into_iter().filter(|n| n.starts_with("wh-")).collect()
}

#[tokio::test]
async fn deleting_webhooks_while_they_retry_leaves_no_consumer_behind() {
    // Retrying at once and for ever keeps each delivery task between an attempt and the
    // write of its error, the write the watch used to restart a stopped task from (which
    // then made the just deleted consumer again).
    let (flue, _agent) = setup(&[
        "--webhook-backoff-ms",
        "1",
        "--webhook-backoff-max-ms",
        "1",
        "--webhook-max-attempts",
        "1000",
    ])
    .await;
    let receiver = Receiver::start(Mode::Fail).await;
    let client = flue.http();
    for _ in 0..10 {
        let response = create(
            &flue,
            json!({"url": receiver.url, "secret": SECRET, "start": "all"}),
        )
        .await;
        assert_eq!(response.status(), 201);
        let webhook: Webhook = response.json().await.expect("webhook body");
        let id = webhook.id.to_string();
        receiver
            .wait_for("three failed attempts", |got| {
                got.iter().filter(|r| r.webhook_id == id).count() >= 3
            })
            .await;
        let deleted = client
            .delete(format!("{}/v1/webhooks/{id}", flue.gateway.url()))
            .send()
            .await
            .expect("delete");
        assert_eq!(deleted.status(), 204);
    }
    // A task that made a consumer after the delete removed it deletes it again at once.
    let fut = async {
        loop {
            let left = webhook_consumers(&flue).await;
            if left.is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await; // polling interval
        }
    };
    if tokio::time::timeout(WAIT, fut).await.is_err() {
        panic!(
            "consumers of deleted webhooks left: {:?}",
            webhook_consumers(&flue).await
        );
    }
    let list = client
        .get(format!("{}/v1/webhooks", flue.gateway.url()))
        .send()
        .await
        .expect("list")
        .text()
        .await
        .expect("list body");
    assert_eq!(list, "[]");
}
