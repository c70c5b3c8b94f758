//! Small measuring helpers the benches share (`throughput.rs`, `backlog.rs`, `scale.rs`,
//! `layout.rs`): settings from the environment, percentiles, a process's CPU time and
//! RSS, the load average, and a bound on a phase. Each bench uses what it needs.
// Each bench includes this file as a module of its own and uses a part of it.
#![allow(dead_code)]

use std::future::Future;
use std::time::{Duration, Instant};

use flue_proto::{CreateDeployment, DeploymentStatus};

/// Linux reports `/proc/<pid>/stat` times in clock ticks of 1/100 s (`USER_HZ`).
const TICKS_PER_SEC: f64 = 100.0;

/// The environment variable `name` as a number, else `default`.
pub fn setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// The `p`th percentile of sorted samples.
pub fn pct(sorted: &[Duration], p: usize) -> Duration {
    sorted[((sorted.len() - 1) * p) / 100]
}

/// A duration in milliseconds.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// User + system CPU seconds a process has used.
pub fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("proc stat");
    // Fields counted after the command name's closing parenthesis: utime and stime are
    // the 12th and 13th there.
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 =
        fields[11].parse::<f64>().expect("utime") + fields[12].parse::<f64>().expect("stime");
    ticks / TICKS_PER_SEC
}

/// The 1, 5 and 15 minute load averages.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// CPUs this process may run on.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// VmRSS of a process, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// `fut`, or a panic naming the phase after `limit`: a phase that takes longer is a
/// finding, not a hang.
pub async fn bounded<T>(limit: Duration, fut: impl Future<Output = T>, phase: &str) -> T {
    tokio::time::timeout(limit, fut)
        .await
        .unwrap_or_else(|_| panic!("{phase} took longer than {limit:?}"))
}

/// One deployment of `body`, followed to COMPLETE: (accepted → result stored, from the
/// record's timestamps on the gateway's clock; POST sent → the client sees COMPLETE).
pub async fn deploy_once(
    client: &flue_client::Client,
    body: &CreateDeployment,
) -> (Duration, Duration) {
    let t = Instant::now();
    let d = client.create_deployment(body).await.expect("create");
    let done = client
        .wait_until_terminal(&d.id, Duration::from_secs(60), |_| {})
        .await
        .expect("finish");
    let observed = t.elapsed();
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    let stored = (done.updated_at - done.created_at)
        .as_seconds_f64()
        .max(0.0);
    (Duration::from_secs_f64(stored), observed)
}
