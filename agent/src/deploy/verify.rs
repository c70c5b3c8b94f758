//! What the agent checks of a pulled message before anything else: the gateway's
//! signature (pinned key, this server and tenant, the body's digest, the expiry), that the
//! broker stored it under its signed message id within its signed publish window (so a
//! copy published again is refused even by an agent that lost its ledger), and that it is
//! not a replayed copy of a request the ledger already holds.

use async_nats::jetstream;
use flue_proto::signing::{self, Refusal, RefusalCode};
use flue_proto::{DeploymentRequest, RequestDigest};
use time::OffsetDateTime;

use crate::error::Error;
use crate::ledger::LedgerKey;
use crate::worker::Agent;

/// The message's sequence in the request stream (0 when the broker did not say).
pub(crate) fn stream_seq(msg: &jetstream::Message) -> u64 {
    msg.info().map_or(0, |info| info.stream_sequence)
}

/// Checks the gateway's signature on the message (its claims header against the pinned
/// `gateway_key`, the body against the signed digest, this server and tenant, the
/// expiry) and its publish window (`signing::verify_window`). An agent started with `--insecure-unsigned-requests` (no credentials) checks
/// nothing.
pub(super) fn verify(agent: &Agent, msg: &jetstream::Message) -> Result<(), Refusal> {
    let Some(credentials) = &agent.credentials else {
        return Ok(());
    };
    let header = |name: &str| {
        msg.headers
            .as_ref()
            .and_then(|h| h.get(name))
            .map(|v| v.as_str())
    };
    let cfg = &agent.config;
    let gateway_key = &credentials.settings.gateway_key;
    signing::verify_request(
        header(signing::REQUEST_CLAIMS_HEADER),
        header(signing::SIGNATURE_HEADER),
        gateway_key,
        &msg.payload,
        (&cfg.tenant, &cfg.server_id),
        OffsetDateTime::now_utc(),
    )?;
    let Ok(info) = msg.info() else {
        return Err(Refusal::new(
            RefusalCode::Undecodable,
            "no stream metadata on the message",
        ));
    };
    let stored = signing::Stored {
        window: header(signing::PUBLISH_WINDOW_HEADER),
        signature: header(signing::WINDOW_SIGNATURE_HEADER),
        msg_id: msg
            .headers
            .as_ref()
            .and_then(|h| h.get(async_nats::header::NATS_MESSAGE_ID))
            .map(|v| v.as_str()),
        stored: info.published,
    };
    signing::verify_window(stored, gateway_key, &msg.payload)
}

/// The signed claims name this very request (its deployment, server and tenant): the
/// digest already ties the body to them, this only refuses a gateway bug loudly.
pub(super) fn signed_for(
    agent: &Agent,
    msg: &jetstream::Message,
    req: &DeploymentRequest,
) -> Result<(), Refusal> {
    if agent.credentials.is_none() {
        return Ok(());
    }
    let claims = msg
        .headers
        .as_ref()
        .and_then(|h| h.get(signing::REQUEST_CLAIMS_HEADER))
        .and_then(|v| serde_json::from_str::<signing::RequestClaims>(v.as_str()).ok());
    match claims {
        Some(c)
            if c.deployment == req.deployment_id
                && c.server == req.server
                && c.tenant == req.tenant =>
        {
            Ok(())
        }
        _ => Err(Refusal::new(
            RefusalCode::BadSignature,
            "the signed claims do not name this request",
        )),
    }
}

/// A replay: the ledger holds this request (same identity, same digest) as handled from
/// another stream message. A redelivery of the same message (same sequence) is not one;
/// nor is anything an agent older than stream sequences recorded.
pub(super) fn replayed(
    agent: &Agent,
    key: &LedgerKey,
    digest: &RequestDigest,
    seq: u64,
) -> Result<Option<Refusal>, Error> {
    let Some(entry) = agent.ledger.get(key)? else {
        return Ok(None);
    };
    let recorded = match entry.stream_seq() {
        Some(recorded) if entry.digest() == Some(digest) && recorded != seq => recorded,
        _ => return Ok(None),
    };
    Ok(Some(Refusal::new(
        RefusalCode::Replayed,
        format!("this request was handled as message {recorded} of the request stream"),
    )))
}
