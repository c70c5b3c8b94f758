//! The gateway's typed configuration: command-line flags, each also an environment variable.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use flue_proto::TenantId;
use flue_proto::nats_tls::{NatsTls, NatsTlsArgs};
use flue_proto::nats_url::{NatsUrls, redact};

use crate::request_consumers::{RequestConsumerStorage, RequestConsumers, RequestConsumersError};
use crate::webhooks::Settings as WebhookSettings;
use crate::webhooks::address::{AddressPolicy, Cidr};
use flue_proto::retry::Policy;

/// Longest deployment timeout accepted: seven days, in seconds.
pub const MAX_TIMEOUT_SECS: u64 = 7 * 24 * 3600;
/// Default seconds without a heartbeat before a server is reported offline.
pub const DEFAULT_PRESENCE_TIMEOUT_SECS: u64 = 10;
/// Longest presence timeout accepted: one day, in seconds.
pub const MAX_PRESENCE_TIMEOUT_SECS: u64 = 24 * 3600;
/// Default `--max-servers`: past ~10k durable consumers a single broker slows down
/// (≈ 50 KiB each, slower restarts); beyond that, shard the request stream.
pub const DEFAULT_MAX_SERVERS: i32 = 10_000;

/// Default of `--state-dir`.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/flue-gateway";
/// Default of `--broker-timeout-ms`.
pub const DEFAULT_BROKER_TIMEOUT_MS: u64 = 2_000;
/// Default of `--account-push-secs`: how stale a tenant leaf node's accounts can get.
pub const DEFAULT_ACCOUNT_PUSH_SECS: u64 = 30;
/// Longest long poll (`wait_secs`), in seconds.
pub const MAX_WAIT_SECS: u64 = 60;
/// Smallest `--request-timeout-secs`: it must leave room for the longest long poll.
pub const MIN_REQUEST_TIMEOUT_SECS: u64 = MAX_WAIT_SECS + 5;
/// Default `--engine-workers`: two per tenant, so one long operation does not hold
/// every other stack of the tenant back.
pub const DEFAULT_WORKERS: u16 = 2;
/// Default `--engine-lease-secs`.
pub const DEFAULT_LEASE_SECS: u64 = 30;

/// Everything `flue-gateway` can be told at start.
///
/// Its `Debug` form hides the passwords in the broker URLs.
#[derive(Clone, Parser)]
#[command(name = "flue-gateway", version, about = "Flue broker gateway")]
pub struct Config {
    /// Address the HTTP API listens on (`127.0.0.1:0` picks a free port).
    #[arg(long, env = "FLUE_LISTEN", default_value = "127.0.0.1:8470")]
    pub listen: SocketAddr,
    /// NATS URL(s) of the broker, comma separated.
    #[arg(long, env = "FLUE_NATS_URL", default_value = "nats://127.0.0.1:4222")]
    pub nats_url: String,
    /// Broker URL(s) handed to agents at registration; when absent, `nats_url` without its
    /// credentials (`user:pass@`), which are the gateway's own and never handed out.
    #[arg(long, env = "FLUE_AGENT_NATS_URL")]
    pub agent_nats_url: Option<String>,
    /// Base URL polling servers reach this gateway at (`https://flue.example.com`), used
    /// in their metadata and signal URLs; when absent, the scheme served and the `Host`
    /// of the registering request.
    #[arg(long, env = "FLUE_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// TLS of the broker connections: `--nats-ca`, `--nats-cert` (the gateway's client
    /// certificate), `--nats-key`.
    #[command(flatten)]
    pub nats_tls: NatsTlsArgs,
    /// Certificate chain (PEM, leaf first) to serve the HTTP API over HTTPS with.
    #[arg(long, env = "FLUE_TLS_CERT", value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of `--tls-cert`.
    #[arg(long, env = "FLUE_TLS_KEY", value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Address range webhooks may be delivered to although it is not public (loopback,
    /// private, link-local…), e.g. `10.20.0.0/16`; repeatable, or comma separated.
    #[arg(
        long = "webhook-allow",
        env = "FLUE_WEBHOOK_ALLOW",
        value_name = "CIDR",
        value_delimiter = ','
    )]
    pub webhook_allow: Vec<Cidr>,
    /// The state directory (mode 0700): the keys only the gateway holds ([`crate::state`]).
    #[arg(long, env = "FLUE_STATE_DIR", default_value = DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
    /// The default tenant: the one served in development mode (an anonymous broker
    /// connection serves one tenant), and the one `flue-gateway init` creates first.
    /// In a tenant runtime's own copy of the configuration, that runtime's tenant.
    #[arg(
        long = "default-tenant",
        visible_alias = "tenant",
        env = "FLUE_DEFAULT_TENANT",
        default_value = "default"
    )]
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
    /// Servers that can register: the request stream's consumer limit (one durable
    /// consumer per server), set on the stream at start. The gateway warns at start when
    /// the broker account allows fewer consumers.
    #[arg(long, env = "FLUE_MAX_SERVERS", default_value_t = DEFAULT_MAX_SERVERS,
          value_parser = clap::value_parser!(i32).range(1..=1_000_000))]
    pub max_servers: i32,
    /// Seconds an event stays in the event stream `FLUE_EVT` (replay window).
    #[arg(long, env = "FLUE_EVENTS_MAX_AGE_SECS", default_value_t = 604_800,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub events_max_age_secs: u64,
    /// Largest size of the event stream in bytes; the oldest events go first.
    #[arg(long, env = "FLUE_EVENTS_MAX_BYTES", default_value_t = 1_073_741_824,
          value_parser = clap::value_parser!(i64).range(1_048_576..))]
    pub events_max_bytes: i64,
    /// Consumers the tenant's NATS listeners may have on the event stream `FLUE_EVT`
    /// together (each listener credential at most 8): the gateway, which makes them,
    /// refuses a creation past it. Bounds what listeners' credentials together can make the
    /// broker hold (≈ 46 KiB each); SSE connections and webhooks are not counted (the
    /// stream itself has no consumer limit). At most half the events account's own
    /// consumer limit, if it has one.
    #[arg(long, env = "FLUE_EVENTS_MAX_CONSUMERS", default_value_t = 1_000,
          value_parser = clap::value_parser!(i32).range(1..=1_000_000))]
    pub events_max_consumers: i32,
    /// Seconds a NATS listener's consumer on `FLUE_EVT` may stay idle before the broker
    /// deletes it: the gateway gives it as `inactive_threshold` to every listener's
    /// consumer that sets none, and refuses one asking for more. At least 30 (async-nats's
    /// ordered consumers ask for 30 s).
    #[arg(long, env = "FLUE_LISTENER_IDLE_SECS", default_value_t = 3_600,
          value_parser = clap::value_parser!(u64).range(30..=31_536_000))]
    pub listener_idle_secs: u64,
    /// Seconds without a heartbeat after which a server is reported offline (checked every
    /// second, so it is reported at most one second later).
    #[arg(long, env = "FLUE_PRESENCE_TIMEOUT_SECS", default_value_t = DEFAULT_PRESENCE_TIMEOUT_SECS,
          value_parser = clap::value_parser!(u64).range(1..=MAX_PRESENCE_TIMEOUT_SECS))]
    pub presence_timeout_secs: u64,
    /// Milliseconds one webhook delivery attempt may take (connect, send, answer) before
    /// it counts as failed.
    #[arg(long, env = "FLUE_WEBHOOK_TIMEOUT_MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub webhook_timeout_ms: u64,
    /// Milliseconds before retrying a failed webhook delivery; doubled after each further
    /// failure of the same event, up to `--webhook-backoff-max-ms`.
    #[arg(long, env = "FLUE_WEBHOOK_BACKOFF_MS", default_value_t = 1_000,
          value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    pub webhook_backoff_ms: u64,
    /// Longest pause between two attempts to deliver one event to a webhook, in milliseconds.
    #[arg(long, env = "FLUE_WEBHOOK_BACKOFF_MAX_MS", default_value_t = 300_000,
          value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    pub webhook_backoff_max_ms: u64,
    /// Failed attempts to deliver one event after which a webhook is parked.
    #[arg(long, env = "FLUE_WEBHOOK_MAX_ATTEMPTS", default_value_t = 8,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub webhook_max_attempts: u32,
    /// Milliseconds one broker call (a JetStream API request, KV read or write, publish
    /// acknowledgement) may take; an API call whose broker call runs out answers 503
    /// `unavailable` with `Retry-After`.
    #[arg(long, env = "FLUE_BROKER_TIMEOUT_MS", default_value_t = DEFAULT_BROKER_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(100..=60_000))]
    pub broker_timeout_ms: u64,
    /// Seconds between two pushes of every account JWT to the broker (operator mode), on top
    /// of the pushes at start, after a reconnection and for each change: a tenant leaf node
    /// whose link was down when a revocation was pushed learns it at the next one. 0 = off.
    #[arg(long, env = "FLUE_ACCOUNT_PUSH_SECS", default_value_t = DEFAULT_ACCOUNT_PUSH_SECS,
          value_parser = clap::value_parser!(u64).range(0..=86_400))]
    pub account_push_secs: u64,
    /// Milliseconds a client has to send a request's headers, counted from when the gateway
    /// starts waiting for them (so also the longest idle keep-alive); then the connection closes.
    #[arg(long, env = "FLUE_HEADER_TIMEOUT_MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub header_timeout_ms: u64,
    /// Milliseconds a client has to send a whole request body once its headers are in;
    /// a slower or stalled body is answered 408 `request_timeout`.
    #[arg(long, env = "FLUE_BODY_TIMEOUT_MS", default_value_t = 30_000,
          value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub body_timeout_ms: u64,
    /// Seconds a request may take until its answer starts (longer than the longest long
    /// poll, 60 s); the event stream after its start is not limited. Over it: 503 `unavailable`.
    #[arg(long, env = "FLUE_REQUEST_TIMEOUT_SECS", default_value_t = 90,
          value_parser = clap::value_parser!(u64).range(MIN_REQUEST_TIMEOUT_SECS..=3600))]
    pub request_timeout_secs: u64,
    /// Most HTTP connections open at once; a connection beyond it is closed as soon as it is
    /// accepted. The process's open-file limit must leave room for it.
    #[arg(long, env = "FLUE_MAX_CONNECTIONS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_connections: u64,
    /// Copies of every stream and KV bucket the gateway creates (JetStream replicas): 1 on
    /// a single broker, 3 on a 3-node cluster (one node may then fail). Streams and
    /// buckets found with another count are changed at start.
    #[arg(long, env = "FLUE_REPLICAS", default_value_t = crate::replicas::DEFAULT_REPLICAS,
          value_parser = clap::value_parser!(u8).range(1..=i64::from(crate::replicas::MAX_REPLICAS)))]
    pub replicas: u8,
    /// Where the broker keeps each server's request consumer state: `file` (kept across
    /// any restart; ~10 ms per registered server at every broker shutdown) or `memory`
    /// (no shutdown cost; needs `--replicas` 3 or more, and a restart of every node at
    /// once redelivers the requests still in the stream, answered from agents' ledgers).
    /// Applies to consumers created from then on.
    #[arg(long, env = "FLUE_REQUEST_CONSUMER_STORAGE", value_enum,
          default_value_t = RequestConsumerStorage::File)]
    pub request_consumer_storage: RequestConsumerStorage,
    /// Nodes each server's request consumer is kept on (1 to `--replicas`); when absent,
    /// the request stream's `--replicas`. On a 3-node cluster, 1 makes a consumer one
    /// node's instead of a Raft group on all three (~50 times cheaper at idle); while that
    /// node is down its servers receive nothing (their requests wait in the stream), and
    /// with memory storage its restart redelivers them, answered from agents' ledgers.
    /// Applies to consumers created from then on.
    #[arg(long, env = "FLUE_REQUEST_CONSUMER_REPLICAS", value_name = "N",
          value_parser = clap::value_parser!(u8).range(1..=i64::from(crate::replicas::MAX_REPLICAS)))]
    pub request_consumer_replicas: Option<u8>,
    /// Development only: serve the HTTP API without tokens, every caller being admin,
    /// engine, listener and viewer of `--tenant`. Logged as a warning at start.
    #[arg(long, env = "FLUE_INSECURE_NO_AUTH")]
    pub insecure_no_auth: bool,
    /// DEVELOPMENT ONLY, INSECURE: apply agents' answers that carry no signature (from
    /// agents run with --insecure-unsigned-requests). Anyone who can publish on a response
    /// subject can then decide deployments. Signed answers are still checked.
    #[arg(long, env = "FLUE_INSECURE_UNSIGNED_ANSWERS")]
    pub insecure_unsigned_answers: bool,
    /// DEVELOPMENT ONLY, INSECURE: connect to a broker without authentication (one
    /// anonymous connection, one tenant: `--default-tenant`), instead of operator mode
    /// (the broker's keys in `--state-dir`, written by `flue-gateway init`). Agents'
    /// credentials then carry no broker user. Logged as a warning at start.
    #[arg(long, env = "FLUE_INSECURE_DEV_BROKER")]
    pub insecure_dev_broker: bool,
    /// Engine workers per tenant running stack operations submitted over HTTP
    /// (`POST /v1/stacks/{id}/operations`) from the tenant's work queue; 0 = none here
    /// (other gateways' workers run them).
    #[arg(long, env = "FLUE_ENGINE_WORKERS", default_value_t = DEFAULT_WORKERS,
          value_parser = clap::value_parser!(u16).range(0..=64))]
    pub engine_workers: u16,
    /// The gateway API the engine workers drive stacks through; when absent, this
    /// gateway's own listen address.
    #[arg(long, env = "FLUE_ENGINE_API_URL")]
    pub engine_api_url: Option<String>,
    /// CA certificate (PEM) the engine API's certificate must chain to (an `https://`
    /// engine API); when absent, `--tls-cert` (a self-signed certificate trusts itself).
    #[arg(long, env = "FLUE_ENGINE_API_CA", value_name = "FILE")]
    pub engine_api_ca: Option<PathBuf>,
    /// Seconds an engine worker holds an operation without renewing its lease (the work
    /// queue's ack wait, renewed while it runs); a worker that dies is replaced after this.
    #[arg(long, env = "FLUE_ENGINE_LEASE_SECS", default_value_t = DEFAULT_LEASE_SECS,
          value_parser = clap::value_parser!(u64).range(2..=600))]
    pub engine_lease_secs: u64,
}

impl Config {
    /// The webhook delivery settings the flags ask for.
    pub fn webhook_settings(&self) -> WebhookSettings {
        WebhookSettings {
            timeout: Duration::from_millis(self.webhook_timeout_ms.max(1)),
            retry: Policy::new(
                Duration::from_millis(self.webhook_backoff_ms.max(1)),
                Duration::from_millis(self.webhook_backoff_max_ms.max(1)),
            ),
            max_attempts: self.webhook_max_attempts.max(1),
        }
    }

    /// A configuration with every default of the command line and the given broker URL.
    pub fn new(nats_url: impl Into<String>) -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8470)),
            nats_url: nats_url.into(),
            agent_nats_url: None,
            public_url: None,
            nats_tls: NatsTlsArgs::default(),
            tls_cert: None,
            tls_key: None,
            webhook_allow: Vec::new(),
            state_dir: PathBuf::from(DEFAULT_STATE_DIR),
            tenant: TenantId::new("default").expect("\"default\" is a valid tenant id"),
            default_timeout_secs: 3600,
            timeout_sweep_ms: 500,
            max_body_bytes: 1_048_576,
            stream_max_age_secs: 604_800,
            max_servers: DEFAULT_MAX_SERVERS,
            events_max_age_secs: 604_800,
            events_max_bytes: 1_073_741_824,
            events_max_consumers: 1_000,
            listener_idle_secs: 3_600,
            presence_timeout_secs: DEFAULT_PRESENCE_TIMEOUT_SECS,
            webhook_timeout_ms: 10_000,
            webhook_backoff_ms: 1_000,
            webhook_backoff_max_ms: 300_000,
            webhook_max_attempts: 8,
            broker_timeout_ms: DEFAULT_BROKER_TIMEOUT_MS,
            account_push_secs: DEFAULT_ACCOUNT_PUSH_SECS,
            header_timeout_ms: 10_000,
            body_timeout_ms: 30_000,
            request_timeout_secs: 90,
            max_connections: 10_000,
            replicas: crate::replicas::DEFAULT_REPLICAS,
            request_consumer_storage: RequestConsumerStorage::File,
            request_consumer_replicas: None,
            insecure_no_auth: false,
            insecure_unsigned_answers: false,
            insecure_dev_broker: false,
            engine_workers: DEFAULT_WORKERS,
            engine_api_url: None,
            engine_api_ca: None,
            engine_lease_secs: DEFAULT_LEASE_SECS,
        }
    }

    /// The broker URL agents are told to use: `agent_nats_url`, or else `nats_url`
    /// stripped of its credentials.
    pub fn agent_nats_url(&self) -> String {
        match &self.agent_nats_url {
            Some(url) => url.clone(),
            None => NatsUrls::parse(&self.nats_url).without_credentials(),
        }
    }

    /// TLS of the broker connection.
    pub fn nats_tls(&self) -> NatsTls {
        self.nats_tls.clone().into()
    }

    /// The certificate and key the API is served with, when it is served over HTTPS.
    pub fn https(&self) -> Option<(&std::path::Path, &std::path::Path)> {
        self.tls_cert.as_deref().zip(self.tls_key.as_deref())
    }

    /// Which addresses webhooks may be delivered to.
    pub fn webhook_policy(&self) -> AddressPolicy {
        AddressPolicy::new(self.webhook_allow.clone())
    }

    /// Interval between two timeout sweeps.
    pub fn timeout_sweep(&self) -> Duration {
        Duration::from_millis(self.timeout_sweep_ms.max(1))
    }

    /// Retention of the event stream.
    pub fn event_retention(&self) -> crate::events::Retention {
        crate::events::Retention {
            max_age: Duration::from_secs(self.events_max_age_secs),
            max_bytes: self.events_max_bytes,
            max_consumers: self.events_max_consumers,
            listener_idle: Duration::from_secs(self.listener_idle_secs),
            replicas: self.replicas(),
        }
    }

    /// Silence after which a server is reported offline.
    pub fn presence_timeout(&self) -> Duration {
        Duration::from_secs(self.presence_timeout_secs.max(1))
    }

    /// The longest one broker call may take.
    pub fn broker_timeout(&self) -> Duration {
        Duration::from_millis(self.broker_timeout_ms)
    }

    /// How often every account JWT is pushed again; `None` when `--account-push-secs` is 0.
    pub fn account_push_every(&self) -> Option<Duration> {
        (self.account_push_secs > 0).then(|| Duration::from_secs(self.account_push_secs))
    }

    /// Replicas of every stream and bucket, as JetStream counts them.
    pub fn replicas(&self) -> usize {
        usize::from(self.replicas)
    }

    /// How servers' request consumers are created (`--request-consumer-storage`,
    /// `--request-consumer-replicas`), refused when they do not fit `--replicas`.
    pub fn request_consumers(&self) -> Result<RequestConsumers, RequestConsumersError> {
        RequestConsumers::checked(
            self.request_consumer_storage,
            self.request_consumer_replicas.map(usize::from),
            self.replicas(),
        )
    }

    /// How long messages stay in the streams.
    pub fn stream_max_age(&self) -> Duration {
        Duration::from_secs(self.stream_max_age_secs)
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("listen", &self.listen)
            .field("nats_url", &redact(&self.nats_url))
            .field(
                "agent_nats_url",
                &self.agent_nats_url.as_deref().map(redact),
            )
            .field("public_url", &self.public_url)
            .field("nats_tls", &self.nats_tls)
            .field("tls_cert", &self.tls_cert)
            .field("tls_key", &self.tls_key)
            .field("webhook_allow", &self.webhook_allow)
            .field("state_dir", &self.state_dir)
            .field("tenant", &self.tenant)
            .field("default_timeout_secs", &self.default_timeout_secs)
            .field("timeout_sweep_ms", &self.timeout_sweep_ms)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("stream_max_age_secs", &self.stream_max_age_secs)
            .field("events_max_age_secs", &self.events_max_age_secs)
            .field("events_max_bytes", &self.events_max_bytes)
            .field("events_max_consumers", &self.events_max_consumers)
            .field("listener_idle_secs", &self.listener_idle_secs)
            .field("presence_timeout_secs", &self.presence_timeout_secs)
            .field("webhook_timeout_ms", &self.webhook_timeout_ms)
            .field("webhook_backoff_ms", &self.webhook_backoff_ms)
            .field("webhook_backoff_max_ms", &self.webhook_backoff_max_ms)
            .field("webhook_max_attempts", &self.webhook_max_attempts)
            .field("broker_timeout_ms", &self.broker_timeout_ms)
            .field("account_push_secs", &self.account_push_secs)
            .field("header_timeout_ms", &self.header_timeout_ms)
            .field("body_timeout_ms", &self.body_timeout_ms)
            .field("request_timeout_secs", &self.request_timeout_secs)
            .field("max_connections", &self.max_connections)
            .field("replicas", &self.replicas)
            .field("request_consumer_storage", &self.request_consumer_storage)
            .field("request_consumer_replicas", &self.request_consumer_replicas)
            .field("insecure_no_auth", &self.insecure_no_auth)
            .field("insecure_unsigned_answers", &self.insecure_unsigned_answers)
            .field("engine_workers", &self.engine_workers)
            .field("engine_api_url", &self.engine_api_url)
            .field("engine_api_ca", &self.engine_api_ca)
            .field("engine_lease_secs", &self.engine_lease_secs)
            .finish()
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
    fn agents_never_get_the_gateway_credentials() {
        let mut config = Config::new("nats://gw:s3cret@a:4222, tls://tok3n@b:4223,c:4224");
        assert_eq!(config.agent_nats_url(), "nats://a:4222,tls://b:4223,c:4224");
        config.agent_nats_url = Some("nats://agent:pw@a:4222".into());
        assert_eq!(
            config.agent_nats_url(),
            "nats://agent:pw@a:4222",
            "an explicit agent URL is handed out as given"
        );
        let shown = format!("{config:?}");
        assert!(!shown.contains("s3cret") && !shown.contains("tok3n") && !shown.contains("pw@"));
        assert!(shown.contains("nats://gw:***@a:4222"), "{shown}");
    }

    #[test]
    fn webhook_allow_ranges_repeat_or_are_comma_separated() {
        let config = Config::try_parse_from([
            "flue-gateway",
            "--webhook-allow",
            "127.0.0.1/32,10.0.0.0/8",
            "--webhook-allow",
            "fd00::/8",
        ])
        .expect("ranges parse");
        let shown: Vec<String> = config
            .webhook_allow
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(shown, ["127.0.0.1/32", "10.0.0.0/8", "fd00::/8"]);
        let policy = config.webhook_policy();
        policy
            .check("10.1.1.1".parse().expect("ip"))
            .expect("allowed");
        assert!(policy.check("192.168.0.1".parse().expect("ip")).is_err());
    }

    #[test]
    fn a_zero_account_push_interval_turns_the_periodic_push_off() {
        let parsed =
            Config::try_parse_from(["flue-gateway", "--account-push-secs", "0"]).expect("parses");
        assert_eq!(parsed.account_push_every(), None);
        let default = Config::new("nats://x:1");
        assert_eq!(
            default.account_push_every(),
            Some(Duration::from_secs(DEFAULT_ACCOUNT_PUSH_SECS))
        );
    }

    #[test]
    fn the_default_tenant_is_also_taken_as_tenant() {
        for flag in ["--default-tenant", "--tenant"] {
            let parsed = Config::try_parse_from(["flue-gateway", flag, "acme"]).expect("parses");
            assert_eq!(parsed.tenant.as_str(), "acme", "{flag}");
        }
    }

    #[test]
    fn bad_values_are_refused_before_start() {
        for args in [
            ["flue-gateway", "--tenant", "a.b"],
            ["flue-gateway", "--default-tenant", "a*"],
            ["flue-gateway", "--default-timeout-secs", "0"],
            ["flue-gateway", "--timeout-sweep-ms", "0"],
            ["flue-gateway", "--listen", "nowhere"],
            ["flue-gateway", "--presence-timeout-secs", "0"],
            ["flue-gateway", "--presence-timeout-secs", "86401"],
            ["flue-gateway", "--webhook-timeout-ms", "0"],
            ["flue-gateway", "--webhook-max-attempts", "0"],
            ["flue-gateway", "--broker-timeout-ms", "0"],
            ["flue-gateway", "--header-timeout-ms", "10"],
            ["flue-gateway", "--body-timeout-ms", "x"],
            ["flue-gateway", "--request-timeout-secs", "60"],
            ["flue-gateway", "--max-connections", "0"],
            ["flue-gateway", "--replicas", "0"],
            ["flue-gateway", "--replicas", "6"],
            ["flue-gateway", "--request-consumer-storage", "disk"],
            ["flue-gateway", "--account-push-secs", "86401"],
            ["flue-gateway", "--account-push-secs", "-1"],
            ["flue-gateway", "--webhook-allow", "10.0.0.0/33"],
            ["flue-gateway", "--tls-cert", "/c.pem"],
            ["flue-gateway", "--nats-key", "/k.pem"],
        ] {
            assert!(Config::try_parse_from(args).is_err(), "{args:?}");
        }
    }
}
