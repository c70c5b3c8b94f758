//! The handles the answer path works with, and nothing more: what applying an agent's
//! answer (or a polling server's signal) reads and writes.

use std::sync::Arc;

use flue_proto::TenantId;

use super::Signers;
use crate::broker::Broker;
use crate::events::Events;
use crate::store;
use crate::timeouts::TimeoutSet;

/// What applying answers takes; cheap to clone.
#[derive(Debug, Clone)]
pub struct Answers {
    /// The tenant whose answers these are.
    pub tenant: TenantId,
    /// `--insecure-unsigned-answers`: an answer with no signature at all is applied.
    pub insecure_unsigned_answers: bool,
    /// The deployment and server records.
    pub deployments: store::Deployments,
    /// Server records (answer-signing keys, agents' sealing keys).
    pub servers: store::Servers,
    /// The response consumer, and what a record may hold (the broker's payload limit).
    pub broker: Broker,
    /// Where each step is reported.
    pub events: Events,
    /// Servers' answer-signing keys, recently read.
    pub signers: Signers,
    /// Deployments watched for their timeout: an ended one is no longer watched.
    pub timeouts: TimeoutSet,
    /// Opens hidden outputs sealed to the gateway's key.
    pub sealing: Arc<nkeys::XKey>,
}
