//! The permission sets of the users the gateway mints: what exactly an agent and a
//! listener may publish and subscribe to. Everything not allowed is refused by the broker.
//!
//! Gateway and system users carry no permissions: each has its whole account (the account
//! is the boundary between tenants). A tenant leaf node's user ([`leaf`]) has the rights of
//! the agents of the servers behind it and its tenant's data space, not its whole edge
//! account; its system user ([`leaf_system`]) hears its own account's updates only.

use flue_proto::event::{EVENT_STREAM, tenant_events};
use flue_proto::jsapi;
use flue_proto::subject::{self, DATA_BUCKET, REQUEST_STREAM};
use flue_proto::{ServerId, StackId, TenantId};

use super::jwt::Permissions;

/// A tenant leaf node's system user's rights: receiving the JWT updates of the tenant's
/// edge `account` (the gateway pushes each on the account's own subject; never the state
/// account's, whose stub the leaf must keep) and nothing else;
/// publishing nothing. Through this leaf remote the hub forwards exactly that subject, so
/// the leaf's resolver learns a revocation at once, while another account's claims, claim
/// lookups, server requests and every other system subject stay out of reach. (The
/// leaf's resolver subscribes with a wildcard; nats-server 2.15 still forwards the allowed
/// subject.)
pub fn leaf_system(account: &str) -> Permissions {
    let mut perms = Permissions::default();
    perms.publish.deny.push(">".to_owned());
    perms
        .subscribe
        .allow
        .push(jsapi::account_claims_update(account));
    perms
}

/// An agent's rights (server `server` of `tenant`, taking part in `stacks`): info, next
/// and ack on its own request consumer, under its `sealed` name
/// ([`crate::consumer_names`], which the agent reads from here) and the older one it has
/// until its gateway moves it; publishing its own response and heartbeat
/// subjects; its own inbox prefix; reading its tenant's agent builds (stream info, direct
/// get); and the data-space keys of its stacks (put, direct get,
/// the bucket's stream info, watching a key's subject). No consumer creation, no
/// wildcard beyond these.
pub fn agent(
    tenant: &TenantId,
    server: &ServerId,
    sealed: Option<&str>,
    stacks: &[StackId],
) -> Permissions {
    let legacy = subject::request_consumer(tenant, server);
    let mut perms = Permissions::default();
    let publish = &mut perms.publish.allow;
    for consumer in sealed.into_iter().chain([legacy.as_str()]) {
        publish.extend(jsapi::consumer_info(REQUEST_STREAM, consumer));
        publish.extend(jsapi::consumer_next(REQUEST_STREAM, consumer));
        publish.push(jsapi::consumer_acks(REQUEST_STREAM, consumer));
    }
    publish.push(subject::response(tenant, server));
    publish.push(subject::heartbeat(tenant, server));
    let subscribe = &mut perms.subscribe.allow;
    subscribe.push(format!("{}.>", subject::agent_inbox_prefix(tenant, server)));
    // Agent builds of its tenant (signed binaries, no secret): read by direct get only.
    let builds = flue_proto::upgrade::BUILDS_BUCKET;
    publish.extend(jsapi::stream_info(&jsapi::kv_stream(builds)));
    publish.extend(jsapi::kv_get(
        builds,
        &flue_proto::upgrade::tenant_builds_filter(tenant),
    ));
    if !stacks.is_empty() {
        publish.extend(jsapi::stream_info(&jsapi::kv_stream(DATA_BUCKET)));
    }
    for stack in stacks {
        let keys = subject::data_stack_filter(tenant, stack);
        publish.extend(jsapi::kv_put(DATA_BUCKET, &keys));
        publish.extend(jsapi::kv_get(DATA_BUCKET, &keys));
        subscribe.push(jsapi::kv_watch(DATA_BUCKET, &keys));
    }
    perms
}

/// The rights of the user a leaf node of `tenant`'s network links to the hub with, the
/// leaf serving `servers`: the union of what those servers' agents need
/// ([`agent`] without stacks, so whatever it grants an agent flows through), and the
/// tenant's data space (stream info, direct get and put of every key of `tenant`, watching
/// them). The data space is wider than any one agent's: an agent's stacks change over
/// time, carried by new agent JWTs in its requests, which a leaf user written once cannot
/// follow. Nothing else: the hub refuses another server's request consumer, answers and
/// heartbeats on the leaf's link (and closes it at the first), and delivers over it no
/// other inbox. A leaf link needs no subject of its own beyond these (measured: no
/// violation in the hub's log with agents behind a leaf): its loop detection (`$LDS.`),
/// the service replies (`_R_.`) and acks (`$JS.ACK.`) it forwards pass the hub unchecked,
/// which is also why an ack subject is kept from the link only by its consumer's name.
///
/// `sealed` gives each server's sealed request consumer name (`crate::consumer_names`), as
/// its agent's JWT has it.
pub fn leaf(
    tenant: &TenantId,
    servers: &[ServerId],
    sealed: impl Fn(&ServerId) -> Option<String>,
) -> Permissions {
    let mut perms = Permissions::default();
    for server in servers {
        let agent = agent(tenant, server, sealed(server).as_deref(), &[]);
        perms.publish.allow.extend(agent.publish.allow);
        perms.subscribe.allow.extend(agent.subscribe.allow);
    }
    let keys = format!("{tenant}.>");
    let publish = &mut perms.publish.allow;
    publish.extend(jsapi::stream_info(&jsapi::kv_stream(DATA_BUCKET)));
    publish.extend(jsapi::kv_put(DATA_BUCKET, &keys));
    publish.extend(jsapi::kv_get(DATA_BUCKET, &keys));
    perms
        .subscribe
        .allow
        .push(jsapi::kv_watch(DATA_BUCKET, &keys));
    // Every server's agent may read the builds: one right each, not one per server.
    for list in [&mut perms.publish.allow, &mut perms.subscribe.allow] {
        let mut seen = std::collections::BTreeSet::new();
        list.retain(|s| seen.insert(s.clone()));
    }
    perms
}

/// The rights of the listener `listener` (a [`subject::listener_id`]) in its tenant's
/// listener account, whose imports reach the events account ([`super::listen`]): reading
/// the event stream (info, message and direct get); creating (through the gateway,
/// [`super::creates`]: pull consumers only), reading, pulling from, acknowledging and
/// deleting its own consumers on it, the [`subject::LISTENER_CONSUMERS`] names
/// [`subject::listener_consumers`] gives, and no other (no unnamed create: the broker
/// could not tell whose consumer it made); subscribing to the tenant's event subjects
/// and to inboxes.
/// It cannot publish an event (no publish right names one), list consumers, nor touch
/// another listener's consumers or the gateway's own SSE and webhook consumers, which
/// are on the same stream under names of the gateway's.
pub fn listener(tenant: &TenantId, listener: &str) -> Permissions {
    let mut perms = Permissions::default();
    let publish = &mut perms.publish.allow;
    for name in subject::listener_consumers(listener) {
        publish.extend(jsapi::consumer_create_named(EVENT_STREAM, &name));
        publish.extend(jsapi::consumer_info(EVENT_STREAM, &name));
        publish.extend(jsapi::consumer_next(EVENT_STREAM, &name));
        publish.extend(jsapi::consumer_delete(EVENT_STREAM, &name));
        publish.push(jsapi::consumer_acks(EVENT_STREAM, &name));
    }
    publish.extend(jsapi::stream_info(EVENT_STREAM));
    publish.extend(jsapi::stream_get(EVENT_STREAM));
    // nats-py looks the stream up by subject before subscribing.
    publish.extend(jsapi::api("STREAM.NAMES"));
    let subscribe = &mut perms.subscribe.allow;
    // Inboxes of the listener account carry nothing but listeners' answers (pulled
    // events, the JetStream API's answers about them).
    subscribe.push("_INBOX.>".to_owned());
    subscribe.push(tenant_events(tenant));
    perms
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id<T: std::str::FromStr>(s: &str) -> T
    where
        T::Err: std::fmt::Debug,
    {
        s.parse().expect("valid id")
    }

    #[test]
    fn an_agent_gets_only_its_own_subjects() {
        let sealed = "sreq-4-acme-web1-00ff";
        let perms = agent(&id("acme"), &id("web1"), Some(sealed), &[id("st")]);
        let publish = &perms.publish.allow;
        // Its consumer under both names, in both spellings; the agent finds the sealed one.
        for consumer in ["req-4-acme-web1", sealed] {
            for subject in [
                format!("$JS.flue.API.CONSUMER.MSG.NEXT.FLUE_REQ.{consumer}"),
                format!("$JS.API.CONSUMER.MSG.NEXT.FLUE_REQ.{consumer}"),
                format!("$JS.API.CONSUMER.INFO.FLUE_REQ.{consumer}"),
                format!("$JS.ACK.FLUE_REQ.{consumer}.>"),
            ] {
                assert!(publish.contains(&subject), "{subject}");
            }
        }
        assert_eq!(
            flue_proto::subject::sealed_request_consumer_in(
                &id("acme"),
                &id("web1"),
                publish.iter().map(String::as_str)
            )
            .as_deref(),
            Some(sealed)
        );
        assert!(publish.contains(&"flue.acme.resp.web1".into()));
        assert!(publish.contains(&"$KV.flue_data.acme.st.>".into()));
        // Its tenant's agent builds, by direct get only (no put, no other tenant's).
        assert!(
            publish
                .contains(&"$JS.flue.API.DIRECT.GET.KV_flue_builds.$KV.flue_builds.acme.>".into())
        );
        assert!(
            publish
                .iter()
                .filter(|s| s.contains("flue_builds"))
                .all(|s| s.contains("DIRECT.GET") || s.contains("STREAM.INFO")),
            "{publish:?}"
        );
        assert!(
            publish
                .iter()
                .all(|s| !s.contains("CREATE") && s != ">" && !s.starts_with("flue.acme.>")),
            "{publish:?}"
        );
        assert_eq!(
            perms.subscribe.allow,
            ["_INBOX_flue.acme.web1.>", "$KV.flue_data.acme.st.>"]
        );
        let no_stacks = agent(&id("acme"), &id("web1"), None, &[]);
        assert!(
            no_stacks
                .publish
                .allow
                .iter()
                .all(|s| !s.contains("flue_data"))
        );
    }

    #[test]
    fn a_leaf_user_gets_its_servers_agents_subjects_and_its_tenants_data_space_only() {
        let (web1, web2, web3): (ServerId, ServerId, ServerId) =
            (id("web1"), id("web2"), id("web3"));
        let sealed = |s: &ServerId| Some(format!("sreq-4-acme-{s}-00ff"));
        let perms = leaf(&id("acme"), &[web1.clone(), web3.clone()], sealed);
        let (publish, subscribe) = (&perms.publish.allow, &perms.subscribe.allow);
        // Everything each served server's agent may do (its own consumer in both API
        // spellings included), whatever perms::agent grants.
        for server in [&web1, &web3] {
            let agent = agent(&id("acme"), server, sealed(server).as_deref(), &[]);
            for s in &agent.publish.allow {
                assert!(publish.contains(s), "{s} missing: {publish:?}");
            }
            for s in &agent.subscribe.allow {
                assert!(subscribe.contains(s), "{s} missing: {subscribe:?}");
            }
        }
        for s in [
            "$JS.API.CONSUMER.MSG.NEXT.FLUE_REQ.req-4-acme-web1",
            "$JS.flue.API.CONSUMER.MSG.NEXT.FLUE_REQ.req-4-acme-web1",
            "$JS.API.CONSUMER.INFO.FLUE_REQ.req-4-acme-web3",
            "$JS.flue.API.CONSUMER.INFO.FLUE_REQ.req-4-acme-web3",
            "$JS.ACK.FLUE_REQ.req-4-acme-web1.>",
            // Its sealed name too, which the leaf learns from nowhere else.
            "$JS.flue.API.CONSUMER.MSG.NEXT.FLUE_REQ.sreq-4-acme-web1-00ff",
            "$JS.ACK.FLUE_REQ.sreq-4-acme-web3-00ff.>",
            "flue.acme.resp.web1",
            "flue.acme.hb.web3",
            // The tenant's data space, both spellings.
            "$KV.flue_data.acme.>",
            "$JS.flue.API.$KV.flue_data.acme.>",
            "$JS.API.DIRECT.GET.KV_flue_data.$KV.flue_data.acme.>",
            "$JS.flue.API.DIRECT.GET.KV_flue_data.$KV.flue_data.acme.>",
            "$JS.API.STREAM.INFO.KV_flue_data",
        ] {
            assert!(publish.contains(&s.to_owned()), "{s}: {publish:?}");
        }
        assert_eq!(
            subscribe,
            &[
                "_INBOX_flue.acme.web1.>",
                "_INBOX_flue.acme.web3.>",
                "$KV.flue_data.acme.>"
            ]
        );
        // Nothing of web2 (another server of the tenant), no other tenant, no wildcard
        // reaching beyond the served servers, no creation, each right once.
        let web2_consumer = subject::request_consumer(&id("acme"), &web2);
        for s in publish.iter().chain(subscribe) {
            assert!(!s.contains(&web2_consumer) && !s.ends_with(".web2"), "{s}");
            assert!(!s.contains("web2"), "{s}");
            assert!(!s.contains("other"), "{s}");
            assert!(!s.contains("CREATE") && !s.contains("DELETE"), "{s}");
            assert!(!s.contains(".*") && s != ">", "{s}");
        }
        let unique: std::collections::BTreeSet<&String> = publish.iter().collect();
        assert_eq!(unique.len(), publish.len(), "{publish:?}");
        assert!(
            publish.iter().all(|s| !s.starts_with("flue.acme.")
                || s.ends_with(".web1")
                || s.ends_with(".web3")),
            "{publish:?}"
        );
    }

    #[test]
    fn a_listener_publishes_no_flue_subject() {
        let perms = listener(&id("acme"), "0123456789ab");
        assert!(
            perms.publish.allow.iter().all(|s| s.starts_with("$JS.")),
            "{:?}",
            perms.publish.allow
        );
        assert!(perms.subscribe.allow.contains(&"flue.acme.evt.>".into()));
        // No right reaches the gateway's copy of the stream, nor lists consumers.
        assert!(
            perms
                .publish
                .allow
                .iter()
                .all(|s| !s.contains(flue_proto::event::GATEWAY_EVENT_STREAM)
                    && !s.contains("CONSUMER.LIST")
                    && !s.contains("CONSUMER.NAMES")),
            "{:?}",
            perms.publish.allow
        );
        // Only its own consumers, by exact name: no unnamed create, no wildcard name.
        let consumers: Vec<&String> = perms
            .publish
            .allow
            .iter()
            .filter(|s| s.contains(".CONSUMER."))
            .collect();
        assert_eq!(consumers.len(), 8 * 10, "{consumers:?}");
        for s in consumers {
            let name = s
                .split('.')
                .find(|t| t.starts_with("lsn-"))
                .unwrap_or_else(|| panic!("{s} names no listener consumer"));
            assert_eq!(
                subject::listener_of_consumer(name),
                Some("0123456789ab"),
                "{s}"
            );
            assert!(!s.contains('*'), "{s}");
        }
        assert!(
            perms
                .publish
                .allow
                .contains(&"$JS.ACK.FLUE_EVT.lsn-0123456789ab-8.>".to_owned())
        );
        assert!(
            perms
                .publish
                .allow
                .iter()
                .all(|s| !s.starts_with("$JS.ACK.") || s.contains("lsn-0123456789ab-")),
            "{:?}",
            perms.publish.allow
        );
    }
}
