//! Staging a new build: the manifest checked against the release key, the chunks read by
//! direct get into `<exe>.new` (lengths and SHA-256 checked), and its `version` run; any
//! failure leaves nothing behind.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use flue_proto::DeploymentRequest;
use flue_proto::upgrade::{AgentBuild, BUILDS_BUCKET, CHUNK_SIZE, Sha256, chunk_key};
use tracing::warn;

use super::{CHECK_TIMEOUT, staged_path};
use crate::worker::Agent;

/// What staging came to.
pub(super) enum Staged {
    /// The build is the one running.
    Already(String),
    /// Staged and checked.
    Ready {
        build: AgentBuild,
        exe: PathBuf,
        staged: PathBuf,
    },
}

/// Checks the build and stages it at `<exe>.new`; why not, otherwise (nothing left).
pub(super) async fn stage(agent: &Agent, req: &DeploymentRequest) -> Result<Staged, String> {
    let build: AgentBuild = serde_json::from_value(req.config.config.clone())
        .map_err(|e| format!("the config body is not an agent build: {e}"))?;
    let key = agent
        .config
        .release_key
        .as_deref()
        .ok_or("this agent has no release key (start it with --release-key)")?;
    build.verify(key).map_err(|e| e.to_string())?;
    if build.version == agent.config.version {
        return Ok(Staged::Already(build.version));
    }
    let exe =
        std::env::current_exe().map_err(|e| format!("cannot tell the agent's executable: {e}"))?;
    let staged = staged_path(&exe);
    let fetched = async {
        fetch(agent, &build, &staged).await?;
        check(&staged, &build.version).await
    };
    if let Err(reason) = fetched.await {
        if let Err(e) = std::fs::remove_file(&staged)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            warn!(path = %staged.display(), error = %e, "cannot remove the staged build");
        }
        return Err(reason);
    }
    Ok(Staged::Ready { build, exe, staged })
}

/// Reads the build's chunks into `to` (mode 0700), checking each chunk's length and the
/// whole SHA-256.
async fn fetch(agent: &Agent, build: &AgentBuild, to: &Path) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let store = agent
        .broker
        .js
        .get_key_value(BUILDS_BUCKET)
        .await
        .map_err(|e| format!("cannot open the builds bucket: {e}"))?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o700)
        .open(to)
        .map_err(|e| format!("cannot write {}: {e}", to.display()))?;
    let mut sha = Sha256::default();
    let total = build.chunks();
    for n in 0..total {
        let chunk = store
            .get(chunk_key(&agent.config.tenant, &build.sha256, n))
            .await
            .map_err(|e| format!("cannot read chunk {n} of {total}: {e}"))?
            .ok_or_else(|| format!("chunk {n} of {total} is missing (upload the build first)"))?;
        let expected = CHUNK_SIZE.min(build.size - n * CHUNK_SIZE);
        if chunk.len() as u64 != expected {
            return Err(format!(
                "size: chunk {n} of {total} holds {} bytes, the signed size {} needs {expected}",
                chunk.len(),
                build.size
            ));
        }
        sha.update(&chunk);
        file.write_all(&chunk)
            .map_err(|e| format!("cannot write {}: {e}", to.display()))?;
    }
    file.sync_all()
        .map_err(|e| format!("cannot write {}: {e}", to.display()))?;
    let got = sha.finish_hex();
    if got != build.sha256 {
        return Err(format!(
            "sha256: the bytes read hash to {got}, the signed build is {}",
            build.sha256
        ));
    }
    Ok(())
}

/// Runs `<staged> version`: it must print `version` within [`CHECK_TIMEOUT`].
async fn check(staged: &Path, version: &str) -> Result<(), String> {
    let run = tokio::process::Command::new(staged)
        .arg("version")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(CHECK_TIMEOUT, run)
        .await
        .map_err(|_| {
            format!(
                "the new build's `version` did not end within {} s",
                CHECK_TIMEOUT.as_secs()
            )
        })?
        .map_err(|e| format!("the new build does not start: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "the new build's `version` failed ({})",
            output.status
        ));
    }
    let got = String::from_utf8_lossy(&output.stdout);
    if got.trim() != version {
        return Err(format!(
            "the new build reports version {:?}, not the signed {version:?}",
            got.trim()
        ));
    }
    Ok(())
}
