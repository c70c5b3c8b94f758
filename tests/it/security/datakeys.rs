//! An agent's data-space rights follow the stacks its server takes part in (issue 10,
//! point 3): the broker refuses another stack's keys, and a server that joins a stack
//! gets a new user JWT its agent reconnects with before the hook runs.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::sync::Arc;

use async_nats::jetstream;
use bytes::Bytes;
use flue_agent::rights::{self, RefusedJwt, Rights};
use flue_gateway::natsauth::jwt::{self, Claims, Permissions, User};
use flue_proto::creds::{AgentCredentials, UserCreds};
use flue_proto::jsapi::JS_DOMAIN;
use flue_proto::subject::{self, DATA_BUCKET};
use flue_proto::{CreateDeployment, Deployment, DeploymentStatus, ServerId, StackId};
use flue_tests::{Flue, REFUSED_WAIT, WAIT};
use nkeys::KeyPair;
use serde_json::{Value, json};
use tokio::sync::watch;

use super::broker_agent::{server, tenant, world};

fn stack(name: &str) -> StackId {
    name.parse().expect("id")
}

/// The agent's configuration for `web1` of `acme`, with its state in `dir`.
fn agent_config(dir: &std::path::Path) -> flue_agent::Config {
    let mut config = flue_agent::Config::new(tenant(), server("web1"));
    config.state_dir = dir.to_owned();
    config
}

/// Connects as the agent does: every connection authenticated with the JWT `rights`
/// hold at that moment; the receiver counts connections.
async fn connect_as_agent(
    url: &str,
    rights: &Rights,
    key: &KeyPair,
) -> (async_nats::Client, watch::Receiver<u64>) {
    let (tx, connects) = watch::channel(0_u64);
    let tx = Arc::new(tx);
    let key = KeyPair::from_seed(&key.seed().expect("seed")).expect("key");
    let client = rights
        .connect_options(key)
        .custom_inbox_prefix(subject::agent_inbox_prefix(&tenant(), &server("web1")))
        .request_timeout(Some(REFUSED_WAIT))
        .event_callback(move |event| {
            let tx = tx.clone();
            async move {
                if matches!(event, async_nats::Event::Connected) {
                    tx.send_modify(|n| *n += 1);
                }
            }
        })
        .connect(url)
        .await
        .expect("agent connects");
    (client, connects)
}

#[tokio::test]
async fn an_agent_that_joins_a_stack_reconnects_with_its_new_jwt_and_only_then_reaches_its_keys() {
    let w = world().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = agent_config(dir.path());
    let rights = Rights::load(&config, &w.creds)
        .expect("credentials")
        .expect("a JWT");
    let (client, connects) = connect_as_agent(&w.secure.nats.url(), &rights, &w.key).await;
    let js = jetstream::with_domain(client.clone(), JS_DOMAIN);
    let store = js.get_key_value(DATA_BUCKET).await.expect("bucket info");

    // Member of st1 only: st2's key can be neither read nor written.
    assert!(
        store.get("acme.st2.secret").await.is_err(),
        "read st2's key"
    );
    assert!(
        store
            .put("acme.st2.secret", Bytes::from_static(b"before joining"))
            .await
            .is_err(),
        "wrote st2's key"
    );
    let value = w.data.get("acme.st2.secret").await.expect("gateway reads");
    assert_eq!(
        value.as_deref(),
        Some(&b"theirs"[..]),
        "st2's key unchanged"
    );

    // web1 joins st2: the gateway mints a JWT for both stacks, a request brings it.
    let joined = w
        .secure
        .auth
        .agent_jwt(
            &tenant(),
            &server("web1"),
            &w.key.public_key(),
            &[stack("st1"), stack("st2")],
        )
        .expect("jwt");
    let before = *connects.borrow();
    rights::take(Some(&rights), &client, &connects, &joined).await;
    assert!(*connects.borrow() > before, "the agent reconnected");
    assert_eq!(rights.jwt(), joined);

    let read = store.get("acme.st2.secret").await.expect("reads st2's key");
    assert_eq!(read.as_deref(), Some(&b"theirs"[..]));
    store
        .put("acme.st2.secret", Bytes::from_static(b"joined"))
        .await
        .expect("writes st2's key");
    let value = w.data.get("acme.st2.secret").await.expect("gateway reads");
    assert_eq!(value.as_deref(), Some(&b"joined"[..]));
    // Its own stack still works over the new connection.
    store
        .put("acme.st1.shared", Bytes::from_static(b"still mine"))
        .await
        .expect("writes st1's key");

    // Saved 0600 and used at the next start instead of the credentials file's.
    let saved = dir.path().join(rights::SAVED_JWT);
    assert_eq!(std::fs::read_to_string(&saved).expect("saved"), joined);
    let mode = std::fs::metadata(&saved)
        .expect("meta")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let restarted = Rights::load(&config, &w.creds)
        .expect("credentials")
        .expect("a JWT");
    assert_eq!(restarted.jwt(), joined);
}

/// A user JWT for `user`, issued by `account` at `iat`.
fn user_jwt(account: &KeyPair, user: &str, iat: i64) -> String {
    let mut claims = Claims::new(user, "agent", User::new(Permissions::default()));
    jwt::encode(account, &mut claims, iat).expect("encodes")
}

#[test]
fn an_agent_takes_only_a_newer_jwt_for_its_own_user_from_its_own_account() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = agent_config(dir.path());
    let account = KeyPair::new_account();
    let user = KeyPair::new_user();
    let now = 1_900_000_000;
    let creds = UserCreds {
        jwt: user_jwt(&account, &user.public_key(), now),
        seed: user.seed().expect("seed"),
    };
    let rights = Rights::load(&config, &creds)
        .expect("credentials")
        .expect("a JWT");

    let other_user = user_jwt(&account, &KeyPair::new_user().public_key(), now + 1);
    assert!(matches!(
        rights.adopt(&other_user),
        Err(RefusedJwt::OtherUser(_))
    ));
    let other_account = user_jwt(&KeyPair::new_account(), &user.public_key(), now + 1);
    assert!(matches!(
        rights.adopt(&other_account),
        Err(RefusedJwt::OtherAccount(_))
    ));
    let older = user_jwt(&account, &user.public_key(), now - 1);
    assert!(matches!(rights.adopt(&older), Err(RefusedJwt::Older)));
    let mut forged = user_jwt(&account, &user.public_key(), now + 1);
    forged.push('A');
    assert!(matches!(rights.adopt(&forged), Err(RefusedJwt::Invalid(_))));
    assert!(
        !dir.path().join(rights::SAVED_JWT).exists(),
        "nothing refused was saved"
    );
    assert_eq!(rights.jwt(), creds.jwt, "the rights held did not change");
    assert!(
        !rights.adopt(&creds.jwt).expect("the same one"),
        "no change"
    );

    let newer = user_jwt(&account, &user.public_key(), now + 1);
    assert!(rights.adopt(&newer).expect("taken"));
    assert_eq!(rights.jwt(), newer);

    // New credentials (a rotation: another user key) win over the saved JWT.
    let rotated_user = KeyPair::new_user();
    let rotated = UserCreds {
        jwt: user_jwt(&account, &rotated_user.public_key(), now + 2),
        seed: rotated_user.seed().expect("seed"),
    };
    let restarted = Rights::load(&config, &rotated)
        .expect("credentials")
        .expect("a JWT");
    assert_eq!(restarted.jwt(), rotated.jwt);
}

/// Creates a deployment of `config` on `server` in `stack` and returns it once finished.
async fn run_in_stack(
    flue: &Flue,
    config: &str,
    server: &str,
    stack: &str,
    inputs: &[(&str, &str)],
) -> Deployment {
    let d = create_in_stack(flue, config, server, stack, inputs).await;
    flue.finished(&d.id).await
}

async fn create_in_stack(
    flue: &Flue,
    config: &str,
    server: &str,
    stack: &str,
    inputs: &[(&str, &str)],
) -> Deployment {
    let input_values: BTreeMap<String, Value> = inputs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    flue.client()
        .create_deployment(&CreateDeployment {
            input_values,
            stack_id: Some(stack.parse().expect("stack id")),
            ..CreateDeployment::new(
                config.parse().expect("config id"),
                server.parse().expect("server id"),
            )
        })
        .await
        .expect("create deployment")
}

#[tokio::test]
async fn a_two_server_stack_whose_servers_exchange_data_keys_completes_on_the_secured_broker() {
    let flue = Flue::start_operator(&[]).await;
    flue.register("db").await;
    flue.register("web").await;
    let db = flue.agent("db", &[]).await;
    let web = flue.agent("web", &[]).await;
    flue.script_config(
        "wait-addr",
        "#!/bin/sh\nset -e\nflue-agent data get db/address --wait 60s > \"$heat_outputs_path.address\"\n",
        &[],
        &["address"],
    )
    .await;
    flue.script_config(
        "put-addr",
        "#!/bin/sh\nset -e\nflue-agent data put db/address \"$addr\"\n",
        &["addr"],
        &[],
    )
    .await;

    let waiter = create_in_stack(&flue, "wait-addr", "web", "st1", &[]).await;
    web.logs().wait_for("waiting for a data key", WAIT).await;
    let put = run_in_stack(&flue, "put-addr", "db", "st1", &[("addr", "10.0.0.5")]).await;
    assert_eq!(put.status, DeploymentStatus::Complete, "{put:?}");
    let done = flue.finished(&waiter.id).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    assert_eq!(done.outputs.get("address"), Some(&json!("10.0.0.5")));
    // Both agents ran their hook with the JWT their server got on joining st1.
    for agent in [&db, &web] {
        agent
            .logs()
            .wait_for("reconnected with the new user JWT", WAIT)
            .await;
    }
}

#[tokio::test]
async fn a_server_of_stack_a_only_is_refused_stack_b_keys_by_the_broker_until_it_joins_b() {
    let flue = Flue::start_operator(&[]).await;
    flue.register("s1").await;
    flue.register("s2").await;
    let _s1 = flue.agent("s1", &[]).await;
    let _s2 = flue.agent("s2", &[]).await;
    flue.script_config(
        "put",
        "#!/bin/sh\nset -e\nflue-agent data put k \"$v\"\n",
        &["v"],
        &[],
    )
    .await;
    flue.script_config(
        "get",
        "#!/bin/sh\nset -e\nflue-agent data get k > \"$heat_outputs_path.v\"\n",
        &[],
        &["v"],
    )
    .await;
    let theirs = run_in_stack(&flue, "put", "s2", "stB", &[("v", "theirs")]).await;
    assert_eq!(theirs.status, DeploymentStatus::Complete, "{theirs:?}");
    let mine = run_in_stack(&flue, "put", "s1", "stA", &[("v", "mine")]).await;
    assert_eq!(mine.status, DeploymentStatus::Complete, "{mine:?}");

    // s1's broker user as its agent holds it: the seed of its credentials file, the JWT
    // its server got on joining stA (public, in the server record).
    let s1: ServerId = "s1".parse().expect("id");
    let record = flue.client().get_server(&s1).await.expect("server");
    assert_eq!(record.stacks, [stack("stA")]);
    let jwt_a = record.agent_jwt.clone().expect("a JWT for stA");
    let saved = flue.path("agent-s1").join(rights::SAVED_JWT);
    assert_eq!(std::fs::read_to_string(&saved).expect("saved"), jwt_a);
    let text = std::fs::read_to_string(flue.creds_path("s1")).expect("creds");
    let seed = AgentCredentials::parse(&text).expect("creds").user.seed;
    let user = UserCreds { jwt: jwt_a, seed };
    let inbox = subject::agent_inbox_prefix(&"default".parse().expect("id"), &s1);
    let (client, refused) = super::refusals_at(&flue.nats.url(), &user, Some(inbox.clone())).await;
    let store = jetstream::with_domain(client, JS_DOMAIN)
        .get_key_value(DATA_BUCKET)
        .await
        .expect("bucket info");
    assert!(
        store.get("default.stB.k").await.is_err(),
        "s1 read stB's key"
    );
    assert!(
        store
            .put("default.stB.k", Bytes::from_static(b"forged"))
            .await
            .is_err(),
        "s1 wrote stB's key"
    );
    store
        .get("default.stA.k")
        .await
        .expect("its own stack's key");
    let refused = refused.lock().expect("lock").join("\n");
    assert!(
        refused.contains("DIRECT.GET.KV_flue_data.$KV.flue_data.default.stB.k"),
        "{refused}"
    );
    // stB's key is unchanged, as stB's own server reads it.
    let read = run_in_stack(&flue, "get", "s2", "stB", &[]).await;
    assert_eq!(read.outputs.get("v"), Some(&json!("theirs")), "{read:?}");

    // s1 joins stB: its hook there reads and writes stB's keys.
    let joined = run_in_stack(&flue, "get", "s1", "stB", &[]).await;
    assert_eq!(joined.status, DeploymentStatus::Complete, "{joined:?}");
    assert_eq!(joined.outputs.get("v"), Some(&json!("theirs")));
    let wrote = run_in_stack(&flue, "put", "s1", "stB", &[("v", "from s1")]).await;
    assert_eq!(wrote.status, DeploymentStatus::Complete, "{wrote:?}");
    let record = flue.client().get_server(&s1).await.expect("server");
    assert_eq!(record.stacks, [stack("stA"), stack("stB")]);
    let jwt_ab = record.agent_jwt.expect("a JWT for stA and stB");
    assert_eq!(std::fs::read_to_string(&saved).expect("saved"), jwt_ab);
    let read = run_in_stack(&flue, "get", "s2", "stB", &[]).await;
    assert_eq!(read.outputs.get("v"), Some(&json!("from s1")), "{read:?}");
}

#[tokio::test]
async fn a_deleted_stack_is_left_out_of_the_next_jwt_its_servers_get() {
    let flue = Flue::start_operator(&[]).await;
    flue.register("s1").await;
    let _s1 = flue.agent("s1", &[]).await;
    flue.script_config(
        "put",
        "#!/bin/sh\nset -e\nflue-agent data put k \"$v\"\n",
        &["v"],
        &[],
    )
    .await;
    let put = run_in_stack(&flue, "put", "s1", "stA", &[("v", "a")]).await;
    assert_eq!(put.status, DeploymentStatus::Complete, "{put:?}");
    // The engine's record of stA names s1 as the server of one of its units.
    let record: flue_proto::PutStack = serde_json::from_value(json!({
        "status": {"action": "CREATE", "status": "COMPLETE"},
        "state": {"units": {"r": {
            "resource": "r", "server_id": "s1", "action": "CREATE", "status": "COMPLETE"
        }}}
    }))
    .expect("stack record");
    let client = flue.client();
    client
        .put_stack(&stack("stA"), &record)
        .await
        .expect("stack stored");
    client
        .delete_stack(&stack("stA"), None)
        .await
        .expect("stack deleted");
    let s1: ServerId = "s1".parse().expect("id");
    let server = client.get_server(&s1).await.expect("server");
    assert!(server.stacks.is_empty(), "{:?}", server.stacks);
    assert_eq!(server.agent_jwt, None);

    let put = run_in_stack(&flue, "put", "s1", "stB", &[("v", "b")]).await;
    assert_eq!(put.status, DeploymentStatus::Complete, "{put:?}");
    let server = client.get_server(&s1).await.expect("server");
    assert_eq!(server.stacks, [stack("stB")]);
    let jwt_b = server.agent_jwt.expect("a JWT for stB");
    assert_eq!(
        std::fs::read_to_string(flue.path("agent-s1").join(rights::SAVED_JWT)).expect("saved"),
        jwt_b,
        "the agent took it"
    );
    // With it, the broker refuses stA's keys.
    let text = std::fs::read_to_string(flue.creds_path("s1")).expect("creds");
    let seed = AgentCredentials::parse(&text).expect("creds").user.seed;
    let user = UserCreds { jwt: jwt_b, seed };
    let inbox = subject::agent_inbox_prefix(&"default".parse().expect("id"), &s1);
    let (client, refused) = super::refusals_at(&flue.nats.url(), &user, Some(inbox)).await;
    let store = jetstream::with_domain(client, JS_DOMAIN)
        .get_key_value(DATA_BUCKET)
        .await
        .expect("bucket info");
    assert!(store.get("default.stA.k").await.is_err());
    store.get("default.stB.k").await.expect("stB's key");
    let refused = refused.lock().expect("lock").join("\n");
    assert!(
        refused.contains("DIRECT.GET.KV_flue_data.$KV.flue_data.default.stA.k"),
        "{refused}"
    );
}

#[tokio::test]
async fn rotated_credentials_grant_the_stacks_the_server_takes_part_in() {
    let flue = Flue::start_operator(&[]).await;
    flue.register("s1").await;
    flue.register("s2").await;
    let _s1 = flue.agent("s1", &[]).await;
    let _s2 = flue.agent("s2", &[]).await;
    flue.script_config(
        "put",
        "#!/bin/sh\nset -e\nflue-agent data put k \"$v\"\n",
        &["v"],
        &[],
    )
    .await;
    for (server, stack) in [("s1", "stA"), ("s2", "stB")] {
        let put = run_in_stack(&flue, "put", server, stack, &[("v", stack)]).await;
        assert_eq!(put.status, DeploymentStatus::Complete, "{put:?}");
    }
    let s1: ServerId = "s1".parse().expect("id");
    let rotated = flue
        .admin_client()
        .rotate_server_credentials(&s1)
        .await
        .expect("rotated");
    let creds = AgentCredentials::parse(&rotated.credentials.expect("new credentials"))
        .expect("credentials");
    let inbox = subject::agent_inbox_prefix(&"default".parse().expect("id"), &s1);
    let (client, refused) = super::refusals_at(&flue.nats.url(), &creds.user, Some(inbox)).await;
    let store = jetstream::with_domain(client, JS_DOMAIN)
        .get_key_value(DATA_BUCKET)
        .await
        .expect("bucket info");
    let value = store.get("default.stA.k").await.expect("stA's key");
    assert_eq!(value.as_deref(), Some(&b"stA"[..]));
    assert!(store.get("default.stB.k").await.is_err(), "read stB's key");
    let refused = refused.lock().expect("lock").join("\n");
    assert!(
        refused.contains("DIRECT.GET.KV_flue_data.$KV.flue_data.default.stB.k"),
        "{refused}"
    );
}

#[tokio::test]
async fn behind_a_leaf_node_an_agent_that_joins_a_stack_reaches_its_keys_after_reconnecting() {
    let (secure, leaf, _dir, _) = super::broker_leaf::hub_and_leaf().await;
    let (gateway, _) = secure.gateway("acme").await;
    let data = jetstream::new(gateway)
        .create_key_value(async_nats::jetstream::kv::Config {
            bucket: DATA_BUCKET.to_owned(),
            history: 1,
            ..Default::default()
        })
        .await
        .expect("data bucket");
    data.put("acme.st2.secret", Bytes::from_static(b"theirs"))
        .await
        .expect("put");
    let key = KeyPair::new_user();
    let creds = UserCreds {
        jwt: secure
            .auth
            .agent_jwt(
                &tenant(),
                &server("web1"),
                &key.public_key(),
                &[stack("st1")],
            )
            .expect("jwt"),
        seed: key.seed().expect("seed"),
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let rights = Rights::load(&agent_config(dir.path()), &creds)
        .expect("credentials")
        .expect("a JWT");
    let (client, connects) = connect_as_agent(&leaf.url(), &rights, &key).await;
    let js = jetstream::with_domain(client.clone(), JS_DOMAIN);
    // The hub's interest in `$JS.flue.API.>` crosses the leaf connection a little after it
    // is made: until then the bucket look-up fails at once.
    let store = wait_for_bucket(&js).await;
    assert!(
        store.get("acme.st2.secret").await.is_err(),
        "read st2's key"
    );

    let joined = secure
        .auth
        .agent_jwt(
            &tenant(),
            &server("web1"),
            &key.public_key(),
            &[stack("st1"), stack("st2")],
        )
        .expect("jwt");
    let before = *connects.borrow();
    rights::take(Some(&rights), &client, &connects, &joined).await;
    assert!(*connects.borrow() > before, "the agent reconnected");
    let store = wait_for_bucket(&js).await;
    let read = store.get("acme.st2.secret").await.expect("reads st2's key");
    assert_eq!(read.as_deref(), Some(&b"theirs"[..]));
    store
        .put("acme.st2.secret", Bytes::from_static(b"joined"))
        .await
        .expect("writes st2's key");
    let value = data.get("acme.st2.secret").await.expect("gateway reads");
    assert_eq!(value.as_deref(), Some(&b"joined"[..]));
}

/// The data bucket, looked up through `js` until the look-up works (at most [`WAIT`]).
async fn wait_for_bucket(js: &jetstream::Context) -> jetstream::kv::Store {
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(50));
    loop {
        tick.tick().await;
        match js.get_key_value(DATA_BUCKET).await {
            Ok(store) => return store,
            Err(_) if tokio::time::Instant::now() < deadline => {}
            Err(e) => panic!("bucket look-up across the leaf node: {e}"),
        }
    }
}
