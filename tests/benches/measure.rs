//! Small measuring helpers of the layout bench (`layout.rs`): settings from the
//! environment, percentiles, a process's CPU time and the load average, as
//! `throughput.rs`, `backlog.rs` and `scale.rs` each define them for themselves.

use std::time::Duration;

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
