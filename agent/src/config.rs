//! The agent's typed configuration and the `flue-agent run` flags that build it.

use std::path::PathBuf;
use std::time::Duration;

use flue_proto::nats_tls::{NatsTls, NatsTlsArgs};
use flue_proto::{ServerId, TenantId, subject};

/// Default broker URL, the same as the gateway's.
pub const DEFAULT_NATS_URL: &str = "nats://127.0.0.1:4222";
/// Default directory holding the ledger and the hooks' work dirs.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/flue-agent";
/// Default hook directory, where heat-agents installs its hooks.
pub const DEFAULT_HOOK_DIR: &str = "/var/lib/heat-config/hooks";
/// Default time a running hook may keep going after SIGTERM/SIGINT.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);
/// Default number of days a finished deployment stays in the ledger.
pub const DEFAULT_LEDGER_RETENTION_DAYS: u64 = 30;
/// Default interval between two heartbeats: a fallback, since a gateway in operator mode
/// learns of a closed agent connection from the broker itself (`heartbeat.rs`).
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(30);
/// Longest accepted heartbeat interval, in seconds.
pub const MAX_HEARTBEAT_SECS: u64 = 60;
/// Seconds in one day of ledger retention.
const DAY_SECS: u64 = 24 * 3600;

/// Everything [`crate::run`] needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Broker URL(s), comma separated; credentials in them are parsed, and shown
    /// redacted, by [`flue_proto::nats_url`].
    pub nats_url: String,
    /// JetStream domain of the hub broker, or none for plain `$JS.API` (a hub without a
    /// domain, reached directly: no leaf node in between).
    pub js_domain: Option<String>,
    /// TLS of the broker connection: the CA that verifies the broker (TLS required when
    /// given) and a client certificate for mutual TLS.
    pub nats_tls: NatsTls,
    /// Tenant of this server.
    pub tenant: TenantId,
    /// This server's id: which request queue the agent pulls.
    pub server_id: ServerId,
    /// Holds `ledger/` (the exactly-once ledger), `work/` (per-deployment work dirs) and
    /// `data.sock` (the data socket, while a hook runs).
    pub state_dir: PathBuf,
    /// Directories searched in order for an executable named after a config's group.
    pub hook_dirs: Vec<PathBuf>,
    /// How long a running hook may finish after shutdown is requested before it is killed.
    pub shutdown_grace: Duration,
    /// How long a `done` ledger entry is kept after its hook finished; never zero.
    ///
    /// Pruning is safe because the gateway keeps a request in the `FLUE_REQ` stream for at
    /// most its `--stream-max-age-secs` (default 7 days), so a request cannot be redelivered
    /// after that, and a `done` entry older than the retention can no longer matter. It should
    /// therefore be at least the gateway's stream max age. `started` entries are never pruned:
    /// they mean a hook may have been interrupted, which must be reported.
    pub ledger_retention: Duration,
    /// Interval between two presence heartbeats (1 s to [`MAX_HEARTBEAT_SECS`]); keep it
    /// well below the gateway's `--presence-timeout-secs` (default 10 s).
    pub heartbeat_interval: Duration,
    /// The credentials file minted at registration ([`flue_proto::creds::AgentCredentials`]),
    /// read at start.
    pub creds_file: Option<PathBuf>,
    /// Development only: run without credentials, taking requests nobody signed
    /// (`--insecure-unsigned-requests`). Without it, no credentials file means no start.
    pub insecure_unsigned_requests: bool,
    /// Development only: accept a credentials file without a broker user (minted by a
    /// gateway run with `--insecure-dev-broker`) and connect anonymously
    /// (`--insecure-dev-broker`). Without it, such a file means no start.
    pub insecure_dev_broker: bool,
    /// This build's version (`flue-agent version`), carried by heartbeats.
    pub version: String,
    /// The release public key (`C…`) an agent build must be signed by to be installed
    /// (`--release-key`); none: upgrades are refused.
    pub release_key: Option<String>,
}

/// The version of a build: the crate's version, `+`, the build id `FLUE_BUILD_ID` had when
/// it was compiled (`dev` without one).
pub fn build_version(build_id: Option<&str>) -> String {
    format!(
        "{}+{}",
        env!("CARGO_PKG_VERSION"),
        build_id.filter(|id| !id.is_empty()).unwrap_or("dev")
    )
}

impl Config {
    /// A config for `server_id` of `tenant` with every other field at its default.
    pub fn new(tenant: TenantId, server_id: ServerId) -> Self {
        Self {
            nats_url: DEFAULT_NATS_URL.to_owned(),
            js_domain: Some(subject::JETSTREAM_DOMAIN.to_owned()),
            nats_tls: NatsTls::default(),
            tenant,
            server_id,
            state_dir: PathBuf::from(DEFAULT_STATE_DIR),
            hook_dirs: vec![PathBuf::from(DEFAULT_HOOK_DIR)],
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            ledger_retention: retention_from_days(DEFAULT_LEDGER_RETENTION_DAYS),
            heartbeat_interval: DEFAULT_HEARTBEAT_INTERVAL,
            creds_file: None,
            insecure_unsigned_requests: false,
            insecure_dev_broker: false,
            version: build_version(None),
            release_key: None,
        }
    }

    /// Where the sled ledger lives.
    pub fn ledger_path(&self) -> PathBuf {
        self.state_dir.join("ledger")
    }

    /// Where the data socket is served while a hook runs, as an absolute path (a hook's
    /// working directory is not the agent's).
    pub fn data_socket_path(&self) -> PathBuf {
        let path = self.state_dir.join(crate::data::SOCKET_FILE);
        std::path::absolute(&path).unwrap_or(path)
    }

    /// Parent of the per-deployment work dirs of the built-in `script` hook.
    pub fn work_root(&self) -> PathBuf {
        self.state_dir.join("work")
    }
}

/// Flags of `flue-agent run`; each can also come from the environment.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// Broker URL(s), comma separated.
    #[arg(long, env = "FLUE_NATS_URL", default_value = DEFAULT_NATS_URL)]
    pub nats_url: String,
    /// JetStream domain of the hub broker; JetStream calls go to `$JS.<domain>.API`, which
    /// works on the hub and through a leaf node alike. Empty: plain `$JS.API` (a hub
    /// without a domain).
    #[arg(long, env = "FLUE_JS_DOMAIN", default_value = subject::JETSTREAM_DOMAIN)]
    pub js_domain: String,
    /// TLS of the broker connection: `--nats-ca`, `--nats-cert`, `--nats-key`.
    #[command(flatten)]
    pub nats_tls: NatsTlsArgs,
    /// Tenant of this server.
    #[arg(long, env = "FLUE_TENANT", default_value = "default")]
    pub tenant: TenantId,
    /// This server's id, as registered with the gateway.
    #[arg(long, env = "FLUE_SERVER_ID")]
    pub server_id: ServerId,
    /// Directory for the ledger and work dirs.
    #[arg(long, env = "FLUE_STATE_DIR", default_value = DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
    /// Hook directory; repeat the flag or separate with ':' to search several, in order.
    #[arg(
        long = "hook-dir",
        env = "FLUE_HOOK_DIRS",
        value_delimiter = ':',
        default_value = DEFAULT_HOOK_DIR
    )]
    pub hook_dirs: Vec<PathBuf>,
    /// Seconds a running hook may finish after SIGTERM/SIGINT before it is killed.
    #[arg(long, env = "FLUE_SHUTDOWN_GRACE_SECS", default_value_t = DEFAULT_SHUTDOWN_GRACE.as_secs())]
    pub shutdown_grace_secs: u64,
    /// Days a finished deployment stays in the ledger (at least 1); keep it at least the
    /// gateway's --stream-max-age-secs, the longest a request can be redelivered.
    #[arg(long, env = "FLUE_LEDGER_RETENTION_DAYS", default_value_t = DEFAULT_LEDGER_RETENTION_DAYS,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub ledger_retention_days: u64,
    /// Seconds between two presence heartbeats (1 to 60). A fallback: in operator mode the
    /// gateway hears of a closed connection from the broker; a silent agent is reported
    /// offline after twice this (or the gateway's --presence-timeout-secs if longer).
    #[arg(long, env = "FLUE_HEARTBEAT_SECS", default_value_t = DEFAULT_HEARTBEAT_INTERVAL.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=MAX_HEARTBEAT_SECS))]
    pub heartbeat_secs: u64,
    /// The credentials file the gateway minted at registration (`flue server register ID
    /// --creds FILE`); a secret, mode 0600.
    #[arg(long, env = "FLUE_CREDS")]
    pub creds: Option<PathBuf>,
    /// DEVELOPMENT ONLY, INSECURE: start without --creds and run requests nobody signed,
    /// answering unsigned. Anyone who can publish on this server's request subject can
    /// then run hooks on it.
    #[arg(
        long,
        env = "FLUE_INSECURE_UNSIGNED_REQUESTS",
        conflicts_with = "creds"
    )]
    pub insecure_unsigned_requests: bool,
    /// DEVELOPMENT ONLY, INSECURE: accept a credentials file that holds no broker user
    /// (from a gateway run with --insecure-dev-broker) and connect to the broker
    /// anonymously. Without it such a file is refused.
    #[arg(long, env = "FLUE_INSECURE_DEV_BROKER")]
    pub insecure_dev_broker: bool,
    /// The release public key (`C…`, from `flue release keygen`): an agent upgrade is
    /// installed only when this key signed the build. Without it upgrades are refused.
    #[arg(long, env = "FLUE_RELEASE_KEY")]
    pub release_key: Option<String>,
}

/// `days` as a duration, saturating rather than overflowing for absurd values.
fn retention_from_days(days: u64) -> Duration {
    Duration::from_secs(days.saturating_mul(DAY_SECS))
}

impl From<RunArgs> for Config {
    fn from(a: RunArgs) -> Self {
        Self {
            nats_url: a.nats_url,
            js_domain: Some(a.js_domain).filter(|d| !d.is_empty()),
            nats_tls: a.nats_tls.into(),
            tenant: a.tenant,
            server_id: a.server_id,
            state_dir: a.state_dir,
            // An empty entry ("a::b", or an empty variable) names no directory.
            hook_dirs: a
                .hook_dirs
                .into_iter()
                .filter(|d| !d.as_os_str().is_empty())
                .collect(),
            shutdown_grace: Duration::from_secs(a.shutdown_grace_secs),
            ledger_retention: retention_from_days(a.ledger_retention_days),
            heartbeat_interval: Duration::from_secs(a.heartbeat_secs),
            creds_file: a.creds,
            insecure_unsigned_requests: a.insecure_unsigned_requests,
            insecure_dev_broker: a.insecure_dev_broker,
            version: build_version(None),
            release_key: a.release_key.filter(|k| !k.is_empty()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    fn parse(args: &[&str]) -> Result<Config, clap::Error> {
        let argv = std::iter::once("flue-agent").chain(args.iter().copied());
        Cli::try_parse_from(argv).map(|c| c.run.into())
    }

    #[test]
    fn defaults_and_repeated_or_colon_separated_hook_dirs() {
        let c = parse(&["--server-id", "web1"]).expect("parses");
        assert_eq!(
            c,
            Config::new(
                TenantId::new("default").expect("id"),
                ServerId::new("web1").expect("id")
            )
        );
        let c = parse(&[
            "--server-id",
            "s",
            "--hook-dir",
            "/a:/b",
            "--hook-dir",
            "/c",
        ])
        .expect("parses");
        assert_eq!(c.hook_dirs, ["/a", "/b", "/c"].map(PathBuf::from));
    }

    #[test]
    fn a_bad_value_names_the_flag() {
        let err = parse(&["--server-id", "a.b"]).expect_err("dot refused");
        assert!(err.to_string().contains("--server-id"), "{err}");
        let err =
            parse(&["--server-id", "s", "--shutdown-grace-secs", "x"]).expect_err("not a number");
        assert!(err.to_string().contains("--shutdown-grace-secs"), "{err}");
        for bad in ["0", "-1", "x"] {
            let flag = format!("--ledger-retention-days={bad}");
            let err = parse(&["--server-id", "s", &flag]).expect_err("not a positive number");
            assert!(err.to_string().contains("--ledger-retention-days"), "{err}");
        }
        for bad in ["0", "61", "x"] {
            let flag = format!("--heartbeat-secs={bad}");
            let err = parse(&["--server-id", "s", &flag]).expect_err("out of range");
            assert!(err.to_string().contains("--heartbeat-secs"), "{err}");
        }
    }

    #[test]
    fn jetstream_is_addressed_through_the_hub_domain_unless_it_is_emptied() {
        let c = parse(&["--server-id", "s"]).expect("parses");
        assert_eq!(c.js_domain.as_deref(), Some("flue"));
        let c = parse(&["--server-id", "s", "--js-domain", "hub2"]).expect("parses");
        assert_eq!(c.js_domain.as_deref(), Some("hub2"));
        let c = parse(&["--server-id", "s", "--js-domain", ""]).expect("parses");
        assert_eq!(c.js_domain, None);
    }

    #[test]
    fn a_nats_ca_asks_for_tls_and_a_client_key_needs_its_certificate() {
        let c = parse(&["--server-id", "s", "--nats-ca", "/etc/flue/ca.pem"]).expect("parses");
        assert_eq!(c.nats_tls.ca_file, Some(PathBuf::from("/etc/flue/ca.pem")));
        assert!(c.nats_tls.required());
        let err = parse(&["--server-id", "s", "--nats-key", "/k.pem"]).expect_err("no cert");
        assert!(err.to_string().contains("--nats-cert"), "{err}");
    }

    #[test]
    fn heartbeat_interval_is_given_in_seconds() {
        let c = parse(&["--server-id", "s"]).expect("parses");
        assert_eq!(c.heartbeat_interval, Duration::from_secs(30));
        let c = parse(&["--server-id", "s", "--heartbeat-secs", "60"]).expect("parses");
        assert_eq!(c.heartbeat_interval, Duration::from_secs(60));
    }

    #[test]
    fn ledger_retention_is_given_in_days() {
        let c = parse(&["--server-id", "s"]).expect("parses");
        assert_eq!(c.ledger_retention, Duration::from_secs(30 * 24 * 3600));
        let c = parse(&["--server-id", "s", "--ledger-retention-days", "1"]).expect("parses");
        assert_eq!(c.ledger_retention, Duration::from_secs(24 * 3600));
    }
}
