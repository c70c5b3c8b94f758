//! The presence task: reads heartbeats, checks silences every second, and watches the
//! gateway's own broker connection so that nobody goes offline because of it.

use std::time::Duration;

use async_nats::connection::State;
use flue_proto::{Heartbeat, TenantId, subject};
use futures_util::StreamExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::{CHECK_INTERVAL, PresenceHandles, PresenceTracker};

/// Least time between two logs of ignored heartbeats.
const NOISE_LOG_EVERY: Duration = Duration::from_secs(60);

/// Follows heartbeats and emits online / offline until cancelled.
pub async fn run(tracker: PresenceTracker, service: PresenceHandles, cancel: CancellationToken) {
    let client = tracker.inner.client.clone();
    let subject = subject::tenant_heartbeats(&tracker.inner.tenant);
    let mut heartbeats = match client.subscribe(subject.clone()).await {
        Ok(s) => s,
        Err(e) => {
            warn!(error = %e, subject, "cannot follow heartbeats; presence stays as it is");
            cancel.cancelled().await;
            return;
        }
    };
    let mut link = Link::new(&client);
    let mut noise = Noise::default();
    let mut tick = tokio::time::interval(CHECK_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // Heartbeats first: a silence is only judged once every waiting heartbeat is read.
        tokio::select! {
            biased;
            () = cancel.cancelled() => return,
            msg = heartbeats.next() => match msg {
                Some(msg) => match parse(&tracker.inner.tenant, &msg) {
                    Ok(beat) => tracker.heartbeat(&service, beat).await,
                    Err(why) => noise.ignored(&msg.subject, why),
                },
                None => {
                    // The client is closed: the gateway is shutting down.
                    cancel.cancelled().await;
                    return;
                }
            },
            _ = tick.tick() => {
                if let Some(grace_from) = link.observe(&client) {
                    tracker.check(&service, grace_from).await;
                }
            }
        }
    }
}

/// The gateway's own broker connection, watched between two checks.
struct Link {
    connects: u64,
    connected: bool,
    grace_from: Instant,
}

impl Link {
    fn new(client: &async_nats::Client) -> Self {
        Self {
            connects: client
                .statistics()
                .connects
                .load(std::sync::atomic::Ordering::Relaxed),
            connected: client.connection_state() == State::Connected,
            grace_from: Instant::now(),
        }
    }

    /// `None` while disconnected (nobody may go offline); otherwise when silences start to
    /// count: the gateway's start or its last reconnection.
    fn observe(&mut self, client: &async_nats::Client) -> Option<Instant> {
        let connected = client.connection_state() == State::Connected;
        let connects = client
            .statistics()
            .connects
            .load(std::sync::atomic::Ordering::Relaxed);
        let reconnected = connected && (!self.connected || connects != self.connects);
        self.connected = connected;
        self.connects = connects;
        if reconnected {
            self.grace_from = Instant::now();
            info!("broker connection back; presence timeouts start again");
        }
        connected.then_some(self.grace_from)
    }
}

/// Rate-limited log of ignored heartbeats.
#[derive(Default)]
struct Noise {
    last_log: Option<Instant>,
    suppressed: u64,
}

impl Noise {
    fn ignored(&mut self, subject: &str, why: &'static str) {
        if self.last_log.is_some_and(|t| t.elapsed() < NOISE_LOG_EVERY) {
            self.suppressed += 1;
            return;
        }
        debug!(
            subject,
            reason = why,
            suppressed = self.suppressed,
            "heartbeat ignored"
        );
        self.last_log = Some(Instant::now());
        self.suppressed = 0;
    }
}

/// The heartbeat in `msg`, if it is one of `tenant` sent on its own server's subject.
fn parse(tenant: &TenantId, msg: &async_nats::Message) -> Result<Heartbeat, &'static str> {
    let beat: Heartbeat =
        serde_json::from_slice(&msg.payload).map_err(|_| "payload is not a heartbeat")?;
    if &beat.tenant != tenant || msg.subject.as_str() != subject::heartbeat(tenant, &beat.server) {
        return Err("subject and payload disagree");
    }
    Ok(beat)
}
