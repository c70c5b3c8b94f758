//! Presence heartbeats on `flue.<tenant>.hb.<server>` (core NATS, no stream).
//!
//! The agent announces itself at start, every `--heartbeat-secs` (default 30) after that, and
//! at once after every reconnection to the broker, so that a broker restart leaves no gap
//! longer than the reconnection itself. Every heartbeat carries the process's random
//! `instance` (a new one tells the gateway the agent restarted), a `seq` counting up from 1,
//! the interval until the next one and the broker connection it was sent on (the server's
//! id and the client id the broker gave it): a gateway following the broker's disconnect
//! advisories (operator mode) reports the server offline as soon as that connection
//! closes, so heartbeats are only the fallback for what the broker cannot see (a
//! connection open but the agent silent, a leaf node, development mode), which is why
//! they can be rare. On a clean shutdown the agent's last heartbeat says `stopping`, and
//! the gateway reports the server offline at once.
//!
//! Heartbeats run in their own task and never wait for deployment work, nor make it wait: a
//! heartbeat is skipped while the connection is down (the reconnection sends one), so they
//! never pile up in the client's outgoing buffer ahead of deployment answers.

use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::connection::State;
use flue_proto::{
    BrokerConnection, Heartbeat, HeartbeatState, PROTOCOL_VERSION, ServerId, TenantId, subject,
};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use crate::connect;
use crate::metrics::Counters;

/// Longest wait for one heartbeat to be handed to the client.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(1);

/// Publishes this agent process's heartbeats; shared by the heartbeat task and shutdown.
#[derive(Debug)]
pub struct Heartbeats {
    client: async_nats::Client,
    subject: String,
    tenant: TenantId,
    server: ServerId,
    instance: String,
    interval: Duration,
    seq: AtomicU64,
    counters: Option<Arc<Counters>>,
    ledger_created_at: Option<time::OffsetDateTime>,
    version: Option<String>,
    sealed_consumer: bool,
}

impl Heartbeats {
    /// Heartbeats of `server` of `tenant` on `client`, one every `interval`, with a fresh
    /// random instance id.
    pub fn new(
        client: async_nats::Client,
        tenant: TenantId,
        server: ServerId,
        interval: Duration,
    ) -> Self {
        Self {
            client,
            subject: subject::heartbeat(&tenant, &server),
            tenant,
            server,
            instance: new_instance(),
            interval,
            seq: AtomicU64::new(0),
            counters: None,
            ledger_created_at: None,
            version: None,
            sealed_consumer: false,
        }
    }

    /// The same, each heartbeat saying the agent pulls the sealed request consumer its
    /// user JWT names ([`flue_proto::Heartbeat::sealed_consumer`]) when `sealed`.
    pub fn with_sealed_consumer(mut self, sealed: bool) -> Self {
        self.sealed_consumer = sealed;
        self
    }

    /// The same, each heartbeat naming the agent build's version.
    pub fn with_version(mut self, version: &str) -> Self {
        self.version = Some(version.to_owned());
        self
    }

    /// The same, each heartbeat naming when the agent's ledger was created.
    pub fn with_ledger_created_at(mut self, at: Option<time::OffsetDateTime>) -> Self {
        self.ledger_created_at = at;
        self
    }

    /// The same, each heartbeat carrying `counters` ([`flue_proto::AgentMetrics`]).
    pub fn with_counters(mut self, counters: Arc<Counters>) -> Self {
        self.counters = Some(counters);
        self
    }

    /// This process's instance id.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// The next heartbeat in `state`, with the next sequence number.
    fn next(&self, state: HeartbeatState) -> Heartbeat {
        Heartbeat {
            v: PROTOCOL_VERSION,
            tenant: self.tenant.clone(),
            server: self.server.clone(),
            instance: self.instance.clone(),
            seq: self.seq.fetch_add(1, Ordering::Relaxed) + 1,
            interval_ms: u64::try_from(self.interval.as_millis()).unwrap_or(u64::MAX),
            state,
            metrics: self.counters.as_ref().map(|c| {
                let connects = self.client.statistics().connects.load(Ordering::Relaxed);
                c.snapshot(connects.saturating_sub(1))
            }),
            ledger_created_at: self.ledger_created_at,
            agent_version: self.version.clone(),
            connection: connection(&self.client),
            sealed_consumer: self.sealed_consumer,
        }
    }

    /// Hands one heartbeat to the client; false when it could not.
    async fn publish(&self, state: HeartbeatState) -> bool {
        let beat = self.next(state);
        let payload = serde_json::to_vec(&beat).expect("a heartbeat always serialises");
        let sent = tokio::time::timeout(
            PUBLISH_TIMEOUT,
            self.client.publish(self.subject.clone(), payload.into()),
        )
        .await;
        match sent {
            Ok(Ok(())) => true,
            Ok(Err(e)) => {
                debug!(error = %e, seq = beat.seq, "heartbeat not sent");
                false
            }
            Err(_) => {
                debug!(seq = beat.seq, "heartbeat not sent in time");
                false
            }
        }
    }

    /// Sends one `alive` heartbeat, unless the connection is down.
    async fn beat(&self) {
        if self.client.connection_state() == State::Connected {
            self.publish(HeartbeatState::Alive).await;
        }
    }

    /// Sends the last heartbeat, `stopping`, and flushes it (for at most `limit`), so that it
    /// leaves before the connection is drained. Nothing when the
    /// connection is down: the gateway then sees a silence instead.
    pub async fn stopping(&self, limit: Duration) {
        if self.client.connection_state() != State::Connected {
            debug!("broker connection down; no stopping heartbeat");
            return;
        }
        if !self.publish(HeartbeatState::Stopping).await {
            return;
        }
        match tokio::time::timeout(limit, self.client.flush()).await {
            Ok(Ok(())) => info!(instance = %self.instance, "stopping heartbeat sent"),
            Ok(Err(e)) => debug!(error = %e, "flushing the stopping heartbeat failed"),
            Err(_) => debug!("flushing the stopping heartbeat timed out"),
        }
    }
}

/// The broker connection `client` is on, as the broker names it; `None` before the
/// first `INFO` (or from a server that gives no client id).
fn connection(client: &async_nats::Client) -> Option<BrokerConnection> {
    let info = client.server_info();
    (info.client_id != 0 && !info.server_id.is_empty()).then_some(BrokerConnection {
        server_id: info.server_id,
        client_id: info.client_id,
    })
}

/// Sends heartbeats until `cancel`: one now, one every interval, and one right after each
/// reconnection (`connects` counts them).
pub async fn run(
    heartbeats: &Heartbeats,
    mut connects: watch::Receiver<u64>,
    cancel: CancellationToken,
) {
    info!(
        instance = %heartbeats.instance,
        interval_ms = heartbeats.interval.as_millis(),
        "sending heartbeats"
    );
    // The first connection may come after this task starts: it counts as a reconnection.
    connects.borrow_and_update();
    let mut reconnected = false;
    loop {
        if reconnected {
            // The connection is up (the client may not say so yet): send without asking.
            heartbeats.publish(HeartbeatState::Alive).await;
        } else {
            heartbeats.beat().await;
        }
        reconnected = tokio::select! {
            biased;
            () = cancel.cancelled() => return,
            () = connect::reconnected(&mut connects) => {
                debug!("reconnected to the broker, sending a heartbeat now");
                true
            }
            () = tokio::time::sleep(heartbeats.interval) => false,
        };
    }
}

/// A random id for this process: 64 bits as 16 hex digits.
///
/// The standard library seeds every `RandomState` from the OS's random source; mixing in
/// the clock and the pid keeps two quick restarts apart even so.
fn new_instance() -> String {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    hasher.write_u128(nanos);
    hasher.write_u32(std::process::id());
    format!("{:016x}", hasher.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instances_differ() {
        let a = new_instance();
        let b = new_instance();
        assert_eq!(a.len(), 16);
        assert_ne!(a, b);
    }
}
