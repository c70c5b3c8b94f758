//! `GET /metrics`: the OpenMetrics text a real gateway serves, read after real deployments,
//! agents and presence changes. Every figure is checked against what happened; the text
//! is checked line by line by the small reader below (each family once, every sample
//! under its family, `# EOF` last).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use flue_proto::auth::Role;
use flue_proto::{CloudEvent, CreateTenant, DeploymentStatus, EventType, TenantId};
use flue_tests::{EventTap, Flue, Tokens, WAIT};
use reqwest::StatusCode;

/// Heartbeats every second, so that agents' counters reach the gateway soon.
const FAST_AGENT: &[&str] = &["--heartbeat-secs", "1"];

/// One scrape, read: every sample by name and labels.
#[derive(Debug)]
struct Scrape {
    /// `name{labels}` (labels sorted) → value.
    samples: BTreeMap<String, f64>,
    /// Family names, from their `# TYPE` lines.
    families: BTreeSet<String>,
}

impl Scrape {
    /// The value of `name` with exactly `labels` (absent: 0, as for a counter never bumped).
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples.get(&key(name, labels)).copied().unwrap_or(0.0)
    }
}

fn key(name: &str, labels: &[(&str, &str)]) -> String {
    let mut labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    labels.sort();
    format!("{name}{{{}}}", labels.join(","))
}

/// Reads the OpenMetrics text `body`, panicking at the first line of a wrong shape.
fn parse(body: &str) -> Scrape {
    let mut samples = BTreeMap::new();
    let mut families = BTreeSet::new();
    let mut current: Option<(String, String)> = None;
    let lines: Vec<&str> = body.lines().collect();
    assert_eq!(lines.last(), Some(&"# EOF"), "the text ends with # EOF");
    assert!(body.ends_with("# EOF\n"), "one newline after # EOF");
    for line in &lines[..lines.len() - 1] {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest.split_once(' ').expect("# TYPE name type");
            assert!(
                ["counter", "gauge", "histogram"].contains(&ty),
                "type of {name}: {ty}"
            );
            assert!(families.insert(name.to_owned()), "family {name} twice");
            current = Some((name.to_owned(), ty.to_owned()));
            continue;
        }
        if let Some(rest) = line
            .strip_prefix("# HELP ")
            .or_else(|| line.strip_prefix("# UNIT "))
        {
            let name = rest.split(' ').next().expect("name");
            assert!(name.starts_with("flue_"), "{line}");
            continue;
        }
        assert!(!line.starts_with('#'), "unexpected comment: {line}");
        let (series, value) = line.rsplit_once(' ').expect("a sample is `series value`");
        let value: f64 = value.parse().expect("a sample's value is a number");
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => (name, rest.strip_suffix('}').expect("labels end with }")),
            None => (series, ""),
        };
        let (family, ty) = current.as_ref().expect("a sample after its # TYPE");
        let suffixes: &[&str] = match ty.as_str() {
            "counter" => &["_total"],
            "gauge" => &[""],
            _ => &["_bucket", "_sum", "_count"],
        };
        assert!(
            suffixes.iter().any(|s| name == format!("{family}{s}")),
            "{name} is not a sample of {family} ({ty})"
        );
        let mut pairs: Vec<(&str, &str)> = Vec::new();
        for pair in labels.split(',').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').expect("label=value");
            let v = v
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .expect("a quoted label value");
            pairs.push((k, v));
        }
        let key = key(name, &pairs);
        assert!(samples.insert(key.clone(), value).is_none(), "{key} twice");
    }
    Scrape { samples, families }
}

/// `GET /metrics` with `token` (none: no Authorization header).
async fn get(flue: &Flue, token: Option<&str>) -> reqwest::Response {
    let url = format!("{}/metrics", flue.gateway.url());
    let request = reqwest::Client::new().get(url);
    let request = match token {
        Some(t) => request.bearer_auth(t),
        None => request,
    };
    request.send().await.expect("GET /metrics")
}

/// A scrape as `role` of tenant `default` (the operator: of the whole gateway).
async fn scrape(flue: &Flue, role: Role) -> Scrape {
    let response = get(flue, Some(flue.gateway.tokens().get(role))).await;
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response.headers()[reqwest::header::CONTENT_TYPE]
        .to_str()
        .expect("ascii")
        .to_owned();
    assert_eq!(
        content_type,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    parse(&response.text().await.expect("body"))
}

/// Scrapes (as the operator) until `done` holds, for at most [`WAIT`].
async fn scrape_until(flue: &Flue, what: &str, done: impl Fn(&Scrape) -> bool) -> Scrape {
    let waiting = async {
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        loop {
            tick.tick().await;
            let s = scrape(flue, Role::Operator).await;
            if done(&s) {
                return s;
            }
        }
    };
    match tokio::time::timeout(WAIT, waiting).await {
        Ok(s) => s,
        Err(_) => panic!(
            "timed out waiting for {what}; last scrape: {:?}",
            scrape(flue, Role::Operator).await.samples
        ),
    }
}

const T: (&str, &str) = ("tenant", "default");

fn deployments(action: &str, status: &str) -> [(&'static str, String); 3] {
    [
        ("tenant", "default".to_owned()),
        ("action", action.to_owned()),
        ("status", status.to_owned()),
    ]
}

fn refs<'a>(labels: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    labels.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

#[tokio::test]
async fn deployments_are_counted_by_status_and_latency_and_agents_hooks_add_up() {
    let flue = Flue::start().await;
    flue.register("m1").await;
    let _agent = flue.agent_in("m1", "agent-m1", &[], FAST_AGENT).await;
    flue.script_config("ok", "#!/bin/sh\necho fine\n", &[], &[])
        .await;
    flue.script_config("bad", "#!/bin/sh\necho broken >&2\nexit 2\n", &[], &[])
        .await;
    let before = scrape(&flue, Role::Operator).await;
    assert!(before.families.contains("flue_deployments"), "{before:?}");
    assert_eq!(
        before.get(
            "flue_deployments_total",
            &refs(&deployments("CREATE", "QUEUED"))
        ),
        0.0
    );

    let mut ids = Vec::new();
    for config in ["ok", "ok", "bad"] {
        ids.push(flue.deploy(config, "m1", &[]).await.id);
    }
    let mut ended = Vec::new();
    for id in &ids {
        ended.push(flue.finished(id).await.status);
    }
    assert_eq!(
        ended,
        [
            DeploymentStatus::Complete,
            DeploymentStatus::Complete,
            DeploymentStatus::Failed
        ]
    );

    let count = |s: &Scrape, status: &str| {
        s.get(
            "flue_deployments_total",
            &refs(&deployments("CREATE", status)),
        )
    };
    let s = scrape_until(&flue, "two completed and one failed deployment", |s| {
        count(s, "COMPLETE") >= 2.0 && count(s, "FAILED") >= 1.0
    })
    .await;
    assert_eq!(count(&s, "QUEUED"), 3.0);
    assert_eq!(count(&s, "IN_PROGRESS"), 3.0);
    assert_eq!(count(&s, "COMPLETE"), 2.0);
    assert_eq!(count(&s, "FAILED"), 1.0);
    for (status, n) in [("COMPLETE", 2.0), ("FAILED", 1.0)] {
        let labels = deployments("CREATE", status);
        let hist_count = s.get("flue_deployment_duration_seconds_count", &refs(&labels));
        assert_eq!(hist_count, n, "{status}");
        let mut inf = refs(&labels);
        inf.push(("le", "+Inf"));
        assert_eq!(s.get("flue_deployment_duration_seconds_bucket", &inf), n);
        assert!(s.get("flue_deployment_duration_seconds_sum", &refs(&labels)) > 0.0);
    }
    // API requests by route template, never by the path asked for.
    let posts = [
        T,
        ("route", "/v1/deployments"),
        ("method", "POST"),
        ("class", "2xx"),
    ];
    assert_eq!(s.get("flue_http_requests_total", &posts), 3.0);
    let polls = [
        T,
        ("route", "/v1/deployments/{id}"),
        ("method", "GET"),
        ("class", "2xx"),
    ];
    assert!(s.get("flue_http_requests_total", &polls) >= 3.0, "{s:?}");
    // No series names a server or a deployment.
    for key in s.samples.keys() {
        assert!(
            !key.contains("m1") && !ids.iter().any(|id| key.contains(id.as_str())),
            "{key}"
        );
    }

    // The agent's own counters arrive with its heartbeats, added up per tenant.
    let hooks =
        |s: &Scrape, result: &str| s.get("flue_agent_hooks_total", &[T, ("result", result)]);
    let s = scrape_until(&flue, "the agent's hooks in its heartbeats", |s| {
        hooks(s, "complete") >= 2.0 && hooks(s, "failed") >= 1.0
    })
    .await;
    assert_eq!(hooks(&s, "complete"), 2.0);
    assert_eq!(hooks(&s, "failed"), 1.0);
    assert!(s.get("flue_agent_hook_seconds_total", &[T]) > 0.0);
    assert!(s.get("flue_agent_heartbeats_with_metrics_total", &[T]) >= 1.0);
    assert_eq!(s.get("flue_agent_requests_rejected_total", &[T]), 0.0);
}

#[tokio::test]
async fn agent_totals_never_go_backwards_when_the_agent_restarts() {
    let flue = Flue::start().await;
    flue.register("r1").await;
    flue.script_config("ok", "#!/bin/sh\necho fine\n", &[], &[])
        .await;
    let hooks = |s: &Scrape| s.get("flue_agent_hooks_total", &[T, ("result", "complete")]);

    let mut agent = flue.agent_in("r1", "agent-r1", &[], FAST_AGENT).await;
    let d = flue.deploy("ok", "r1", &[]).await;
    assert_eq!(
        flue.finished(&d.id).await.status,
        DeploymentStatus::Complete
    );
    scrape_until(&flue, "the first instance's hook", |s| hooks(s) >= 1.0).await;
    assert!(agent.terminate().await.success());

    // The same state dir: a new instance, whose own count starts from zero again.
    let _agent = flue.agent_in("r1", "agent-r1", &[], FAST_AGENT).await;
    let d = flue.deploy("ok", "r1", &[]).await;
    assert_eq!(
        flue.finished(&d.id).await.status,
        DeploymentStatus::Complete
    );
    let s = scrape_until(&flue, "the second instance's hook", |s| hooks(s) >= 2.0).await;
    assert_eq!(hooks(&s), 2.0);
}

#[tokio::test]
async fn presence_counts_follow_an_agent_killed() {
    let flue = Flue::start_with(&["--presence-timeout-secs", "3"]).await;
    flue.register("p1").await;
    flue.register("p2").await;
    let mut tap = EventTap::from_start(&flue.nats.events_client().await).await;
    let mut p1 = flue.agent_in("p1", "agent-p1", &[], FAST_AGENT).await;
    let _p2 = flue.agent_in("p2", "agent-p2", &[], FAST_AGENT).await;
    let presence = |s: &Scrape, p: &str| s.get("flue_servers", &[T, ("presence", p)]);
    scrape_until(&flue, "both servers online", |s| {
        presence(s, "online") == 2.0
    })
    .await;

    p1.kill9().await;
    tap.wait_for("p1 offline", WAIT, |e: &CloudEvent| {
        e.ty == EventType::ServerOffline && e.server.as_ref().is_some_and(|s| s.as_str() == "p1")
    })
    .await;
    let s = scrape(&flue, Role::Operator).await;
    assert_eq!(presence(&s, "online"), 1.0);
    assert_eq!(presence(&s, "offline"), 1.0);
    assert_eq!(presence(&s, "unknown"), 0.0);
}

#[tokio::test]
async fn the_series_do_not_grow_with_the_number_of_servers() {
    let flue = Flue::start().await;
    flue.register("n0").await;
    let one = scrape(&flue, Role::Operator).await;
    for n in 1..30 {
        flue.register(&format!("n{n}")).await;
    }
    let thirty = scrape(&flue, Role::Operator).await;
    eprintln!(
        "one tenant, 30 servers: {} samples in {} families",
        thirty.samples.len(),
        thirty.families.len()
    );
    assert_eq!(
        one.samples.keys().collect::<Vec<_>>(),
        thirty.samples.keys().collect::<Vec<_>>(),
        "the same series with 1 and 30 servers"
    );
    // Registered here, never heard from: unknown.
    assert_eq!(
        thirty.get("flue_servers", &[T, ("presence", "unknown")]),
        30.0
    );
    assert_eq!(one.get("flue_servers", &[T, ("presence", "unknown")]), 1.0);
}

#[tokio::test]
async fn metrics_need_a_token_of_a_reading_role_and_a_tenant_sees_only_itself() {
    let flue = Flue::start().await;
    let response = get(&flue, None).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let body: serde_json::Value = response.json().await.expect("a JSON error body");
    assert_eq!(body["error"]["code"], "unauthorized", "{body}");
    let response = get(&flue, Some("not-a-token")).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    for role in [Role::Engine, Role::Listener] {
        let response = get(&flue, Some(flue.gateway.tokens().get(role))).await;
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{role}");
    }

    // A second tenant: the operator sees both, each tenant's admin or viewer only itself.
    let acme = TenantId::new("acme").expect("id");
    flue.gateway
        .client_as(Role::Operator)
        .create_tenant(&CreateTenant {
            id: acme.clone(),
            name: "Acme".to_owned(),
        })
        .await
        .expect("the operator creates a tenant");
    let tenants_in = |s: &Scrape| -> BTreeSet<String> {
        s.samples
            .keys()
            .filter_map(|k| k.split("tenant=\"").nth(1))
            .filter_map(|rest| rest.split('"').next())
            .map(str::to_owned)
            .collect()
    };
    let all = scrape(&flue, Role::Operator).await;
    assert_eq!(
        tenants_in(&all),
        ["acme", "default"].map(String::from).into()
    );
    for role in [Role::Admin, Role::Viewer] {
        let own = scrape(&flue, role).await;
        assert_eq!(
            tenants_in(&own),
            ["default"].map(String::from).into(),
            "{role}"
        );
        // The same families, each once, whichever tenants are shown.
        assert_eq!(own.families, all.families);
    }
    let acme_tokens = Tokens::for_tenant(&flue.gateway.state_dir(), &acme);
    let response = get(&flue, Some(acme_tokens.get(Role::Viewer))).await;
    assert_eq!(response.status(), StatusCode::OK);
    let acme_only = parse(&response.text().await.expect("body"));
    assert_eq!(tenants_in(&acme_only), ["acme"].map(String::from).into());
}

#[tokio::test]
async fn webhook_failures_parking_and_deliveries_are_counted() {
    use crate::events::webhooks::receiver::{Mode, Receiver};

    let flags = [
        "--webhook-allow",
        "127.0.0.1/32",
        "--webhook-max-attempts",
        "3",
        "--webhook-backoff-ms",
        "50",
    ];
    let flue = Flue::start_with(&flags).await;
    flue.register("w1").await;
    let _agent = flue.agent("w1", &[]).await;
    flue.script_config("c1", "#!/bin/sh\necho hello\n", &[], &[])
        .await;
    let receiver = Receiver::start(Mode::Fail).await;
    let created = flue
        .http()
        .post(format!("{}/v1/webhooks", flue.gateway.url()))
        .json(&serde_json::json!({
            "url": receiver.url,
            "secret": "whsec_Zmx1ZS13ZWJob29rLXRlc3Qta2V5LTAxMjM0NTY3ODk=",
            "filter": {"types": ["deployment.queued", "deployment.completed"], "server": "w1"},
        }))
        .send()
        .await
        .expect("POST /v1/webhooks");
    assert_eq!(created.status(), StatusCode::CREATED);
    let webhook: serde_json::Value = created.json().await.expect("webhook");
    let id = webhook["id"].as_str().expect("id").to_owned();

    let d = flue.deploy("c1", "w1", &[]).await;
    flue.finished(&d.id).await;
    let counter = |s: &Scrape, name: &str| s.get(name, &[T]);
    let s = scrape_until(&flue, "the webhook parked", |s| {
        counter(s, "flue_webhooks_parked_total") >= 1.0
    })
    .await;
    assert_eq!(counter(&s, "flue_webhooks_parked_total"), 1.0);
    assert_eq!(
        counter(&s, "flue_webhook_failures_total"),
        3.0,
        "three attempts"
    );
    assert_eq!(counter(&s, "flue_webhook_deliveries_total"), 0.0);

    receiver.set_mode(Mode::Ok);
    let resumed = flue
        .http()
        .post(format!("{}/v1/webhooks/{id}/resume", flue.gateway.url()))
        .send()
        .await
        .expect("resume");
    assert_eq!(resumed.status(), StatusCode::OK);
    receiver
        .wait_delivered(&format!("deployment:{}:completed", d.id))
        .await;
    let delivered = receiver.delivered().len() as f64;
    let s = scrape_until(&flue, "the deliveries counted", |s| {
        counter(s, "flue_webhook_deliveries_total") >= delivered
    })
    .await;
    assert_eq!(counter(&s, "flue_webhook_deliveries_total"), delivered);
    assert_eq!(counter(&s, "flue_webhook_failures_total"), 3.0);
}

#[tokio::test]
async fn open_event_streams_and_long_polls_are_gauged() {
    let flue = Flue::start().await;
    let gauge = |s: &Scrape, name: &str| s.get(name, &[T]);
    assert_eq!(
        gauge(&scrape(&flue, Role::Operator).await, "flue_sse_connections"),
        0.0
    );

    let stream = flue
        .http()
        .get(format!("{}/v1/events", flue.gateway.url()))
        .send()
        .await
        .expect("GET /v1/events");
    assert_eq!(stream.status(), StatusCode::OK);
    scrape_until(&flue, "one event stream open", |s| {
        gauge(s, "flue_sse_connections") == 1.0
    })
    .await;
    drop(stream);
    scrape_until(&flue, "no event stream open", |s| {
        gauge(s, "flue_sse_connections") == 0.0
    })
    .await;

    // A deployment no agent takes stays QUEUED: a long poll on it waits.
    flue.register("l1").await;
    flue.script_config("c1", "#!/bin/sh\n", &[], &[]).await;
    let d = flue.deploy("c1", "l1", &[]).await;
    let poll = flue
        .http()
        .get(format!(
            "{}/v1/deployments/{}?wait_secs=60&after_status=QUEUED",
            flue.gateway.url(),
            d.id
        ))
        .send();
    let waiting = tokio::spawn(poll);
    scrape_until(&flue, "one long poll waiting", |s| {
        gauge(s, "flue_long_polls") == 1.0
    })
    .await;
    waiting.abort();
}

#[tokio::test]
async fn engine_operations_are_counted_by_kind_and_result() {
    use flue_proto::operation::OperationState;

    let flue = Flue::start().await;
    flue.register("web1").await;
    let _web1 = flue.agent("web1", &[]).await;
    let log = flue.path("hooks.log");
    let body = crate::operations::group_body("create", 1, &log);
    let created = crate::operations::accepted(&flue.gateway, "farm", &body).await;
    let done = crate::operations::ended(&flue.gateway, "farm", &created.id).await;
    assert_eq!(done.state, OperationState::Succeeded, "{done:?}");

    let ops = |s: &Scrape, result: &str| {
        s.get(
            "flue_engine_operations_total",
            &[T, ("kind", "create"), ("result", result)],
        )
    };
    let s = scrape_until(&flue, "the operation counted", |s| {
        ops(s, "succeeded") >= 1.0
    })
    .await;
    assert_eq!(ops(&s, "succeeded"), 1.0);
    assert_eq!(ops(&s, "failed"), 0.0);
    assert_eq!(s.get("flue_engine_operations_running", &[T]), 0.0);
}

/// Requests waiting on servers without an agent: three on one, one on another. The
/// sample (every 15 s) shows them as a histogram of queue lengths, never per server.
#[tokio::test]
async fn pending_requests_per_server_are_a_histogram_of_queue_lengths() {
    let flue = Flue::start().await;
    flue.register("busy").await;
    flue.register("quiet").await;
    flue.script_config("noop", "#!/bin/sh\ntrue\n", &[], &[])
        .await;
    for _ in 0..3 {
        flue.deploy("noop", "busy", &[]).await;
    }
    flue.deploy("noop", "quiet", &[]).await;
    let pending = |bucket: &str| ("pending", bucket.to_owned());
    let s = scrape_until(&flue, "the pending sample", |s| {
        s.get("flue_pending_requests", &[T]) == 4.0
    })
    .await;
    assert_eq!(s.get("flue_pending_requests_longest", &[T]), 3.0);
    for (bucket, servers) in [("1", 1.0), ("2-5", 1.0), ("6-20", 0.0), ("101+", 0.0)] {
        let label = pending(bucket);
        assert_eq!(
            s.get(
                "flue_servers_with_pending_requests",
                &[T, (label.0, label.1.as_str())]
            ),
            servers,
            "{bucket}"
        );
    }
    assert!(
        s.samples
            .keys()
            .all(|k| !k.contains("busy") && !k.contains("quiet")),
        "a series names a server"
    );
}

/// `GET /metrics` as the operator with `Accept: accept`.
async fn get_accepting(flue: &Flue, accept: &str) -> reqwest::Response {
    reqwest::Client::new()
        .get(format!("{}/metrics", flue.gateway.url()))
        .bearer_auth(flue.gateway.tokens().get(Role::Operator))
        .header(reqwest::header::ACCEPT, accept)
        .send()
        .await
        .expect("GET /metrics")
}

/// Runs `tests/it/metrics_classic_check.py` (the Prometheus Python client's parser, made
/// strict) on `text`; its report of the families, or its complaint.
fn classic_check(text: &str) -> Result<String, String> {
    use std::io::Write as _;
    let python = flue_tests::repo_root().join(".venv/bin/python");
    let script = flue_tests::repo_root().join("tests/it/metrics_classic_check.py");
    let mut child = std::process::Command::new(&python)
        .arg(script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{} does not start: {e}", python.display()));
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("text to the checker");
    let out = child.wait_with_output().expect("the checker ends");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[tokio::test]
async fn asked_for_text_plain_metrics_answer_the_classic_format_a_strict_parser_accepts() {
    let flue = Flue::start().await;
    flue.register("m1").await;
    let _agent = flue.agent("m1", &[]).await;
    flue.script_config("ok", "#!/bin/sh\necho fine\n", &[], &[])
        .await;
    let d = flue.deploy("ok", "m1", &[]).await;
    assert_eq!(
        flue.finished(&d.id).await.status,
        DeploymentStatus::Complete
    );
    // The latency histogram has a series once the deployment's end was counted.
    scrape_until(&flue, "the deployment's latency", |s| {
        s.get(
            "flue_deployment_duration_seconds_count",
            &refs(&deployments("CREATE", "COMPLETE")),
        ) == 1.0
    })
    .await;

    // What the default answer (OpenMetrics) is, the classic check refuses.
    let openmetrics = get_accepting(&flue, "application/openmetrics-text").await;
    let openmetrics = openmetrics.text().await.expect("body");
    let refused = classic_check(&openmetrics).expect_err("OpenMetrics is not classic text");
    assert!(refused.contains("flue_deployments_total"), "{refused}");

    for accept in ["text/plain;version=0.0.4", "text/plain"] {
        let response = get_accepting(&flue, accept).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            response.headers()[reqwest::header::CONTENT_TYPE],
            "text/plain; version=0.0.4; charset=utf-8",
            "{accept}"
        );
        let text = response.text().await.expect("body");
        let families = classic_check(&text).unwrap_or_else(|e| panic!("{accept}: {e}\n{text}"));
        for family in [
            "flue_deployments counter",
            "flue_deployment_duration_seconds histogram",
            "flue_servers gauge",
        ] {
            assert!(families.contains(family), "{family} missing in\n{families}");
        }
        assert!(
            text.lines().any(|l| l
                == "flue_deployments_total{tenant=\"default\",action=\"CREATE\",status=\"COMPLETE\"} 1"),
            "{text}"
        );
    }
}

#[tokio::test]
async fn a_check_that_finds_drift_is_counted_as_drifted_not_failed() {
    let flue = Flue::start().await;
    flue.register("m1").await;
    let _agent = flue.agent("m1", &[]).await;
    let spec: flue_proto::ConfigSpec = serde_json::from_value(serde_json::json!({
        "id": "checked",
        "group": "script",
        "config": "#!/bin/sh\necho applied\n",
        "hooks": {"CHECK": "#!/bin/sh\necho 'changed since applied' >&2\nexit 4\n"},
    }))
    .expect("config spec");
    flue.client().create_config(&spec).await.expect("config");
    let applied = flue.deploy("checked", "m1", &[]).await.id;
    assert_eq!(
        flue.finished(&applied).await.status,
        DeploymentStatus::Complete
    );
    let check = flue
        .client()
        .create_deployment(&flue_proto::CreateDeployment {
            action: flue_proto::Action::new(flue_proto::CHECK_ACTION).expect("action"),
            inputs_from: Some(applied),
            ..flue_proto::CreateDeployment::new(
                "checked".parse().expect("id"),
                "m1".parse().expect("id"),
            )
        })
        .await
        .expect("check")
        .id;
    assert_eq!(flue.finished(&check).await.status, DeploymentStatus::Failed);

    let count = |s: &Scrape, status: &str| {
        s.get(
            "flue_deployments_total",
            &refs(&deployments("CHECK", status)),
        )
    };
    let s = scrape_until(&flue, "the check's end counted", |s| {
        count(s, "DRIFTED") + count(s, "FAILED") >= 1.0
    })
    .await;
    assert_eq!(
        (count(&s, "DRIFTED"), count(&s, "FAILED")),
        (1.0, 0.0),
        "drift found is no failure"
    );
    let latency = s.get(
        "flue_deployment_duration_seconds_count",
        &refs(&deployments("CHECK", "DRIFTED")),
    );
    assert_eq!(latency, 1.0);
    assert_eq!(
        s.get(
            "flue_deployments_total",
            &refs(&deployments("CREATE", "FAILED"))
        ),
        0.0
    );
}
