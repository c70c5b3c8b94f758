//! The gateway's typed configuration: command-line flags, each also an environment variable.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use flue_proto::TenantId;

/// Longest deployment timeout accepted: seven days, in seconds.
pub const MAX_TIMEOUT_SECS: u64 = 7 * 24 * 3600;

/// Everything `flue-gateway` can be told at start.
#[derive(Debug, Clone, Parser)]
#[command(name = "flue-gateway", version, about = "Flue broker gateway")]
pub struct Config {
    /// Address the HTTP API listens on (`127.0.0.1:0` picks a free port).
    #[arg(long, env = "FLUE_LISTEN", default_value = "127.0.0.1:8470")]
    pub listen: SocketAddr,
    /// NATS URL(s) of the broker, comma separated.
    #[arg(long, env = "FLUE_NATS_URL", default_value = "nats://127.0.0.1:4222")]
    pub nats_url: String,
    /// Broker URL(s) handed to agents at registration; `nats_url` when absent.
    #[arg(long, env = "FLUE_AGENT_NATS_URL")]
    pub agent_nats_url: Option<String>,
    /// The tenant every object of this gateway belongs to.
    #[arg(long, env = "FLUE_TENANT", default_value = "default")]
    pub tenant: TenantId,
    /// Seconds to wait for an agent's answer when a deployment names no timeout.
    #[arg(long, env = "FLUE_DEFAULT_TIMEOUT_SECS", default_value_t = 3600,
          value_parser = clap::value_parser!(u64).range(1..=MAX_TIMEOUT_SECS))]
    pub default_timeout_secs: u64,
    /// Milliseconds between two sweeps for timed-out deployments.
    #[arg(long, env = "FLUE_TIMEOUT_SWEEP_MS", default_value_t = 500,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout_sweep_ms: u64,
    /// Largest accepted request body, in bytes.
    #[arg(long, env = "FLUE_MAX_BODY_BYTES", default_value_t = 1_048_576)]
    pub max_body_bytes: usize,
    /// Seconds a message stays in the request and response streams.
    #[arg(long, env = "FLUE_STREAM_MAX_AGE_SECS", default_value_t = 604_800,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub stream_max_age_secs: u64,
}

impl Config {
    /// A configuration with every default of the command line and the given broker URL.
    pub fn new(nats_url: impl Into<String>) -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8470)),
            nats_url: nats_url.into(),
            agent_nats_url: None,
            tenant: TenantId::new("default").expect("\"default\" is a valid tenant id"),
            default_timeout_secs: 3600,
            timeout_sweep_ms: 500,
            max_body_bytes: 1_048_576,
            stream_max_age_secs: 604_800,
        }
    }

    /// The broker URL agents are told to use.
    pub fn agent_nats_url(&self) -> &str {
        self.agent_nats_url.as_deref().unwrap_or(&self.nats_url)
    }

    /// Interval between two timeout sweeps.
    pub fn timeout_sweep(&self) -> Duration {
        Duration::from_millis(self.timeout_sweep_ms.max(1))
    }

    /// How long messages stay in the streams.
    pub fn stream_max_age(&self) -> Duration {
        Duration::from_secs(self.stream_max_age_secs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_matches_the_command_line_defaults() {
        let parsed = Config::try_parse_from(["flue-gateway", "--nats-url", "nats://x:1"])
            .expect("defaults parse");
        let built = Config::new("nats://x:1");
        assert_eq!(format!("{parsed:?}"), format!("{built:?}"));
        assert_eq!(built.agent_nats_url(), "nats://x:1");
    }

    #[test]
    fn bad_values_are_refused_before_start() {
        for args in [
            ["flue-gateway", "--tenant", "a.b"],
            ["flue-gateway", "--default-timeout-secs", "0"],
            ["flue-gateway", "--timeout-sweep-ms", "0"],
            ["flue-gateway", "--listen", "nowhere"],
        ] {
            assert!(Config::try_parse_from(args).is_err(), "{args:?}");
        }
    }
}
