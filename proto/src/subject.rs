//! Subject, stream and consumer names: the one place that spells them.
//!
//! | subject | stream |
//! |---|---|
//! | `flue.<tenant>.req.<server>` | [`REQUEST_STREAM`] |
//! | `flue.<tenant>.resp.<server>` | [`RESPONSE_STREAM`] |
//! | `flue.<tenant>.evt.<kind>.<stack>.<server>.<name>` | [`crate::event::EVENT_STREAM`] |
//! | `flue.<tenant>.hb.<server>` | none (core NATS heartbeats) |
//! | `flue.<tenant>.lsn.create.<consumer>[.<filter>]` | none (listeners' consumer creations, answered by the gateway) |
//!
//! The stack data space is the KV bucket [`DATA_BUCKET`], keys `<tenant>.<stack>.<key>`.

use crate::ids::{ServerId, StackId, TenantId};

/// Stream holding deployment requests, one subject per server, Limits retention.
pub const REQUEST_STREAM: &str = "FLUE_REQ";
/// Subjects captured by [`REQUEST_STREAM`].
pub const REQUEST_SUBJECTS: &str = "flue.*.req.*";
/// Stream holding agent responses (started, result).
pub const RESPONSE_STREAM: &str = "FLUE_RESP";
/// Subjects captured by [`RESPONSE_STREAM`].
pub const RESPONSE_SUBJECTS: &str = "flue.*.resp.*";
/// Durable pull consumer on [`RESPONSE_STREAM`] shared by every gateway replica.
pub const GATEWAY_RESPONSE_CONSUMER: &str = "flue-gateway";
/// The priority group every gateway pulls [`GATEWAY_RESPONSE_CONSUMER`] in: the broker
/// pins it to one gateway at a time (`pinned_client`), so one server's answers are
/// applied in stream order whichever gateways run.
pub const GATEWAY_RESPONSE_GROUP: &str = "flue";

/// Subject of a server's request queue.
pub fn request(tenant: &TenantId, server: &ServerId) -> String {
    format!("flue.{tenant}.req.{server}")
}

/// Subject an agent publishes its responses on.
pub fn response(tenant: &TenantId, server: &ServerId) -> String {
    format!("flue.{tenant}.resp.{server}")
}

/// Subjects of the responses of every agent of `tenant`.
pub fn tenant_responses(tenant: &TenantId) -> String {
    format!("flue.{tenant}.resp.*")
}

/// Subject an agent publishes its heartbeats on (core NATS, no stream).
pub fn heartbeat(tenant: &TenantId, server: &ServerId) -> String {
    format!("flue.{tenant}.hb.{server}")
}

/// Subjects of every agent's heartbeats, which the gateway subscribes to.
pub const HEARTBEAT_SUBJECTS: &str = "flue.*.hb.*";

/// Subjects of the heartbeats of every agent of `tenant`: what a gateway of that tenant
/// follows.
pub fn tenant_heartbeats(tenant: &TenantId) -> String {
    format!("flue.{tenant}.hb.*")
}

/// Where a listener's consumer creation (`$JS.API.CONSUMER.CREATE.FLUE_EVT.<name>[.<filter>]`
/// in its listener account) arrives in the events account: the prefix, then the name and
/// the filter's tokens. The gateway answers it (no stream captures it), creating the
/// consumer when its configuration is one a listener may have.
pub fn listener_creates(tenant: &TenantId) -> String {
    format!("flue.{tenant}.lsn.create")
}

/// Name of the durable pull consumer the gateway creates for one server's requests.
///
/// Ids may contain `-` and `_`, so joining tenant and server with a separator could
/// make two servers of different tenants share a consumer; the tenant's length prefix
/// makes the name unambiguous.
pub fn request_consumer(tenant: &TenantId, server: &ServerId) -> String {
    format!("req-{}-{tenant}-{server}", tenant.as_str().len())
}

/// What every sealed request consumer's name starts with ([`sealed_request_consumer`]).
pub const SEALED_REQUEST_CONSUMER_PREFIX: &str = "sreq-";

/// Name of one server's request consumer that only the gateway can compute: the
/// [`request_consumer`] name's parts and `tag`, a secret-derived token (the gateway's,
/// `broker-gateway`'s `consumer_names`). A name nobody else can guess is what keeps a
/// reply subject of `$JS.ACK.FLUE_REQ.<name>.…`, which nats-server lets a leaf node's
/// link set, from reaching the consumer (issue 22); the agent learns it from its own
/// user JWT ([`sealed_request_consumer_in`]). `sreq-` never begins a [`request_consumer`]
/// name, so the two kinds cannot collide.
pub fn sealed_request_consumer(tenant: &TenantId, server: &ServerId, tag: &str) -> String {
    format!(
        "{SEALED_REQUEST_CONSUMER_PREFIX}{}-{tenant}-{server}-{tag}",
        tenant.as_str().len()
    )
}

/// The sealed request consumer ([`sealed_request_consumer`]) of `tenant`'s server
/// `server` that a list of publish permissions (an agent user JWT's) lets its holder
/// pull from, if one: how an agent learns the name only the gateway can compute.
pub fn sealed_request_consumer_in<'a>(
    tenant: &TenantId,
    server: &ServerId,
    allowed: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    let prefix = format!(
        "$JS.API.CONSUMER.MSG.NEXT.{REQUEST_STREAM}.{}",
        sealed_request_consumer(tenant, server, "")
    );
    allowed.into_iter().find_map(|subject| {
        let tag = subject.strip_prefix(&prefix)?;
        let valid = !tag.is_empty() && tag.bytes().all(|b| b.is_ascii_alphanumeric());
        valid.then(|| sealed_request_consumer(tenant, server, tag))
    })
}

/// Consumers one listener credential may hold on the event stream at once: its user may
/// create (and delete) only the consumers [`listener_consumer`] names for it, `1..=` this.
pub const LISTENER_CONSUMERS: u32 = 8;

/// What every listener consumer's name starts with.
pub const LISTENER_CONSUMER_PREFIX: &str = "lsn-";

/// A new listener credential's id: 12 lower-case hex digits from `random` (a consumer
/// name is one subject token, so the broker can allow exact names only, never a prefix).
pub fn listener_id(random: u64) -> String {
    format!("{:012x}", random & 0xffff_ffff_ffff)
}

/// The name of consumer `n` (`1..=`[`LISTENER_CONSUMERS`]) of the listener `listener`
/// (a [`listener_id`]): `lsn-<listener>-<n>`.
pub fn listener_consumer(listener: &str, n: u32) -> String {
    format!("{LISTENER_CONSUMER_PREFIX}{listener}-{n}")
}

/// Every consumer name the listener `listener` may use.
pub fn listener_consumers(listener: &str) -> Vec<String> {
    (1..=LISTENER_CONSUMERS)
        .map(|n| listener_consumer(listener, n))
        .collect()
}

/// The listener a consumer named by [`listener_consumer`] belongs to; `None` for any
/// other name.
pub fn listener_of_consumer(name: &str) -> Option<&str> {
    let rest = name.strip_prefix(LISTENER_CONSUMER_PREFIX)?;
    let (listener, n) = rest.rsplit_once('-')?;
    let valid = listener.len() == 12
        && listener
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && n.parse::<u32>().is_ok_and(|k| {
            (1..=LISTENER_CONSUMERS).contains(&k) && listener_consumer(listener, k) == name
        });
    valid.then_some(listener)
}

/// Inbox prefix an agent uses for its request/reply traffic, so that broker
/// permissions can confine it to its own replies.
pub fn agent_inbox_prefix(tenant: &TenantId, server: &ServerId) -> String {
    format!("_INBOX_flue.{tenant}.{server}")
}

/// JetStream domain of the hub broker (`jetstream { domain: flue }`). Agents and listeners
/// address JetStream through it (`$JS.flue.API...`), so the same calls work on the hub
/// itself and through a leaf node in a tenant network, where plain `$JS.API` would reach
/// no JetStream (nats-server keeps `$JS.API.>` and `$KV.>` from crossing a leaf connection
/// between JetStream domains).
pub const JETSTREAM_DOMAIN: &str = "flue";
/// KV bucket of revoked HTTP API tokens: key = token id (`jti`), kept as long as the
/// longest token lives ([`crate::auth::MAX_TOKEN_TTL_SECS`]).
pub const REVOKED_TOKENS_BUCKET: &str = "flue_revoked_tokens";

/// KV bucket of the stack-scoped data space that hooks read and write through the agent.
pub const DATA_BUCKET: &str = "flue_data";

/// KV bucket of configs (the gateway's).
pub const CONFIGS_BUCKET: &str = "flue_configs";
/// KV bucket of servers (the gateway's).
pub const SERVERS_BUCKET: &str = "flue_servers";
/// KV bucket of deployment records (the gateway's).
pub const DEPLOYMENTS_BUCKET: &str = "flue_deployments";
/// Index bucket listing each server's deployments (the gateway's).
pub const SERVER_DEPLOYMENTS_BUCKET: &str = "flue_server_deployments";
/// KV bucket of stack records (the gateway's).
pub const STACKS_BUCKET: &str = "flue_stacks";
/// KV bucket of stack units, one key each (the gateway's).
pub const STACK_UNITS_BUCKET: &str = "flue_stack_units";
/// Index bucket of the deployments that are not terminal (the gateway's).
pub const PENDING_BUCKET: &str = "flue_pending";
/// Index bucket of servers in registration order (the gateway's).
pub const SERVER_ORDER_BUCKET: &str = "flue_server_order";
/// KV bucket of presence records, `<tenant>.<server>` (the gateway's).
pub const PRESENCE_BUCKET: &str = "flue_presence";
/// KV bucket of webhook subscriptions (the gateway's).
pub const WEBHOOKS_BUCKET: &str = "flue_webhooks";

/// Prefix of the names of Flue's own streams (`FLUE_REQ`, `FLUE_EVT`, …).
pub const STREAM_PREFIX: &str = "FLUE_";
/// Prefix of the names of the streams behind Flue's KV buckets (`KV_flue_…`).
pub const KV_STREAM_PREFIX: &str = "KV_flue_";

/// True for the name of a stream of Flue's in an account: one of its own (`FLUE_…`) or
/// one behind its KV buckets (`KV_flue_…`).
pub fn is_flue_stream(name: &str) -> bool {
    name.starts_with(STREAM_PREFIX) || name.starts_with(KV_STREAM_PREFIX)
}
/// Longest data-space key a hook may use, in bytes.
pub const MAX_DATA_KEY_LEN: usize = 200;

/// Why a data-space key was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("data key {key:?} {reason}")]
pub struct DataKeyError {
    /// The refused key.
    pub key: String,
    /// Why.
    pub reason: &'static str,
}

/// Checks a hook's data-space key: 1 to [`MAX_DATA_KEY_LEN`] bytes of
/// `[A-Za-z0-9_-/=.]`, no empty `.`-separated part. The key always lands under the
/// stack's own prefix, so no key can reach another stack's data.
pub fn validate_data_key(key: &str) -> Result<(), DataKeyError> {
    let fail = |reason| {
        Err(DataKeyError {
            key: key.to_owned(),
            reason,
        })
    };
    if key.is_empty() {
        return fail("must not be empty");
    }
    if key.len() > MAX_DATA_KEY_LEN {
        return fail("is longer than 200 bytes");
    }
    if !key
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '/' | '=' | '.'))
    {
        return fail("may only hold letters, digits and '_', '-', '/', '=', '.'");
    }
    if key.split('.').any(str::is_empty) {
        return fail("must not start or end with '.' or hold '..'");
    }
    Ok(())
}

/// Full KV key of a stack's data-space key (validate `key` first).
pub fn data_key(tenant: &TenantId, stack: &StackId, key: &str) -> String {
    format!("{tenant}.{stack}.{key}")
}

/// KV key filter matching every data-space key of one stack.
pub fn data_stack_filter(tenant: &TenantId, stack: &StackId) -> String {
    format!("{tenant}.{stack}.>")
}

/// Core NATS subject a put of a data-space key is published on: subscribing to it
/// lets a reader wait for a key without creating a consumer.
pub fn data_key_subject(tenant: &TenantId, stack: &StackId, key: &str) -> String {
    format!("$KV.{DATA_BUCKET}.{tenant}.{stack}.{key}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn listener_consumers_are_named_after_their_listener_and_only_those_names_parse() {
        let id = super::listener_id(0x0123_4567_89ab_cdef);
        assert_eq!(id, "456789abcdef");
        let names = super::listener_consumers(&id);
        assert_eq!(names.len(), 8);
        assert_eq!(names[0], "lsn-456789abcdef-1");
        for name in &names {
            assert_eq!(super::listener_of_consumer(name), Some(id.as_str()));
        }
        for other in [
            "lsn-456789abcdef-0",
            "lsn-456789abcdef-9",
            "lsn-456789abcdef-01",
            "lsn-456789ABCDEF-1",
            "lsn-456789abcde-1",
            "flue-sse-1",
            "wh-4-acme-x",
        ] {
            assert_eq!(super::listener_of_consumer(other), None, "{other}");
        }
    }

    use super::*;

    fn t(s: &str) -> TenantId {
        TenantId::new(s).expect("valid")
    }
    fn s(x: &str) -> ServerId {
        ServerId::new(x).expect("valid")
    }

    #[test]
    fn subjects_have_the_documented_shape() {
        assert_eq!(request(&t("acme"), &s("web1")), "flue.acme.req.web1");
        assert_eq!(response(&t("acme"), &s("web1")), "flue.acme.resp.web1");
        assert_eq!(heartbeat(&t("acme"), &s("web1")), "flue.acme.hb.web1");
        assert_eq!(tenant_heartbeats(&t("acme")), "flue.acme.hb.*");
        assert_eq!(
            agent_inbox_prefix(&t("acme"), &s("web1")),
            "_INBOX_flue.acme.web1"
        );
    }

    #[test]
    fn data_keys_stay_inside_their_stack() {
        for ok in ["db/address", "a.b", "x=1", "A_b-c"] {
            assert!(validate_data_key(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a..b", ".a", "a.", "a*", "a>", "a b", &"x".repeat(201)] {
            assert!(validate_data_key(bad).is_err(), "{bad:?}");
        }
        let st = StackId::new("st").expect("id");
        assert_eq!(data_key(&t("acme"), &st, "db/ip"), "acme.st.db/ip");
        assert_eq!(data_stack_filter(&t("acme"), &st), "acme.st.>");
        assert_eq!(
            data_key_subject(&t("acme"), &st, "k"),
            "$KV.flue_data.acme.st.k"
        );
    }

    #[test]
    fn a_sealed_request_consumer_is_found_among_publish_permissions_for_its_own_server_only() {
        let name = sealed_request_consumer(&t("acme"), &s("web1"), "00ff");
        assert_eq!(name, "sreq-4-acme-web1-00ff");
        let allowed = [
            "$JS.flue.API.CONSUMER.MSG.NEXT.FLUE_REQ.sreq-4-acme-web1-00ff",
            "$JS.API.CONSUMER.MSG.NEXT.FLUE_REQ.req-4-acme-web1",
            "$JS.API.CONSUMER.MSG.NEXT.FLUE_REQ.sreq-4-acme-web1-00ff",
        ];
        assert_eq!(
            sealed_request_consumer_in(&t("acme"), &s("web1"), allowed).as_deref(),
            Some("sreq-4-acme-web1-00ff")
        );
        // Another server's, a longer server id sharing the prefix, or a wildcard: none.
        assert_eq!(
            sealed_request_consumer_in(&t("acme"), &s("web"), allowed),
            None
        );
        let wild = ["$JS.API.CONSUMER.MSG.NEXT.FLUE_REQ.sreq-4-acme-web1-*"];
        assert_eq!(
            sealed_request_consumer_in(&t("acme"), &s("web1"), wild),
            None
        );
        // No legacy name is ever a sealed one.
        assert!(!request_consumer(&t("sreq"), &s("x")).starts_with(SEALED_REQUEST_CONSUMER_PREFIX));
    }

    #[test]
    fn consumer_names_never_collide_across_tenants() {
        let a = request_consumer(&t("a_b"), &s("c"));
        let b = request_consumer(&t("a"), &s("b_c"));
        assert_ne!(a, b);
        assert_eq!(a, "req-3-a_b-c");
    }
}
