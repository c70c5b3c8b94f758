//! A tenant network's leaf node written by `flue-gateway leaf-config`, on loopback: an
//! agent connected to it reaches its queue on the hub; another tenant's user is refused; a
//! revocation reaches the leaf node at once (its system remote hears the tenant's edge
//! account's updates), while the leaf's system user may do nothing else system-wide.

use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use bytes::Bytes;
use flue_gateway::natsauth::push;
use flue_gateway::natsauth::{AccountKind, accounts, perms};
use flue_proto::creds::UserCreds;
use flue_proto::jsapi::{self, JS_DOMAIN};
use flue_proto::subject::{self, REQUEST_STREAM};
use flue_proto::{ServerId, TenantId};
use flue_tests::{NatsProcess, SecureNats, WAIT, admin, connect_options, free_port, wait_until};
use futures_util::{FutureExt as _, StreamExt as _};
use nkeys::KeyPair;

use super::refusals_at;

/// A hub with tenants `acme` and `other`, `web1`'s queue holding one request, and a leaf
/// node for `acme`'s network serving `web1` connected to it.
pub(super) async fn hub_and_leaf() -> (SecureNats, NatsProcess, tempfile::TempDir, String) {
    let secure = SecureNats::start(&["acme", "other"], Some(free_port())).await;
    secure.set_up_by_gateway("acme", &["web1"]).await;
    let (gateway, _) = secure.gateway("acme").await;
    let js = jetstream::new(gateway);
    let (tenant, server) = ids();
    js.publish(
        subject::request(&tenant, &server),
        Bytes::from_static(b"request for web1"),
    )
    .await
    .expect("publish")
    .await
    .expect("stored");
    let hub_leaf = secure
        .nats
        .logs()
        .wait_for("Listening for leafnode connections on ", WAIT)
        .await;
    let hub_leaf = hub_leaf
        .rsplit(' ')
        .next()
        .expect("address")
        .trim()
        .to_owned();
    let out = tempfile::tempdir().expect("tempdir");
    let hub = format!("nats-leaf://{hub_leaf}");
    write_leaf_conf(&secure, &hub, out.path(), &["web1"]).await;
    let leaf = NatsProcess::start(&out.path().join("leaf/leaf.conf")).await;
    leaf.logs()
        .wait_for("Leafnode connection created", WAIT)
        .await;
    hub_forwards_account_updates_to_the_leaf(&secure).await;
    (secure, leaf, out, hub)
}

/// Waits until the hub holds the leaf's system remote's interest in account JWT updates
/// (its resolver's subscription, shown by the hub's `LEAFZ`): from then on an update
/// pushed to the hub reaches the leaf.
pub(super) async fn hub_forwards_account_updates_to_the_leaf(secure: &SecureNats) {
    let system = secure.system().await;
    let system_account = secure.auth.account_jwts().expect("accounts").remove(0).0;
    let found = tokio::time::timeout(WAIT, async {
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        loop {
            tick.tick().await;
            let Ok(answer) = system
                .request(
                    "$SYS.REQ.SERVER.PING.LEAFZ",
                    Bytes::from_static(br#"{"subscriptions":true}"#),
                )
                .await
            else {
                continue;
            };
            let leafz: serde_json::Value =
                serde_json::from_slice(&answer.payload).expect("LEAFZ answer is JSON");
            let listening = leafz["data"]["leafs"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|l| l["account"] == system_account.as_str())
                .flat_map(|l| {
                    l["subscriptions_list"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default()
                })
                .any(|s| s.as_str().is_some_and(|s| s.ends_with(".CLAIMS.UPDATE")));
            if listening {
                return;
            }
        }
    })
    .await;
    found.expect("the hub forwards account updates to the leaf's system remote");
}

/// `flue-gateway leaf-config` for `acme`'s leaf node serving `servers` into `<dir>/leaf`;
/// what it printed.
pub(super) async fn write_leaf_conf(
    secure: &SecureNats,
    hub: &str,
    dir: &std::path::Path,
    servers: &[&str],
) -> String {
    let out = dir.join("leaf");
    let mut args = vec![
        "leaf-config",
        "--state-dir",
        secure.state_dir().to_str().expect("utf-8"),
        "--tenant",
        "acme",
        "--hub",
        hub,
        "--out",
        out.to_str().expect("utf-8"),
    ];
    for server in servers {
        args.extend(["--server", server]);
    }
    admin(&args).await
}

pub(super) fn ids() -> (TenantId, ServerId) {
    ("acme".parse().expect("id"), "web1".parse().expect("id"))
}

#[tokio::test]
async fn an_agent_behind_a_leaf_node_pulls_and_answers_on_the_hub() {
    let (secure, leaf, _dir, _) = hub_and_leaf().await;
    let (tenant, server) = ids();
    let key = KeyPair::new_user();
    let jwt = secure
        .auth
        .agent_jwt(&tenant, &server, &key.public_key(), &[])
        .expect("jwt");
    let creds = UserCreds {
        jwt,
        seed: key.seed().expect("seed"),
    };
    let agent = connect_options(&creds)
        .custom_inbox_prefix(subject::agent_inbox_prefix(&tenant, &server))
        .connect(leaf.url())
        .await
        .expect("the agent connects to the leaf node");
    let js = jetstream::with_domain(agent, JS_DOMAIN);
    // The leaf node logs its connection before the hub's interest in `$JS.flue.API.>` has
    // crossed it; until then a request fails at once (no responders, or a JetStream error
    // while the interest settles). The last error is reported if it never works.
    let name = subject::request_consumer(&tenant, &server);
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    let consumer: consumer::PullConsumer = loop {
        tick.tick().await;
        match js.get_consumer_from_stream(&name, REQUEST_STREAM).await {
            Ok(consumer) => break consumer,
            Err(_) if tokio::time::Instant::now() < deadline => {}
            Err(e) => panic!("consumer info across the leaf node: {e}"),
        }
    };
    let mut batch = consumer
        .fetch()
        .max_messages(1)
        .messages()
        .await
        .expect("pull");
    let msg = tokio::time::timeout(WAIT, batch.next())
        .await
        .expect("in time")
        .expect("a message")
        .expect("no error");
    assert_eq!(&msg.payload[..], b"request for web1");
    msg.double_ack().await.expect("ack confirmed by the hub");
    js.publish(
        subject::response(&tenant, &server),
        Bytes::from_static(b"answer"),
    )
    .await
    .expect("publish")
    .await
    .expect("answer stored on the hub");
}

#[tokio::test]
async fn a_leaf_node_admits_no_other_tenants_user_and_no_anonymous_client() {
    let (secure, leaf, _dir, _) = hub_and_leaf().await;
    let (other, _) = secure
        .auth
        .gateway_creds(&"other".parse().expect("id"))
        .expect("users");
    let e = connect_options(&other)
        .connect(leaf.url())
        .await
        .expect_err("refused");
    assert!(
        e.to_string().to_lowercase().contains("authorization"),
        "{e}"
    );
    assert!(
        async_nats::connect(leaf.url()).await.is_err(),
        "anonymous client refused"
    );
}

#[tokio::test]
async fn a_revoked_agent_behind_a_leaf_node_is_cut_off_at_once_without_a_reload() {
    let (secure, leaf, _dir, _hub) = hub_and_leaf().await;
    let (tenant, server) = ids();
    let key = KeyPair::new_user();
    let jwt = secure
        .auth
        .agent_jwt(&tenant, &server, &key.public_key(), &[])
        .expect("jwt");
    let creds = UserCreds {
        jwt,
        seed: key.seed().expect("seed"),
    };
    let inbox = subject::agent_inbox_prefix(&tenant, &server);
    let (agent, events) = refusals_at(&leaf.url(), &creds, Some(inbox)).await;
    let system = secure.system().await;
    secure
        .auth
        .revoke_user(&tenant, AccountKind::Edge, &key.public_key(), &system)
        .await
        .expect("revoked on the hub");
    // The hub forwards the re-signed account JWT to the leaf's system remote: the leaf
    // closes the connection itself, its configuration untouched and never reloaded.
    wait_until(
        "the leaf node closes the revoked user's connection",
        WAIT,
        || {
            let seen = events.lock().expect("lock").join("\n");
            seen.contains("User Authentication Revoked").then_some(())
        },
    )
    .await;
    assert!(
        connect_options(&creds).connect(leaf.url()).await.is_err(),
        "the leaf node admits the revoked user again"
    );
    drop(agent);
}

/// A system account user with the rights of `account`'s leaf system user, allowed on a
/// plain client connection (minted here with the system account's key from the state dir).
fn with_leaf_system_rights(secure: &SecureNats, account: &str) -> UserCreds {
    let seed = std::fs::read_to_string(secure.state_dir().join(accounts::SYSTEM_KEY))
        .expect("the system account's seed");
    let system = KeyPair::from_seed(seed.trim()).expect("a seed");
    accounts::mint_user(&system, "leaf system rights", perms::leaf_system(account)).expect("minted")
}

#[tokio::test]
async fn a_leaf_nodes_users_are_refused_to_a_plain_client_of_the_hub() {
    let secure = SecureNats::start(&["acme"], None).await;
    let (tenant, server) = ids();
    let acme = secure
        .auth
        .account_public_key(&tenant, AccountKind::Edge)
        .expect("acme");
    for (what, creds) in [
        (
            "leaf",
            secure
                .auth
                .leaf_creds(&tenant, &[server])
                .expect("leaf user"),
        ),
        (
            "leaf system",
            secure
                .auth
                .leaf_system_creds(&acme)
                .expect("leaf system user"),
        ),
    ] {
        let e = secure
            .nats
            .connect(&creds)
            .await
            .expect_err("a leaf node's user on a plain client connection");
        assert!(e.to_lowercase().contains("authorization"), "{what}: {e}");
    }
    // The same rights without the restriction connect: the connection type, nothing else,
    // is what the hub refused (it logs only `authentication error`, the reason at debug).
    secure
        .nats
        .connect(&with_leaf_system_rights(&secure, &acme))
        .await
        .expect("a plain client with the same rights");
}

#[tokio::test]
async fn a_leaf_nodes_system_user_hears_only_its_tenants_account_updates_and_asks_nothing() {
    let secure = SecureNats::start(&["acme", "other"], None).await;
    let acme = secure
        .auth
        .account_public_key(&"acme".parse().expect("id"), AccountKind::Edge)
        .expect("acme");
    let other = secure
        .auth
        .account_public_key(&"other".parse().expect("id"), AccountKind::Edge)
        .expect("other");
    // The rights of the user `leaf-config` writes for acme's leaf node, straight on the hub:
    // whatever a compromised tenant network could do with it through a leaf node of its
    // own (the user itself is refused to a plain client:
    // `a_leaf_nodes_users_are_refused_to_a_plain_client_of_the_hub`).
    let creds = with_leaf_system_rights(&secure, &acme);
    let (leaf_system, refused) = refusals_at(&secure.nats.url(), &creds, None).await;
    let mut own = leaf_system
        .subscribe(jsapi::account_claims_update(&acme))
        .await
        .expect("subscribe");
    let mut others = leaf_system
        .subscribe(jsapi::account_claims_update(&other))
        .await
        .expect("subscribe");
    let mut every_account = leaf_system
        .subscribe("$SYS.REQ.ACCOUNT.*.CLAIMS.UPDATE")
        .await
        .expect("subscribe");
    let mut generic = leaf_system
        .subscribe(jsapi::CLAIMS_UPDATE)
        .await
        .expect("subscribe");
    let lookup = leaf_system
        .request(
            format!("$SYS.REQ.ACCOUNT.{other}.CLAIMS.LOOKUP"),
            Bytes::new(),
        )
        .await;
    assert!(
        lookup.is_err(),
        "another account's JWT looked up: {lookup:?}"
    );
    let servers = leaf_system
        .request("$SYS.REQ.SERVER.PING.CONNZ", Bytes::new())
        .await;
    assert!(
        servers.is_err(),
        "the hub's connections listed: {servers:?}"
    );
    // The user may publish nothing, so no request proves the broker has read its
    // subscriptions (a flush would only have written them): the refusal of its last
    // publish, sent while the broker handles it, after them, does.
    let connz = "Permissions Violation for Publish to \"$SYS.REQ.SERVER.PING.CONNZ\"";
    wait_until("the broker refuses the last publish", WAIT, || {
        refused
            .lock()
            .expect("lock")
            .iter()
            .any(|e| e.contains(connz))
            .then_some(())
    })
    .await;

    // Every account but acme's first, then acme's: once acme's has arrived, any other
    // would have arrived before it (one publisher, one connection, in order).
    let system = secure.system().await;
    let mut jwts = secure.auth.account_jwts().expect("accounts");
    jwts.sort_by_key(|(public, _)| *public == acme);
    for (_, jwt) in &jwts {
        push::push(&system, jwt).await.expect("pushed");
    }
    let update = tokio::time::timeout(WAIT, own.next())
        .await
        .expect("acme's update within WAIT")
        .expect("subscription open");
    assert_eq!(update.subject.as_str(), jsapi::account_claims_update(&acme));
    for (what, sub) in [
        ("another tenant's", &mut others),
        ("every account's", &mut every_account),
        ("the generic", &mut generic),
    ] {
        assert!(
            sub.next().now_or_never().is_none(),
            "{what} account updates reached the leaf's system user"
        );
    }
    let refused = refused.lock().expect("lock").join("\n");
    for subject in [
        jsapi::account_claims_update(&other),
        "$SYS.REQ.ACCOUNT.*.CLAIMS.UPDATE".to_owned(),
        jsapi::CLAIMS_UPDATE.to_owned(),
    ] {
        assert!(
            refused.contains(&format!(
                "Permissions Violation for Subscription to \"{subject}\""
            )),
            "{subject} not refused: {refused}"
        );
    }
}
