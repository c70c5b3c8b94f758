//! `flue-agent doctor`: checks, with the agent's own flags and environment, what the agent
//! needs to run — its credentials file, its state dir, its hook dirs, the small guard, the
//! broker and its request consumer — and says for each what is wrong and how to fix it.
//!
//! It changes nothing: it reads the credentials, lists the hook dirs, makes and removes one
//! temporary file in the state dir, connects once (no retry, bounded) and looks the request
//! consumer up (agents never create one). It never opens the ledger, so it can run next to
//! a running agent. No line names a secret: not the seeds, the JWT, nor the broker URL's
//! userinfo.

mod files;

use std::fmt;
use std::time::Duration;

use async_nats::jetstream::consumer::PullConsumer;
use flue_proto::creds::{AgentCredentials, UserJwtClaims};
use flue_proto::subject;

use crate::config::Config;

/// Longest wait, in seconds, for each network step: the connection, then the consumer
/// look-up.
pub const DEFAULT_TIMEOUT_SECS: u64 = 5;

/// Flags of `flue-agent doctor`: the agent's own (so it runs with the unit's environment
/// file) and the network wait.
#[derive(Debug, Clone, clap::Args)]
pub struct DoctorArgs {
    /// The flags and environment `flue-agent run` takes.
    #[command(flatten)]
    pub run: crate::config::RunArgs,
    /// Seconds to wait for the broker connection, then for the consumer look-up (1 to 60).
    #[arg(long, default_value_t = DEFAULT_TIMEOUT_SECS,
          value_parser = clap::value_parser!(u64).range(1..=60))]
    pub timeout_secs: u64,
}

/// Runs every check for `args` and prints the report; exit status 0 when all passed,
/// 1 otherwise.
pub async fn main(args: DoctorArgs) -> std::process::ExitCode {
    let timeout = Duration::from_secs(args.timeout_secs);
    let report = run(&args.run.into(), timeout).await;
    print!("{report}");
    if report.passed() {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}

/// The outcome of one check: one line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// What was checked (`credentials`, `broker`, …).
    pub name: &'static str,
    /// Whether it passed.
    pub ok: bool,
    /// What was found; on failure, what is wrong and how to fix it.
    pub detail: String,
}

impl Check {
    fn pass(name: &'static str, detail: impl Into<String>) -> Self {
        Self {
            name,
            ok: true,
            detail: detail.into(),
        }
    }

    fn fail(name: &'static str, detail: impl Into<String>) -> Self {
        Self {
            name,
            ok: false,
            detail: detail.into(),
        }
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = if self.ok { "ok  " } else { "FAIL" };
        write!(f, "{status} {}: {}", self.name, self.detail)
    }
}

/// Every check, in the order run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// One entry per line.
    pub checks: Vec<Check>,
}

impl Report {
    /// True when every check passed (exit status 0).
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for check in &self.checks {
            writeln!(f, "{check}")?;
        }
        Ok(())
    }
}

/// Runs every check. The broker checks need usable credentials (or the development
/// flags that do without); without them they are reported as not tried.
pub async fn run(config: &Config, timeout: Duration) -> Report {
    let (credentials_check, credentials) = files::credentials(config);
    let usable = credentials.is_some() || config.insecure_unsigned_requests;
    let mut checks = vec![credentials_check, files::state_dir(config)];
    checks.extend(files::hook_dirs(config));
    checks.push(files::guard());
    if usable {
        checks.extend(broker(config, credentials.as_ref(), timeout).await);
    } else {
        checks.push(Check::fail(
            "broker",
            "not tried: the credentials file is not usable (see above)",
        ));
    }
    Report { checks }
}

/// Connects once, as the agent would (same user, TLS and inbox prefix), then looks up the
/// server's request consumer.
async fn broker(
    config: &Config,
    credentials: Option<&AgentCredentials>,
    timeout: Duration,
) -> Vec<Check> {
    let rights = match credentials {
        Some(c) => match crate::rights::Rights::load(config, &c.user) {
            Ok(rights) => rights,
            Err(e) => return vec![Check::fail("broker", format!("not tried: {e}"))],
        },
        None => None,
    };
    let (urls, options) =
        match crate::connect::connect_options(config, credentials, rights.as_ref()) {
            Ok(built) => built,
            Err(e) => {
                return vec![Check::fail(
                    "broker",
                    format!("not tried: {}", error_chain(&e)),
                )];
            }
        };
    let url = urls.redacted();
    let connecting = options.connection_timeout(timeout).connect(urls.servers());
    let client = match tokio::time::timeout(timeout, connecting).await {
        Ok(Ok(client)) => client,
        Ok(Err(e)) => return vec![Check::fail("broker", connect_failure(&url, &e))],
        Err(_) => {
            return vec![Check::fail(
                "broker",
                format!(
                    "no connection to {url} within {}s: is the broker running there and reachable from this server (firewall, FLUE_NATS_URL / --nats-url)?",
                    timeout.as_secs()
                ),
            )];
        }
    };
    let jwt = credentials
        .map(|c| c.user.jwt.as_str())
        .filter(|jwt| !jwt.is_empty());
    let owner = match jwt.map(UserJwtClaims::verified) {
        None => Ok("anonymously (development broker)"),
        Some(Ok(claims)) => match files::not_this_servers_user(config, &claims) {
            None => Ok("as this server's broker user"),
            Some(whose) => Err(whose),
        },
        Some(Err(e)) => Err(format!("its user JWT: {e}")),
    };
    let checks = match owner {
        Ok(user) => vec![
            Check::pass("broker", format!("connected to {url} {user}")),
            request_consumer(config, credentials, client.clone(), timeout).await,
        ],
        // The broker took the user, but it is not this server's: saying "ok" here would
        // hide the one thing wrong.
        Err(whose) => vec![
            Check::fail(
                "broker",
                format!("connected to {url}, but not as this server's broker user: {whose}"),
            ),
            Check::fail(
                "request consumer",
                "not tried: the credentials are not this server's (see above)",
            ),
        ],
    };
    if tokio::time::timeout(timeout, client.drain()).await.is_err() {
        tracing::debug!("draining the doctor's connection timed out");
    }
    checks
}

/// Looks up (never creates) the durable consumer the gateway made at registration, under
/// each name it may have ([`crate::connect::request_consumers`]).
async fn request_consumer(
    config: &Config,
    credentials: Option<&AgentCredentials>,
    client: async_nats::Client,
    timeout: Duration,
) -> Check {
    let names = crate::connect::request_consumers(config, credentials);
    let stream = subject::REQUEST_STREAM;
    let js = crate::connect::jetstream(config, client);
    let lookup = async {
        let mut last = None;
        for name in &names {
            let found: Result<PullConsumer, _> = js.get_consumer_from_stream(name, stream).await;
            match found {
                Ok(_) => return Ok(name.clone()),
                Err(e) => last = Some(e),
            }
        }
        Err(last.map_or_else(|| "no name".to_owned(), |e| e.to_string()))
    };
    let name = names.join(" or ");
    let domain = config.js_domain.as_deref().unwrap_or("none");
    match tokio::time::timeout(timeout, lookup).await {
        Ok(Ok(found)) => Check::pass(
            "request consumer",
            format!("{found} on stream {stream} (JetStream domain {domain})"),
        ),
        Ok(Err(e)) => Check::fail(
            "request consumer",
            format!(
                "{name} on stream {stream} (JetStream domain {domain}) not found: {e}; is server {} registered with the gateway (`flue server register {}`)?",
                config.server_id, config.server_id
            ),
        ),
        // A JetStream call the broker denies surfaces as a timeout, not as an error.
        Err(_) => Check::fail(
            "request consumer",
            format!(
                "no answer about {name} on stream {stream} within {}s: JetStream domain {domain} is not reachable (behind a leaf node the hub needs that domain: FLUE_JS_DOMAIN / --js-domain), or the broker denied the look-up (credentials of another server or tenant?)",
                timeout.as_secs()
            ),
        ),
    }
}

/// What a failed connection means, for the operator.
fn connect_failure(url: &str, e: &async_nats::ConnectError) -> String {
    use async_nats::ConnectErrorKind as Kind;
    let hint = match e.kind() {
        Kind::AuthorizationViolation | Kind::Authentication => {
            "the broker refused this server's credentials: the server was deregistered or its credentials rotated since this file was written; get new ones with `flue server rotate-credentials ID --creds FILE`"
        }
        Kind::Tls => {
            "TLS failed: check FLUE_NATS_CA / --nats-ca (the CA the broker's certificate chains to) and the broker's name in the URL"
        }
        Kind::TimedOut => "is the broker reachable from this server (firewall, address)?",
        _ => "is the broker running there and FLUE_NATS_URL / --nats-url right?",
    };
    format!("cannot connect to {url}: {e}; {hint}")
}

/// An error and its causes on one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
