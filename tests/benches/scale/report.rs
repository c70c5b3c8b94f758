//! The scale bench's figures: one [`Run`] per size, printed as a Markdown table.

/// Every figure of one size.
#[derive(Debug, Default, Clone)]
pub struct Run {
    /// Registration of all N servers, seconds.
    pub register_secs: f64,
    /// Until every simulated agent pulls, seconds.
    pub connect_secs: f64,
    /// Broker VmRSS (KiB): before registration, registered, all agents connected.
    pub broker_rss_kib: [u64; 3],
    /// Gateway VmRSS (KiB), at the same three moments.
    pub gateway_rss_kib: [u64; 3],
    /// CPU seconds over the idle window: broker, gateway, load generator.
    pub idle_cpu_secs: [f64; 3],
    /// CPU seconds over the same window before any server was registered: broker, gateway.
    pub empty_cpu_secs: [f64; 2],
    /// `GET /v1/servers`, milliseconds.
    pub list_servers_ms: f64,
    /// Its body, KiB.
    pub list_servers_kib: f64,
    /// First POST → every deployment accepted, seconds.
    pub accept_all_secs: f64,
    /// First POST → every result seen, seconds.
    pub results_all_secs: f64,
    /// Accepted → result stored (gateway clock), ms: p50, p99, max.
    pub latency_ms: [f64; 3],
    /// p50 ms of accepted → delivered and of agent finished → stored.
    pub split_ms: [f64; 2],
    /// Deployments that ended other than COMPLETE.
    pub failed: usize,
    /// POSTs answered 503 ("retry later") and sent again.
    pub retried: usize,
    /// The group stack's creation through the engine workers.
    pub stack: StackRun,
    /// Broker SIGTERM → exit with every agent connected, seconds.
    pub broker_shutdown_secs: f64,
    /// Broker start-up on the same store with the agents stopped, seconds.
    pub broker_start_secs: f64,
    /// Broker SIGTERM → exit again, no agent, seconds.
    pub broker_idle_shutdown_secs: f64,
    /// Load averages before and after.
    pub load: [String; 2],
}

/// The group stack's figures (NaN: not done or not run).
#[derive(Debug, Clone)]
pub struct StackRun {
    /// `flue stack create` started → exited with CREATE_COMPLETE, seconds.
    pub cli_secs: f64,
    /// The operation's record: submitted → finished, seconds.
    pub op_secs: f64,
    /// Submitted → the first member's deployment created, seconds.
    pub to_first_secs: f64,
    /// Submitted → the last member's result stored, seconds.
    pub results_secs: f64,
    /// Each member's deployment created → result stored, ms: p50, p99, max.
    pub member_ms: [f64; 3],
    /// Member deployments COMPLETE.
    pub members_complete: f64,
    /// Workers that took the operation.
    pub attempts: f64,
    /// When the operation was accepted.
    pub submitted_at: Option<time::OffsetDateTime>,
}

impl Run {
    /// Marks the figures of the phases `--idle-only` skips as not measured.
    pub fn skipped(&mut self) {
        self.list_servers_ms = f64::NAN;
        self.list_servers_kib = f64::NAN;
        self.accept_all_secs = f64::NAN;
        self.results_all_secs = f64::NAN;
        self.latency_ms = [f64::NAN; 3];
        self.split_ms = [f64::NAN; 2];
    }

    /// Broker + gateway CPU at idle with `n` agents connected, above the same window with
    /// no server registered, in % of a core per 1,000 agents.
    pub fn idle_per_thousand(&self, n: usize) -> f64 {
        let busy = self.idle_cpu_secs[0] + self.idle_cpu_secs[1];
        let empty = self.empty_cpu_secs[0] + self.empty_cpu_secs[1];
        (busy - empty) / IDLE_SECS * 100.0 * 1000.0 / n as f64
    }
}

/// The idle window, seconds (the bench's `IDLE_WINDOW`).
const IDLE_SECS: f64 = 30.0;
/// Issue 24's goal for presence at idle: broker + gateway, % of a core per 1,000 agents.
const IDLE_GOAL: f64 = 2.0;

impl Default for StackRun {
    fn default() -> Self {
        Self {
            cli_secs: f64::NAN,
            op_secs: f64::NAN,
            to_first_secs: f64::NAN,
            results_secs: f64::NAN,
            member_ms: [f64::NAN; 3],
            members_complete: f64::NAN,
            attempts: f64::NAN,
            submitted_at: None,
        }
    }
}

/// Prints every figure of every size as a Markdown table, with the ratio of the largest
/// size to the smallest.
pub fn print_table(sizes: &[usize], runs: &[Run]) {
    type Figure = (&'static str, &'static str, Box<dyn Fn(&Run, usize) -> f64>);
    let figures: Vec<Figure> = vec![
        (
            "registration, all N (16 at a time)",
            "s",
            Box::new(|r, _| r.register_secs),
        ),
        (
            "registrations per second",
            "1/s",
            Box::new(|r, n| n as f64 / r.register_secs),
        ),
        (
            "agents connected and pulling, all N (64 at a time)",
            "s",
            Box::new(|r, _| r.connect_secs),
        ),
        (
            "broker RSS, before registration",
            "MiB",
            Box::new(|r, _| r.broker_rss_kib[0] as f64 / 1024.0),
        ),
        (
            "broker RSS, all connected",
            "MiB",
            Box::new(|r, _| r.broker_rss_kib[2] as f64 / 1024.0),
        ),
        (
            "broker RSS per registered server",
            "KiB",
            Box::new(|r, n| per(r.broker_rss_kib[1], r.broker_rss_kib[0], n)),
        ),
        (
            "broker RSS per connected agent",
            "KiB",
            Box::new(|r, n| per(r.broker_rss_kib[2], r.broker_rss_kib[1], n)),
        ),
        (
            "gateway RSS, before registration",
            "MiB",
            Box::new(|r, _| r.gateway_rss_kib[0] as f64 / 1024.0),
        ),
        (
            "gateway RSS, all connected",
            "MiB",
            Box::new(|r, _| r.gateway_rss_kib[2] as f64 / 1024.0),
        ),
        (
            "gateway RSS per registered server",
            "KiB",
            Box::new(|r, n| per(r.gateway_rss_kib[1], r.gateway_rss_kib[0], n)),
        ),
        (
            "gateway RSS per connected agent",
            "KiB",
            Box::new(|r, n| per(r.gateway_rss_kib[2], r.gateway_rss_kib[1], n)),
        ),
        (
            "idle 30 s, broker CPU",
            "s",
            Box::new(|r, _| r.idle_cpu_secs[0]),
        ),
        (
            "idle 30 s, gateway CPU",
            "s",
            Box::new(|r, _| r.idle_cpu_secs[1]),
        ),
        (
            "idle 30 s, load generator CPU",
            "s",
            Box::new(|r, _| r.idle_cpu_secs[2]),
        ),
        (
            "idle, broker + gateway CPU per 1,000 agents",
            "% of a core",
            Box::new(|r, n| {
                (r.idle_cpu_secs[0] + r.idle_cpu_secs[1]) / IDLE_SECS * 100.0 * 1000.0 / n as f64
            }),
        ),
        (
            "idle 30 s before registration (no server): broker CPU",
            "s",
            Box::new(|r, _| r.empty_cpu_secs[0]),
        ),
        (
            "idle 30 s before registration (no server): gateway CPU",
            "s",
            Box::new(|r, _| r.empty_cpu_secs[1]),
        ),
        (
            "idle, broker + gateway CPU per 1,000 agents above no server",
            "% of a core",
            Box::new(|r, n| r.idle_per_thousand(n)),
        ),
        ("GET /v1/servers", "ms", Box::new(|r, _| r.list_servers_ms)),
        (
            "GET /v1/servers body",
            "KiB",
            Box::new(|r, _| r.list_servers_kib),
        ),
        (
            "one deployment per server: all accepted (32 POSTs at a time)",
            "s",
            Box::new(|r, _| r.accept_all_secs),
        ),
        (
            "one deployment per server: all results stored",
            "s",
            Box::new(|r, _| r.results_all_secs),
        ),
        (
            "deployments per second, POST → all results",
            "1/s",
            Box::new(|r, n| n as f64 / r.results_all_secs),
        ),
        (
            "accepted → result stored, p50",
            "ms",
            Box::new(|r, _| r.latency_ms[0]),
        ),
        (
            "accepted → result stored, p99",
            "ms",
            Box::new(|r, _| r.latency_ms[1]),
        ),
        (
            "accepted → result stored, max",
            "ms",
            Box::new(|r, _| r.latency_ms[2]),
        ),
        (
            "deployments not COMPLETE",
            "",
            Box::new(|r, _| r.failed as f64),
        ),
        (
            "POSTs answered 503 (retry later) and sent again",
            "",
            Box::new(|r, _| r.retried as f64),
        ),
        (
            "stack, one group over all N: `flue stack create` → CREATE_COMPLETE",
            "s",
            Box::new(|r, _| r.stack.cli_secs),
        ),
        (
            "stack: operation submitted → finished (its record)",
            "s",
            Box::new(|r, _| r.stack.op_secs),
        ),
        (
            "stack: submitted → first member created",
            "s",
            Box::new(|r, _| r.stack.to_first_secs),
        ),
        (
            "stack: submitted → all results stored",
            "s",
            Box::new(|r, _| r.stack.results_secs),
        ),
        (
            "stack: member created → result stored, p50",
            "ms",
            Box::new(|r, _| r.stack.member_ms[0]),
        ),
        (
            "stack: member created → result stored, p99",
            "ms",
            Box::new(|r, _| r.stack.member_ms[1]),
        ),
        (
            "stack: members COMPLETE",
            "",
            Box::new(|r, _| r.stack.members_complete),
        ),
        (
            "stack: workers that took the operation",
            "",
            Box::new(|r, _| r.stack.attempts),
        ),
        (
            "broker shutdown, SIGTERM → exit, all connected",
            "s",
            Box::new(|r, _| r.broker_shutdown_secs),
        ),
        (
            "broker start-up after that, agents stopped (ready)",
            "s",
            Box::new(|r, _| r.broker_start_secs),
        ),
        (
            "broker shutdown again, no agents",
            "s",
            Box::new(|r, _| r.broker_idle_shutdown_secs),
        ),
    ];
    let last = sizes.len() - 1;
    print!("\n| figure | unit |");
    for n in sizes {
        print!(" N={n} |");
    }
    if last > 0 {
        print!(" ratio N={}/N={} |", sizes[last], sizes[0]);
    }
    println!();
    println!(
        "|---|---|{}{}",
        "---|".repeat(sizes.len()),
        if last > 0 { "---|" } else { "" }
    );
    for (name, unit, f) in &figures {
        print!("| {name} | {unit} |");
        let values: Vec<f64> = runs.iter().zip(sizes).map(|(r, &n)| f(r, n)).collect();
        for v in &values {
            print!(" {} |", fmt(*v));
        }
        if last > 0 {
            let ratio = if values[0] == 0.0 {
                f64::NAN
            } else {
                values[last] / values[0]
            };
            print!(" {:.2}× |", ratio);
        }
        println!();
    }
    for (run, n) in runs.iter().zip(sizes) {
        println!(
            "load average, N={n}: before {} / after {}",
            run.load[0], run.load[1]
        );
    }
    print_goals(sizes, runs);
}

/// Issue 24 point 7's two figures against their goals.
fn print_goals(sizes: &[usize], runs: &[Run]) {
    println!();
    for (run, &n) in runs.iter().zip(sizes) {
        let idle = run.idle_per_thousand(n);
        println!(
            "GOAL idle, N={n}: broker + gateway {} % of a core per 1,000 idle agents (above {} % with no server: probes) — goal ≤ {IDLE_GOAL} %: {}",
            fmt(idle),
            fmt((run.empty_cpu_secs[0] + run.empty_cpu_secs[1]) / IDLE_SECS * 100.0),
            if idle <= IDLE_GOAL { "met" } else { "NOT met" }
        );
        println!(
            "GOAL broker stop, N={n}: {} s with agents connected ({} ms per server), {} s without ({} ms per server)",
            fmt(run.broker_shutdown_secs),
            fmt(run.broker_shutdown_secs * 1000.0 / n as f64),
            fmt(run.broker_idle_shutdown_secs),
            fmt(run.broker_idle_shutdown_secs * 1000.0 / n as f64),
        );
    }
    if let ([first, .., last], [a, .., b]) = (sizes, runs) {
        let ratio = b.broker_shutdown_secs / a.broker_shutdown_secs;
        let grown = *last as f64 / *first as f64;
        println!(
            "GOAL broker stop scales ×{} for ×{} servers (N={first} → N={last}) — goal: independent of N (×1, read as ≤ ×1.5): {}",
            fmt(ratio),
            fmt(grown),
            // Within the noise of one run on a shared VM: half as long again at most.
            if ratio <= 1.5 { "met" } else { "NOT met" }
        );
    }
}

/// KiB more than `base`, per one of `n`.
fn per(kib: u64, base: u64, n: usize) -> f64 {
    kib.saturating_sub(base) as f64 / n as f64
}

/// Three significant figures.
fn fmt(v: f64) -> String {
    match v.abs() {
        x if x >= 100.0 => format!("{v:.0}"),
        x if x >= 10.0 => format!("{v:.1}"),
        _ => format!("{v:.2}"),
    }
}
