//! Answering on the response queue: publishing `delivered` / `started` / `progress` /
//! `finished` with JetStream de-duplication ids, acking the request, and keeping a result
//! within one message.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::context::PublishAckFuture;
use async_nats::jetstream::{self, message::PublishMessage};
use flue_proto::retry::Retryable;
use flue_proto::signing::{self, AnswerClaims};
use flue_proto::{
    AgentMessage, DeploymentId, DeploymentResult, DeploymentStatus, PROTOCOL_VERSION,
    RequestDigest, ServerId, TenantId, subject,
};
use nkeys::KeyPair;
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use flue_proto::output::{TRUNCATED_MARKER, json_len, shorten_streams};

/// After shutdown is requested, a result still gets this long to be published; after
/// that the request stays unacked and its redelivery is answered from the ledger.
pub const PUBLISH_WINDOW_AFTER_SHUTDOWN: Duration = Duration::from_secs(5);
/// How many times an ack is sent before giving up on its confirmation.
///
/// Few, and each bounded by [`ACK_CONFIRM_TIMEOUT`]: a broker that restarted may no longer
/// know the delivery and then never answers the ack, and waiting longer only delays the
/// next deployment; the redelivery is answered from the ledger anyway.
pub const ACK_ATTEMPTS: u32 = 2;
/// How long one ack waits for the broker's confirmation.
pub const ACK_CONFIRM_TIMEOUT: Duration = Duration::from_secs(2);
/// Room left in a message for headers and framing.
const HEADROOM: usize = 4096;
/// Used when the broker has not told its limit (NATS's default).
const DEFAULT_MAX_PAYLOAD: usize = 1 << 20;

/// Publishes this agent's answers on `flue.<tenant>.resp.<server>`, each signed with the
/// agent's user key (the gateway applies nothing unsigned).
#[derive(Clone)]
pub struct Responder {
    js: jetstream::Context,
    subject: String,
    tenant: TenantId,
    server: ServerId,
    /// The user key from the credentials file; `None` only with
    /// `--insecure-unsigned-requests`, when answers go out unsigned.
    signer: Option<Arc<KeyPair>>,
}

/// An answer encoded and signed by [`Responder::prepare`], not sent yet.
pub struct Prepared(PublishMessage);

impl std::fmt::Debug for Responder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Responder")
            .field("subject", &self.subject)
            .field("signer", &self.signer.as_ref().map(|k| k.public_key()))
            .finish_non_exhaustive()
    }
}

impl Responder {
    /// A responder for `server` of `tenant`, signing with `signer`.
    pub fn new(
        js: jetstream::Context,
        tenant: TenantId,
        server: ServerId,
        signer: Option<Arc<KeyPair>>,
    ) -> Self {
        Self {
            subject: subject::response(&tenant, &server),
            js,
            tenant,
            server,
            signer,
        }
    }

    /// Publishes `msg` with its de-duplication id and waits for the broker's PubAck.
    pub async fn publish(&self, msg: &AgentMessage) -> Result<(), String> {
        let ack = self.send(msg).await?;
        ack.await.map(|_| ()).map_err(|e| e.to_string())
    }

    /// Queues `msg` with its de-duplication id on the connection (after anything queued
    /// before, ahead of anything queued later) and returns the broker's PubAck to come.
    pub async fn send(&self, msg: &AgentMessage) -> Result<PublishAckFuture, String> {
        let prepared = self.prepare(msg)?;
        self.send_prepared(prepared).await
    }

    /// `msg` encoded and signed, ready for [`Responder::send_prepared`]: the CPU part of
    /// [`Responder::send`], for a caller that has a moment to spare before it may send.
    pub fn prepare(&self, msg: &AgentMessage) -> Result<Prepared, String> {
        let payload = serde_json::to_vec(msg).map_err(|e| e.to_string())?;
        let mut publish =
            PublishMessage::build().message_id(msg.msg_id(&self.tenant, &self.server));
        if let Some(key) = &self.signer {
            let claims = AnswerClaims {
                v: signing::CLAIMS_VERSION,
                tenant: self.tenant.clone(),
                server: self.server.clone(),
                digest: RequestDigest::of(&payload),
                at: OffsetDateTime::now_utc(),
            };
            let signed = signing::sign(&claims, key).map_err(|e| e.to_string())?;
            publish = publish
                .header(signing::ANSWER_CLAIMS_HEADER, signed.claims.as_str())
                .header(signing::SIGNATURE_HEADER, signed.signature.as_str());
        }
        Ok(Prepared(publish.payload(payload.into())))
    }

    /// Queues a message [`Responder::prepare`] made, as [`Responder::send`] does.
    pub async fn send_prepared(&self, prepared: Prepared) -> Result<PublishAckFuture, String> {
        self.js
            .send_publish(self.subject.clone(), prepared.0)
            .await
            .map_err(|e| e.to_string())
    }

    /// Publishes an answer, retrying with backoff until the broker acknowledges
    /// it; false if shutdown came first (plus [`PUBLISH_WINDOW_AFTER_SHUTDOWN`]).
    pub async fn publish_finished(&self, msg: &AgentMessage, shutdown: &CancellationToken) -> bool {
        let give_up = async {
            shutdown.cancelled().await;
            tokio::time::sleep(PUBLISH_WINDOW_AFTER_SHUTDOWN).await;
        };
        let published = (|| self.publish(msg))
            .retry(crate::RETRY.retry(None))
            .notify(|e, _| warn!(error = %e, "publishing an answer failed, retrying"));
        tokio::select! {
            () = give_up => false,
            published = published => published.is_ok(),
        }
    }
}

/// Acks a request and waits for the broker to confirm, retrying a few times (once only
/// when shutting down). A lost ack is harmless: the redelivered request is answered from
/// the ledger.
pub async fn ack(msg: &jetstream::Message, shutdown: &CancellationToken) {
    let mut attempts = 0u32;
    let confirmed = (|| {
        let attempt = attempts;
        attempts += 1;
        async move {
            match tokio::time::timeout(ACK_CONFIRM_TIMEOUT, msg.double_ack()).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => {
                    warn!(error = %e, attempt, "acking the request failed");
                    Err(())
                }
                Err(_) => {
                    warn!(attempt, "ack not confirmed in time");
                    Err(())
                }
            }
        }
    })
    .retry(crate::RETRY.retry(Some(ACK_ATTEMPTS as usize - 1)))
    .when(|()| !shutdown.is_cancelled())
    .await;
    if confirmed.is_err() {
        info!("ack unconfirmed; a redelivery will be answered from the ledger");
    }
}

/// The broker's message size limit, as far as a result may use it.
pub fn result_budget(client: &async_nats::Client) -> usize {
    let max = match client.server_info().max_payload {
        0 => DEFAULT_MAX_PAYLOAD,
        n => n,
    };
    max.saturating_sub(HEADROOM)
}

/// The `finished` message for a result, answering the request message of `digest`.
pub fn finished(
    id: &DeploymentId,
    digest: Option<&RequestDigest>,
    result: DeploymentResult,
) -> AgentMessage {
    AgentMessage::Finished {
        v: PROTOCOL_VERSION,
        deployment_id: id.clone(),
        result,
        request_digest: digest.cloned(),
    }
}

/// Shortens `deploy_stdout` / `deploy_stderr` until the `finished` message fits in
/// `budget` bytes, sharing the room fairly (a short stream is kept whole, two long ones
/// get half each). If the rest of the result alone is too big, the outputs are dropped and
/// the deployment fails, since a result that cannot be delivered helps no one.
pub fn fit(
    id: &DeploymentId,
    digest: Option<&RequestDigest>,
    result: DeploymentResult,
    budget: usize,
) -> DeploymentResult {
    let size = |r: &DeploymentResult| {
        serde_json::to_vec(&finished(id, digest, r.clone())).map_or(usize::MAX, |b| b.len())
    };
    let mut r = result;
    // One pass is exact; the second only runs after the outputs were dropped.
    for _ in 0..3 {
        let len = size(&r);
        if len <= budget {
            return r;
        }
        let mut bare = r.clone();
        bare.deploy_stdout.clear();
        bare.deploy_stderr.clear();
        let base = size(&bare);
        let room = budget.saturating_sub(base);
        if room < 4 * json_len(TRUNCATED_MARKER) {
            r.outputs.clear();
            r.status = DeploymentStatus::Failed;
            r.status_reason = Some(format!(
                "result of {len} bytes does not fit in a broker message ({budget} bytes)"
            ));
            continue;
        }
        shorten_streams(&mut r.deploy_stdout, &mut r.deploy_stderr, room);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(stdout: usize, stderr: usize) -> DeploymentResult {
        DeploymentResult {
            status: DeploymentStatus::Complete,
            status_reason: None,
            outputs: [("o".to_owned(), serde_json::json!("v"))].into(),
            deploy_stdout: "a".repeat(stdout),
            deploy_stderr: "\u{1}".repeat(stderr),
            deploy_status_code: Some(0),
            started_at: None,
            finished_at: OffsetDateTime::UNIX_EPOCH,
        }
    }

    #[test]
    fn fit_shortens_the_streams_until_the_message_fits() {
        let id: DeploymentId = "d1".parse().expect("id");
        let small = result(10, 10);
        assert_eq!(fit(&id, None, small.clone(), 10_000), small);

        let budget = 1 << 20;
        let r = fit(&id, None, result(1 << 20, 1 << 18), budget);
        let len = serde_json::to_vec(&finished(&id, None, r.clone()))
            .expect("ser")
            .len();
        assert!(len <= budget, "{len}");
        assert!(r.deploy_stdout.ends_with(TRUNCATED_MARKER));
        assert_eq!(r.status, DeploymentStatus::Complete);
        assert_eq!(r.deploy_stdout.matches("[truncated]").count(), 1);
        // Two long streams share the room: neither is wiped out.
        assert!(
            r.deploy_stdout.len() > budget / 4,
            "{}",
            r.deploy_stdout.len()
        );
        assert!(
            r.deploy_stderr.len() > budget / 32,
            "{}",
            r.deploy_stderr.len()
        );
        // A short stream is kept whole.
        let r = fit(&id, None, result(1 << 21, 100), budget);
        assert_eq!(r.deploy_stderr, "\u{1}".repeat(100));
        let len = serde_json::to_vec(&finished(&id, None, r))
            .expect("ser")
            .len();
        assert!(len <= budget && len > budget - 64, "{len}");

        let mut huge = result(0, 0);
        huge.outputs
            .insert("big".into(), serde_json::json!("x".repeat(5000)));
        let r = fit(&id, None, huge, 2000);
        assert_eq!(r.status, DeploymentStatus::Failed);
        assert!(r.outputs.is_empty());
        assert!(r.status_reason.unwrap_or_default().contains("does not fit"));
    }
}
