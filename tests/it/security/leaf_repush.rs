//! A revocation pushed while a tenant's leaf node was away still reaches it (issue 10,
//! point 3): the leaf cannot ask the hub for what it missed, so it keeps admitting a
//! revoked user until the gateway pushes the account again (`--account-push-secs`).

use std::sync::{Arc, Mutex};

use async_nats::jetstream;
use flue_gateway::natsauth::AccountKind;
use flue_proto::creds::{AgentCredentials, UserCreds};
use flue_proto::jsapi::JS_DOMAIN;
use flue_proto::subject::{self, REQUEST_STREAM};
use flue_proto::{ServerId, TenantId};
use flue_tests::{Flue, NatsProcess, WAIT, admin, connect_options, free_port, wait_until};
use nkeys::KeyPair;
use tokio::sync::watch;

use super::broker_leaf::{
    hub_and_leaf, hub_forwards_account_updates_to_the_leaf, ids, write_leaf_conf,
};

/// A client connected as `creds` to `url` the way an agent is (its inbox prefix, reconnecting
/// without end): what the broker told it, and how many times it got connected.
struct AgentConnection {
    client: async_nats::Client,
    events: Arc<Mutex<Vec<String>>>,
    connects: watch::Receiver<u64>,
}

impl AgentConnection {
    async fn open(url: &str, creds: &UserCreds, inbox: String) -> AgentConnection {
        let events: Arc<Mutex<Vec<String>>> = Arc::default();
        let (tx, connects) = watch::channel(0_u64);
        let tx = Arc::new(tx);
        let sink = events.clone();
        let client = connect_options(creds)
            .custom_inbox_prefix(inbox)
            .event_callback(move |event| {
                let sink = sink.clone();
                let tx = tx.clone();
                async move {
                    if matches!(event, async_nats::Event::Connected) {
                        tx.send_modify(|n| *n += 1);
                    }
                    sink.lock().expect("lock").push(event.to_string());
                }
            })
            .connect(url)
            .await
            .expect("the agent's user is admitted");
        AgentConnection {
            client,
            events,
            connects,
        }
    }

    /// Waits until the connection has been made `n` times (bounded by [`WAIT`]).
    async fn connected_times(&mut self, n: u64) {
        tokio::time::timeout(WAIT, self.connects.wait_for(|c| *c >= n))
            .await
            .unwrap_or_else(|_| panic!("not connected {n} times within {WAIT:?}"))
            .expect("client alive");
    }

    /// Waits until the broker says the user is revoked (bounded by [`WAIT`]).
    async fn revoked(&self) {
        wait_until(
            "the leaf node closes the revoked user's connection",
            WAIT,
            || {
                let seen = self.events.lock().expect("lock").join("\n");
                seen.contains("User Authentication Revoked").then_some(())
            },
        )
        .await;
    }

    fn saw_revoked(&self) -> bool {
        self.events
            .lock()
            .expect("lock")
            .iter()
            .any(|e| e.contains("User Authentication Revoked"))
    }
}

#[tokio::test]
async fn a_server_deregistered_while_its_leaf_node_was_down_is_cut_off_there_by_the_periodic_push()
{
    let leaf_port = free_port();
    let flue = Flue::start_operator_leafnodes(&["--account-push-secs", "1"], leaf_port).await;
    let server = ServerId::new("web1").expect("id");
    flue.register(server.as_str()).await;
    let text = std::fs::read_to_string(flue.creds_path(server.as_str())).expect("creds");
    let creds = AgentCredentials::parse(&text).expect("credentials").user;
    let tenant = TenantId::new("default").expect("id");

    // The tenant's leaf node, written by `leaf-config`, on loopback.
    let out = tempfile::tempdir().expect("tempdir");
    let leaf_dir = out.path().join("leaf");
    admin(&[
        "leaf-config",
        "--state-dir",
        flue.gateway.state_dir().to_str().expect("utf-8"),
        "--tenant",
        tenant.as_str(),
        "--hub",
        &format!("nats-leaf://127.0.0.1:{leaf_port}"),
        "--server",
        server.as_str(),
        "--out",
        leaf_dir.to_str().expect("utf-8"),
    ])
    .await;
    let mut leaf = NatsProcess::start(&leaf_dir.join("leaf.conf")).await;
    let mut agent = AgentConnection::open(
        &leaf.url(),
        &creds,
        subject::agent_inbox_prefix(&tenant, &server),
    )
    .await;

    // The leaf goes away (kill -9); meanwhile the server is deregistered: its user is
    // revoked and the account pushed to the hub, which the leaf does not hear.
    leaf.kill().await;
    flue.admin_client()
        .delete_server(&server)
        .await
        .expect("deregistered");
    // The leaf comes back with its configuration and resolver directory as they were, its
    // link to the hub held back (the hub frozen) until the agent is in: the leaf admits the
    // revoked user on what it knew.
    flue.nats.pause();
    leaf.start_again().await;
    agent.connected_times(2).await;
    assert!(
        !agent.saw_revoked(),
        "the stale leaf refused the user before it heard anything"
    );
    flue.nats.resume();

    // Once linked, the next periodic push carries the revocation to the leaf: it closes the
    // connection itself, and refuses the user from then on.
    agent.revoked().await;
    assert!(
        connect_options(&creds).connect(leaf.url()).await.is_err(),
        "the leaf node admits the revoked user again"
    );
    drop(agent.client);
}

#[tokio::test]
async fn a_leaf_node_that_missed_a_revocation_admits_the_user_until_the_account_is_pushed_again() {
    let (secure, mut leaf, _dir, _) = hub_and_leaf().await;
    let (tenant, server) = ids();
    let key = KeyPair::new_user();
    let creds = UserCreds {
        jwt: secure
            .auth
            .agent_jwt(&tenant, &server, &key.public_key(), &[])
            .expect("jwt"),
        seed: key.seed().expect("seed"),
    };
    leaf.kill().await;
    let system = secure.system().await;
    secure
        .auth
        .revoke_user(&tenant, AccountKind::Edge, &key.public_key(), &system)
        .await
        .expect("revoked on the hub");
    leaf.start_again().await;
    // The leaf is linked again and the hub would forward an update to it now...
    hub_forwards_account_updates_to_the_leaf(&secure).await;
    // ...yet nothing made it learn the one it missed: the revoked user is admitted and
    // reaches its queue on the hub through it.
    let agent = AgentConnection::open(
        &leaf.url(),
        &creds,
        subject::agent_inbox_prefix(&tenant, &server),
    )
    .await;
    reaches_its_consumer(&agent.client, &tenant, &server).await;
    assert!(!agent.saw_revoked());

    // What the gateway does every `--account-push-secs`.
    secure.auth.push_all(&system).await.expect("pushed");
    agent.revoked().await;
}

#[tokio::test]
async fn leaf_config_run_again_revokes_the_leaf_user_it_replaces() {
    let (secure, mut leaf, dir, hub) = hub_and_leaf().await;
    let creds_file = dir.path().join("leaf/leaf.creds");
    let user_of = |path: &std::path::Path| {
        let text = std::fs::read_to_string(path).expect("leaf.creds");
        let creds = UserCreds::parse(&text).expect("creds");
        KeyPair::from_seed(&creds.seed).expect("seed").public_key()
    };
    let old = user_of(&creds_file);
    // Run again for one more server of the network (web2 joins it).
    let printed = write_leaf_conf(&secure, &hub, dir.path(), &["web1", "web2"]).await;
    assert!(printed.contains(&old), "{printed}");
    assert!(
        printed.contains("leaf user for the servers web1 web2"),
        "{printed}"
    );
    let new = user_of(&creds_file);
    assert_ne!(new, old, "a new leaf user");

    // What the gateway does every `--account-push-secs`: the hub drops the running leaf's
    // link made with the replaced user.
    let from = leaf.logs().len();
    let system = secure.system().await;
    secure.auth.push_all(&system).await.expect("pushed");
    wait_until("the hub refuses the replaced leaf user", WAIT, || {
        leaf.logs().lines()[from..]
            .iter()
            .any(|l| l.contains("Leafnode Error 'User Authentication Revoked'"))
            .then_some(())
    })
    .await;

    // The leaf restarted with the new files links again: an agent behind it reaches its
    // consumer on the hub.
    leaf.kill().await;
    leaf.start_again().await;
    let (tenant, server) = ids();
    let key = KeyPair::new_user();
    let creds = UserCreds {
        jwt: secure
            .auth
            .agent_jwt(&tenant, &server, &key.public_key(), &[])
            .expect("jwt"),
        seed: key.seed().expect("seed"),
    };
    let agent = AgentConnection::open(
        &leaf.url(),
        &creds,
        subject::agent_inbox_prefix(&tenant, &server),
    )
    .await;
    reaches_its_consumer(&agent.client, &tenant, &server).await;
}

/// Waits until `client`, behind a leaf node, finds `server`'s request consumer on the hub
/// (the hub's interest crosses the leaf link a little after it is made); panics after
/// [`WAIT`].
async fn reaches_its_consumer(client: &async_nats::Client, tenant: &TenantId, server: &ServerId) {
    let js = jetstream::with_domain(client.clone(), JS_DOMAIN);
    let name = subject::request_consumer(tenant, server);
    let found = tokio::time::timeout(WAIT, async {
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(50));
        loop {
            tick.tick().await;
            if js
                .get_consumer_from_stream::<jetstream::consumer::pull::Config, _, _>(
                    &name,
                    REQUEST_STREAM,
                )
                .await
                .is_ok()
            {
                return;
            }
        }
    })
    .await;
    assert!(found.is_ok(), "{server} never reached its consumer");
}
