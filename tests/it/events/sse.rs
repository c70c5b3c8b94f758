//! Events: sse. `GET /v1/events` against a real broker, gateway and agent: resuming with
//! `Last-Event-ID` gives exactly the missed events, filters pass only matching events, a
//! replay ends, a listener behind the retention window is told so, bad queries are 400s,
//! and a client's consumer (on `FLUE_EVT`, named as the gateway's) goes when the client does.

use std::time::Duration;

use async_nats::jetstream;
use flue_proto::event::EVENT_STREAM;
use flue_proto::{CloudEvent, EventFilter, EventType};
use flue_tests::{EventTap, Flue, Sse, WAIT};
use serde_json::Value;

fn ids(events: &[(u64, CloudEvent)]) -> Vec<(u64, String)> {
    events.iter().map(|(s, e)| (*s, e.id.clone())).collect()
}

/// A broker, a gateway, and servers `web1`, `web2` with agents and a `hello` config.
async fn cluster() -> (Flue, Vec<flue_tests::Agent>) {
    let env = Flue::start().await;
    let mut agents = Vec::new();
    for s in ["web1", "web2"] {
        env.register(s).await;
        agents.push(env.agent(s, &[]).await);
    }
    env.script_config("hello", "#!/bin/sh\necho hello\n", &[], &[])
        .await;
    (env, agents)
}

/// Runs `hello` on `server` to its end; returns the deployment id.
async fn deploy(env: &Flue, server: &str) -> String {
    let d = env.deploy("hello", server, &[]).await;
    env.finished(&d.id).await;
    d.id.to_string()
}

fn completed(id: &str) -> impl Fn(&CloudEvent) -> bool + '_ {
    move |e| {
        e.ty == EventType::DeploymentCompleted
            && e.deployment.as_ref().is_some_and(|d| d.as_str() == id)
    }
}

#[tokio::test]
async fn resuming_with_last_event_id_gives_exactly_the_missed_events() {
    let (env, _agents) = cluster().await;
    let d1 = deploy(&env, "web1").await;
    let mut tap = EventTap::from_start(&env.nats.events_client().await).await;
    tap.wait_for("d1 completed", WAIT, completed(&d1)).await;

    // A browser-like client reads a few events, then its connection drops.
    let mut first = Sse::open(&env, "from=start", None).await;
    let mut before = Vec::new();
    while before.len() < 3 {
        before.push(first.event().await.expect("following never ends"));
    }
    assert!(first.raw.starts_with("retry: 2000\n"), "{:?}", first.raw);
    drop(first);

    let d2 = deploy(&env, "web2").await;
    tap.wait_for("d2 completed", WAIT, completed(&d2)).await;

    // It reconnects repeating its first URL; the header wins over `from=start`.
    let last = before.last().expect("three events").0;
    let mut again = Sse::open(&env, "from=start&follow=false", Some(last)).await;
    let after = again.rest().await;
    let newest = after.last().expect("events were missed").1.clone();
    tap.wait_for("the newest replayed event", WAIT, |e| e.id == newest.id)
        .await;
    let end = after.last().expect("non-empty").0;
    let expected: Vec<(u64, String)> = ids(tap.seen())
        .into_iter()
        .filter(|(s, _)| *s > last && *s <= end)
        .collect();
    assert_eq!(ids(&after), expected, "exactly the missed events, in order");
    assert!(
        after.iter().any(|(_, e)| completed(&d2)(e)),
        "the missed completion came"
    );
    let all: Vec<(u64, String)> = ids(&before).into_iter().chain(ids(&after)).collect();
    let mut unique = all.clone();
    unique.dedup_by_key(|(s, _)| *s);
    assert_eq!(unique, all, "none twice");
    assert_eq!(
        ids(&before),
        ids(&tap.seen()[..3]),
        "the first part was the stream's start"
    );

    // A client that resumes and follows gets new events live, each once.
    let mut live = Sse::open(&env, "", Some(end)).await;
    let d3 = deploy(&env, "web1").await;
    let mut got = Vec::new();
    while !got
        .iter()
        .any(|(_, e): &(u64, CloudEvent)| completed(&d3)(e))
    {
        got.push(live.event().await.expect("following"));
    }
    assert_eq!(
        got.first().expect("events").0,
        end + 1,
        "resumed right after the last one"
    );
    let seqs: Vec<u64> = got.iter().map(|(s, _)| *s).collect();
    assert!(
        seqs.windows(2).all(|w| w[0] + 1 == w[1]),
        "no gap, no repeat: {seqs:?}"
    );
}

#[tokio::test]
async fn filters_pass_only_matching_events() {
    let (env, _agents) = cluster().await;
    let d1 = deploy(&env, "web1").await;
    let d2 = deploy(&env, "web2").await;
    let mut tap = EventTap::from_start(&env.nats.events_client().await).await;
    tap.wait_for("d2 completed", WAIT, completed(&d2)).await;
    let everything = Sse::open(&env, "from=start&follow=false", None)
        .await
        .rest()
        .await;
    let newest = everything.last().expect("events").1.id.clone();
    tap.wait_for("the newest replayed event", WAIT, |e| e.id == newest)
        .await;
    // Same facts, same sequences: the replay is the stream.
    assert_eq!(ids(&everything), ids(&tap.seen()[..everything.len()]));

    let cases: [(&str, EventFilter); 5] = [
        (
            "type=deployment.completed",
            filter(&[EventType::DeploymentCompleted], None, None),
        ),
        ("server=web1", filter(&[], Some("server"), Some("web1"))),
        ("deployment=D1", filter(&[], Some("deployment"), Some(&d1))),
        (
            "type=io.flue.deployment.completed,deployment.started&server=web2",
            EventFilter {
                types: vec![EventType::DeploymentCompleted, EventType::DeploymentStarted],
                ..filter(&[], Some("server"), Some("web2"))
            },
        ),
        ("stack=nostack", filter(&[], Some("stack"), Some("nostack"))),
    ];
    for (query, filter) in cases {
        let query = query.replace("D1", &d1);
        let got = Sse::open(&env, &format!("{query}&from=start&follow=false"), None)
            .await
            .rest()
            .await;
        let want: Vec<(u64, CloudEvent)> = everything
            .iter()
            .filter(|(_, e)| filter.matches(e))
            .cloned()
            .collect();
        assert_eq!(ids(&got), ids(&want), "{query}");
        assert!(got.iter().all(|(_, e)| filter.matches(e)), "{query}");
    }
    // The filters do filter: the completions of both, only web1's, only d1's.
    let completions = everything
        .iter()
        .filter(|(_, e)| e.ty == EventType::DeploymentCompleted)
        .count();
    assert_eq!(completions, 2);
    let web1 = Sse::open(&env, "server=web1&from=start&follow=false", None)
        .await
        .rest()
        .await;
    assert!(
        web1.iter().any(|(_, e)| completed(&d1)(e)) && !web1.iter().any(|(_, e)| completed(&d2)(e))
    );
}

fn filter(types: &[EventType], field: Option<&str>, value: Option<&str>) -> EventFilter {
    let mut f = EventFilter {
        types: types.to_vec(),
        ..EventFilter::default()
    };
    match (field, value) {
        (Some("server"), Some(v)) => f.server = Some(v.parse().expect("id")),
        (Some("stack"), Some(v)) => f.stack = Some(v.parse().expect("id")),
        (Some("deployment"), Some(v)) => f.deployment = Some(v.parse().expect("id")),
        _ => {}
    }
    f
}

#[tokio::test]
async fn a_replay_ends_and_new_events_stream_live() {
    let (env, _agents) = cluster().await;
    let d1 = deploy(&env, "web1").await;
    // Nothing matches: the replay ends at once, after the opening block.
    let mut none = Sse::open(&env, "deployment=nothing&from=start&follow=false", None).await;
    assert!(none.rest().await.is_empty());
    assert!(none.raw.starts_with("retry: 2000\n"), "{:?}", none.raw);
    // Only new events by default.
    let mut live = Sse::open(&env, "type=deployment.completed", None).await;
    let d2 = deploy(&env, "web2").await;
    let (_, e) = live.event().await.expect("live event");
    assert!(
        completed(&d2)(&e),
        "the first is the new one, not d1 {d1}: {e:?}"
    );
}

#[tokio::test]
async fn a_listener_behind_the_retention_window_is_told_then_continues() {
    let (env, _agents) = cluster().await;
    let d1 = deploy(&env, "web1").await;
    let nats = env.nats.events_client().await;
    let mut tap = EventTap::from_start(&nats).await;
    tap.wait_for("d1 completed", WAIT, completed(&d1)).await;
    let mut stream = jetstream::new(nats.clone())
        .get_stream(EVENT_STREAM)
        .await
        .expect("stream");
    stream.purge().await.expect("purge the event stream");
    let oldest = stream.info().await.expect("info").state.first_sequence;
    let d2 = deploy(&env, "web2").await;
    tap.wait_for("d2 completed", WAIT, completed(&d2)).await;

    let mut sse = Sse::open(&env, "follow=false", Some(1)).await;
    let head = sse.block().await.expect("opening block");
    assert_eq!(head.retry.as_deref(), Some("2000"));
    let error = sse.block().await.expect("error block");
    assert_eq!(error.event.as_deref(), Some("flue-error"));
    let body: Value = serde_json::from_str(&error.data.expect("data")).expect("json");
    assert_eq!(body["code"], "too_far_behind", "{body}");
    assert_eq!(body["requested_after"], 1);
    assert_eq!(body["oldest_available"], oldest);
    assert!(
        body["message"]
            .as_str()
            .expect("message")
            .contains("no longer kept"),
        "{body}"
    );
    let rest = sse.rest().await;
    assert_eq!(
        rest.first().expect("events continue").0,
        oldest,
        "from the oldest kept"
    );
    assert!(rest.iter().any(|(_, e)| completed(&d2)(e)));
    assert!(
        !rest.iter().any(|(_, e)| completed(&d1)(e)),
        "purged events are gone"
    );
}

#[tokio::test]
async fn bad_queries_are_400_with_a_json_error_naming_the_parameter() {
    let env = Flue::start().await;
    let http = env.http();
    for (query, header, needle) in [
        ("type=deployment.done", None, "unknown event type"),
        ("server=a.b", None, "invalid server id"),
        ("stack=%20", None, "invalid stack id"),
        ("after=-3", None, "\"after\""),
        ("since=yesterday", None, "RFC 3339"),
        ("from=end", None, "\"from\""),
        ("follow=maybe", None, "\"follow\""),
        ("after=1&since=2025-01-01T00:00:00Z", None, "only one"),
        ("server_id=web1", None, "unknown query parameter"),
        ("", Some("not-a-number"), "Last-Event-ID"),
    ] {
        let mut request = http.get(format!("{}/v1/events?{query}", env.gateway.url()));
        if let Some(h) = header {
            request = request.header("Last-Event-ID", h);
        }
        let response = request.send().await.expect("request");
        assert_eq!(response.status(), 400, "{query}");
        let body: Value = response.json().await.expect("a JSON body");
        assert_eq!(body["error"]["code"], "invalid_query", "{query}: {body}");
        let message = body["error"]["message"].as_str().expect("message");
        assert!(message.contains(needle), "{query}: {message}");
    }
}

#[tokio::test]
async fn a_clients_consumer_goes_when_the_client_does() {
    let env = Flue::start().await;
    let js = jetstream::new(env.nats.events_client().await);
    // SSE consumers are on FLUE_EVT, named as the gateway's (`flue-sse-…`): never a
    // listener's, so never counted against the listeners' consumer limit.
    let count_named = |prefix: &'static str| {
        let js = js.clone();
        async move {
            let stream = js.get_stream(EVENT_STREAM).await.expect("stream");
            let mut names = stream.consumer_names();
            let mut n = 0;
            while let Some(name) = futures_util::StreamExt::next(&mut names).await {
                n += usize::from(name.expect("a name").starts_with(prefix));
            }
            n
        }
    };
    let count = || count_named("flue-sse-");
    let baseline = count().await;
    let listeners_baseline = count_named(flue_proto::subject::LISTENER_CONSUMER_PREFIX).await;
    let mut clients = Vec::new();
    for query in [
        "",
        "from=start",
        "type=server.online",
        "server=web9&after=0",
    ] {
        clients.push(Sse::open(&env, query, None).await);
    }
    // The consumer exists once the response has started, and is no listener's.
    assert_eq!(count().await, baseline + 4);
    assert_eq!(
        count_named(flue_proto::subject::LISTENER_CONSUMER_PREFIX).await,
        listeners_baseline
    );
    drop(clients);
    // Deleted when the connection closes, well before the broker's 30 s inactivity limit.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while count().await != baseline {
        assert!(
            tokio::time::Instant::now() < deadline,
            "consumers left behind: {}",
            count().await
        );
        tokio::time::sleep(Duration::from_millis(50)).await; // polling interval of a bounded wait
    }
    // A finished replay leaves nothing behind either.
    Sse::open(&env, "from=start&follow=false", None)
        .await
        .rest()
        .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while count().await != baseline {
        assert!(
            tokio::time::Instant::now() < deadline,
            "replay consumer left behind"
        );
        tokio::time::sleep(Duration::from_millis(50)).await; // polling interval of a bounded wait
    }
}
