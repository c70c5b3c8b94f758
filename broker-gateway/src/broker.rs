//! The request and response streams, the consumers on them, and publishing requests.
//!
//! Every registered server has a durable consumer on the request stream, so the stream's
//! consumer limit (`--max-servers`) bounds the servers; the gateway sets it explicitly and
//! checks it (and the account's) at start.

use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use flue_proto::signing::{self, PublishWindow, RequestClaims};
use flue_proto::{DeploymentRequest, RequestDigest, ServerId, TenantId, subject};
use time::OffsetDateTime;
use tracing::{info, warn};

use crate::consumer_names::ConsumerNames;
use crate::request_consumers::RequestConsumers;

/// How long JetStream remembers a message id to drop a duplicate publish. On the request
/// stream it must outlast a request's publish window (`signing::PUBLISH_WINDOW`): a copy
/// of a signed request is then either a duplicate or too late to run.
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);
const _: () = assert!(DUPLICATE_WINDOW.as_secs() >= 2 * signing::PUBLISH_WINDOW.as_secs());

/// How long a delivered message may stay unacknowledged before it is redelivered.
///
/// Short, so that the deployment a crashed agent held is handed back (and reported
/// "interrupted") within seconds; agents send in-progress acks every few seconds while
/// a hook runs, so a long hook is never redelivered.
pub const ACK_WAIT: Duration = Duration::from_secs(10);

/// How long the gateway pinned to the response consumer keeps the pin without pulling:
/// how soon another gateway takes over the answers from one that died. As long as the
/// ack wait, so the dead one's unacknowledged answers are due again by then.
pub const PIN_TIMEOUT: Duration = ACK_WAIT;

/// Room kept in every message for headers and framing (a message id, KV's expected
/// revision): what the gateway stores or publishes must fit in the max payload less this.
pub const HEADROOM: usize = 4096;

/// The max payload assumed when the broker does not tell its own (NATS's default, 1 MiB).
const DEFAULT_MAX_PAYLOAD: usize = 1 << 20;

/// JetStream's "maximum consumers limit reached" (a stream's or the account's).
const MAXIMUM_CONSUMERS_LIMIT: jetstream::ErrorCode = jetstream::ErrorCode(10026);

/// What a stream's `max_consumers` of zero or less means on nats-server 2.15: not
/// "unlimited" but the broker's `jetstream.limits.default_max_consumers`, 1,000 unless the
/// broker's configuration lifts it.
pub const BROKER_DEFAULT_MAX_CONSUMERS: i64 = 1000;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Something the gateway would store or publish is larger than the broker takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{what} takes {size} bytes; the broker's max payload ({max_payload} bytes, less {HEADROOM} for headers) allows {limit}"
)]
pub struct TooLarge {
    /// What (`config`, `deployment request`, `deployment record`, `stack record`).
    pub what: &'static str,
    /// Its size in bytes, as JSON.
    pub size: usize,
    /// The broker's max payload.
    pub max_payload: usize,
    /// The most it may take: `max_payload` less [`HEADROOM`].
    pub limit: usize,
}

/// Why the broker refused a write (or a stream) for lack of JetStream storage: the
/// broker's own answer, one of four JetStream error codes. Nothing was stored; trying
/// again cannot help until an operator gives the broker room (then writes resume by
/// themselves: nats-server checks its limits on every write).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageRefusal {
    /// 10023 "insufficient resources": the server's JetStream store is over its
    /// `max_file_store` (or `max_memory_store`); every account on it is refused.
    Server,
    /// 10002 "resource limits exceeded for account": the account's JetStream storage
    /// limit (its JWT's `disk_storage` / `mem_storage`) is reached.
    Account,
    /// 10047 "insufficient storage resources available": a stream's reservation
    /// (`max_bytes`) would exceed what the server has left to reserve.
    Reservation,
    /// 10028 "insufficient memory resources available".
    Memory,
}

impl std::fmt::Display for StorageRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Server => {
                "the broker's JetStream store is full (its max_file_store or max_memory_store is reached)"
            }
            Self::Account => "the broker account's JetStream storage limit is reached",
            Self::Reservation => "the broker has no JetStream storage left to reserve",
            Self::Memory => "the broker's JetStream memory store is full",
        })
    }
}

impl StorageRefusal {
    /// The refusal somewhere in `error`'s chain, if the broker refused for storage.
    pub fn of(error: &(dyn std::error::Error + 'static)) -> Option<Self> {
        use async_nats::jetstream::ErrorCode;
        match jetstream_code(error)? {
            ErrorCode::INSUFFICIENT_RESOURCES => Some(Self::Server),
            ErrorCode::ACCOUNT_RESOURCES_EXCEEDED => Some(Self::Account),
            ErrorCode::STORAGE_RESOURCES_EXCEEDED => Some(Self::Reservation),
            ErrorCode::MEMORY_RESOURCES_EXCEEDED => Some(Self::Memory),
            _ => None,
        }
    }
}

/// Whether the broker refused a write or a stream somewhere in `error`'s chain for lack
/// of JetStream storage ([`StorageRefusal`]). Retrying cannot help; an operator must give
/// the broker room.
pub fn out_of_storage(error: &(dyn std::error::Error + 'static)) -> bool {
    StorageRefusal::of(error).is_some()
}

/// Why a broker operation failed.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// A stream could not be created or read.
    #[error("cannot set up stream {stream}")]
    Stream {
        /// Stream name.
        stream: &'static str,
        /// Cause.
        #[source]
        source: BoxError,
    },
    /// A consumer could not be created or read.
    #[error("cannot set up consumer {consumer} on stream {stream}")]
    Consumer {
        /// Stream name.
        stream: &'static str,
        /// Consumer name.
        consumer: String,
        /// Cause.
        #[source]
        source: BoxError,
    },
    /// An event could not be published, or its publish was not acknowledged.
    #[error("cannot publish event {id}")]
    Event {
        /// Event id.
        id: String,
        /// Cause.
        #[source]
        source: BoxError,
    },
    /// A request is larger than the broker takes: publishing it again cannot help.
    #[error("cannot publish the request of deployment {deployment}")]
    RequestTooLarge {
        /// Deployment id.
        deployment: String,
        /// Sizes.
        #[source]
        source: TooLarge,
    },
    /// The broker refused a server's request consumer: the request stream's (or the
    /// account's) consumer limit is reached, one consumer per registered server.
    #[error("the broker's consumer limit{} is reached", limit.map(|n| format!(" of {n}")).unwrap_or_default())]
    ConsumerLimit {
        /// The limit, as far as it could be read.
        limit: Option<i64>,
    },
    /// A request could not be published, or its publish was not acknowledged.
    #[error("cannot publish the request of deployment {deployment}")]
    Publish {
        /// Deployment id.
        deployment: String,
        /// Cause.
        #[source]
        source: BoxError,
    },
}

impl BrokerError {
    /// The stream the failed call was on, when there is one (a 507 names it).
    pub fn stream(&self) -> Option<&'static str> {
        match self {
            Self::Stream { stream, .. } | Self::Consumer { stream, .. } => Some(stream),
            Self::Event { .. } => Some(flue_proto::event::EVENT_STREAM),
            Self::Publish { .. } => Some(subject::REQUEST_STREAM),
            Self::RequestTooLarge { .. } | Self::ConsumerLimit { .. } => None,
        }
    }
}

/// The error of an operation on one server's request consumer `name`.
fn request_consumer_error(name: &str) -> impl Fn(BoxError) -> BrokerError + use<> {
    let name = name.to_owned();
    move |source| BrokerError::Consumer {
        stream: subject::REQUEST_STREAM,
        consumer: name.clone(),
        source,
    }
}

/// The configuration of server `server`'s request consumer `name`, made as `consumers`
/// says, delivering from the subject's first message.
fn request_consumer_config(
    name: &str,
    tenant: &TenantId,
    server: &ServerId,
    consumers: &RequestConsumers,
) -> consumer::pull::Config {
    consumer::pull::Config {
        durable_name: Some(name.to_owned()),
        filter_subject: subject::request(tenant, server),
        ack_policy: consumer::AckPolicy::Explicit,
        deliver_policy: consumer::DeliverPolicy::All,
        max_ack_pending: 1,
        ack_wait: ACK_WAIT,
        max_deliver: -1,
        memory_storage: consumers.storage.in_memory(),
        num_replicas: consumers.num_replicas(),
        ..Default::default()
    }
}

/// The consumer `name`'s info, `None` when the stream (the request stream, or `of`) has no
/// such consumer.
async fn consumer_info(
    stream: &stream::Stream<()>,
    name: &str,
) -> Result<Option<consumer::Info>, BrokerError> {
    consumer_info_of(stream, subject::REQUEST_STREAM, name).await
}

/// [`consumer_info`] on the stream named `of`.
async fn consumer_info_of(
    stream: &stream::Stream<()>,
    of: &'static str,
    name: &str,
) -> Result<Option<consumer::Info>, BrokerError> {
    match stream.consumer_info(name).await {
        Ok(info) => Ok(Some(info)),
        Err(e) if e.kind() == jetstream::context::ConsumerInfoErrorKind::NotFound => Ok(None),
        Err(e) => Err(BrokerError::Consumer {
            stream: of,
            consumer: name.to_owned(),
            source: e.into(),
        }),
    }
}

/// Whether a consumer creation failed for the stream's or the account's consumer limit.
fn at_consumer_limit(e: &stream::ConsumerError) -> bool {
    matches!(
        e.kind(),
        stream::ConsumerErrorKind::JetStream(j) if j.error_code() == MAXIMUM_CONSUMERS_LIMIT
    )
}

/// Deletes the request consumer `name`; one already gone is fine.
async fn delete_consumer(stream: &stream::Stream<()>, name: &str) -> Result<(), BrokerError> {
    delete_consumer_of(stream, subject::REQUEST_STREAM, name).await
}

/// [`delete_consumer`] on the stream named `of`.
pub(crate) async fn delete_consumer_of(
    stream: &stream::Stream<()>,
    of: &'static str,
    name: &str,
) -> Result<(), BrokerError> {
    match stream.delete_consumer(name).await {
        Ok(_) => Ok(()),
        Err(e)
            if matches!(
                e.kind(),
                stream::ConsumerErrorKind::JetStream(j)
                    if j.error_code() == jetstream::ErrorCode::CONSUMER_NOT_FOUND
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(BrokerError::Consumer {
            stream: of,
            consumer: name.to_owned(),
            source: e.into(),
        }),
    }
}

/// The limits on consumers that bound how many servers can register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerLimits {
    /// The request stream's `max_consumers`; zero or less means the broker's default
    /// ([`BROKER_DEFAULT_MAX_CONSUMERS`] unless its configuration lifts it).
    pub stream: i64,
    /// The account's JetStream consumer limit, if it has one (it counts every consumer of
    /// the account: the gateway's, webhooks' and SSE listeners' too).
    pub account: Option<i64>,
}

impl ConsumerLimits {
    /// The lowest known limit; `None` when neither is set, which means the broker's
    /// default applies to the stream.
    pub fn effective(&self) -> Option<i64> {
        let stream = (self.stream > 0).then_some(self.stream);
        match (stream, self.account) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// Handle on the broker's JetStream; cheap to clone.
#[derive(Debug, Clone)]
pub struct Broker {
    js: jetstream::Context,
    /// The broker's max payload, as it told at connection.
    max_payload: usize,
    /// How servers' request consumers are created (`--request-consumer-storage`,
    /// `--request-consumer-replicas`).
    request_consumers: RequestConsumers,
    /// Their sealed names ([`crate::consumer_names`]).
    names: ConsumerNames,
}

impl Broker {
    /// Wraps a JetStream context, reading the broker's max payload from its connection.
    pub fn new(js: jetstream::Context) -> Self {
        let max_payload = match js.client().server_info().max_payload {
            0 => DEFAULT_MAX_PAYLOAD,
            n => n,
        };
        Self {
            js,
            max_payload,
            request_consumers: RequestConsumers::default(),
            names: ConsumerNames::none(),
        }
    }

    /// The same handle, moving servers' request consumers to the sealed names `names`
    /// gives ([`Broker::seal_request_consumer`]).
    pub fn with_consumer_names(mut self, names: ConsumerNames) -> Self {
        self.names = names;
        self
    }

    /// The same handle, creating servers' request consumers as `consumers` says.
    pub fn with_request_consumers(mut self, consumers: RequestConsumers) -> Self {
        self.request_consumers = consumers;
        self
    }

    /// The broker's max payload in bytes.
    pub fn max_payload(&self) -> usize {
        self.max_payload
    }

    /// The most bytes of JSON the gateway stores or publishes in one message: the max
    /// payload less [`HEADROOM`].
    pub fn payload_limit(&self) -> usize {
        self.max_payload.saturating_sub(HEADROOM)
    }

    /// Refuses `what`, of `size` bytes as JSON, when it would not fit in one message.
    pub fn fits(&self, what: &'static str, size: usize) -> Result<(), TooLarge> {
        let limit = self.payload_limit();
        if size <= limit {
            return Ok(());
        }
        Err(TooLarge {
            what,
            size,
            limit,
            max_payload: self.max_payload,
        })
    }

    /// Refuses `value` when its JSON would not fit in one message (see [`Broker::fits`]).
    pub fn fits_json(
        &self,
        what: &'static str,
        value: &impl serde::Serialize,
    ) -> Result<(), TooLarge> {
        // What the gateway stores always serialises; a failure has no size to refuse.
        let size = serde_json::to_vec(value).map_or(0, |bytes| bytes.len());
        self.fits(what, size)
    }

    /// Creates the request and response streams if they do not exist yet, and gives
    /// existing ones `max_age` if they were created with another, and the request stream
    /// `max_servers` as its consumer limit (one durable consumer per server).
    ///
    /// The limit is set on the stream explicitly: left at -1 it would mean the broker's
    /// default, 1,000 on nats-server 2.15, and the 1,001st registration would fail. An
    /// account allowing fewer consumers caps it (the broker refuses a stream limit above
    /// its account's); the start-up check then warns. `replicas` is the count a new
    /// stream is created with ([`crate::replicas::ensure`] changes existing ones).
    pub async fn ensure_streams(
        &self,
        max_age: Duration,
        max_servers: i32,
        replicas: usize,
    ) -> Result<(), BrokerError> {
        // The broker refuses a stream limit above its account's.
        let request_limit = match self.account_consumer_limit().await {
            Some(account) if account < i64::from(max_servers) => {
                i32::try_from(account).unwrap_or(max_servers)
            }
            _ => max_servers,
        };
        for (name, subjects, max_consumers) in [
            (
                subject::REQUEST_STREAM,
                subject::REQUEST_SUBJECTS,
                request_limit,
            ),
            (subject::RESPONSE_STREAM, subject::RESPONSE_SUBJECTS, 0),
        ] {
            let config = stream::Config {
                name: name.to_owned(),
                subjects: vec![subjects.to_owned()],
                retention: stream::RetentionPolicy::Limits,
                storage: stream::StorageType::File,
                duplicate_window: DUPLICATE_WINDOW,
                max_age,
                // One durable consumer per server on the request stream.
                max_consumers,
                num_replicas: replicas,
                ..Default::default()
            };
            let err = |e: BoxError| BrokerError::Stream {
                stream: name,
                source: e,
            };
            let stream = self
                .js
                .get_or_create_stream(config)
                .await
                .map_err(|e| err(e.into()))?;
            let found = &stream.cached_info().config;
            let limit_changed = max_consumers > 0 && found.max_consumers != max_consumers;
            let window_short = found.duplicate_window < DUPLICATE_WINDOW;
            if found.max_age != max_age || limit_changed || window_short {
                let mut changed = found.clone();
                changed.max_age = max_age;
                changed.duplicate_window = changed.duplicate_window.max(DUPLICATE_WINDOW);
                if limit_changed {
                    changed.max_consumers = max_consumers;
                }
                self.js
                    .update_stream(&changed)
                    .await
                    .map_err(|e| err(e.into()))?;
                info!(
                    stream = name,
                    from_secs = found.max_age.as_secs(),
                    to_secs = max_age.as_secs(),
                    from_max_consumers = found.max_consumers,
                    to_max_consumers = changed.max_consumers,
                    "stream limits changed"
                );
            }
        }
        Ok(())
    }

    /// The account's JetStream consumer limit, if it has one and it can be read.
    async fn account_consumer_limit(&self) -> Option<i64> {
        match self.js.query_account().await {
            Ok(account) => account.limits.max_consumers.filter(|n| *n > 0),
            Err(e) => {
                warn!(error = %e, "cannot read the broker account's limits");
                None
            }
        }
    }

    /// The consumer limits that bound how many servers can register: the request
    /// stream's own and its account's.
    pub async fn consumer_limits(&self) -> Result<ConsumerLimits, BrokerError> {
        let err = |e: BoxError| BrokerError::Stream {
            stream: subject::REQUEST_STREAM,
            source: e,
        };
        let stream = self
            .js
            .get_stream(subject::REQUEST_STREAM)
            .await
            .map_err(|e| err(e.into()))?;
        let stream_limit = i64::from(stream.cached_info().config.max_consumers);
        let account = self.js.query_account().await.map_err(|e| err(e.into()))?;
        Ok(ConsumerLimits {
            stream: stream_limit,
            account: account.limits.max_consumers.filter(|n| *n > 0),
        })
    }

    /// The gateway's durable pull consumer on the response stream, created if missing and
    /// brought to this configuration if it was made without it.
    ///
    /// Every gateway pulls it in the priority group [`subject::GATEWAY_RESPONSE_GROUP`]
    /// with the `pinned_client` policy: the broker delivers to one gateway at a time and
    /// moves the pin to another once the pinned one has not pulled for [`PIN_TIMEOUT`]
    /// (it died, or lost the broker). JetStream is the only coordination: no election of
    /// Flue's own.
    pub async fn response_consumer(&self) -> Result<consumer::PullConsumer, BrokerError> {
        let name = self.response_consumer_name();
        let err = |e: BoxError| BrokerError::Consumer {
            stream: subject::RESPONSE_STREAM,
            consumer: name.clone(),
            source: e,
        };
        let stream = self
            .js
            .get_stream_no_info(subject::RESPONSE_STREAM)
            .await
            .map_err(|e| err(e.into()))?;
        let mut config = consumer::pull::Config {
            durable_name: Some(name.clone()),
            ack_policy: consumer::AckPolicy::Explicit,
            deliver_policy: consumer::DeliverPolicy::All,
            ack_wait: ACK_WAIT,
            max_deliver: -1,
            priority_policy: consumer::PriorityPolicy::PinnedClient,
            priority_groups: vec![subject::GATEWAY_RESPONSE_GROUP.to_owned()],
            priority_timeout: PIN_TIMEOUT,
            ..Default::default()
        };
        // The name every gateway used before sealed names (issue 22), when this one is
        // not it: its consumer, if one is left, hands its position over and goes.
        let older = (name != subject::GATEWAY_RESPONSE_CONSUMER)
            .then_some(subject::GATEWAY_RESPONSE_CONSUMER);
        let found = match stream.get_consumer::<consumer::pull::Config>(&name).await {
            Ok(found)
                if found.cached_info().config.priority_policy
                    == consumer::PriorityPolicy::PinnedClient =>
            {
                found
            }
            // Missing, or made by a gateway before pinning: create or update it in place
            // (the broker keeps its position and what it has delivered); a new sealed one
            // starts after what the older consumer had acknowledged.
            _ => {
                if let Some(older) = older
                    && let Some(old) =
                        consumer_info_of(&stream, subject::RESPONSE_STREAM, older).await?
                    && old.ack_floor.stream_sequence > 0
                {
                    config.deliver_policy = consumer::DeliverPolicy::ByStartSequence {
                        start_sequence: old.ack_floor.stream_sequence + 1,
                    };
                }
                match stream.create_consumer(config).await {
                    Ok(made) => made,
                    // Made meanwhile by another gateway, from another start.
                    Err(e) => stream
                        .get_consumer::<consumer::pull::Config>(&name)
                        .await
                        .map_err(|_| err(e.into()))?,
                }
            }
        };
        if let Some(older) = older
            && consumer_info_of(&stream, subject::RESPONSE_STREAM, older)
                .await?
                .is_some()
        {
            warn!(
                consumer = older,
                "the response consumer of gateways before sealed consumer names is deleted: its answers are delivered by this one, after what it had acknowledged (a gateway of an older release still running makes it again: upgrade every gateway together)"
            );
            delete_consumer_of(&stream, subject::RESPONSE_STREAM, older).await?;
        }
        Ok(found)
    }

    /// The operations consumer's name: sealed ([`ConsumerNames::gateway`]) in operator
    /// mode.
    pub fn operations_consumer_name(&self) -> String {
        self.names
            .gateway(flue_proto::operation::OPERATIONS_CONSUMER)
    }

    /// The response consumer's name: sealed ([`ConsumerNames::gateway`]) in operator mode.
    pub fn response_consumer_name(&self) -> String {
        self.names.gateway(subject::GATEWAY_RESPONSE_CONSUMER)
    }

    /// Releases the response consumer's pin if it is still `pin` (this gateway's, from the
    /// `Nats-Pin-Id` of the answers it got), so that the next pull, this gateway's or
    /// another's, takes it at once instead of after [`PIN_TIMEOUT`]. Whether it was
    /// released.
    pub async fn release_response_pin(&self, pin: &str) -> Result<bool, BrokerError> {
        let name = &self.response_consumer_name();
        let err = |e: BoxError| BrokerError::Consumer {
            stream: subject::RESPONSE_STREAM,
            consumer: name.to_owned(),
            source: e,
        };
        let stream = self
            .js
            .get_stream_no_info(subject::RESPONSE_STREAM)
            .await
            .map_err(|e| err(e.into()))?;
        let info = stream
            .consumer_info(name)
            .await
            .map_err(|e| err(e.into()))?;
        let mine = info
            .priority_groups
            .iter()
            .any(|g| g.pinned_client_id.as_deref() == Some(pin));
        if mine {
            stream
                .unpin_consumer(name, subject::GATEWAY_RESPONSE_GROUP)
                .await
                .map_err(|e| err(e.into()))?;
        }
        Ok(mine)
    }

    /// Creates (or finds) the durable pull consumer of one server's request queue.
    ///
    /// One message in flight at a time, so a server applies its deployments in queue
    /// order; redelivered forever, since the agent's ledger makes redelivery harmless.
    /// Its state is kept where `--request-consumer-storage` says and on as many nodes as
    /// `--request-consumer-replicas` says (the stream's when not given). A consumer that
    /// exists is found, never updated: it keeps the storage and replicas it was made with,
    /// so gateways started with other settings do not change each other's consumers.
    /// A broker refusing it for its consumer limit is [`BrokerError::ConsumerLimit`].
    ///
    /// A server registered again whose consumer already moved to its sealed name keeps
    /// that one; otherwise the consumer is made under the name every agent can compute
    /// ([`subject::request_consumer`]) and moved once its agent asks
    /// ([`Broker::seal_request_consumer`]).
    pub async fn ensure_request_consumer(
        &self,
        tenant: &TenantId,
        server: &ServerId,
    ) -> Result<String, BrokerError> {
        let name = subject::request_consumer(tenant, server);
        let err = request_consumer_error(&name);
        let stream = self.request_stream(&err).await?;
        if let Some(sealed) = self.names.request(tenant, server)
            && let Some(_) = consumer_info(&stream, &sealed).await?
        {
            return Ok(sealed);
        }
        let config = request_consumer_config(&name, tenant, server, &self.request_consumers);
        let created = stream.get_or_create_consumer(&name, config).await;
        match created {
            Ok(_) => Ok(name),
            Err(e) if at_consumer_limit(&e) => {
                let limits = self.consumer_limits().await;
                let limit = limits.as_ref().ok().and_then(ConsumerLimits::effective);
                warn!(server.id = %server, limit, "the broker refused a request consumer: its consumer limit is reached");
                Err(BrokerError::ConsumerLimit { limit })
            }
            Err(e) => Err(err(e.into())),
        }
    }

    /// Removes one server's request queue: purges its requests from the stream, then
    /// deletes its consumer (a consumer already gone is fine, so a repeated call
    /// finishes an interrupted one).
    ///
    /// The purge comes first because registering the server again creates a consumer
    /// that delivers the subject from its start: requests left there would run again.
    pub async fn remove_request_queue(
        &self,
        tenant: &TenantId,
        server: &ServerId,
    ) -> Result<(), BrokerError> {
        let name = subject::request_consumer(tenant, server);
        let err = request_consumer_error(&name);
        let stream = self.request_stream(&err).await?;
        stream
            .purge()
            .filter(subject::request(tenant, server))
            .await
            .map_err(|e| err(e.into()))?;
        // Under either name (a move interrupted half-way leaves both).
        for name in [Some(name), self.names.request(tenant, server)]
            .into_iter()
            .flatten()
        {
            delete_consumer(&stream, &name).await?;
        }
        Ok(())
    }

    /// Moves `server`'s request consumer to its sealed name (issue 22,
    /// [`crate::consumer_names`]) if it still has the older one: the sealed consumer is
    /// made delivering from just after what the older one had acknowledged, then the older
    /// one is deleted. The message in flight, if one, is delivered again by the new
    /// consumer, which the agent answers from its ledger (nothing runs twice); the agent's
    /// pull on the deleted consumer fails and it looks its consumer up again, sealed name
    /// first. True when this call moved it; false with nothing to move (already moved,
    /// not registered, no sealed names). Two gateways moving it at once both end well:
    /// the second finds the sealed consumer made, or the older one gone.
    pub async fn seal_request_consumer(
        &self,
        tenant: &TenantId,
        server: &ServerId,
    ) -> Result<bool, BrokerError> {
        let Some(sealed) = self.names.request(tenant, server) else {
            return Ok(false);
        };
        let legacy = subject::request_consumer(tenant, server);
        let err = request_consumer_error(&sealed);
        let stream = self.request_stream(&err).await?;
        let Some(old) = consumer_info(&stream, &legacy).await? else {
            return Ok(false);
        };
        if consumer_info(&stream, &sealed).await?.is_none() {
            let floor = old.ack_floor.stream_sequence;
            let mut config =
                request_consumer_config(&sealed, tenant, server, &self.request_consumers);
            // The older consumer's storage and replicas are kept, as a found consumer's are.
            config.memory_storage = old.config.memory_storage;
            config.num_replicas = old.config.num_replicas;
            if floor > 0 {
                config.deliver_policy = consumer::DeliverPolicy::ByStartSequence {
                    start_sequence: floor + 1,
                };
            }
            match stream.create_consumer(config).await {
                Ok(_) => {}
                // At the stream's consumer limit: the server keeps the older name (moving
                // would mean deleting the older one first, a moment with no consumer at
                // all should this gateway die between the two calls).
                Err(e) if at_consumer_limit(&e) => {
                    warn!(server.id = %server, "the request stream is at its consumer limit: the server's request consumer keeps its older name for now (tried again at a heartbeat 10 minutes on)");
                    return Ok(false);
                }
                // Made meanwhile by another gateway (with another start, so "exists").
                Err(e) => {
                    if consumer_info(&stream, &sealed).await?.is_none() {
                        return Err(err(e.into()));
                    }
                }
            }
        }
        delete_consumer(&stream, &legacy).await?;
        info!(server.id = %server, "request consumer moved to its sealed name");
        Ok(true)
    }

    /// A handle on the request stream (no broker call), its error made by `err`.
    async fn request_stream(
        &self,
        err: &impl Fn(BoxError) -> BrokerError,
    ) -> Result<stream::Stream<()>, BrokerError> {
        self.js
            .get_stream_no_info(subject::REQUEST_STREAM)
            .await
            .map_err(|e| err(e.into()))
    }

    /// The name `server`'s request consumer has now: its sealed one once moved there,
    /// else the older one.
    pub async fn request_consumer_name(
        &self,
        tenant: &TenantId,
        server: &ServerId,
    ) -> Result<String, BrokerError> {
        let legacy = subject::request_consumer(tenant, server);
        let Some(sealed) = self.names.request(tenant, server) else {
            return Ok(legacy);
        };
        let stream = self
            .request_stream(&request_consumer_error(&sealed))
            .await?;
        Ok(match consumer_info(&stream, &sealed).await? {
            Some(_) => sealed,
            None => legacy,
        })
    }

    /// Publishes a request on its server's queue, with the deployment id as message id,
    /// signed by `key` (the gateway's `signing.nk`: the claims name the server, the
    /// deployment, the body's digest and the expiry, see [`RequestClaims::of`]), and waits
    /// for the broker's acknowledgement. Every path that publishes a request (at once,
    /// deferred, at start) comes through here, so none goes out unsigned.
    pub async fn publish_request(
        &self,
        request: &DeploymentRequest,
        key: &nkeys::KeyPair,
    ) -> Result<(), BrokerError> {
        let err = |e: BoxError| BrokerError::Publish {
            deployment: request.deployment_id.to_string(),
            source: e,
        };
        let payload = request.encode();
        self.fits("deployment request", payload.len())
            .map_err(|source| BrokerError::RequestTooLarge {
                deployment: request.deployment_id.to_string(),
                source,
            })?;
        let digest = RequestDigest::of(&payload);
        let msg_id = request.msg_id();
        let window = PublishWindow::of(digest.clone(), msg_id.clone(), OffsetDateTime::now_utc());
        let claims = RequestClaims::of(request, digest);
        let signed = signing::sign(&claims, key).map_err(|e| err(e.into()))?;
        let window = signing::sign(&window, key).map_err(|e| err(e.into()))?;
        let ack = self
            .js
            .send_publish(
                subject::request(&request.tenant, &request.server),
                jetstream::message::PublishMessage::build()
                    .payload(payload.into())
                    .message_id(msg_id)
                    .header(signing::REQUEST_CLAIMS_HEADER, signed.claims.as_str())
                    .header(signing::SIGNATURE_HEADER, signed.signature.as_str())
                    .header(signing::PUBLISH_WINDOW_HEADER, window.claims.as_str())
                    .header(signing::WINDOW_SIGNATURE_HEADER, window.signature.as_str()),
            )
            .await
            .map_err(|e| err(e.into()))?;
        ack.await.map_err(|e| err(e.into()))?;
        Ok(())
    }
}

/// Whether `error` says the JetStream cluster cannot place a stream yet: no peers known
/// for its replicas, no cluster available, or the chosen peer failing to create its store
/// (all seen from a cluster in its first second; the last also from a node that sets up
/// the account's JetStream while the stream is created on it), or a peer that does not
/// know the account yet (10035 "account not found": an account JWT pushed a moment ago is
/// confirmed by the first node that takes it, and a chosen peer that has not taken it yet
/// refuses the stream assignment, nats-server `processStreamAssignment`; seen once in a
/// fresh-clone CI as a 3-node cluster's gateway started), or a node that knows the account
/// but has not yet enabled its JetStream (10039 "JetStream not enabled for account": the
/// same account JWT, pushed a moment ago, not yet applied by the node answering; seen in a
/// full run as a 3-node cluster's gateway created the events account's stream first).
pub fn cluster_forming(error: &(dyn std::error::Error + 'static)) -> bool {
    use async_nats::jetstream::ErrorCode;
    jetstream_code(error).is_some_and(|code| {
        code == ErrorCode::CLUSTER_NO_PEERS
            || code == ErrorCode::CLUSTER_NOT_AVAILABLE
            || code == ErrorCode::STREAM_CREATE
            || code == ErrorCode::NO_ACCOUNT
            || code == ErrorCode::JETSTREAM_NOT_ENABLED_FOR_ACCOUNT
    })
}

/// The JetStream error code somewhere in `error`'s chain: a bare JetStream answer, or
/// one inside the async-nats error of a stream create, a stream read or a consumer call
/// (which carry it in their kind, not as their source).
pub(crate) fn jetstream_code(
    error: &(dyn std::error::Error + 'static),
) -> Option<async_nats::jetstream::ErrorCode> {
    use async_nats::jetstream::context::{
        CreateStreamError, CreateStreamErrorKind, GetStreamError, GetStreamErrorKind,
    };
    use async_nats::jetstream::stream::{ConsumerError, ConsumerErrorKind};
    let mut next = Some(error);
    while let Some(e) = next {
        let code = if let Some(js) = e.downcast_ref::<async_nats::jetstream::Error>() {
            Some(js.error_code())
        } else if let Some(e) = e.downcast_ref::<CreateStreamError>()
            && let CreateStreamErrorKind::JetStream(js) = e.kind()
        {
            Some(js.error_code())
        } else if let Some(e) = e.downcast_ref::<GetStreamError>()
            && let GetStreamErrorKind::JetStream(js) = e.kind()
        {
            Some(js.error_code())
        } else if let Some(e) = e.downcast_ref::<ConsumerError>()
            && let ConsumerErrorKind::JetStream(js) = e.kind()
        {
            Some(js.error_code())
        } else {
            None
        };
        if code.is_some() {
            return code;
        }
        next = e.source();
    }
    None
}

/// Whether a broker call somewhere in `error`'s chain ran out of time. async-nats gives
/// each call its own error type (stream, consumer, KV, publish, request), with no kind
/// they share; every one of them says "timed out" for this cause, so the text is what
/// tells it apart.
pub fn timed_out(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(e) = next {
        if e.to_string().contains("timed out") {
            return true;
        }
        next = e.source();
    }
    false
}

/// Whether `error` may pass by itself, so that the same step, tried again, can succeed:
/// a cluster still forming, or a broker call that ran out of time (a replicated stream
/// created on a loaded cluster can take longer than `--broker-timeout-ms`; it may well
/// exist by the next try, and every step of a tenant's start is idempotent).
pub fn transient(error: &(dyn std::error::Error + 'static)) -> bool {
    cluster_forming(error) || timed_out(error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_effective_consumer_limit_is_the_lowest_known_one() {
        let limits = |stream, account| ConsumerLimits { stream, account };
        assert_eq!(limits(5000, None).effective(), Some(5000));
        assert_eq!(limits(5000, Some(300)).effective(), Some(300));
        assert_eq!(limits(-1, Some(300)).effective(), Some(300));
        assert_eq!(limits(-1, None).effective(), None);
        assert_eq!(limits(0, None).effective(), None);
        assert_eq!(
            BrokerError::ConsumerLimit { limit: Some(5) }.to_string(),
            "the broker's consumer limit of 5 is reached"
        );
    }

    #[test]
    fn a_timed_out_stream_create_is_transient_and_a_storage_refusal_is_not() {
        use async_nats::jetstream::context::{CreateStreamError, CreateStreamErrorKind};
        let slow = BrokerError::Stream {
            stream: "FLUE_REQ",
            source: CreateStreamError::new(CreateStreamErrorKind::TimedOut).into(),
        };
        assert!(timed_out(&slow) && transient(&slow));
        let full = BrokerError::Stream {
            stream: "FLUE_REQ",
            source: CreateStreamError::new(CreateStreamErrorKind::JetStream(
                // The broker's own answer (JetStream error 10047), as it arrives.
                serde_json::from_value(serde_json::json!({
                    "code": 500,
                    "err_code": 10047,
                    "description": "insufficient storage resources available"
                }))
                .expect("a JetStream error"),
            ))
            .into(),
        };
        assert!(!transient(&full) && out_of_storage(&full));
    }

    /// A peer of a forming cluster that fails to create its store (JetStream error 10049,
    /// seen when an account's JetStream is set up on that node while the stream is
    /// created) answers through async-nats's stream error, not a bare JetStream error.
    #[test]
    fn a_store_a_peer_could_not_create_yet_is_transient_however_it_is_wrapped() {
        use async_nats::jetstream::context::{CreateStreamError, CreateStreamErrorKind};
        let answer = || -> async_nats::jetstream::Error {
            serde_json::from_value(serde_json::json!({
                "code": 500,
                "err_code": 10049,
                "description": "error creating store for stream"
            }))
            .expect("a JetStream error")
        };
        let wrapped = BrokerError::Stream {
            stream: "FLUE_EVT",
            source: CreateStreamError::new(CreateStreamErrorKind::JetStream(answer())).into(),
        };
        assert!(cluster_forming(&wrapped) && transient(&wrapped));
        let bare = BrokerError::Stream {
            stream: "FLUE_EVT",
            source: Box::new(answer()),
        };
        assert!(cluster_forming(&bare) && transient(&bare));
    }

    /// A stream placed on a peer that has not yet taken the account's JWT (pushed to
    /// another node a moment before) is refused with "account not found": the cluster
    /// is still forming for that account, not broken.
    #[test]
    fn a_peer_that_does_not_know_the_account_yet_is_a_cluster_still_forming() {
        use async_nats::jetstream::context::{CreateStreamError, CreateStreamErrorKind};
        let answer: async_nats::jetstream::Error = serde_json::from_value(serde_json::json!({
            "code": 503,
            "err_code": 10035,
            "description": "account not found"
        }))
        .expect("a JetStream error");
        let wrapped = BrokerError::Stream {
            stream: "FLUE_REQ",
            source: CreateStreamError::new(CreateStreamErrorKind::JetStream(answer)).into(),
        };
        assert!(cluster_forming(&wrapped));
    }
}
