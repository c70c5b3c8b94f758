//! Broker authentication against a real nats-server in operator mode, configured by
//! `flue-gateway init`: no anonymous clients, tenants isolated by accounts, `init`
//! idempotent. Agents: `broker_agent.rs`; listeners: `broker_listener.rs`.

use std::os::unix::fs::PermissionsExt as _;

use async_nats::jetstream::{self, stream};
use bytes::Bytes;
use flue_gateway::natsauth::jwt::{self, Claims, Permissions, User};
use flue_proto::creds::UserCreds;
use flue_proto::subject;
use flue_tests::{SecureNats, admin, broker_has_read};
use futures_util::StreamExt as _;
use nkeys::KeyPair;

use super::wait_for_marker;

#[tokio::test]
async fn anonymous_and_foreign_users_are_refused_at_connect() {
    let secure = SecureNats::start(&["acme"], None).await;
    let anonymous = async_nats::connect(secure.nats.url()).await;
    assert!(anonymous.is_err(), "an anonymous client connected");

    // A user signed by an account the operator never signed.
    let stranger = KeyPair::new_account();
    let user = KeyPair::new_user();
    let mut claims = Claims::new(
        user.public_key(),
        "stranger",
        User::new(Permissions::default()),
    );
    let creds = UserCreds {
        jwt: jwt::encode(&stranger, &mut claims, 1).expect("encodes"),
        seed: user.seed().expect("seed"),
    };
    let e = secure
        .nats
        .connect(&creds)
        .await
        .expect_err("foreign user refused");
    assert!(e.to_lowercase().contains("authorization"), "{e}");

    // The real proof of the encoder: a user it signed for a known account gets in.
    let (_gateway, _events) = secure.gateway("acme").await;
}

#[tokio::test]
async fn a_tenants_gateway_user_never_reaches_another_tenants_streams_or_subjects() {
    let secure = SecureNats::start(&["alpha", "beta"], None).await;
    let (alpha, _) = secure.gateway("alpha").await;
    let (beta, _) = secure.gateway("beta").await;
    let (alpha_js, beta_js) = (jetstream::new(alpha.clone()), jetstream::new(beta.clone()));
    let config = || stream::Config {
        name: subject::REQUEST_STREAM.to_owned(),
        subjects: vec![subject::REQUEST_SUBJECTS.to_owned()],
        ..Default::default()
    };
    // Both accounts hold a stream of the same name over the same subjects.
    alpha_js
        .create_stream(config())
        .await
        .expect("alpha's stream");
    beta_js
        .create_stream(config())
        .await
        .expect("beta's stream");

    let mut everything = alpha.subscribe(">").await.expect("alpha subscribes to >");
    // The broker has alpha's `>` before beta publishes anything. (Its probe, an API
    // request, reaches `>` too, as does the answer: neither is beta's nor a flue subject.)
    let [account_info, _] = flue_proto::jsapi::api("INFO");
    broker_has_read(&alpha, &account_info).await;
    beta_js
        .publish("flue.beta.req.web1", Bytes::from_static(b"beta's request"))
        .await
        .expect("publish")
        .await
        .expect("beta's request stored");
    beta.publish(
        "flue.alpha.req.web1",
        Bytes::from_static(b"beta writes alpha's name"),
    )
    .await
    .expect("publish");
    beta.flush().await.expect("flush");
    // Whatever crossed would reach alpha's `>` before alpha's own later message.
    alpha
        .publish("alpha.marker", Bytes::from_static(b"m"))
        .await
        .expect("publish");
    let seen = wait_for_marker(&mut everything, "alpha.marker").await;
    assert!(
        seen.iter()
            .all(|s| !s.contains("beta") && !s.starts_with("flue.")),
        "alpha saw {seen:?}"
    );
    let alpha_stream = alpha_js
        .get_stream(subject::REQUEST_STREAM)
        .await
        .expect("alpha's stream")
        .info()
        .await
        .expect("info")
        .state
        .messages;
    assert_eq!(alpha_stream, 0, "beta's messages landed in alpha's stream");
    let names: Vec<String> = alpha_js
        .stream_names()
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .map(|n| n.expect("name"))
        .collect();
    assert_eq!(
        names,
        [subject::REQUEST_STREAM],
        "alpha lists only its own stream"
    );
    let beta_stream = beta_js
        .get_stream(subject::REQUEST_STREAM)
        .await
        .expect("beta's stream")
        .info()
        .await
        .expect("info")
        .state
        .messages;
    assert_eq!(
        beta_stream, 2,
        "what beta published stays in beta's own stream"
    );
}

#[tokio::test]
async fn a_tenant_created_at_run_time_is_pushed_to_the_running_broker() {
    let secure = SecureNats::start(&["acme"], None).await;
    let late: flue_proto::TenantId = "late".parse().expect("id");
    // Not in the broker's preload, so the broker does not know it yet.
    let system = secure.system().await;
    secure
        .auth
        .create_tenant(&late, &system)
        .await
        .expect("created and pushed");
    let (main, events) = secure.gateway("late").await;
    jetstream::new(main)
        .create_stream(stream::Config {
            name: subject::REQUEST_STREAM.to_owned(),
            subjects: vec![subject::REQUEST_SUBJECTS.to_owned()],
            ..Default::default()
        })
        .await
        .expect("the new tenant account has JetStream");
    events
        .flush()
        .await
        .expect("the events account user is connected");
    let tenants = secure.auth.tenants().expect("tenants");
    assert_eq!(tenants, ["acme".parse().expect("id"), late]);
}

#[tokio::test]
async fn an_account_jwt_the_broker_refuses_is_reported_and_another_operators_account_admits_no_one()
{
    let secure = SecureNats::start(&["acme"], None).await;
    let system = secure.system().await;
    let e = flue_gateway::natsauth::push::push(&system, "not a jwt")
        .await
        .expect_err("refused");
    assert!(
        matches!(e, flue_gateway::natsauth::push::PushError::Refused { .. }),
        "{e}"
    );

    // An account JWT signed by another operator: nats-server 2.15 answers "jwt updated" (its
    // resolver stores what it is sent), but it never admits a user of that account.
    let stranger = KeyPair::new_operator();
    let account = KeyPair::new_account();
    let mut claims = Claims::new(
        account.public_key(),
        "intruder",
        jwt::Account::new(jwt::AccountLimits::unlimited_with_jetstream()),
    );
    let forged = jwt::encode(&stranger, &mut claims, 1).expect("encodes");
    let _ = flue_gateway::natsauth::push::push(&system, &forged).await;
    let user = KeyPair::new_user();
    let mut claims = Claims::new(user.public_key(), "u", User::new(Permissions::default()));
    let creds = UserCreds {
        jwt: jwt::encode(&account, &mut claims, 1).expect("encodes"),
        seed: user.seed().expect("seed"),
    };
    let e = secure
        .nats
        .connect(&creds)
        .await
        .expect_err("a user of the forged account is refused");
    assert!(e.to_lowercase().contains("authorization"), "{e}");
}

#[tokio::test]
async fn init_keeps_its_keys_and_writes_only_private_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let state_arg = state.to_str().expect("utf-8");
    let first = admin(&["init", "--state-dir", state_arg, "--tenant", "acme"]).await;
    let conf = std::fs::read_to_string(state.join("broker/nats-server.conf")).expect("conf");
    let again = admin(&["init", "--state-dir", state_arg, "--tenant", "acme"]).await;
    assert_eq!(first, again, "the same operator key and configuration path");
    let account = std::fs::read_to_string(state.join("accounts/acme/account.jwt")).expect("jwt");
    admin(&["tenant", "create", "other", "--state-dir", state_arg]).await;
    assert_eq!(
        std::fs::read_to_string(state.join("accounts/acme/account.jwt")).expect("jwt"),
        account,
        "an existing account is kept"
    );
    let rewritten = std::fs::read_to_string(state.join("broker/nats-server.conf")).expect("conf");
    assert!(
        rewritten.len() > conf.len(),
        "the new tenant's accounts are preloaded"
    );
    for entry in walk(&state) {
        let mode = std::fs::metadata(&entry)
            .expect("meta")
            .permissions()
            .mode()
            & 0o777;
        let expected = if entry.is_dir() { 0o700 } else { 0o600 };
        assert_eq!(mode, expected, "{}", entry.display());
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut all = vec![dir.to_owned()];
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            all.extend(walk(&path));
        } else {
            all.push(path);
        }
    }
    all
}
