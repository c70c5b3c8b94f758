//! The agent's only network traffic: one NATS connection, made outwards, and the
//! look-up of the request consumer the gateway created for this server.

use std::sync::Arc;

use async_nats::jetstream::{self, consumer::PullConsumer};
use async_nats::{ConnectOptions, Event};
use flue_proto::creds::AgentCredentials;
use flue_proto::nats_url::NatsUrls;
use flue_proto::retry::Delays;
use flue_proto::subject;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::config::Config;
use crate::error::Error;
use crate::rights::Rights;

/// A connected (or connecting) broker client.
#[derive(Debug, Clone)]
pub struct Broker {
    /// The core client.
    pub client: async_nats::Client,
    /// JetStream on that client.
    pub js: jetstream::Context,
    /// Counts (re)connections, so the pull loop can re-issue its pull request: a broker
    /// that restarted has forgotten it.
    pub connects: watch::Receiver<u64>,
    /// The names this server's request consumer may have, looked up in this order
    /// ([`request_consumers`]).
    pub consumers: Vec<String>,
    /// Set once the agent has waited [`SEAL_WAIT`] for its consumer's move: it does not
    /// wait again (a gateway that does not move consumers).
    seal_waited: Arc<std::sync::atomic::AtomicBool>,
}

/// How long an agent that found its consumer under the older name waits, once, for the
/// gateway to move it to the sealed one (its first heartbeat asks; the move takes a few
/// broker calls) before it pulls the older one: so that the move does not happen under
/// a request in flight (which would be delivered again, and answered from the ledger).
pub const SEAL_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
/// How often it looks for the sealed one meanwhile.
const SEAL_POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// The names this server's request consumer may have: the sealed one its user JWT names,
/// if it names one (only the gateway can compute it: issue 22), then the older one that
/// every server had before and keeps until its agent says it pulls the sealed one (its
/// heartbeats' `sealed_consumer`, on which the gateway moves the consumer).
pub fn request_consumers(config: &Config, credentials: Option<&AgentCredentials>) -> Vec<String> {
    let sealed = credentials
        .filter(|c| !c.user.jwt.is_empty())
        .and_then(|c| flue_proto::creds::UserJwtClaims::verified(&c.user.jwt).ok())
        .and_then(|claims| claims.sealed_request_consumer(&config.tenant, &config.server_id));
    sealed
        .into_iter()
        .chain([subject::request_consumer(&config.tenant, &config.server_id)])
        .collect()
}

/// Connects to the broker in the background (over TLS when configured): the call returns
/// at once and the client keeps (re)connecting forever with jittered exponential backoff.
///
/// With `rights`, every (re)connection authenticates with the user JWT they hold at that
/// moment (a newer one taken after joining a stack included), signed by the credentials'
/// user seed.
pub async fn connect(
    config: &Config,
    credentials: Option<&AgentCredentials>,
    rights: Option<&Rights>,
) -> Result<Broker, Error> {
    let (tx, connects) = watch::channel(0u64);
    let tx = Arc::new(tx);
    let (urls, options) = connect_options(config, credentials, rights)?;
    let options = options
        .retry_on_initial_connect()
        .max_reconnects(None)
        .reconnect_delay_callback(|attempts| {
            crate::RETRY.delay(u32::try_from(attempts.saturating_sub(1)).unwrap_or(u32::MAX))
        })
        .event_callback(move |event| {
            let tx = tx.clone();
            async move {
                match event {
                    Event::Connected => {
                        info!("connected to the broker");
                        tx.send_modify(|n| *n += 1);
                    }
                    Event::Disconnected => warn!("disconnected from the broker"),
                    Event::ServerError(e) => warn!(error = %e, "broker reported an error"),
                    Event::ClientError(e) => warn!(error = %e, "broker client error"),
                    other => debug!(event = %other, "broker connection event"),
                }
            }
        });
    let client = options
        .connect(urls.servers())
        .await
        .map_err(|source| Error::Connect {
            url: urls.redacted(),
            source,
        })?;
    let js = jetstream(config, client.clone());
    Ok(Broker {
        client,
        js,
        connects,
        consumers: request_consumers(config, credentials),
        seal_waited: Arc::default(),
    })
}

/// The broker URLs and the options every agent connection starts from: the user
/// (signing with the JWT `rights` hold at each connection), TLS, the client name and the
/// inbox prefix the broker lets this agent use. `flue-agent doctor` connects with them too,
/// once and without retrying. A wrong TLS file path fails here, not as a connection retried
/// for ever.
pub fn connect_options(
    config: &Config,
    credentials: Option<&AgentCredentials>,
    rights: Option<&Rights>,
) -> Result<(NatsUrls, ConnectOptions), Error> {
    config.nats_tls.check()?;
    let urls = NatsUrls::parse(&config.nats_url);
    let base = match (rights, credentials) {
        (Some(rights), Some(creds)) => {
            rights.connect_options(crate::credentials::user_key(&creds.user, config)?)
        }
        _ => ConnectOptions::new(),
    };
    let options = config
        .nats_tls
        .apply(urls.with_credentials(base))
        .name(format!("flue-agent {}/{}", config.tenant, config.server_id))
        .custom_inbox_prefix(subject::agent_inbox_prefix(
            &config.tenant,
            &config.server_id,
        ));
    Ok((urls, options))
}

/// JetStream on `client`, through the hub's domain when there is one: JetStream then
/// answers the same on the hub and behind a leaf node.
pub fn jetstream(config: &Config, client: async_nats::Client) -> jetstream::Context {
    match &config.js_domain {
        Some(domain) => jetstream::with_domain(client, domain),
        None => jetstream::new(client),
    }
}

/// Looks up (never creates) this server's request consumer under each of its names
/// ([`Broker::consumers`], the sealed one first), retrying with backoff while it is
/// missing (server not registered yet) or the broker is unreachable, and at once after a
/// reconnection (a look-up sent on a dying connection would otherwise wait for its
/// timeout). `None` once `shutdown` is cancelled.
pub async fn find_consumer(
    broker: &Broker,
    connects: &mut watch::Receiver<u64>,
    shutdown: &CancellationToken,
) -> Option<PullConsumer> {
    use std::sync::atomic::Ordering;
    let names = &broker.consumers;
    let mut delays = crate::RETRY.delays();
    let mut older_since: Option<tokio::time::Instant> = None;
    loop {
        connects.borrow_and_update();
        let lookup = first_found(&broker.js, names);
        let found = tokio::select! {
            biased;
            _ = shutdown.cancelled() => return None,
            _ = reconnected(connects) => continue,
            found = lookup => found,
        };
        match found {
            // The older name while the sealed one is known: the gateway moves it on this
            // agent's heartbeat; wait for that, once, rather than pull what it moves.
            Ok(consumer)
                if names.len() > 1
                    && consumer.cached_info().name != names[0]
                    && !broker.seal_waited.load(Ordering::Relaxed) =>
            {
                let since = *older_since.get_or_insert_with(|| {
                    info!(
                        consumer = %consumer.cached_info().name,
                        "request consumer found under its older name; waiting for the gateway to move it to the sealed one"
                    );
                    tokio::time::Instant::now()
                });
                if since.elapsed() >= SEAL_WAIT {
                    broker.seal_waited.store(true, Ordering::Relaxed);
                    warn!(
                        consumer = %consumer.cached_info().name,
                        wait_secs = SEAL_WAIT.as_secs(),
                        "the gateway did not move the request consumer to its sealed name (a gateway older than this agent?); pulling the older one"
                    );
                    return Some(consumer);
                }
                tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => return None,
                    _ = reconnected(connects) => {}
                    _ = tokio::time::sleep(SEAL_POLL) => {}
                }
                continue;
            }
            Ok(consumer) => return Some(consumer),
            Err(e) => warn!(
                consumer = %names.join(" or "),
                stream = subject::REQUEST_STREAM,
                error = %e,
                "request consumer not available (server not registered yet, or broker down), retrying"
            ),
        }
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return None,
            _ = reconnected(connects) => {}
            _ = tokio::time::sleep(delays.next_delay()) => {}
        }
    }
}

/// The first of `names` the request stream has a consumer of; the last look-up's error
/// when none.
async fn first_found(
    js: &jetstream::Context,
    names: &[String],
) -> Result<PullConsumer, jetstream::stream::ConsumerError> {
    let mut last = None;
    for name in names {
        match js
            .get_consumer_from_stream(name, subject::REQUEST_STREAM)
            .await
        {
            Ok(consumer) => return Ok(consumer),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        jetstream::stream::ConsumerError::new(jetstream::stream::ConsumerErrorKind::Other)
    }))
}

/// Resolves at the next (re)connection to the broker.
pub async fn reconnected(connects: &mut watch::Receiver<u64>) {
    if connects.changed().await.is_err() {
        // The client is gone, so no reconnection will ever come.
        std::future::pending::<()>().await;
    }
}

/// Sleeps for the next of `delays`; false if `shutdown` was cancelled meanwhile.
pub async fn pause(delays: &mut Delays, shutdown: &CancellationToken) -> bool {
    tokio::select! {
        _ = shutdown.cancelled() => false,
        _ = tokio::time::sleep(delays.next_delay()) => true,
    }
}
