//! Presence: online / offline derived from agents' heartbeats and the broker's own
//! disconnect advisories, emitted as events.
//!
//! The gateway follows `flue.<tenant>.hb.*` (core NATS). A registered server goes
//! **online** on its first heartbeat (or the first after being offline), and **offline**
//! at once on its agent's `stopping` heartbeat (reason `agent stopped`), when a new agent
//! instance replaces the one online (`agent restarted`, then online again), when the
//! broker reports the agent's connection closed (`agent disconnected (…)`, below), or
//! after a silence (`no heartbeat for N s`). The silence limit is `--presence-timeout-secs`
//! (default 10), or twice the agent's heartbeat interval when that is longer (60 s with
//! the agent's default 30 s), and it is checked every second ([`CHECK_INTERVAL`]): a
//! silent agent is reported offline at most limit + 1 s after its last heartbeat.
//!
//! In operator mode the gateway also follows its tenant account's disconnect advisories
//! (`$SYS.ACCOUNT.<account>.DISCONNECT`, over its system-account connection,
//! [`advisories`]): each heartbeat names the broker connection it came on
//! ([`flue_proto::BrokerConnection`]), and when the broker reports the connection of the
//! instance online closed by its agent, broken, or stale ([`Disconnect`]), the server
//! goes offline once [`DISCONNECT_GRACE`] passed without a heartbeat on a new connection
//! (a reconnection). A killed agent is so reported offline within about 2–3 s, whatever
//! its heartbeat interval, and heartbeats are only the fallback: for an agent whose
//! connection stays open while it is silent, a connection the gateway has not yet seen a
//! heartbeat on (an agent older than this, a gateway just started), agents behind a
//! tenant network's leaf node (their broker's advisories stay in it) and development mode
//! (no system account). A broker shutting down is not an agent leaving: its advisories
//! are ignored.
//!
//! The state of each server is kept in the KV bucket [`PRESENCE_BUCKET`] (`<tenant>.<server>`,
//! see [`Record`]), written only on transitions, each one a compare-and-set on the key's
//! revision, and the event is emitted only by the writer that won it. So a restarted gateway
//! does not report `online` again for an agent that stayed online, and two gateways seeing
//! the same heartbeats do not both report a transition (the loser re-reads the record; the
//! stable event ids also let the event stream drop a copy).
//!
//! No flapping on a broker restart: while the gateway's own broker connection is down no
//! server goes offline, and after it comes back (or after the gateway starts) every server
//! gets a full silence limit before it can be reported offline; agents send a heartbeat as
//! soon as they reconnect.
//!
//! Two agents running with the same server id do not flap it: the first replaced is
//! remembered in the record ([`Record::replaced`]), and its heartbeats are then ignored
//! (logged once a minute) while the other is online.
//!
//! Heartbeats of unregistered servers (or whose subject and payload disagree) are ignored;
//! registration is read from the store on a server's first heartbeat and re-read every
//! minute (every 5 s while unregistered), not on each heartbeat.

mod advisories;
mod bucket;
mod follow;
mod state;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use bytes::Bytes;
use flue_proto::event::ServerEventData;
use flue_proto::{
    AgentMetrics, BrokerConnection, CloudEvent, EventType, Heartbeat, HeartbeatState, Presence,
    PresenceStatus, ServerId, TenantId,
};
use time::OffsetDateTime;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::config::Config;
use crate::error::chain;
use crate::events::Events;
use crate::metrics::{TenantMetrics, agents};
use crate::store::{self, StoreError};

pub use advisories::{Advisories, follow_disconnects};
pub use follow::run;
pub use state::{Disconnect, Reason, Record, Step};

/// What following presence takes besides the tracker: the server records (a heartbeat
/// counts only from a registered server) and the event stream; cheap to clone.
#[derive(Debug, Clone)]
pub struct PresenceHandles {
    /// The server records.
    pub servers: store::Servers,
    /// Where `server.online` / `server.offline` go.
    pub events: Events,
    /// Told the id of each server found rebuilt (the stacks' `converge: auto` policy).
    pub rebuilt: Option<tokio::sync::mpsc::UnboundedSender<ServerId>>,
    /// Told the id of a server, with its agent instance, on each heartbeat of an agent
    /// pulling its sealed request consumer ([`Heartbeat::sealed_consumer`]; the move,
    /// `servers::sealed`, is done once per instance).
    pub sealed: Option<tokio::sync::mpsc::UnboundedSender<(ServerId, String)>>,
}

use bucket::{bucket, key, load, read};

pub use flue_proto::subject::PRESENCE_BUCKET;
/// How often silences are checked.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(1);
/// How long after the broker reported the connection of a server's agent closed the
/// server goes offline, unless a heartbeat came on a new connection meanwhile (an agent
/// reconnecting sends one at once). Checked with silences, so offline comes 2–3 s after.
pub const DISCONNECT_GRACE: Duration = Duration::from_secs(2);
/// How long a server found registered is trusted before its registration is read again.
const REGISTERED_RECHECK: Duration = Duration::from_secs(60);
/// How long a server found unregistered is ignored before its registration is read again.
const UNREGISTERED_RECHECK: Duration = Duration::from_secs(5);
/// Transitions one heartbeat may cause, counting re-reads after a lost compare-and-set.
const MAX_ROUNDS: usize = 4;
/// Least time between two logs of a server's rival agent.
const RIVAL_LOG_EVERY: Duration = Duration::from_secs(60);

/// What the gateway knows of every server's presence; cheap to clone.
#[derive(Debug, Clone)]
pub struct PresenceTracker {
    inner: Arc<Inner>,
    /// Where agents' heartbeat counters are added up.
    metrics: TenantMetrics,
}

#[derive(Debug)]
struct Inner {
    kv: kv::Store,
    client: async_nats::Client,
    tenant: TenantId,
    timeout: Duration,
    servers: Mutex<HashMap<ServerId, Tracked>>,
    /// The broker connection of each server's instance online, as its last heartbeat
    /// named it, for the disconnect advisories (never locked with `servers` held).
    connections: Mutex<HashMap<BrokerConnection, ServerId>>,
}

/// Whether a server is registered, as last read from the store.
#[derive(Debug, Clone, Default)]
enum Registered {
    #[default]
    Unchecked,
    Yes {
        name: String,
        checked: Instant,
    },
    No {
        checked: Instant,
    },
}

/// One server, in memory.
#[derive(Debug)]
struct Tracked {
    /// The stored record (`None`: none, or not decodable).
    record: Option<Record>,
    /// Revision of the key (0: absent), for compare-and-set.
    revision: u64,
    registered: Registered,
    /// When this gateway last got an `alive` heartbeat of it.
    last_beat: Option<Instant>,
    /// The same, as a time for events.
    last_seen: Option<OffsetDateTime>,
    /// Current silence limit.
    limit: Duration,
    /// A `stopping` whose offline could not be written yet.
    pending_stop: bool,
    /// When a rival agent of this server was last logged.
    rival_logged: Option<Instant>,
    /// The counters of its agent's last heartbeat, with that agent's instance.
    agent_counts: Option<(String, AgentMetrics)>,
    /// The version its agent's last heartbeat named, with that agent's instance.
    agent_version: Option<(String, String)>,
    /// The broker connection the instance online last sent a heartbeat on.
    connection: Option<BrokerConnection>,
    /// When the broker reported that connection closed, and how; cleared by a heartbeat.
    disconnected: Option<(Instant, Disconnect)>,
}

impl Tracked {
    fn new(timeout: Duration) -> Self {
        Self {
            record: None,
            revision: 0,
            registered: Registered::Unchecked,
            last_beat: None,
            last_seen: None,
            limit: timeout,
            pending_stop: false,
            rival_logged: None,
            agent_counts: None,
            agent_version: None,
            connection: None,
            disconnected: None,
        }
    }
}

/// Outcome of one compare-and-set write.
enum Written {
    /// Written: the record now stored.
    Done(Record),
    /// Another writer changed the record; it was read again.
    Conflict,
    Failed,
}

/// The presence of a server never seen.
pub fn unknown() -> Presence {
    Presence {
        status: PresenceStatus::Unknown,
        since: None,
        agent_instance: None,
        agent_version: None,
        reason: None,
    }
}

impl PresenceTracker {
    /// Opens (creating if missing) the presence bucket and loads this tenant's records.
    pub async fn open(js: &jetstream::Context, config: &Config) -> Result<Self, StoreError> {
        let kv = bucket(js, config.replicas()).await?;
        let timeout = config.presence_timeout();
        let tenant = config.tenant.clone();
        let mut servers = HashMap::new();
        for (server, record, revision) in load(&kv, &tenant).await? {
            let mut tracked = Tracked::new(timeout);
            if let Some(r) = &record {
                tracked.limit = state::silence_limit(timeout, r.interval_ms);
            }
            (tracked.record, tracked.revision) = (record, revision);
            servers.insert(server, tracked);
        }
        info!(
            servers = servers.len(),
            timeout_secs = timeout.as_secs(),
            "presence state loaded"
        );
        Ok(Self {
            inner: Arc::new(Inner {
                kv,
                client: js.client(),
                tenant,
                timeout,
                servers: Mutex::new(servers),
                connections: Mutex::new(HashMap::new()),
            }),
            metrics: TenantMetrics::default(),
        })
    }

    /// The same, adding up agents' heartbeat counters into `metrics`.
    pub fn counting(self, metrics: TenantMetrics) -> Self {
        Self { metrics, ..self }
    }

    /// How many servers are online, offline and unknown (tracked, but no presence
    /// recorded yet), leaving out those known to be deregistered: one pass over the
    /// servers in memory, under the tracker's lock, for `GET /metrics`.
    pub fn counts(&self) -> [u64; 3] {
        let mut counts = [0u64; 3];
        let deregistered = Reason::Deregistered.to_string();
        for t in self.lock().values() {
            if matches!(t.registered, Registered::No { .. }) {
                continue;
            }
            let i = match &t.record {
                Some(r) if r.reason.as_ref() == Some(&deregistered) => continue,
                Some(r) if r.is_online() => 0,
                Some(_) => 1,
                None => 2,
            };
            counts[i] += 1;
        }
        counts
    }

    /// The presence of `server`, for API reads; `None` when it was never seen (show
    /// [`unknown`]).
    pub fn view(&self, tenant: &TenantId, server: &ServerId) -> Option<Presence> {
        if tenant != &self.inner.tenant {
            return None;
        }
        self.lock().get(server).and_then(|t| {
            let mut view = t.record.as_ref().map(Record::view)?;
            // The version of the instance the record names, as its heartbeats said.
            view.agent_version = t
                .agent_version
                .as_ref()
                .filter(|(instance, _)| view.agent_instance.as_ref() == Some(instance))
                .map(|(_, version)| version.clone());
            Some(view)
        })
    }

    /// Forgets a deregistered server: it is recorded offline (`server deregistered`, with
    /// no `offline` event: its `deregistered` event says it) and its heartbeats are ignored
    /// from now on. Call it after the server's record is deleted.
    ///
    /// The record is kept, not deleted, so that the server's epoch, and with it its event
    /// ids, never repeat if it is registered again.
    pub async fn forget(&self, tenant: &TenantId, server: &ServerId) {
        if tenant != &self.inner.tenant {
            return;
        }
        self.with(server, |t| {
            t.registered = Registered::No {
                checked: Instant::now(),
            }
        });
        self.retire(server).await;
    }

    /// Notes that `server` was just registered (named `name`), so that its agent's very
    /// first heartbeat counts: without it, a server deregistered a moment ago would stay
    /// "unregistered" here until that answer is re-read ([`UNREGISTERED_RECHECK`]), and
    /// go online only on a later heartbeat. (Another gateway sharing the broker still
    /// re-reads on its own schedule.)
    pub fn note_registered(&self, tenant: &TenantId, server: &ServerId, name: &str) {
        if tenant != &self.inner.tenant {
            return;
        }
        self.with(server, |t| {
            t.registered = Registered::Yes {
                name: name.to_owned(),
                checked: Instant::now(),
            }
        });
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<ServerId, Tracked>> {
        self.inner.servers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on `server`'s entry, creating it if missing.
    fn with<T>(&self, server: &ServerId, f: impl FnOnce(&mut Tracked) -> T) -> T {
        let mut servers = self.lock();
        let tracked = servers
            .entry(server.clone())
            .or_insert_with(|| Tracked::new(self.inner.timeout));
        f(tracked)
    }

    /// True when `server` is registered, reading the store only when the cached answer is
    /// missing or old. A failed read keeps a positive answer and otherwise says no.
    async fn registered(&self, service: &PresenceHandles, server: &ServerId) -> bool {
        let cached = self.with(server, |t| t.registered.clone());
        match &cached {
            Registered::Yes { checked, .. } if checked.elapsed() < REGISTERED_RECHECK => {
                return true;
            }
            Registered::No { checked } if checked.elapsed() < UNREGISTERED_RECHECK => return false,
            _ => {}
        }
        let now = Instant::now();
        let found = match service.servers.get(&self.inner.tenant, server).await {
            Ok(Some(s)) => Registered::Yes {
                name: s.name,
                checked: now,
            },
            Ok(None) => {
                debug!(server.id = %server, "heartbeat of an unregistered server; ignored");
                Registered::No { checked: now }
            }
            Err(e) => {
                debug!(error = %chain(&e), server.id = %server, "cannot read the server's registration");
                return matches!(cached, Registered::Yes { .. });
            }
        };
        let yes = matches!(found, Registered::Yes { .. });
        self.with(server, |t| t.registered = found);
        if !yes {
            self.retire(server).await;
        }
        yes
    }

    /// Records a server no longer registered offline, without an event, if it was online.
    async fn retire(&self, server: &ServerId) {
        for _ in 0..MAX_ROUNDS {
            let online = self.with(server, |t| {
                t.last_beat = None;
                t.pending_stop = false;
                t.disconnected = None;
                t.record.as_ref().is_some_and(Record::is_online)
            });
            if !online {
                return;
            }
            match self
                .write_record(server, &Step::Offline(Reason::Deregistered))
                .await
            {
                Written::Done(_) => {
                    info!(server.id = %server, "server no longer registered; presence retired");
                    return;
                }
                Written::Conflict => {}
                Written::Failed => return,
            }
        }
    }

    /// One heartbeat: makes the transitions it calls for and remembers it.
    async fn heartbeat(&self, service: &PresenceHandles, beat: Heartbeat) {
        let server = beat.server.clone();
        if !self.registered(service, &server).await {
            return;
        }
        let now = (Instant::now(), OffsetDateTime::now_utc());
        match beat.state {
            // The last word of the instance online: the last heartbeat its offline reports.
            HeartbeatState::Stopping => self.with(&server, |t| t.last_seen = Some(now.1)),
            // Remembered after the transitions, so that an `agent restarted` offline
            // reports the old instance's last heartbeat, not the new one's.
            HeartbeatState::Alive => {}
        }
        self.follow(service, &beat).await;
        let rival = self.rival(&beat);
        if beat.sealed_consumer
            && !rival
            && let Some(tell) = &service.sealed
        {
            // Nobody listening any more: the gateway is stopping.
            let _ = tell.send((server.clone(), beat.instance.clone()));
        }
        if let Some(counts) = beat.metrics.filter(|_| !rival) {
            let increments = self.with(&server, |t| {
                let inc = agents::increments(t.agent_counts.as_ref(), &beat.instance, &counts);
                t.agent_counts = Some((beat.instance.clone(), counts));
                inc
            });
            self.metrics.agents().add(&increments);
        }
        if beat.state == HeartbeatState::Alive && !rival {
            let limit = state::silence_limit(self.inner.timeout, beat.interval_ms);
            // A version is a short token (`0.1.0+<build id>`); anything longer is not kept.
            let version = beat.agent_version.clone().filter(|v| v.len() <= 64);
            let (old, new) = self.with(&server, |t| {
                t.last_beat = Some(now.0);
                t.last_seen = Some(now.1);
                t.limit = limit;
                t.agent_version = version.map(|v| (beat.instance.clone(), v));
                // A heartbeat is a connection alive: any closed one is behind it.
                t.disconnected = None;
                let online = t.record.as_ref().is_some_and(Record::is_online);
                let new = beat.connection.clone().filter(|_| online);
                (std::mem::replace(&mut t.connection, new.clone()), new)
            });
            if old.is_some() || new.is_some() {
                let mut connections = self.connections();
                if let Some(old) = old.filter(|old| Some(old) != new.as_ref()) {
                    connections.remove(&old);
                }
                if let Some(new) = new {
                    connections.insert(new, server);
                }
            }
        }
    }

    /// The broker reported the connection `closed` ended, `how`: if it is the one the
    /// instance online of a server sent its heartbeats on, that server goes offline after
    /// [`DISCONNECT_GRACE`] unless a heartbeat comes first ([`Self::check`], in [`run`]).
    /// Memory only: no broker call.
    fn disconnected(&self, closed: &BrokerConnection, how: Disconnect) {
        let Some(server) = self.connections().remove(closed) else {
            return;
        };
        self.with(&server, |t| {
            if t.connection.as_ref() == Some(closed) {
                debug!(server.id = %server, %how, "the broker reports the agent's connection closed");
                t.connection = None;
                t.disconnected = Some((Instant::now(), how));
            }
        });
    }

    fn connections(&self) -> MutexGuard<'_, HashMap<BrokerConnection, ServerId>> {
        self.inner
            .connections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// True when `beat` is a [`state::rival`]'s: it neither changes the presence nor keeps
    /// the instance online alive. Logged at most once per [`RIVAL_LOG_EVERY`] and server.
    fn rival(&self, beat: &Heartbeat) -> bool {
        self.with(&beat.server, |t| {
            let Some(record) = t.record.as_ref().filter(|r| state::rival(Some(r), beat)) else {
                return false;
            };
            if t.rival_logged
                .is_none_or(|at| at.elapsed() >= RIVAL_LOG_EVERY)
            {
                t.rival_logged = Some(Instant::now());
                warn!(
                    server.id = %beat.server,
                    instance = %beat.instance,
                    online_instance = record.agent_instance.as_deref().unwrap_or(""),
                    "two agents run with the same server id; the one replaced is ignored"
                );
            }
            true
        })
    }

    /// Makes the transitions `beat` calls for, one at a time, re-reading the record after a
    /// lost compare-and-set.
    async fn follow(&self, service: &PresenceHandles, beat: &Heartbeat) {
        let server = &beat.server;
        for _ in 0..MAX_ROUNDS {
            let step = self.with(server, |t| state::after_heartbeat(t.record.as_ref(), beat));
            let Some(step) = step else { return };
            match self.transition(service, server, &step).await {
                Written::Done(_) | Written::Conflict => {}
                Written::Failed => {
                    if step == Step::Offline(Reason::Stopped) {
                        self.with(server, |t| t.pending_stop = true);
                    }
                    return;
                }
            }
        }
    }

    /// Reports offline every online server silent for longer than its limit, counting from
    /// `grace_from` at the earliest, and retries `stopping` offlines not written yet.
    async fn check(&self, service: &PresenceHandles, grace_from: Instant) {
        let now = Instant::now();
        let due: Vec<(ServerId, Step)> = self
            .lock()
            .iter()
            .filter_map(|(server, t)| {
                let online = t.record.as_ref().is_some_and(Record::is_online);
                let step = if t.pending_stop && online {
                    Some(Step::Offline(Reason::Stopped))
                } else {
                    state::after_disconnect(
                        t.record.as_ref(),
                        t.disconnected,
                        DISCONNECT_GRACE,
                        now,
                    )
                    .or_else(|| {
                        state::after_silence(
                            t.record.as_ref(),
                            t.last_beat,
                            grace_from,
                            t.limit,
                            now,
                        )
                    })
                };
                step.map(|s| (server.clone(), s))
            })
            .collect();
        for (server, step) in due {
            // A server deregistered meanwhile (by another gateway) is dropped, not reported.
            if self.registered(service, &server).await {
                self.transition(service, &server, &step).await;
            }
        }
    }

    /// Makes the transition `step`: writes the record and, if this write won, emits the
    /// event.
    async fn transition(
        &self,
        service: &PresenceHandles,
        server: &ServerId,
        step: &Step,
    ) -> Written {
        let before = self.with(server, |t| t.record.clone());
        let written = self.write_record(server, step).await;
        let Written::Done(record) = &written else {
            return written;
        };
        if let Some(old) = state::rebuilt(before.as_ref(), record) {
            self.report_rebuilt(service, server, record, old).await;
        }
        let (name, last_seen) = self.with(server, |t| {
            let name = match &t.registered {
                Registered::Yes { name, .. } => name.clone(),
                _ => String::new(),
            };
            // An online comes from the heartbeat being handled now.
            let last_seen = match step {
                Step::Online { .. } => Some(record.since),
                // None when no heartbeat reached this gateway process.
                Step::Offline(_) => t.last_seen,
            };
            (name, last_seen)
        });
        let ty = step.event_type();
        info!(
            server.id = %server,
            status = ?record.status,
            epoch = record.epoch,
            reason = record.reason.as_deref().unwrap_or(""),
            "server presence changed"
        );
        let data = ServerEventData {
            server_id: server.clone(),
            name,
            agent_instance: record.agent_instance.clone(),
            reason: record.reason.clone(),
            last_seen,
        };
        let event = CloudEvent::new(
            ty,
            &self.inner.tenant,
            state::event_id(server, ty, record),
            format!("servers/{server}"),
            &data,
        )
        .server(server);
        service.events.emit(&event).await;
        written
    }

    /// `server.rebuilt`: the agent online now runs on a ledger newer than the one the
    /// server had (created at `old`); then the auto-converge task is told.
    async fn report_rebuilt(
        &self,
        service: &PresenceHandles,
        server: &ServerId,
        record: &Record,
        old: OffsetDateTime,
    ) {
        let new = record.ledger_created_at.unwrap_or(record.since);
        let reason = format!(
            "its agent runs on a new, empty ledger (created {}) instead of the one created {}: the server was rebuilt, what its deployments applied may be gone",
            rfc3339(new),
            rfc3339(old)
        );
        warn!(server.id = %server, %reason, "server rebuilt");
        let name = self.with(server, |t| match &t.registered {
            Registered::Yes { name, .. } => name.clone(),
            _ => String::new(),
        });
        let data = ServerEventData {
            server_id: server.clone(),
            name,
            agent_instance: record.agent_instance.clone(),
            reason: Some(reason),
            last_seen: Some(record.since),
        };
        let event = CloudEvent::new(
            EventType::ServerRebuilt,
            &self.inner.tenant,
            format!("server:{server}:rebuilt:{}", rfc3339(new)),
            format!("servers/{server}"),
            &data,
        )
        .server(server);
        service.events.emit(&event).await;
        if let Some(tell) = &service.rebuilt {
            let _ = tell.send(server.clone());
        }
    }

    /// Writes the record after `step` with compare-and-set on the key's revision.
    async fn write_record(&self, server: &ServerId, step: &Step) -> Written {
        let (record, revision) = self.with(server, |t| {
            let next = state::next_record(t.record.as_ref(), step, OffsetDateTime::now_utc());
            (next, t.revision)
        });
        let key = key(&self.inner.tenant, server);
        let value = Bytes::from(serde_json::to_vec(&record).expect("a presence record serialises"));
        match self.inner.kv.update(&key, value, revision).await {
            Ok(revision) => {
                self.with(server, |t| {
                    if !record.is_online() {
                        t.disconnected = None;
                    }
                    t.record = Some(record.clone());
                    t.revision = revision;
                    t.pending_stop = false;
                });
                Written::Done(record)
            }
            Err(e) if crate::store::lost_race(&e) => {
                debug!(server.id = %server, "presence changed by another gateway; read again");
                self.reload(server).await;
                Written::Conflict
            }
            Err(e) => {
                warn!(error = %e, server.id = %server, "cannot record a presence change; retried later");
                Written::Failed
            }
        }
    }

    /// Reads `server`'s record and revision again.
    async fn reload(&self, server: &ServerId) {
        match read(&self.inner.kv, &key(&self.inner.tenant, server)).await {
            Ok((record, revision)) => self.with(server, |t| {
                t.record = record;
                t.revision = revision;
            }),
            Err(e) => {
                debug!(error = %chain(&e), server.id = %server, "cannot read a presence record")
            }
        }
    }
}

/// `t` as RFC 3339 text.
fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| t.unix_timestamp().to_string())
}
