//! Network namespaces for the isolation proofs: namespaces and veth links made by the test
//! (and removed on drop, also when it panics), processes started inside a namespace, and
//! TCP reachability checks made from inside one.
//!
//! Everything lives inside namespaces the lab created: the root namespace gets no address,
//! route or interface (both ends of every veth are created directly in their namespaces).
//! Addresses are `10.250.<link>.1` and `.2`, per link, and exist only inside the lab.
//! Needs root and iproute2's `ip`; without them [`NetLab::new`] fails the test saying so.

use std::ffi::OsStr;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::process::{Child, Command};

use crate::Logs;

/// Prefix of every namespace a lab makes: `flue-<pid>-<lab>-<role>`.
const NAME_PREFIX: &str = "flue-";

/// Labs made by this process so far, so two labs of one test process get distinct names.
static LABS: AtomicU32 = AtomicU32::new(0);

/// Runs `ip ARGS…` to its end; panics with its stderr when it fails.
fn ip(args: &[&str]) -> String {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run `ip {}`: {e}", args.join(" ")));
    assert!(
        out.status.success(),
        "`ip {}` failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The effective uid of this process, from `/proc/self/status` (no `unsafe` needed).
fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// Fails the test, saying what is missing, unless it runs as root with `ip` available.
/// A network test that cannot run must not pass silently: CI runs as root.
pub fn require_netns_support() {
    let uid = effective_uid();
    assert_eq!(
        uid,
        Some(0),
        "network-namespace tests must run as root (they create namespaces and veth links): \
         running as uid {uid:?}; run the suite as root, as CI does"
    );
    let ip_ok = std::process::Command::new("ip")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ip_ok,
        "network-namespace tests need iproute2's `ip` on PATH (apt-get install iproute2)"
    );
}

/// Whether a TCP connect from inside a namespace got through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    /// The connection was accepted.
    Connected,
    /// The address answered but nothing listens on that port (RST).
    Refused,
    /// The namespace has no route to the address (or the host said so).
    Unreachable,
    /// No answer within the bound: packets go nowhere (dropped, not forwarded).
    TimedOut,
    /// Something else; the text is what the connect attempt printed.
    Other(String),
}

/// One namespace of a lab: a cheap handle, the lab owns its lifetime.
#[derive(Debug, Clone)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Its name (`ip netns exec NAME …`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `ip -n NAME ARGS…`, to its end; panics when it fails.
    pub fn ip(&self, args: &[&str]) -> String {
        let mut all = vec!["-n", &self.name];
        all.extend_from_slice(args);
        ip(&all)
    }

    /// A command running `program` inside this namespace (`ip netns exec NAME program`):
    /// `ip` enters the namespace and execs the program, so the child is the program itself.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name]).arg(program);
        cmd.kill_on_drop(true);
        cmd
    }

    /// Starts `program ARGS…` inside this namespace, its stdout and stderr captured in one
    /// log (printed if the test panics). `label` names it in that dump.
    pub fn spawn<S: AsRef<OsStr>>(
        &self,
        label: &str,
        program: impl AsRef<OsStr>,
        args: &[S],
    ) -> NsProcess {
        let mut child = self
            .command(program)
            .args(args)
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {label} in {}: {e}", self.name));
        let logs = Logs::default();
        logs.capture(child.stdout.take().expect("stdout"));
        logs.capture(child.stderr.take().expect("stderr"));
        NsProcess {
            label: format!("{label} (netns {})", self.name),
            child: Some(child),
            logs,
        }
    }

    /// Tries a TCP connect to `addr` from inside this namespace, for at most `limit`.
    ///
    /// The attempt is bash's `/dev/tcp` in a child inside the namespace (the test process
    /// itself cannot enter one without `unsafe`); its error text tells refused from
    /// unreachable, and the bound tells a silent drop.
    pub async fn probe(&self, addr: SocketAddrV4, limit: Duration) -> Reach {
        let script = format!("exec 3<>/dev/tcp/{}/{}", addr.ip(), addr.port());
        let attempt = self
            .command("bash")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output();
        let out = match tokio::time::timeout(limit, attempt).await {
            Err(_) => return Reach::TimedOut,
            Ok(out) => out.unwrap_or_else(|e| panic!("run bash in {}: {e}", self.name)),
        };
        if out.status.success() {
            return Reach::Connected;
        }
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        if err.contains("Connection refused") {
            Reach::Refused
        } else if err.contains("Network is unreachable") || err.contains("No route to host") {
            Reach::Unreachable
        } else if err.contains("timed out") {
            Reach::TimedOut
        } else {
            Reach::Other(err.trim().to_owned())
        }
    }

    /// The TCP sockets listening inside this namespace (`ss -ltnH`), as local addresses.
    pub fn tcp_listeners(&self) -> Vec<String> {
        let out = std::process::Command::new("ip")
            .args(["netns", "exec", &self.name, "ss", "-ltnH"])
            .output()
            .expect("run ss");
        assert!(
            out.status.success(),
            "ss -ltnH in {}: {}",
            self.name,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().nth(3).map(str::to_owned))
            .collect()
    }
}

/// Both ends of a veth link: `a` in the first namespace, `b` in the second, one /24.
#[derive(Debug, Clone, Copy)]
pub struct Link {
    /// Address of the first namespace's end.
    pub a: Ipv4Addr,
    /// Address of the second namespace's end.
    pub b: Ipv4Addr,
}

/// The namespaces and links of one test, all removed on drop.
pub struct NetLab {
    tag: String,
    namespaces: Vec<Netns>,
    links: u8,
}

impl NetLab {
    /// A new, empty lab; fails the test when not root or `ip` is missing. Namespaces that
    /// an earlier run left behind (its process is gone: killed before its drops ran) are
    /// removed first.
    pub fn new() -> NetLab {
        require_netns_support();
        remove_orphaned_namespaces();
        let n = LABS.fetch_add(1, Ordering::Relaxed);
        NetLab {
            tag: format!("{NAME_PREFIX}{}-{n}", std::process::id()),
            namespaces: Vec::new(),
            links: 0,
        }
    }

    /// Creates a namespace named after `role` (`flue-<pid>-<lab>-<role>`), loopback up.
    pub fn namespace(&mut self, role: &str) -> Netns {
        let name = format!("{}-{role}", self.tag);
        ip(&["netns", "add", &name]);
        let ns = Netns { name };
        self.namespaces.push(ns.clone());
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    /// Joins two namespaces of this lab by a veth pair (both ends created directly in
    /// their namespaces) on their own /24: `a` gets `10.250.<k>.1`, `b` `10.250.<k>.2`.
    /// No other route is added: each side reaches exactly that /24.
    pub fn link(&mut self, a: &Netns, b: &Netns) -> Link {
        assert!(self.links < 250, "too many links in one lab");
        self.links += 1;
        let k = self.links;
        let (ea, eb) = (format!("v{k}a"), format!("v{k}b"));
        ip(&[
            "link", "add", &ea, "netns", &a.name, "type", "veth", "peer", "name", &eb, "netns",
            &b.name,
        ]);
        let link = Link {
            a: Ipv4Addr::new(10, 250, k, 1),
            b: Ipv4Addr::new(10, 250, k, 2),
        };
        for (ns, dev, addr) in [(a, &ea, link.a), (b, &eb, link.b)] {
            ns.ip(&["addr", "add", &format!("{addr}/24"), "dev", dev]);
            ns.ip(&["link", "set", dev, "up"]);
        }
        link
    }
}

impl Default for NetLab {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for NetLab {
    fn drop(&mut self) {
        // Processes first (a namespace lives on while one runs in it), then the names;
        // deleting a namespace takes its veth ends, and so their peers, with it.
        for ns in self.namespaces.iter().rev() {
            remove_namespace(&ns.name);
        }
    }
}

/// Kills everything running in namespace `name` and deletes it; never panics (it runs
/// in drops, also while unwinding).
fn remove_namespace(name: &str) {
    if let Ok(out) = std::process::Command::new("ip")
        .args(["netns", "pids", name])
        .output()
    {
        for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            let _ = std::process::Command::new("kill")
                .args(["-9", pid])
                .status();
        }
    }
    let deleted = std::process::Command::new("ip")
        .args(["netns", "del", name])
        .stderr(Stdio::null())
        .status();
    if !deleted.is_ok_and(|s| s.success()) {
        eprintln!("warning: could not delete network namespace {name}");
    }
}

/// Removes lab namespaces whose test process no longer exists.
fn remove_orphaned_namespaces() {
    let Ok(out) = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
    else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        let Some(pid) = name
            .strip_prefix(NAME_PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            remove_namespace(name);
        }
    }
}

/// A process running inside a namespace; killed on drop, its output printed if the test
/// panicked.
pub struct NsProcess {
    label: String,
    child: Option<Child>,
    logs: Logs,
}

impl NsProcess {
    /// What it printed (stdout and stderr).
    pub fn logs(&self) -> &Logs {
        &self.logs
    }

    /// Waits for a line containing `needle`; returns it. Bounded by
    /// [`crate::START_WAIT`], since most callers wait for a process to start (a broker
    /// ready, a leaf node linked, a gateway listening, an agent ready); a process that
    /// exits ends the wait at once.
    pub async fn wait_for(&self, needle: &str) -> String {
        self.logs.wait_for(needle, crate::START_WAIT).await
    }

    /// SIGKILL, and waits for it to be gone.
    pub async fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill().await;
        }
    }
}

impl Drop for NsProcess {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("----- {} output -----", self.label);
            for line in self.logs.lines() {
                eprintln!("{line}");
            }
        }
    }
}

/// `addr:port` as a socket address.
pub fn at(addr: Ipv4Addr, port: u16) -> SocketAddrV4 {
    SocketAddrV4::new(addr, port)
}
