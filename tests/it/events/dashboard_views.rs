//! The dashboard an operator keeps open, in headless Chromium: the stacks view (status,
//! outputs, units, operation history), filters, the deployment detail with hidden inputs
//! masked, pages, times with their zone and ids that do not wrap; screenshots of both views.

use flue_proto::auth::Role;
use flue_proto::{CreateDeployment, DeploymentId};
use flue_tests::{Browser, Flue, WAIT};
use serde_json::{Value, json};

use super::dashboard::{check_not_blank, sign_in};
use crate::stack::{create_stack, example};

/// 64 characters, the longest id there is.
const LONG_ID: &str = "a-very-long-deployment-id-that-must-never-wrap-in-the-dashboard-x";

#[tokio::test]
async fn the_dashboard_shows_stacks_filters_pages_and_a_deployment_in_detail() {
    let flue = Flue::start().await;
    let mut agents = Vec::new();
    for s in ["db", "web"] {
        flue.register(s).await;
        agents.push(flue.agent(s, &[]).await);
    }
    let data = flue.path("data");
    let run = create_stack(
        &flue,
        "shop",
        &example("two-tier"),
        &[&format!("data_dir={}", data.display())],
    )
    .await;
    assert_eq!(run.code, 0, "{run}");
    let password = std::fs::read_to_string(data.join("db/password")).expect("password");
    let password = password.trim().to_owned();

    // More deployments than a page holds, one failing, one with the longest id.
    flue.script_config("tick", "#!/bin/sh\necho tick\n", &[], &[])
        .await;
    flue.script_config(
        "broken",
        "#!/bin/sh\necho 'disk full' >&2\nexit 3\n",
        &[],
        &[],
    )
    .await;
    let mut ids = Vec::new();
    for _ in 0..26 {
        ids.push(flue.deploy("tick", "db", &[]).await.id);
    }
    let failed = flue.deploy("broken", "web", &[]).await.id;
    let long: DeploymentId = LONG_ID[..64].parse().expect("id");
    flue.client()
        .create_deployment(&CreateDeployment {
            id: Some(long.clone()),
            ..CreateDeployment::new("tick".parse().expect("id"), "web".parse().expect("id"))
        })
        .await
        .expect("deploy");
    ids.push(failed.clone());
    ids.push(long.clone());
    for id in &ids {
        flue.finished(id).await;
    }
    let total = flue
        .client()
        .list_deployments_up_to(None, 1000)
        .await
        .expect("list")
        .len();
    assert!(total > 25, "{total}");

    let mut browser = Browser::launch().await;
    let mut page = browser.open(flue.gateway.url()).await;
    sign_in(&mut page, flue.gateway.tokens().get(Role::Viewer)).await;
    page.wait_for(
        "the first read, every deployment finished",
        WAIT,
        &format!(
            "document.body.dataset.loaded === 'true' \
             && document.getElementById('connection').dataset.state === 'live' \
             && document.querySelectorAll('tbody.deployment').length === {total} \
             && document.querySelector('tr[data-deployment-id=\"{failed}\"] td.state')?.textContent === 'FAILED'"
        ),
    )
    .await;

    // Pages: 25 newest first, the rest on the next page, none twice.
    let visible = "[...document.querySelectorAll('tbody.deployment')].filter(g => !g.hidden).map(g => g.dataset.deploymentGroup)";
    let first: Vec<String> = serde_json::from_value(page.eval(visible).await).expect("ids");
    assert_eq!(first.len(), 25);
    assert_eq!(first[0], long.to_string(), "newest first");
    assert_eq!(
        page.eval("document.getElementById('page-info').textContent")
            .await,
        Value::from(format!("1–25 of {total}"))
    );
    page.eval("document.getElementById('page-next').click(); true")
        .await;
    let second: Vec<String> = serde_json::from_value(
        page.wait_for(
            "the second page",
            WAIT,
            &format!(
                "document.getElementById('deployments-pager').dataset.page === '2' && {visible}"
            ),
        )
        .await,
    )
    .expect("ids");
    assert_eq!(second.len(), total - 25);
    assert!(second.iter().all(|id| !first.contains(id)), "{second:?}");
    page.eval("document.getElementById('page-prev').click(); true")
        .await;

    // Filters: by status, by server, by stack; the choices come from what is shown.
    let choose = |select: &str, value: &str| {
        format!(
            "(() => {{ const s = document.getElementById('{select}'); s.value = '{value}'; \
              s.dispatchEvent(new Event('change')); return s.value; }})()"
        )
    };
    assert_eq!(
        page.eval(&choose("filter-status", "FAILED")).await,
        Value::from("FAILED")
    );
    let shown: Vec<String> = serde_json::from_value(page.eval(visible).await).expect("ids");
    assert_eq!(shown, [failed.to_string()]);
    page.eval(&choose("filter-status", "")).await;
    assert_eq!(
        page.eval(&choose("filter-stack", "shop")).await,
        Value::from("shop")
    );
    let shown: Vec<String> = serde_json::from_value(page.eval(visible).await).expect("ids");
    assert_eq!(shown.len(), 2, "db_deploy and web_deploy: {shown:?}");
    page.eval(&choose("filter-stack", "")).await;
    page.eval(&choose("filter-server", "web")).await;
    let servers: Vec<String> = serde_json::from_value(
        page.eval("[...document.querySelectorAll('tbody.deployment')].filter(g => !g.hidden).map(g => g.querySelector('td.server').textContent)")
            .await,
    )
    .expect("servers");
    assert!(
        !servers.is_empty() && servers.iter().all(|s| s == "web"),
        "{servers:?}"
    );
    page.eval(&choose("filter-server", "")).await;

    // The feed hides progress events until asked for them.
    let progress =
        "[...document.querySelectorAll('#feed .event[data-type=\"deployment.progress\"]')]";
    page.wait_for(
        "progress events in the feed",
        WAIT,
        &format!("{progress}.length > 0"),
    )
    .await;
    assert_eq!(
        page.eval(&format!("{progress}.every(e => e.hidden)")).await,
        Value::from(true)
    );
    page.eval("document.getElementById('show-progress').click(); true")
        .await;
    assert_eq!(
        page.eval(&format!("{progress}.every(e => !e.hidden)"))
            .await,
        Value::from(true)
    );
    page.eval(&choose("filter-type", "stack")).await;
    assert_eq!(
        page.eval("[...document.querySelectorAll('#feed .event')].filter(e => !e.hidden).every(e => e.dataset.kind === 'stack')").await,
        Value::from(true)
    );
    page.eval(&choose("filter-type", "")).await;

    // A deployment in detail: web_deploy's hidden input masked, its outputs, timings.
    let web = flue
        .client()
        .list_server_deployments(&"web".parse().expect("id"))
        .await
        .expect("list")
        .into_iter()
        .find(|d| d.resource_name.as_deref() == Some("web_deploy"))
        .expect("web_deploy");
    let detail = page
        .wait_for(
            "web_deploy's detail",
            WAIT,
            &format!(
                "(() => {{ const r = document.querySelector('tr[data-deployment-id=\"{id}\"]'); \
                   if (!r.classList.contains('open')) r.click(); \
                   const d = document.querySelector('[data-detail-for=\"{id}\"]'); \
                   const cell = (t, n) => d.querySelector(`table.${{t}} tr[data-name=\"${{n}}\"] td`)?.textContent; \
                   return cell('inputs', 'db_password') && {{ \
                     password: cell('inputs', 'db_password'), \
                     masked: !!d.querySelector('table.inputs tr[data-name=\"db_password\"] .masked'), \
                     port: cell('inputs', 'app_port'), url: cell('outputs', 'url'), \
                     exit: d.querySelector('[data-timing=\"exit-code\"]').textContent, \
                     duration: d.querySelector('[data-timing=\"duration\"]').textContent, \
                     finished: d.querySelector('[data-timing=\"finished\"]').textContent, \
                     text: d.textContent }}; }})()",
                id = web.id
            ),
        )
        .await;
    assert_eq!(detail["masked"], Value::from(true), "{detail}");
    assert!(
        !detail["text"].as_str().unwrap_or("").contains(&password),
        "{detail}"
    );
    assert_eq!(detail["exit"], Value::from("0"), "{detail}");
    assert!(
        detail["url"]
            .as_str()
            .is_some_and(|u| u.starts_with("http")),
        "{detail}"
    );
    assert_ne!(detail["duration"], Value::from("–"), "{detail}");
    // Times carry their zone: `HH:MM:SS ZONE`.
    let finished = detail["finished"].as_str().unwrap_or("");
    let (clock, zone) = finished.split_once(' ').unwrap_or(("", ""));
    assert!(clock.len() == 8 && !zone.is_empty(), "{finished:?}");
    assert!(
        page.eval("document.getElementById('timezone').textContent")
            .await
            .as_str()
            .is_some_and(|t| t.starts_with("Times in ") && t.contains("UTC")),
    );

    // The longest id stays on one line.
    let long_id = page
        .eval(&format!(
            "(() => {{ const e = document.querySelector('tr[data-deployment-id=\"{long}\"] td.name .id'); \
               const s = getComputedStyle(e); \
               return [s.whiteSpace, e.getBoundingClientRect().height <= parseFloat(s.lineHeight) * 1.5, e.title]; }})()"
        ))
        .await;
    assert_eq!(long_id, json!(["nowrap", true, long.to_string()]));
    let overview = page.save_screenshot(&flue.path("overview.png")).await;
    check_not_blank(&overview);

    // The stacks view: the list, then the stack's status, outputs, units and operations.
    page.eval("document.querySelector('nav.views button[data-view=\"stacks\"]').click(); true")
        .await;
    page.wait_for(
        "the stacks list",
        WAIT,
        "document.body.dataset.stacksLoaded === 'true' \
         && document.querySelector('#stacks tr[data-stack-id=\"shop\"]') !== null",
    )
    .await;
    assert_eq!(
        page.eval(
            "document.querySelector('#stacks tr[data-stack-id=\"shop\"] .badge').textContent"
        )
        .await,
        Value::from("CREATE_COMPLETE")
    );
    page.eval("document.querySelector('#stacks tr[data-stack-id=\"shop\"]').click(); true")
        .await;
    let stack = page
        .wait_for(
            "the stack's detail",
            WAIT,
            "document.body.dataset.stackShown === 'shop' && { \
               units: [...document.querySelectorAll('#stack-units tr[data-unit]')].map(r => r.dataset.unit), \
               outputs: [...document.querySelectorAll('#stack-outputs tr[data-name]')].map(r => r.dataset.name), \
               operations: [...document.querySelectorAll('#stack-operations tr[data-operation]')].map(r => [r.cells[0].querySelector('.label').textContent, r.cells[1].textContent]), \
               overviewHidden: document.getElementById('main').hidden }",
        )
        .await;
    assert_eq!(
        stack["units"],
        json!(["db_deploy", "web_deploy"]),
        "{stack}"
    );
    assert_eq!(stack["outputs"], json!(["db_address", "url"]), "{stack}");
    assert_eq!(
        stack["operations"],
        json!([["create", "succeeded"]]),
        "{stack}"
    );
    assert_eq!(stack["overviewHidden"], Value::from(true));
    let stacks = page.save_screenshot(&flue.path("stacks.png")).await;
    check_not_blank(&stacks);
    assert_ne!(overview, stacks, "the two views look the same");
    if let Some(dir) = std::env::var_os("FLUE_SCREENSHOT_DIR") {
        let dir = std::path::Path::new(&dir);
        std::fs::write(dir.join("overview.png"), &overview).expect("keep");
        std::fs::write(dir.join("stacks.png"), &stacks).expect("keep");
    }
    assert_eq!(
        page.eval("document.getElementById('banner').hidden").await,
        Value::from(true),
        "{}",
        page.eval("document.getElementById('banner').textContent")
            .await
    );
}
