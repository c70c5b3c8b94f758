//! Events: the web dashboard in headless Chromium, live from the SSE stream, and
//! `GET /v1/deployments`, which it reads first.

use std::collections::HashMap;
use std::time::Instant;

use flue_proto::auth::Role;
use flue_proto::{CreateDeployment, Deployment, DeploymentId};
use flue_tests::{Browser, Flue, Page, WAIT, chromium_bin, wait_until};
use serde_json::Value;

/// What the hook prints: a plain line, and one a page that parsed HTML would run.
const HELLO: &str = "hello from the dashboard hook";
const MARKUP: &str = "<img src=x onerror=\"window.__xss=1\"><b>not bold</b>";

async fn deploy_named(flue: &Flue, config: &str, server: &str, name: &str) -> Deployment {
    flue.client()
        .create_deployment(&CreateDeployment {
            name: Some(name.to_owned()),
            ..CreateDeployment::new(
                config.parse().expect("config id"),
                server.parse().expect("server id"),
            )
        })
        .await
        .expect("create deployment")
}

/// Opens the dashboard and signs in with a viewer token, as a person would.
async fn open_signed_in<'b>(browser: &'b mut Browser, flue: &Flue) -> Page<'b> {
    let mut page = browser.open(flue.gateway.url()).await;
    sign_in(&mut page, flue.gateway.tokens().get(Role::Viewer)).await;
    page
}

/// Waits for the sign-in form and submits `token` in it.
pub(crate) async fn sign_in(page: &mut Page<'_>, token: &str) {
    page.wait_for(
        "the sign-in form",
        WAIT,
        "document.body.dataset.auth === 'login'",
    )
    .await;
    let token = serde_json::to_string(token).expect("json string");
    page.eval(&format!(
        "document.getElementById('login-token').value = {token}; \
         document.getElementById('login').requestSubmit(); true"
    ))
    .await;
}

/// `document.querySelector(...)` of a deployment's row, as JavaScript.
fn row(id: &DeploymentId) -> String {
    format!("document.querySelector('tr[data-deployment-id=\"{id}\"]')")
}

fn chromium_processes() -> usize {
    let out = std::process::Command::new("pgrep")
        .args(["-c", "chromium"])
        .output()
        .expect("run pgrep");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

#[tokio::test]
async fn dashboard_shows_a_new_deployment_complete_live_and_is_not_blank() {
    let started = Instant::now();
    chromium_bin(); // fails at once, saying how to install it, when there is none
    let chromium_before = chromium_processes();
    let flue = Flue::start().await;
    flue.register("web1").await;
    let _agent = flue.agent("web1", &[]).await;
    flue.script_config(
        "hello",
        &format!("#!/bin/sh\necho '{HELLO}'\necho '{MARKUP}'\necho 'a warning' >&2\n"),
        &[],
        &[],
    )
    .await;
    flue.script_config(
        "broken",
        "#!/bin/sh\necho 'disk full' >&2\nexit 3\n",
        &[],
        &[],
    )
    .await;
    // A server without an agent, and deployments from before the page opens: they come
    // from GET /v1/servers and GET /v1/deployments.
    flue.register("db1").await;
    let failed = flue.deploy("broken", "web1", &[]).await;
    flue.finished(&failed.id).await;
    let earlier = flue.deploy("hello", "web1", &[]).await;
    flue.finished(&earlier.id).await;

    let mut browser = Browser::launch().await;
    let mut page = open_signed_in(&mut browser, &flue).await;
    page.wait_for(
        "the page's first read and a live event stream",
        WAIT,
        &format!(
            "document.body.dataset.loaded === 'true' \
             && document.getElementById('connection').dataset.state === 'live' \
             && {row}?.querySelector('td.state')?.textContent === 'COMPLETE'",
            row = row(&earlier.id)
        ),
    )
    .await;
    let failed_row = page
        .eval(&format!(
            "[{r}.querySelector('td.state').textContent, {r}.querySelector('td.detail').textContent]",
            r = row(&failed.id)
        ))
        .await;
    let failed_row: (String, String) = serde_json::from_value(failed_row).expect("state, detail");
    assert_eq!(failed_row.0, "FAILED");
    assert!(
        failed_row.1.contains('3'),
        "the failure reason: {failed_row:?}"
    );
    assert_eq!(
        page.eval("document.querySelector('tr[data-server-id=\"db1\"] .presence').dataset.status")
            .await,
        Value::from("unknown"),
        "no agent ever ran for db1"
    );
    assert_eq!(page.eval("window.__marker = 1").await, Value::from(1));

    let name = "<i>web</i> & co";
    let d = deploy_named(&flue, "hello", "web1", name).await;
    page.wait_for(
        "the new deployment's row to show COMPLETE",
        WAIT,
        &format!(
            "{}?.querySelector('td.state')?.textContent === 'COMPLETE'",
            row(&d.id)
        ),
    )
    .await;
    assert_eq!(
        page.eval("window.__marker").await,
        Value::from(1),
        "the page was reloaded"
    );
    // Newest first, and its name shown as text, not markup.
    let first = page
        .eval("document.querySelector('tr[data-deployment-id]').dataset.deploymentId")
        .await;
    assert_eq!(first, Value::from(d.id.to_string()));
    // The name is not in the events: it comes from reading the deployment, which the
    // page does shortly after first seeing it (possibly after it completed).
    let name_cell = page
        .wait_for(
            "the deployment's name, read after its events",
            WAIT,
            &format!(
                "{r}.querySelector('td.name .label.id') === null \
                 && [{r}.querySelector('td.name .label').textContent, {r}.querySelector('td.name i') === null]",
                r = row(&d.id)
            ),
        )
        .await;
    assert_eq!(name_cell, serde_json::json!([name, true]));

    // Its output as the hook printed it, line by line, from progress events.
    let lines = page
        .wait_for(
            "the hook's lines in the deployment's output panel",
            WAIT,
            &format!(
                "(() => {{ const l = [...document.querySelectorAll('pre[data-output-for=\"{}\"] .line')]; \
                  return l.some(e => e.textContent.includes('{HELLO}')) \
                    && l.map(e => [e.dataset.source, e.dataset.stream, e.textContent.trimEnd()]); }})()",
                d.id
            ),
        )
        .await;
    let lines: Vec<(String, String, String)> =
        serde_json::from_value(lines).expect("lines as [source, stream, text]");
    let sources: Vec<&str> = lines.iter().map(|(s, _, _)| s.as_str()).collect();
    assert!(
        sources.iter().all(|s| *s == "progress"),
        "the output should come live from progress events, not from the final result: {lines:?}"
    );
    let text: Vec<(&str, &str)> = lines
        .iter()
        .map(|(_, stream, text)| (stream.as_str(), text.as_str()))
        .collect();
    assert!(text.contains(&("stdout", HELLO)), "{lines:?}");
    assert!(text.contains(&("stdout", MARKUP)), "{lines:?}");
    assert!(text.contains(&("stderr", "a warning")), "{lines:?}");
    assert_eq!(
        page.eval("[window.__xss === undefined, document.querySelector('pre.output img, pre.output b') === null]")
            .await,
        serde_json::json!([true, true]),
        "event text was parsed as HTML"
    );

    // The server, online from its agent's heartbeats; the feed, newest first.
    page.wait_for(
        "web1 to show online",
        WAIT,
        "document.querySelector('tr[data-server-id=\"web1\"] .presence')?.dataset.status === 'online'",
    )
    .await;
    let feed = page
        .eval("[...document.querySelectorAll('#feed .event')].map(e => [e.dataset.type, e.querySelector('.subject').textContent])")
        .await;
    let feed: Vec<(String, String)> = serde_json::from_value(feed).expect("feed items");
    let position = |ty: &str| {
        feed.iter()
            .position(|(t, s)| t == ty && *s == d.id.to_string())
            .unwrap_or_else(|| panic!("no {ty} of {} in the feed: {feed:?}", d.id))
    };
    assert!(position("deployment.completed") < position("deployment.queued"));

    assert_eq!(
        page.eval("document.getElementById('banner').hidden").await,
        Value::from(true),
        "the page reported a problem: {}",
        page.eval("document.getElementById('banner').textContent")
            .await
    );

    let png = page.save_screenshot(&flue.path("dashboard.png")).await;
    // To look at it: FLUE_SCREENSHOT_DIR=/some/dir keeps a copy (the temp dir goes away).
    if let Some(dir) = std::env::var_os("FLUE_SCREENSHOT_DIR") {
        std::fs::write(std::path::Path::new(&dir).join("dashboard.png"), &png)
            .expect("keep the screenshot");
    }
    check_not_blank(&png);
    eprintln!(
        "dashboard screenshot: {} ({} bytes); test ran {:?}",
        flue.path("dashboard.png").display(),
        png.len(),
        started.elapsed()
    );

    drop(browser);
    wait_until("chromium's processes to be gone", WAIT, || {
        (chromium_processes() <= chromium_before).then_some(())
    })
    .await;
}

/// A blank page is one colour; the dashboard has a dark bar, panels, badges and text.
pub(crate) fn check_not_blank(png: &[u8]) {
    let mut decoder = png::Decoder::new(std::io::Cursor::new(png));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size().expect("image size")];
    let frame = reader.next_frame(&mut buf).expect("decode the screenshot");
    let channels = frame.color_type.samples();
    assert!(channels >= 3, "screenshot is {:?}", frame.color_type);
    let mut colours: HashMap<[u8; 3], usize> = HashMap::new();
    for px in buf[..frame.buffer_size()].chunks_exact(channels) {
        *colours.entry([px[0], px[1], px[2]]).or_default() += 1;
    }
    let total = (frame.width * frame.height) as usize;
    let background = colours.values().copied().max().unwrap_or(0);
    let other = total - background;
    assert!(
        (frame.width, frame.height) == (1280, 900),
        "screenshot is {}×{}",
        frame.width,
        frame.height
    );
    assert!(
        other * 100 >= total * 10,
        "only {other} of {total} pixels differ from the background: a blank page?"
    );
    assert!(
        colours.len() >= 64,
        "only {} distinct colours: a blank page?",
        colours.len()
    );
}

#[tokio::test]
async fn dashboard_reconnects_by_itself_and_says_when_events_were_missed() {
    chromium_bin();
    let mut flue = Flue::start().await;
    flue.register("web1").await;
    let _agent = flue.agent("web1", &[]).await;
    flue.script_config("hello", &format!("#!/bin/sh\necho '{HELLO}'\n"), &[], &[])
        .await;
    let mut browser = Browser::launch().await;
    let mut page = open_signed_in(&mut browser, &flue).await;
    let live = "document.getElementById('connection').dataset.state === 'live'";
    page.wait_for("a live page", WAIT, live).await;
    let before = flue.deploy("hello", "web1", &[]).await;
    page.wait_for(
        "the first deployment COMPLETE",
        WAIT,
        &format!(
            "{}?.querySelector('td.state')?.textContent === 'COMPLETE'",
            row(&before.id)
        ),
    )
    .await;
    page.eval("window.__marker = 1").await;

    // The gateway goes away; meanwhile an event the page never saw is stored and then
    // dropped from the stream, as retention would drop it.
    flue.gateway.kill().await;
    page.wait_for("the page to notice", WAIT, &format!("!({live})"))
        .await;
    let nats = flue.nats.events_client().await;
    let js = async_nats::jetstream::new(nats);
    js.publish("flue.default.evt.server.~.web1.online", "{}".into())
        .await
        .expect("publish")
        .await
        .expect("stored");
    js.get_stream("FLUE_EVT")
        .await
        .expect("the event stream")
        .purge()
        .await
        .expect("purge");
    // A gateway again at the same address, where the browser keeps reconnecting.
    let port = flue
        .gateway
        .url()
        .rsplit(':')
        .next()
        .expect("port")
        .to_owned();
    let mut gateway = tokio::process::Command::new(flue_tests::bin("flue-gateway"))
        .args([
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--nats-url",
            &flue.nats.url(),
            "--state-dir",
            &flue.gateway.state_dir().display().to_string(),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn flue-gateway");
    let stdout = flue_tests::Logs::default();
    stdout.capture(gateway.stdout.take().expect("stdout"));
    stdout.wait_for("flue-gateway listening on", WAIT).await;

    page.wait_for(
        "the missed-events banner",
        WAIT,
        "document.getElementById('banner').dataset.code === 'too_far_behind'",
    )
    .await;
    let after = flue.deploy("hello", "web1", &[]).await;
    page.wait_for(
        "the deployment made after the reconnection COMPLETE",
        WAIT,
        &format!(
            "{}?.querySelector('td.state')?.textContent === 'COMPLETE'",
            row(&after.id)
        ),
    )
    .await;
    assert_eq!(page.eval(live).await, Value::from(true));
    assert_eq!(
        page.eval("window.__marker").await,
        Value::from(1),
        "the page was reloaded"
    );
}

#[tokio::test]
async fn deployments_are_listed_in_creation_order_filtered_and_bounded() {
    let flue = Flue::start().await;
    flue.register("a").await;
    flue.register("b").await;
    flue.script_config("noop", "#!/bin/sh\ntrue\n", &[], &[])
        .await;
    // No agents: the deployments stay QUEUED, which is all a listing needs.
    let mut ids = Vec::new();
    for server in ["a", "b", "a"] {
        ids.push(flue.deploy("noop", server, &[]).await.id.to_string());
    }
    let http = flue.http();
    let get = |query: &'static str| {
        let http = http.clone();
        let url = format!("{}/v1/deployments{query}", flue.gateway.url());
        async move {
            let res = http.get(url).send().await.expect("GET /v1/deployments");
            let status = res.status().as_u16();
            (status, res.json::<Value>().await.expect("a JSON body"))
        }
    };
    let listed = |body: &Value| -> Vec<String> {
        body.as_array()
            .expect("an array")
            .iter()
            .map(|d| d["id"].as_str().expect("id").to_owned())
            .collect()
    };

    let (status, all) = get("").await;
    assert_eq!(status, 200);
    assert_eq!(listed(&all), ids);
    let (_, on_a) = get("?server=a").await;
    assert_eq!(listed(&on_a), vec![ids[0].clone(), ids[2].clone()]);
    let (_, one) = get("?limit=1").await;
    assert_eq!(listed(&one), vec![ids[0].clone()]);
    let (_, none) = get("?stack=s1").await;
    assert_eq!(listed(&none), Vec::<String>::new());

    // Hidden inputs read as "<hidden>" here as everywhere.
    let spec = serde_json::from_value(serde_json::json!({
        "id": "secret", "group": "script", "config": "#!/bin/sh\ntrue\n",
        "inputs": [{"name": "password", "hidden": true}],
    }))
    .expect("config spec");
    flue.client()
        .create_config(&spec)
        .await
        .expect("create config");
    let secret = flue.deploy("secret", "b", &[("password", "s3cret")]).await;
    let (_, newest) = get("?server=b&stack=").await;
    let newest = Value::from(vec![newest[1].clone()]);
    assert_eq!(listed(&newest), vec![secret.id.to_string()]);
    assert_eq!(newest[0]["input_values"]["password"], "<hidden>");
    assert!(!newest.to_string().contains("s3cret"), "{newest}");

    for (query, parameter) in [
        ("?limit=0", "limit"),
        ("?limit=1001", "limit"),
        ("?limit=ten", "limit"),
        ("?server=a.b", "server"),
        ("?stack=*", "stack"),
    ] {
        let (status, body) = get(query).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["error"]["code"], "invalid_query", "{query}: {body}");
        let message = body["error"]["message"].as_str().expect("message");
        assert!(message.contains(parameter), "{query}: {message}");
    }
    let (status, body) = get("?sever=a").await;
    assert_eq!(status, 400, "an unknown parameter is refused: {body}");
}

#[tokio::test]
async fn dashboard_assets_are_served_with_their_types() {
    let flue = Flue::start().await;
    let http = flue.http();
    let url = flue.gateway.url();
    for (path, ty) in [
        ("/", "text/html; charset=utf-8"),
        ("/assets/dashboard.js", "text/javascript; charset=utf-8"),
        ("/assets/dashboard.css", "text/css; charset=utf-8"),
    ] {
        let res = http.get(format!("{url}{path}")).send().await.expect("GET");
        assert_eq!(res.status(), 200, "{path}");
        assert_eq!(res.headers()["content-type"], ty, "{path}");
        assert_eq!(res.headers()["x-content-type-options"], "nosniff");
    }
    let page = http.get(format!("{url}/")).send().await.expect("GET /");
    assert!(
        page.headers()["content-security-policy"]
            .to_str()
            .expect("ascii")
            .contains("script-src 'self'")
    );
    let html = page.text().await.expect("html");
    assert!(html.contains("<title>Flue · default</title>"), "{html}");
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "the page loads nothing from elsewhere"
    );
    let missing = http
        .get(format!("{url}/assets/nope.js"))
        .send()
        .await
        .expect("GET");
    assert_eq!(missing.status(), 404);
}

#[tokio::test]
async fn a_busy_page_reads_deployments_it_did_not_list_together_and_in_order() {
    use futures_util::StreamExt as _;
    chromium_bin();
    let flue = Flue::start().await;
    // No agent: they stay queued. More than the page's first read (100) lists, created
    // in parallel, so that many share a millisecond.
    flue.register("db1").await;
    flue.script_config("noop", "#!/bin/sh\n", &[], &[]).await;
    let created: Vec<Deployment> = futures_util::stream::iter(0..150)
        .map(|_| flue.deploy("noop", "db1", &[]))
        .buffer_unordered(16)
        .collect()
        .await;
    assert_eq!(created.len(), 150);

    let mut browser = Browser::launch().await;
    let mut page = open_signed_in(&mut browser, &flue).await;
    page.wait_for(
        "every deployment on the page",
        WAIT,
        "document.body.dataset.loaded === 'true' \
         && document.querySelectorAll('tr.summary').length === 150",
    )
    .await;
    // Newest first by creation (to the millisecond, then by id), as the records say,
    // once the page has read them.
    page.wait_for(
        "the rows in creation order",
        WAIT,
        "(async () => { \
           const auth = { authorization: `Bearer ${sessionStorage.getItem('flue-token')}` }; \
           const list = await (await fetch('/v1/deployments?limit=1000', { headers: auth })).json(); \
           const key = (d) => [Date.parse(d.created_at), d.id]; \
           const want = list.map(key).sort((a, b) => b[0] - a[0] || (b[1] > a[1] ? 1 : -1)) \
             .map((k) => k[1]); \
           const got = [...document.querySelectorAll('tr.summary')].map((r) => r.dataset.deploymentId); \
           return JSON.stringify(got) === JSON.stringify(want); })()",
    )
    .await;
    let single_reads = page
        .eval(
            "performance.getEntriesByType('resource') \
               .filter((e) => new URL(e.name).pathname.startsWith('/v1/deployments/')).length",
        )
        .await;
    let single_reads = single_reads.as_u64().expect("a count");
    assert!(
        single_reads < 10,
        "{single_reads} reads of single deployments: the ones the first read did not list \
         should be read with one list"
    );
}
