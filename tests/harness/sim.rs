//! Simulated agents: many agents in one process, for the scale bench
//! (`tests/benches/scale.rs`) and its smoke test.
//!
//! Each simulated agent is what a real `flue-agent` is on the wire, built from the agent
//! crate's own modules: its own NATS connection authenticated with the credentials its
//! server's registration minted ([`flue_agent::connect`], [`flue_agent::rights`]), the
//! request consumer the gateway created for it looked up, never created
//! ([`flue_agent::connect::find_consumer`]), one pull at a time, the gateway's signature on
//! every request checked ([`flue_proto::signing::verify_request`]), answers signed with the
//! agent's user key ([`flue_agent::answer::Responder`]) and presence heartbeats
//! ([`flue_agent::heartbeat`]). What it leaves out is the work: no ledger, no hook process;
//! every request is answered `started` (as from a real agent whose hook starts at once,
//! it stands for `delivered` too) and a no-op COMPLETE at once. So the
//! figures the bench takes are the broker's and the gateway's, not the hooks'.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use flue_agent::answer::{self, Responder};
use flue_agent::heartbeat::{self, Heartbeats};
use flue_agent::{Config, connect};
use flue_proto::creds::AgentCredentials;
use flue_proto::signing;
use flue_proto::{
    AgentMessage, DeploymentRequest, DeploymentResult, DeploymentStatus, PROTOCOL_VERSION,
    RequestDigest, ServerId, TenantId,
};
use futures_util::StreamExt;
use time::OffsetDateTime;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// One simulated agent to start: its server and the credentials text its registration
/// minted (kept in memory: nothing is written to disk).
#[derive(Clone)]
pub struct SimServer {
    /// The registered server.
    pub id: ServerId,
    /// The credentials file's text from `POST /v1/servers`.
    pub credentials: String,
}

impl std::fmt::Debug for SimServer {
    // The credentials are a secret: never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimServer")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// How the simulated agents run.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// The broker URL.
    pub nats_url: String,
    /// The tenant of every server.
    pub tenant: TenantId,
    /// Presence heartbeat interval (the real agent's default is 3 s).
    pub heartbeat: Duration,
    /// How many agents connect and look up their consumer at the same time: a bounded
    /// start, so the bench measures the broker at rest rather than a connection storm.
    pub connecting_at_once: usize,
}

/// Counters the agents share with whoever watches them.
#[derive(Debug, Default)]
struct Counters {
    ready: AtomicU64,
    answered: AtomicU64,
    rejected: AtomicU64,
    failures: Mutex<Vec<String>>,
}

/// Simulated agents running on the current tokio runtime; stopped on [`SimAgents::stop`]
/// or drop.
#[derive(Debug)]
pub struct SimAgents {
    tasks: JoinSet<()>,
    stop: CancellationToken,
    counters: Arc<Counters>,
    count: u64,
}

impl SimAgents {
    /// Starts one simulated agent per server (at most `connecting_at_once` connecting at a
    /// time); returns at once. [`SimAgents::wait_ready`] waits until all pull.
    pub fn start(options: &SimOptions, servers: Vec<SimServer>) -> SimAgents {
        let stop = CancellationToken::new();
        let counters = Arc::new(Counters::default());
        let gate = Arc::new(Semaphore::new(options.connecting_at_once.max(1)));
        let count = servers.len() as u64;
        let mut tasks = JoinSet::new();
        for server in servers {
            let options = options.clone();
            let (stop, counters, gate) = (stop.clone(), counters.clone(), gate.clone());
            tasks.spawn(async move {
                let id = server.id.clone();
                if let Err(e) = run(&options, server, &stop, &counters, &gate).await {
                    let mut failures = counters.failures.lock().expect("failures lock");
                    failures.push(format!("{id}: {e}"));
                }
            });
        }
        SimAgents {
            tasks,
            stop,
            counters,
            count,
        }
    }

    /// How many agents found their consumer and pull.
    pub fn ready(&self) -> u64 {
        self.counters.ready.load(Ordering::Relaxed)
    }

    /// How many requests were answered COMPLETE.
    pub fn answered(&self) -> u64 {
        self.counters.answered.load(Ordering::Relaxed)
    }

    /// How many messages failed the signature check (none, unless something is wrong).
    pub fn rejected(&self) -> u64 {
        self.counters.rejected.load(Ordering::Relaxed)
    }

    /// Waits, at most `limit`, until every agent pulls; panics naming the agents that
    /// could not start.
    pub async fn wait_ready(&self, limit: Duration) {
        let counters = self.counters.clone();
        let count = self.count;
        crate::wait_until("every simulated agent to pull", limit, move || {
            let failures = counters.failures.lock().expect("failures lock");
            assert!(
                failures.is_empty(),
                "simulated agents failed to start: {failures:?}"
            );
            (counters.ready.load(Ordering::Relaxed) >= count).then_some(())
        })
        .await;
    }

    /// Stops every agent and waits for them to be gone.
    pub async fn stop(mut self) {
        self.stop.cancel();
        while self.tasks.join_next().await.is_some() {}
    }
}

impl Drop for SimAgents {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// One agent: connect, heartbeats, find the consumer, then pull and answer until `stop`.
async fn run(
    options: &SimOptions,
    server: SimServer,
    stop: &CancellationToken,
    counters: &Counters,
    gate: &Semaphore,
) -> Result<(), String> {
    let creds = AgentCredentials::parse(&server.credentials).map_err(|e| e.to_string())?;
    if creds.settings.server != server.id || creds.settings.tenant != options.tenant {
        return Err("credentials minted for another server".to_owned());
    }
    let mut config = Config::new(options.tenant.clone(), server.id.clone());
    config.nats_url = options.nats_url.clone();
    config.heartbeat_interval = options.heartbeat;
    // No state dir is made: `Rights::load` only looks there for a JWT saved after joining
    // a stack, which a simulated agent never does.
    config.state_dir = std::env::temp_dir().join("flue-sim-agent-has-no-state");
    let rights =
        flue_agent::rights::Rights::load(&config, &creds.user).map_err(|e| e.to_string())?;
    let signer = Arc::new(nkeys::KeyPair::from_seed(&creds.user.seed).map_err(|e| e.to_string())?);

    let permit = gate.acquire().await.map_err(|e| e.to_string())?;
    let broker = connect::connect(&config, Some(&creds), rights.as_ref())
        .await
        .map_err(|e| e.to_string())?;
    let heartbeats = Heartbeats::new(
        broker.client.clone(),
        config.tenant.clone(),
        config.server_id.clone(),
        config.heartbeat_interval,
    )
    .with_sealed_consumer(broker.consumers.len() > 1);
    let beating = heartbeat::run(&heartbeats, broker.connects.clone(), stop.clone());
    let responder = Responder::new(
        broker.js.clone(),
        config.tenant.clone(),
        config.server_id.clone(),
        Some(signer),
    );
    let mut connects = broker.connects.clone();
    let mut permit = Some(permit);
    let pulling = async {
        let mut delays = flue_agent::RETRY.delays();
        loop {
            let Some(consumer) = connect::find_consumer(&broker, &mut connects, stop).await else {
                return;
            };
            if permit.take().is_some() {
                counters.ready.fetch_add(1, Ordering::Relaxed);
            }
            loop {
                let pull = consumer
                    .batch()
                    .max_messages(1)
                    .expires(flue_agent::worker::PULL_EXPIRES)
                    .messages();
                // As the real agent: a failed pull, or a reconnection, means looking the
                // consumer up again.
                let next: Option<Result<jetstream::Message, ()>> = tokio::select! {
                    biased;
                    _ = stop.cancelled() => return,
                    batch = pull => match batch {
                        Ok(mut batch) => tokio::select! {
                            biased;
                            _ = stop.cancelled() => return,
                            _ = connect::reconnected(&mut connects) => break,
                            next = batch.next() => next.map(|r| r.map_err(drop)),
                        },
                        Err(_) => Some(Err(())),
                    },
                };
                match next {
                    None => {}
                    Some(Err(_)) => {
                        if !connect::pause(&mut delays, stop).await {
                            return;
                        }
                        break;
                    }
                    Some(Ok(msg)) => {
                        delays.reset();
                        answer_noop(&config, &creds, &responder, &msg, stop, counters).await;
                    }
                }
            }
        }
    };
    tokio::join!(beating, pulling);
    Ok(())
}

/// Answers one request as a real agent whose hook did nothing and succeeded: signature
/// checked first (a refused one is terminated, as the real agent does, and counted),
/// then `started`, `finished` COMPLETE, then the ack.
async fn answer_noop(
    config: &Config,
    creds: &AgentCredentials,
    responder: &Responder,
    msg: &jetstream::Message,
    stop: &CancellationToken,
    counters: &Counters,
) {
    let header = |name: &str| {
        msg.headers
            .as_ref()
            .and_then(|h| h.get(name))
            .map(|v| v.as_str())
    };
    let now = OffsetDateTime::now_utc();
    let verified = signing::verify_request(
        header(signing::REQUEST_CLAIMS_HEADER),
        header(signing::SIGNATURE_HEADER),
        &creds.settings.gateway_key,
        &msg.payload,
        (&config.tenant, &config.server_id),
        now,
    );
    let request = serde_json::from_slice::<DeploymentRequest>(&msg.payload);
    let (Ok(_), Ok(req)) = (verified, request) else {
        counters.rejected.fetch_add(1, Ordering::Relaxed);
        let _ = msg.ack_with(AckKind::Term).await;
        return;
    };
    let digest = RequestDigest::of(&msg.payload);
    let id = req.deployment_id;
    // As the real agent whose hook starts at once: `started` stands for `delivered` too.
    let started = AgentMessage::Started {
        v: PROTOCOL_VERSION,
        deployment_id: id.clone(),
        at: now,
        request_digest: Some(digest.clone()),
    };
    // As in the real agent, a lost `started` changes nothing else.
    let _ = responder.publish(&started).await;
    let result = DeploymentResult {
        status: DeploymentStatus::Complete,
        status_reason: None,
        outputs: Default::default(),
        deploy_stdout: String::new(),
        deploy_stderr: String::new(),
        deploy_status_code: Some(0),
        started_at: Some(now),
        finished_at: OffsetDateTime::now_utc(),
    };
    let finished = answer::finished(&id, Some(&digest), result);
    if responder.publish_finished(&finished, stop).await {
        answer::ack(msg, stop).await;
        counters.answered.fetch_add(1, Ordering::Relaxed);
    }
}

/// Registers the servers `<prefix>-00001` … through the API (`POST /v1/servers` with an
/// admin client), at most `at_once` at a time, and returns them with the credentials each
/// registration minted, in order.
pub async fn register(
    admin: &flue_client::Client,
    prefix: &str,
    count: usize,
    at_once: usize,
) -> Vec<SimServer> {
    let mut servers: Vec<(usize, SimServer)> = futures_util::stream::iter(1..=count)
        .map(|i| async move {
            let id = ServerId::new(format!("{prefix}-{i:05}")).expect("server id");
            let registration = admin
                .register_server(&flue_proto::RegisterServer {
                    id: id.clone(),
                    name: String::new(),
                    transport: Default::default(),
                })
                .await
                .unwrap_or_else(|e| panic!("registering {id}: {e}"));
            let credentials = registration
                .credentials
                .unwrap_or_else(|| panic!("{id} was registered before: no credentials"));
            (i, SimServer { id, credentials })
        })
        .buffer_unordered(at_once.max(1))
        .collect()
        .await;
    servers.sort_by_key(|(i, _)| *i);
    servers.into_iter().map(|(_, s)| s).collect()
}
