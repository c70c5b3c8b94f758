//! The broker's consumer limit: every server has a durable consumer on the request
//! stream, so 1,500 servers register against the documented broker, and a registration
//! the broker refuses for its limit is a clear 507 naming the limit, never a 500.

use std::time::Instant;

use flue_client::ClientError;
use flue_proto::{RegisterServer, ServerId, subject};
use flue_tests::{Flue, Gateway, Nats, WAIT};
use futures_util::StreamExt;

/// Registrations in flight at once, as an engine creating a large stack would send them.
const CONCURRENT: usize = 32;

async fn register(flue: &Flue, id: &str) -> Result<(), ClientError> {
    flue.admin_client()
        .register_server(&RegisterServer {
            transport: Default::default(),
            id: ServerId::new(id).expect("id"),
            name: String::new(),
        })
        .await
        .map(drop)
}

#[tokio::test]
async fn fifteen_hundred_servers_register_against_the_documented_broker() {
    let flue = Flue::start().await;
    let started = Instant::now();
    let failures: Vec<(usize, ClientError)> = futures_util::stream::iter(0..1500)
        .map(|i| {
            let flue = &flue;
            async move { (i, register(flue, &format!("s{i}")).await) }
        })
        .buffer_unordered(CONCURRENT)
        .filter_map(|(i, r)| async move { r.err().map(|e| (i, e)) })
        .collect()
        .await;
    eprintln!(
        "1500 registrations ({CONCURRENT} at a time) took {:?}",
        started.elapsed()
    );
    assert!(
        failures.is_empty(),
        "{} failed, first: {:?}",
        failures.len(),
        failures.first()
    );
    let servers = flue.client().list_servers().await.expect("list");
    assert_eq!(servers.len(), 1500);
}

#[tokio::test]
async fn a_registration_past_the_brokers_consumer_limit_is_a_507_naming_the_limit() {
    let flue = Flue::start().await;
    // An operator (or a smaller broker account) holding the request stream to 5 consumers.
    let js = async_nats::jetstream::new(flue.nats.client().await);
    let mut stream = js
        .get_stream(subject::REQUEST_STREAM)
        .await
        .expect("request stream");
    let mut config = stream.info().await.expect("info").config.clone();
    config.max_consumers = 5;
    js.update_stream(&config).await.expect("lower the limit");

    for i in 0..5 {
        register(&flue, &format!("s{i}"))
            .await
            .expect("within the limit");
    }
    let err = register(&flue, "s5").await.expect_err("past the limit");
    let ClientError::Api {
        status,
        code,
        message,
    } = err
    else {
        panic!("not an API error: {err}");
    };
    assert_eq!(status, 507, "{code}: {message}");
    assert_eq!(code, "consumer_limit_reached", "{message}");
    assert!(message.contains("limit of 5"), "{message}");
    // Registering a server that has its consumer already still works at the limit.
    register(&flue, "s0").await.expect("again");
    assert!(
        !flue
            .gateway
            .logs()
            .lines()
            .iter()
            .any(|l| l.contains("request failed")),
        "logged as an internal failure"
    );
}

#[tokio::test]
async fn a_gateway_on_a_broker_account_with_fewer_consumers_warns_at_start_and_answers_507() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("nats-server.conf");
    // A broker whose account allows 20 consumers per stream (nats-server applies an
    // account's `max_consumers` to each of its streams).
    std::fs::write(
        &config,
        "jetstream {}\n\
         accounts {\n\
           FLUE { jetstream { max_consumers: 20 }, users: [{user: flue, password: flue}] }\n\
         }\n",
    )
    .expect("write config");
    let nats = Nats::start_with_config(&config).await;
    let url = nats.url().replace("nats://", "nats://flue:flue@");
    let gateway = Gateway::start(&url, &[]).await;
    let warning = gateway
        .logs()
        .wait_for("the broker allows fewer consumers than --max-servers", WAIT)
        .await;
    assert!(warning.contains("limit=20"), "{warning}");

    let client = gateway.admin_client();
    let mut refused = None;
    for i in 0..25 {
        let registered = client
            .register_server(&RegisterServer {
                transport: Default::default(),
                id: ServerId::new(format!("s{i}")).expect("id"),
                name: String::new(),
            })
            .await;
        if let Err(e) = registered {
            refused = Some((i, e));
            break;
        }
    }
    let Some((
        20,
        ClientError::Api {
            status,
            code,
            message,
        },
    )) = refused
    else {
        panic!("not the 21st registration refused: {refused:?}");
    };
    assert_eq!(
        (status, code.as_str()),
        (507, "consumer_limit_reached"),
        "{message}"
    );
    assert!(message.contains("limit of 20"), "{message}");
}
