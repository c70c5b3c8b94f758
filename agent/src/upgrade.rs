//! Upgrading the agent itself: a deployment of the group [`UPGRADE_GROUP`] whose config body
//! is an [`AgentBuild`].
//!
//! 1. **Refused with nothing changed** unless the agent was given a release key
//!    (`--release-key`) and that key signed the build's version, size and SHA-256; then
//!    its chunks are read from the KV bucket `flue_builds` (direct gets) into
//!    `<exe>.new`, each chunk's length and the whole SHA-256 checked against the signed
//!    ones, and `<exe>.new version` must print the signed version within
//!    [`CHECK_TIMEOUT`]. Any failure removes `<exe>.new` and answers FAILED saying why.
//! 2. **Trial**: `started` is recorded in the ledger, the marker `<state-dir>/upgrade.json`
//!    written (`trial`), the request handed back to the broker (nak), and the agent shuts
//!    down cleanly and `exec`s `<exe>.new` with its own arguments (same PID: systemd keeps
//!    tracking it). `<exe>` is still the old build.
//! 3. **Commit**: the new build, once it has found its request consumer (connected with its
//!    credentials, ledger open), links `<exe>` to `<exe>.previous` and renames `<exe>.new`
//!    over `<exe>` (atomic), and marks the marker `committed`.
//! 4. **Rollback**: a new build that does not commit within [`HEALTHY_WITHIN`] marks the
//!    marker `rolled_back` and `exec`s the old `<exe>`; one that exits (crashes) is
//!    restarted by the agent's supervisor (systemd's `Restart=always`) as the old `<exe>`,
//!    which finds the marker still `trial` and rolls back the same way.
//! 5. **Answer, once**: the request comes back to whichever build runs; its ledger entry is
//!    `started`, and the marker names its digest, so instead of `interrupted` it is
//!    answered from the marker (COMPLETE `upgraded from A to B`, or FAILED with the
//!    rollback's reason), recorded, and the marker removed.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use flue_proto::{
    AgentMessage, DeploymentRequest, DeploymentResult, PROTOCOL_VERSION, RequestDigest,
};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use tracing::{error, info, warn};

use crate::config::Config;
use crate::deploy;
use crate::error::Error;
use crate::hook;
use crate::ledger::LedgerKey;
use crate::worker::Agent;

mod stage;

use stage::Staged;

pub use flue_proto::upgrade::UPGRADE_GROUP;

/// Longest the new build's `version` may take.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest the new build may take to find its request consumer before the old one is
/// run again.
pub const HEALTHY_WITHIN: Duration = Duration::from_secs(60);

/// The marker file in the state dir.
const MARKER_FILE: &str = "upgrade.json";

/// Where an upgrade stands, across the restart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marker {
    /// The digest of the upgrade request, which the answer names.
    pub digest: RequestDigest,
    /// The version that was running.
    pub from: String,
    /// The version being installed.
    pub to: String,
    /// The agent's executable (the old build until the commit).
    pub exe: PathBuf,
    /// Where the new build was staged.
    pub staged: PathBuf,
    /// Where it stands.
    pub state: MarkerState,
    /// Why it was rolled back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Where an upgrade stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MarkerState {
    /// The new build was started and has not come up yet.
    Trial,
    /// The new build came up and replaced the old one.
    Committed,
    /// The old build runs again.
    RolledBack,
}

/// `<exe>.new`, where a new build is staged (same directory: the switch is a rename).
pub fn staged_path(exe: &Path) -> PathBuf {
    suffixed(exe, ".new")
}

/// `<exe>.previous`, the build an upgrade replaced.
pub fn previous_path(exe: &Path) -> PathBuf {
    suffixed(exe, ".previous")
}

fn suffixed(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

fn marker_path(config: &Config) -> PathBuf {
    config.state_dir.join(MARKER_FILE)
}

/// The marker, if an upgrade is under way or unanswered. An unreadable marker is logged
/// and ignored (its request is then reported `interrupted`).
pub fn read_marker(config: &Config) -> Option<Marker> {
    let path = marker_path(config);
    let text = std::fs::read(&path).ok()?;
    match serde_json::from_slice(&text) {
        Ok(marker) => Some(marker),
        Err(e) => {
            error!(path = %path.display(), error = %e, "unreadable upgrade marker, ignored");
            None
        }
    }
}

fn write_marker(config: &Config, marker: &Marker) -> std::io::Result<()> {
    let path = marker_path(config);
    let tmp = suffixed(&path, ".tmp");
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(&serde_json::to_vec(marker).map_err(std::io::Error::other)?)?;
    file.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// At start, before the ledger is read for requests: an old build restarted while its
/// marker says `trial` means the new build did not come up; it rolls back. A new build
/// in trial gets [`HEALTHY_WITHIN`] to commit, after which it runs the old one again.
pub fn on_start(config: &Config) {
    let Some(mut marker) = read_marker(config) else {
        return;
    };
    if marker.state != MarkerState::Trial {
        return;
    }
    if config.version != marker.to {
        let reason = format!(
            "the new build {} did not come back healthy (it exited before finding its request queue); rolled back to {}",
            marker.to, config.version
        );
        rollback(config, &mut marker, reason);
        return;
    }
    info!(from = %marker.from, to = %marker.to, "upgrade trial: this build commits once it finds its request queue");
    let config = config.clone();
    std::thread::spawn(move || {
        std::thread::sleep(HEALTHY_WITHIN);
        let Some(mut marker) = read_marker(&config) else {
            return;
        };
        if marker.state == MarkerState::Trial {
            let reason = format!(
                "the new build {} did not find its request queue within {} s; rolled back to {}",
                marker.to,
                HEALTHY_WITHIN.as_secs(),
                marker.from
            );
            rollback(&config, &mut marker, reason);
            let exe = marker.exe.clone();
            let err = exec(&exe);
            error!(exe = %exe.display(), error = %err, "cannot run the old build again");
            std::process::exit(1);
        }
    });
}

fn rollback(config: &Config, marker: &mut Marker, reason: String) {
    warn!(reason = %reason, "agent upgrade rolled back");
    if let Err(e) = std::fs::remove_file(&marker.staged)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        warn!(path = %marker.staged.display(), error = %e, "cannot remove the staged build");
    }
    marker.state = MarkerState::RolledBack;
    marker.reason = Some(reason);
    if let Err(e) = write_marker(config, marker) {
        error!(error = %e, "cannot write the upgrade marker");
    }
}

/// Once the agent has found its request consumer: a build in trial replaces the old one.
/// Errors only when the switch failed, after rolling back: the caller runs the old build.
pub fn commit(config: &Config) -> Result<(), Error> {
    let Some(mut marker) = read_marker(config) else {
        return Ok(());
    };
    if marker.state != MarkerState::Trial || config.version != marker.to {
        return Ok(());
    }
    // Killed between the rename and the marker's write: the switch is done already.
    let running = std::env::current_exe().ok();
    let done = !marker.staged.exists() && running.as_ref() == Some(&marker.exe);
    let switched = (|| -> std::io::Result<()> {
        if done {
            return Ok(());
        }
        let previous = previous_path(&marker.exe);
        match std::fs::remove_file(&previous) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        std::fs::hard_link(&marker.exe, &previous)?;
        std::fs::rename(&marker.staged, &marker.exe)?;
        if let Some(dir) = marker.exe.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    match switched {
        Ok(()) => {
            marker.state = MarkerState::Committed;
            if let Err(e) = write_marker(config, &marker) {
                error!(error = %e, "cannot write the upgrade marker");
            }
            info!(from = %marker.from, to = %marker.to, "agent upgrade committed");
            Ok(())
        }
        Err(e) => {
            let reason = format!(
                "cannot install the new build as {}: {e}; rolled back to {}",
                marker.exe.display(),
                marker.from
            );
            rollback(config, &mut marker, reason);
            Err(Error::Restart { exe: marker.exe })
        }
    }
}

/// The answer to the upgrade request whose message has `digest`, found `started` in the
/// ledger, when the marker names it and the upgrade is over; the caller records it and
/// then calls [`answered`].
pub fn outcome(config: &Config, digest: &RequestDigest) -> Option<DeploymentResult> {
    let marker = read_marker(config).filter(|m| &m.digest == digest)?;
    let result = match marker.state {
        MarkerState::Trial => return None,
        MarkerState::Committed if config.version == marker.to => hook::nothing_run(Some(format!(
            "upgraded from {} to {}",
            marker.from, marker.to
        ))),
        MarkerState::Committed => deploy::failed(
            &format!(
                "the upgrade to {} was committed but this agent runs {}",
                marker.to, config.version
            ),
            None,
        ),
        MarkerState::RolledBack => {
            deploy::failed(marker.reason.as_deref().unwrap_or("rolled back"), None)
        }
    };
    Some(result)
}

/// The upgrade request was answered: the marker goes.
pub fn answered(config: &Config) {
    if let Err(e) = std::fs::remove_file(marker_path(config))
        && e.kind() != std::io::ErrorKind::NotFound
    {
        warn!(error = %e, "cannot remove the upgrade marker");
    }
}

/// Replaces this process with `exe`, given this process's arguments; returns only on
/// failure.
pub fn exec(exe: &Path) -> std::io::Error {
    use std::os::unix::process::CommandExt as _;
    std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .exec()
}

/// Handles a new upgrade request: refused (FAILED, nothing changed) or staged and
/// started, in which case the agent must restart as the new build ([`Error::Restart`]).
pub async fn apply(
    agent: &Agent,
    msg: &jetstream::Message,
    req: &DeploymentRequest,
    key: &LedgerKey,
    digest: &RequestDigest,
) -> Result<DeploymentResult, Error> {
    let seq = Some(deploy::stream_seq(msg));
    let (build, exe, staged) = match stage::stage(agent, req).await {
        Ok(Staged::Already(version)) => {
            let note = format!("already running {version}; nothing changed");
            return deploy::record(agent, key, digest, seq, hook::nothing_run(Some(note))).await;
        }
        Ok(Staged::Ready { build, exe, staged }) => (build, exe, staged),
        Err(reason) => {
            warn!(reason = %reason, "agent upgrade refused");
            let reason = format!("upgrade refused, nothing changed: {reason}");
            return deploy::record(agent, key, digest, seq, deploy::failed(&reason, None)).await;
        }
    };
    let now = OffsetDateTime::now_utc();
    agent
        .ledger
        .record_started(key, now, Some(digest), seq)
        .await?;
    let started = AgentMessage::Started {
        v: PROTOCOL_VERSION,
        deployment_id: req.deployment_id.clone(),
        at: now,
        request_digest: Some(digest.clone()),
    };
    agent
        .responder
        .publish_finished(&started, &agent.shutdown)
        .await;
    let marker = Marker {
        digest: digest.clone(),
        from: agent.config.version.clone(),
        to: build.version.clone(),
        exe,
        staged: staged.clone(),
        state: MarkerState::Trial,
        reason: None,
    };
    if let Err(e) = write_marker(&agent.config, &marker) {
        let _ = std::fs::remove_file(&staged);
        let reason =
            format!("upgrade refused, nothing changed: cannot write the upgrade marker: {e}");
        return deploy::record(agent, key, digest, seq, deploy::failed(&reason, None)).await;
    }
    // Back to the queue at once: the next build answers it.
    if let Err(e) = msg.ack_with(AckKind::Nak(None)).await {
        warn!(error = %e, "handing the upgrade request back failed; it comes back after the ack wait");
    }
    info!(from = %marker.from, to = %marker.to, staged = %staged.display(), "restarting as the new build");
    Err(Error::Restart { exe: staged })
}
