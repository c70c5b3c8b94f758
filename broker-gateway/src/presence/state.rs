//! The rules of presence, free of I/O: what a heartbeat or a silence changes, and the
//! record of each server kept in the `flue_presence` bucket.

use std::fmt;
use std::time::Duration;

use flue_proto::{EventType, Heartbeat, HeartbeatState, Presence, PresenceStatus, ServerId};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use tokio::time::Instant;

/// Longest agent heartbeat interval the silence limit follows (the agent's own maximum).
const MAX_FOLLOWED_INTERVAL: Duration = Duration::from_secs(60);
/// Replaced agent instances a record remembers (the most recent ones).
const MAX_REPLACED: usize = 8;

/// A server's presence as stored under `<tenant>.<server>`; written only on transitions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// `online` or `offline` (never `unknown`: an unknown server has no record).
    pub status: PresenceStatus,
    /// Counts the server's online periods: incremented when it goes online, so the events
    /// of one period share it (`server:<id>:online:<epoch>`, `server:<id>:offline:<epoch>`).
    pub epoch: u64,
    /// When the status last changed.
    #[serde(with = "time::serde::rfc3339")]
    pub since: OffsetDateTime,
    /// The agent instance the status is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_instance: Option<String>,
    /// Why it is offline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The agent's heartbeat interval when it went online, in milliseconds.
    #[serde(default)]
    pub interval_ms: u64,
    /// Instances a newer one replaced while online (`agent restarted`), most recent last.
    /// A restarted agent's old instance is gone; one that still sends heartbeats is a
    /// second agent claiming the same server id, and must not take it back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replaced: Vec<String>,
    /// When the ledger of the agent last online was created (its heartbeats say so;
    /// absent for older agents): a later one is a server rebuilt under the same id.
    #[serde(
        default,
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub ledger_created_at: Option<OffsetDateTime>,
}

impl Record {
    /// True when the record says online.
    pub fn is_online(&self) -> bool {
        self.status == PresenceStatus::Online
    }

    /// The API view.
    pub fn view(&self) -> Presence {
        Presence {
            status: self.status,
            since: Some(self.since),
            agent_instance: self.agent_instance.clone(),
            agent_version: None,
            reason: self.reason.clone(),
        }
    }
}

/// Why a server went offline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Its agent said `stopping`.
    Stopped,
    /// A new agent instance replaced the one that was online.
    Restarted,
    /// No heartbeat for this long.
    Silent(Duration),
    /// The broker reported the connection of the agent online closed, and no heartbeat
    /// came on a new one.
    Disconnected(Disconnect),
    /// The server was deregistered (reported by its `deregistered` event, not an `offline`).
    Deregistered,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stopped => f.write_str("agent stopped"),
            Self::Restarted => f.write_str("agent restarted"),
            Self::Silent(limit) => write!(f, "no heartbeat for {} s", limit.as_secs()),
            Self::Disconnected(how) => write!(f, "agent disconnected ({how})"),
            Self::Deregistered => f.write_str("server deregistered"),
        }
    }
}

/// How an agent's broker connection ended, as the broker's disconnect advisory says: only
/// the ends that mean the agent is gone. Others (the broker shutting down, a slow
/// consumer, an authorization change) are left to heartbeats: the agent reconnects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disconnect {
    /// Its side closed it: the agent's process ended or was killed (`Client Closed`).
    Closed,
    /// It broke (`Read Error`: reset by the agent's host or the network).
    Broken,
    /// The agent stopped answering the broker's pings (`Stale Connection`).
    Stale,
}

impl Disconnect {
    /// The end nats-server's advisory `reason` names, if it is one that means the agent
    /// is gone.
    pub fn from_reason(reason: &str) -> Option<Self> {
        match reason {
            "Client Closed" => Some(Self::Closed),
            "Read Error" => Some(Self::Broken),
            "Stale Connection" => Some(Self::Stale),
            _ => None,
        }
    }
}

impl fmt::Display for Disconnect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Closed => "connection closed",
            Self::Broken => "connection broken",
            Self::Stale => "no answer to the broker's pings",
        })
    }
}

/// A transition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Online, for this agent instance with this heartbeat interval.
    Online {
        /// The instance whose heartbeat brought it online.
        instance: String,
        /// Its heartbeat interval, in milliseconds.
        interval_ms: u64,
        /// When its ledger was created, if it says.
        ledger_created_at: Option<OffsetDateTime>,
    },
    /// Offline.
    Offline(Reason),
}

impl Step {
    /// The event type it is reported with.
    pub fn event_type(&self) -> EventType {
        match self {
            Self::Online { .. } => EventType::ServerOnline,
            Self::Offline(_) => EventType::ServerOffline,
        }
    }
}

/// The next transition a heartbeat calls for, given the stored record; applied one at a
/// time and asked again, so a new instance while online gives `Offline(Restarted)`, then
/// `Online`.
///
/// An `alive` heartbeat of a [`rival`] changes nothing: two agents running with the same
/// server id would otherwise replace each other on every heartbeat, endlessly.
pub fn after_heartbeat(stored: Option<&Record>, beat: &Heartbeat) -> Option<Step> {
    let online = stored.filter(|r| r.is_online());
    let same_instance = online.is_some_and(|r| r.agent_instance.as_deref() == Some(&beat.instance));
    match beat.state {
        HeartbeatState::Alive if same_instance => None,
        HeartbeatState::Alive if rival(stored, beat) => None,
        HeartbeatState::Alive if online.is_some() => Some(Step::Offline(Reason::Restarted)),
        HeartbeatState::Alive => Some(Step::Online {
            instance: beat.instance.clone(),
            interval_ms: beat.interval_ms,
            ledger_created_at: beat.ledger_created_at,
        }),
        // A stopping instance that is not the one online is an old one: its successor lives.
        HeartbeatState::Stopping if same_instance => Some(Step::Offline(Reason::Stopped)),
        HeartbeatState::Stopping => None,
    }
}

/// True when `beat` comes from an instance that was replaced by the one now online, and
/// so still runs beside it: another agent claims the same server id. It is ignored while
/// the instance online lives; once that one is offline, it may come online again.
pub fn rival(stored: Option<&Record>, beat: &Heartbeat) -> bool {
    stored.is_some_and(|r| {
        r.is_online()
            && r.agent_instance.as_deref() != Some(&beat.instance)
            && r.replaced.iter().any(|i| i == &beat.instance)
    })
}

/// How long a server may stay silent: the configured timeout, or two heartbeat intervals of
/// its agent when that is longer (an agent told to beat rarely does not flap).
pub fn silence_limit(timeout: Duration, interval_ms: u64) -> Duration {
    let interval = Duration::from_millis(interval_ms).min(MAX_FOLLOWED_INTERVAL);
    timeout.max(interval * 2)
}

/// `Offline(Silent)` when an online server's last sign of life is older than `limit`.
///
/// The last sign of life is its last heartbeat, but never earlier than `grace_from`: the
/// moment this gateway started or last got its broker connection back, since heartbeats
/// could not reach it before.
pub fn after_silence(
    stored: Option<&Record>,
    last_beat: Option<Instant>,
    grace_from: Instant,
    limit: Duration,
    now: Instant,
) -> Option<Step> {
    if !stored.is_some_and(Record::is_online) {
        return None;
    }
    let alive_at = last_beat.map_or(grace_from, |b| b.max(grace_from));
    (now.saturating_duration_since(alive_at) >= limit)
        .then_some(Step::Offline(Reason::Silent(limit)))
}

/// `Offline(Disconnected)` when an online server's agent connection was reported closed
/// at `at` and `grace` passed since without a heartbeat on a new connection (a heartbeat
/// clears it: the agent reconnected).
pub fn after_disconnect(
    stored: Option<&Record>,
    disconnected: Option<(Instant, Disconnect)>,
    grace: Duration,
    now: Instant,
) -> Option<Step> {
    if !stored.is_some_and(Record::is_online) {
        return None;
    }
    let (at, how) = disconnected?;
    (now.saturating_duration_since(at) >= grace).then_some(Step::Offline(Reason::Disconnected(how)))
}

/// The record after `step`.
pub fn next_record(stored: Option<&Record>, step: &Step, now: OffsetDateTime) -> Record {
    let epoch = stored.map_or(0, |r| r.epoch);
    let mut replaced = stored.map_or_else(Vec::new, |r| r.replaced.clone());
    match step {
        Step::Online {
            instance,
            interval_ms,
            ledger_created_at,
        } => {
            replaced.retain(|i| i != instance);
            Record {
                status: PresenceStatus::Online,
                epoch: epoch + 1,
                since: now,
                agent_instance: Some(instance.clone()),
                reason: None,
                interval_ms: *interval_ms,
                replaced,
                // An agent that does not say keeps what the last one said.
                ledger_created_at: ledger_created_at.or(stored.and_then(|r| r.ledger_created_at)),
            }
        }
        Step::Offline(reason) => {
            let agent_instance = stored.and_then(|r| r.agent_instance.clone());
            if let (Reason::Restarted, Some(old)) = (reason, &agent_instance) {
                replaced.retain(|i| i != old);
                replaced.push(old.clone());
                let excess = replaced.len().saturating_sub(MAX_REPLACED);
                replaced.drain(..excess);
            }
            Record {
                status: PresenceStatus::Offline,
                epoch,
                since: now,
                agent_instance,
                reason: Some(reason.to_string()),
                interval_ms: stored.map_or(0, |r| r.interval_ms),
                replaced,
                ledger_created_at: stored.and_then(|r| r.ledger_created_at),
            }
        }
    }
}

/// When the record `after` a transition says the server's agent runs on a newer ledger
/// than the one `before` knew: the creation time of the ledger it replaced. A server
/// rebuilt under the same id (its state gone, its agent installed again).
pub fn rebuilt(before: Option<&Record>, after: &Record) -> Option<OffsetDateTime> {
    let old = before?.ledger_created_at?;
    let new = after.ledger_created_at?;
    (new > old).then_some(old)
}

/// The event id of a transition that produced `record`: `server:<id>:online:<epoch>` or
/// `server:<id>:offline:<epoch>` (an offline keeps the epoch of the period it ends).
pub fn event_id(server: &ServerId, ty: EventType, record: &Record) -> String {
    format!("server:{server}:{}:{}", ty.name(), record.epoch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flue_proto::PROTOCOL_VERSION;

    fn beat(instance: &str, state: HeartbeatState) -> Heartbeat {
        Heartbeat {
            v: PROTOCOL_VERSION,
            tenant: "t".parse().expect("id"),
            server: "s".parse().expect("id"),
            instance: instance.into(),
            seq: 1,
            interval_ms: 3000,
            state,
            metrics: None,
            ledger_created_at: None,
            agent_version: None,
            connection: None,
            sealed_consumer: false,
        }
    }

    fn apply(stored: Option<Record>, step: &Step) -> Record {
        next_record(stored.as_ref(), step, OffsetDateTime::UNIX_EPOCH)
    }

    #[test]
    fn first_heartbeat_goes_online_and_the_same_instance_stays() {
        let step = after_heartbeat(None, &beat("a", HeartbeatState::Alive)).expect("online");
        let online = apply(None, &step);
        assert_eq!((online.status, online.epoch), (PresenceStatus::Online, 1));
        assert_eq!(online.agent_instance.as_deref(), Some("a"));
        assert_eq!(
            after_heartbeat(Some(&online), &beat("a", HeartbeatState::Alive)),
            None
        );
        let id = event_id(&"s".parse().expect("id"), step.event_type(), &online);
        assert_eq!(id, "server:s:online:1");
    }

    #[test]
    fn stopping_goes_offline_at_once_and_only_for_the_instance_online() {
        let online = apply(
            None,
            &after_heartbeat(None, &beat("a", HeartbeatState::Alive)).expect("step"),
        );
        assert_eq!(
            after_heartbeat(Some(&online), &beat("old", HeartbeatState::Stopping)),
            None
        );
        let step =
            after_heartbeat(Some(&online), &beat("a", HeartbeatState::Stopping)).expect("offline");
        assert_eq!(step, Step::Offline(Reason::Stopped));
        let offline = apply(Some(online), &step);
        assert_eq!(
            (offline.status, offline.epoch),
            (PresenceStatus::Offline, 1)
        );
        assert_eq!(offline.reason.as_deref(), Some("agent stopped"));
        assert_eq!(
            after_heartbeat(Some(&offline), &beat("a", HeartbeatState::Stopping)),
            None
        );
        let back =
            after_heartbeat(Some(&offline), &beat("b", HeartbeatState::Alive)).expect("online");
        assert_eq!(apply(Some(offline), &back).epoch, 2);
    }

    #[test]
    fn a_new_instance_while_online_is_a_restart() {
        let online = apply(
            None,
            &after_heartbeat(None, &beat("a", HeartbeatState::Alive)).expect("step"),
        );
        let step =
            after_heartbeat(Some(&online), &beat("b", HeartbeatState::Alive)).expect("offline");
        let offline = apply(Some(online), &step);
        assert_eq!(offline.reason.as_deref(), Some("agent restarted"));
        let step =
            after_heartbeat(Some(&offline), &beat("b", HeartbeatState::Alive)).expect("online");
        let online = apply(Some(offline), &step);
        assert_eq!(
            (online.epoch, online.agent_instance.as_deref()),
            (2, Some("b"))
        );
    }

    #[test]
    fn a_replaced_instance_still_beating_is_a_rival_and_takes_nothing_back() {
        let a = beat("a", HeartbeatState::Alive);
        let b = beat("b", HeartbeatState::Alive);
        let online_a = apply(None, &after_heartbeat(None, &a).expect("online"));
        // b appears: a is taken to have restarted as b.
        let step = after_heartbeat(Some(&online_a), &b).expect("offline");
        let offline = apply(Some(online_a), &step);
        assert_eq!(offline.replaced, ["a"]);
        let online_b = apply(Some(offline), &after_heartbeat(None, &b).expect("online"));
        assert_eq!((online_b.epoch, online_b.replaced.len()), (2, 1));
        // a beats on: a second agent with the same server id, not a new restart.
        assert!(rival(Some(&online_b), &a));
        assert_eq!(after_heartbeat(Some(&online_b), &a), None);
        assert!(!rival(Some(&online_b), &b));
        // A third instance still replaces b, and neither old one flips it back.
        let c = beat("c", HeartbeatState::Alive);
        let step = after_heartbeat(Some(&online_b), &c).expect("offline");
        let online_c = apply(
            Some(apply(Some(online_b), &step)),
            &after_heartbeat(None, &c).expect("online"),
        );
        assert_eq!(online_c.replaced, ["a", "b"]);
        assert_eq!(after_heartbeat(Some(&online_c), &a), None);
        assert_eq!(after_heartbeat(Some(&online_c), &b), None);
        // Once c is gone, a rival may come online: it is the agent left.
        let gone = apply(Some(online_c), &Step::Offline(Reason::Stopped));
        let step = after_heartbeat(Some(&gone), &a).expect("online");
        let online_a = apply(Some(gone), &step);
        assert_eq!(online_a.replaced, ["b"]);
        // The memory is bounded.
        let mut r = online_a;
        for n in 0..20 {
            r = apply(Some(r), &Step::Offline(Reason::Restarted));
            r = apply(
                Some(r),
                &Step::Online {
                    instance: format!("i{n}"),
                    interval_ms: 1,
                    ledger_created_at: None,
                },
            );
        }
        assert_eq!(r.replaced.len(), MAX_REPLACED);
        assert_eq!(r.replaced.last().map(String::as_str), Some("i18"));
    }

    #[test]
    fn silence_counts_from_the_last_beat_or_the_grace_start_whichever_is_later() {
        let online = apply(
            None,
            &after_heartbeat(None, &beat("a", HeartbeatState::Alive)).expect("step"),
        );
        let t0 = Instant::now();
        let limit = Duration::from_secs(10);
        let at = |secs| t0 + Duration::from_secs(secs);
        assert_eq!(
            after_silence(Some(&online), Some(t0), t0, limit, at(9)),
            None
        );
        assert_eq!(
            after_silence(Some(&online), Some(t0), t0, limit, at(10)),
            Some(Step::Offline(Reason::Silent(limit)))
        );
        // The broker connection came back at 5 s: a full limit from there.
        assert_eq!(
            after_silence(Some(&online), Some(t0), at(5), limit, at(14)),
            None
        );
        assert!(after_silence(Some(&online), None, at(5), limit, at(15)).is_some());
        let offline = apply(Some(online), &Step::Offline(Reason::Silent(limit)));
        assert_eq!(offline.reason.as_deref(), Some("no heartbeat for 10 s"));
        assert_eq!(
            after_silence(Some(&offline), Some(t0), t0, limit, at(99)),
            None
        );
    }

    #[test]
    fn a_closed_connection_takes_an_online_server_offline_after_the_grace_only() {
        let online = apply(
            None,
            &after_heartbeat(None, &beat("a", HeartbeatState::Alive)).expect("step"),
        );
        let t0 = Instant::now();
        let grace = Duration::from_secs(2);
        let at = |secs| t0 + Duration::from_secs(secs);
        let closed = Some((t0, Disconnect::Closed));
        assert_eq!(after_disconnect(Some(&online), None, grace, at(99)), None);
        assert_eq!(after_disconnect(Some(&online), closed, grace, at(1)), None);
        let step = after_disconnect(Some(&online), closed, grace, at(2)).expect("offline");
        assert_eq!(
            step,
            Step::Offline(Reason::Disconnected(Disconnect::Closed))
        );
        let offline = apply(Some(online), &step);
        assert_eq!(
            offline.reason.as_deref(),
            Some("agent disconnected (connection closed)")
        );
        assert_eq!(after_disconnect(Some(&offline), closed, grace, at(9)), None);
        // Only the ends that mean the agent is gone count.
        assert_eq!(
            Disconnect::from_reason("Stale Connection"),
            Some(Disconnect::Stale)
        );
        assert_eq!(
            Disconnect::from_reason("Read Error"),
            Some(Disconnect::Broken)
        );
        for other in [
            "Server Shutdown",
            "Slow Consumer (Write Deadline)",
            "Authentication Revoked",
            "",
        ] {
            assert_eq!(Disconnect::from_reason(other), None, "{other}");
        }
    }

    #[test]
    fn the_limit_follows_a_slow_agent_up_to_a_bound() {
        let timeout = Duration::from_secs(10);
        assert_eq!(silence_limit(timeout, 3000), timeout);
        assert_eq!(silence_limit(timeout, 30_000), Duration::from_secs(60));
        assert_eq!(silence_limit(timeout, u64::MAX), Duration::from_secs(120));
    }

    #[test]
    fn only_a_later_ledger_is_a_rebuild() {
        let at = |secs| Some(OffsetDateTime::UNIX_EPOCH + time::Duration::seconds(secs));
        let online = |ledger| {
            apply(
                None,
                &Step::Online {
                    instance: "a".into(),
                    interval_ms: 1,
                    ledger_created_at: ledger,
                },
            )
        };
        let (old, same, newer, unsaid) =
            (online(at(10)), online(at(10)), online(at(20)), online(None));
        assert_eq!(rebuilt(Some(&old), &newer), at(10));
        assert_eq!(rebuilt(Some(&old), &same), None);
        assert_eq!(rebuilt(Some(&newer), &old), None);
        assert_eq!(rebuilt(None, &newer), None, "first time seen");
        assert_eq!(
            rebuilt(Some(&unsaid), &newer),
            None,
            "an older agent said nothing"
        );
        // An agent that does not say keeps what the last one said.
        let kept = next_record(
            Some(&old),
            &Step::Online {
                instance: "b".into(),
                interval_ms: 1,
                ledger_created_at: None,
            },
            OffsetDateTime::UNIX_EPOCH,
        );
        assert_eq!(kept.ledger_created_at, at(10));
    }

    #[test]
    fn records_round_trip() {
        let r = apply(
            None,
            &Step::Online {
                instance: "a".into(),
                interval_ms: 1,
                ledger_created_at: None,
            },
        );
        let json = serde_json::to_string(&r).expect("json");
        assert!(json.contains(r#""status":"online""#), "{json}");
        assert_eq!(serde_json::from_str::<Record>(&json).expect("decodes"), r);
        assert_eq!(r.view().status, PresenceStatus::Online);
    }
}
