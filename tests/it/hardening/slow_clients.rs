//! Slow and oversized clients cannot hold the gateway: early 413, header and body read
//! timeouts, and a bound on open connections — over real sockets.

use std::time::Duration;

use flue_tests::{Flue, WAIT};

use tokio::net::TcpStream;

use flue_proto::auth::Role;

use super::raw::{Answer, answer, closed_within, connect, send, try_answer};

/// Bound for what must happen "at once" (no timeout involved), generous for busy machines.
const AT_ONCE: Duration = Duration::from_secs(5);

#[tokio::test]
async fn a_declared_body_over_the_limit_is_refused_413_before_it_is_sent() {
    let flue = Flue::start().await;
    let mut s = connect(flue.gateway.url()).await;
    send(
        &mut s,
        &format!(
            "POST /v1/configs HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\nContent-Length: 2000000\r\n\r\n",
            flue.gateway.tokens().get(Role::Engine)
        ),
    )
    .await;
    let a = answer(&mut s, AT_ONCE).await;
    assert_eq!(a.status, 413, "{a:?}");
    assert!(a.head.contains("content-type: application/json"), "{a:?}");
    assert_eq!(a.body["error"]["code"], "body_too_large", "{a:?}");
    assert!(
        a.body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("1048576")),
        "{a:?}"
    );
    assert!(
        closed_within(&mut s, WAIT).await,
        "the connection stays open for the refused body"
    );
}

#[tokio::test]
async fn partial_headers_and_idle_connections_are_closed_after_the_header_timeout() {
    let flue = Flue::start_with(&["--header-timeout-ms", "500"]).await;
    let mut partial = connect(flue.gateway.url()).await;
    send(&mut partial, "GET /livez HTTP/1.1\r\nHost: gw\r\n").await;
    let mut idle = connect(flue.gateway.url()).await;
    assert!(
        closed_within(&mut partial, WAIT).await,
        "a connection with half its headers is held"
    );
    assert!(
        closed_within(&mut idle, WAIT).await,
        "a connection that sends nothing is held"
    );
}

#[tokio::test]
async fn a_stalled_body_is_answered_408_after_the_body_timeout() {
    let flue = Flue::start_with(&["--body-timeout-ms", "500"]).await;
    let mut s = connect(flue.gateway.url()).await;
    send(
        &mut s,
        &format!(
            "POST /v1/configs HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"id\":",
            flue.gateway.tokens().get(Role::Engine)
        ),
    )
    .await;
    let a = answer(&mut s, WAIT).await;
    assert_eq!(a.status, 408, "{a:?}");
    assert_eq!(a.body["error"]["code"], "request_timeout", "{a:?}");
    assert!(closed_within(&mut s, WAIT).await, "closed after the 408");
}

#[tokio::test]
async fn the_connection_over_the_limit_is_closed_and_a_freed_slot_serves_again() {
    let flue = Flue::start_with(&["--max-connections", "3", "--header-timeout-ms", "60000"]).await;
    flue.script_config("c", "#!/bin/sh\n", &[], &[]).await;
    flue.register("nobody").await;
    let queued = flue.deploy("c", "nobody", &[]).await;
    let base = flue.gateway.url().to_owned();

    // Two connections held by long polls, one by a kept-alive client.
    let mut polls = Vec::new();
    for _ in 0..2 {
        let mut s = connect(&base).await;
        let path = format!("/v1/deployments/{}?wait_secs=60", queued.id);
        let token = flue.gateway.tokens().get(Role::Viewer);
        send(
            &mut s,
            &format!("GET {path} HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {token}\r\n\r\n"),
        )
        .await;
        polls.push(s);
    }
    // Until the two polls are counted, and until the third connection is answered: an
    // earlier connection the gateway has not yet seen closed may hold its slot a moment.
    let idle = served_within(&base, |a| a.body["long_polls"] == 2, WAIT).await;

    let mut over = connect(&base).await;
    assert!(
        closed_within(&mut over, AT_ONCE).await,
        "the fourth connection is served"
    );
    assert!(
        !closed_within(&mut polls[0], Duration::from_millis(200)).await,
        "a long poll within the limit was cut"
    );

    drop(idle);
    // The gateway sees the close and frees the slot; a normal request then works.
    let _again = served_within(&base, |a| a.body["long_polls"] == 2, WAIT).await;
}

/// A connection on which `GET /livez` was answered 200 with a body `check` accepts
/// (kept alive), trying again for at most `limit` while connections are refused.
async fn served_within(base: &str, check: impl Fn(&Answer) -> bool, limit: Duration) -> TcpStream {
    let fut = async {
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        loop {
            tick.tick().await;
            let mut s = connect(base).await;
            send(&mut s, "GET /livez HTTP/1.1\r\nHost: gw\r\n\r\n").await;
            if let Some(a) = try_answer(&mut s, AT_ONCE).await
                && a.status == 200
                && check(&a)
            {
                return s;
            }
        }
    };
    tokio::time::timeout(limit, fut)
        .await
        .unwrap_or_else(|_| panic!("no connection served within {limit:?}"))
}
