//! What the dashboard's states mean, in headless Chromium: a unit that never ran is not a
//! success, a `CHECK` that found drift is not a failure (nor counted as one), and a long
//! reason wraps inside its column instead of running past it.

use flue_proto::auth::Role;
use flue_tests::{Browser, Flue, WAIT};
use serde_json::{Value, json};

use super::dashboard::sign_in;
use crate::stack::{create_stack, flue};

const TEMPLATE: &str = r#"heat_template_version: 2018-08-31
resources:
  cfg_ok:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      config: |
        #!/bin/sh
        echo applied
      hooks:
        CHECK: |
          #!/bin/sh
          echo "/etc/app.conf changed since it was applied" >&2
          exit 4
  cfg_broken:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      outputs: [{name: err, error_output: true}]
      config: |
        #!/bin/sh
        printf '%s' "$LONG" > "$heat_outputs_path.err"
  ok: {type: OS::Heat::SoftwareDeployment, properties: {config: {get_resource: cfg_ok}, server: s1}}
  broken: {type: OS::Heat::SoftwareDeployment, depends_on: ok, properties: {config: {get_resource: cfg_broken}, server: s1}}
  later: {type: OS::Heat::SoftwareDeployment, depends_on: broken, properties: {config: {get_resource: cfg_ok}, server: s1}}
"#;

#[tokio::test]
async fn the_dashboard_shows_a_unit_never_run_as_not_run_a_drifted_check_as_no_failure_and_wraps_long_reasons()
 {
    let env = Flue::start().await;
    env.register("s1").await;
    let _agent = env.agent("s1", &[]).await;
    // A reason with a word of 300 characters and no break in it (a digest, as errors quote
    // them; a browser breaks a line after a `-` or a `/` by itself).
    let long = format!("cannot-verify-{}", "0123456789abcdef".repeat(19));
    let t = env.path("t.yaml");
    std::fs::write(&t, TEMPLATE.replace("$LONG", &long)).expect("template");
    let run = create_stack(&env, "small", &t.display().to_string(), &[]).await;
    assert_eq!(run.code, 1, "broken fails: {run}");
    let check = flue(&env, &["stack", "check", "small"]).await;
    assert_eq!(check.code, 1, "ok drifted: {check}");
    assert!(check.stdout.contains("drifted"), "{check}");

    let all = env
        .client()
        .list_server_deployments(&"s1".parse().expect("id"))
        .await
        .expect("list");
    let id_of = |action: &str, resource: &str| {
        all.iter()
            .find(|d| d.action.as_str() == action && d.resource_name.as_deref() == Some(resource))
            .unwrap_or_else(|| panic!("{action} {resource}: {all:?}"))
            .id
            .to_string()
    };
    let (checked, broken) = (id_of("CHECK", "ok"), id_of("CREATE", "broken"));

    let mut browser = Browser::launch().await;
    let mut page = browser.open(env.gateway.url()).await;
    sign_in(&mut page, env.gateway.tokens().get(Role::Viewer)).await;
    let badge = |id: &str| {
        format!("document.querySelector('tr[data-deployment-id=\"{id}\"] td.state .badge')")
    };
    let overview = page
        .wait_for(
            "every deployment finished",
            WAIT,
            &format!(
                "document.body.dataset.loaded === 'true' \
                 && document.querySelectorAll('tbody.deployment').length === {n} \
                 && {b}?.textContent === 'FAILED' && {c}?.textContent !== 'QUEUED' && {{ \
                   check: {c}.textContent, broken: {b}.textContent, \
                   checkColour: getComputedStyle({c}).backgroundColor, \
                   brokenColour: getComputedStyle({b}).backgroundColor, \
                   failed: document.getElementById('stat-failed').textContent, \
                   drifted: document.getElementById('stat-drifted').textContent }}",
                n = all.len(),
                b = badge(&broken),
                c = badge(&checked),
            ),
        )
        .await;
    // Two deployments ended FAILED; one of them is the check that found drift.
    assert_eq!(overview["check"], Value::from("DRIFTED"), "{overview}");
    assert_ne!(
        overview["checkColour"], overview["brokenColour"],
        "{overview}"
    );
    assert_eq!(
        (&overview["failed"], &overview["drifted"]),
        (&Value::from("1"), &Value::from("1")),
        "{overview}"
    );
    // The failure's reason in the event feed wraps there too (three lines at most).
    let feed = page
        .wait_for(
            "the failure in the event feed",
            WAIT,
            "(() => { const feed = document.getElementById('feed').getBoundingClientRect(); \
               const e = [...document.querySelectorAll('#feed .event[data-type=\"deployment.failed\"] .summary')] \
                 .find(e => e.textContent.includes('0123456789abcdef0123456789abcdef')); \
               if (!e) return null; \
               const r = e.getBoundingClientRect(); \
               const line = parseFloat(getComputedStyle(e).lineHeight) || 16; \
               return e.scrollWidth > e.clientWidth + 1 ? 'overflows its box' \
                 : r.right > feed.right + 1 ? 'runs past the feed' \
                 : r.height < 2 * line ? 'one line' : r.height > 3.5 * line ? 'more than three lines' \
                 : e.title.length > e.textContent.length - 1 ? 'wraps' : 'no title'; })()",
        )
        .await;
    assert_eq!(feed, Value::from("wraps"));
    // The feed says a unit was planned, not that it completed anything.
    let planned = page
        .eval(
            "[...document.querySelectorAll('#feed .event[data-type=\"stack.operation_progress\"] .summary')].map(e => e.textContent).filter(t => t.startsWith('later'))",
        )
        .await;
    assert_eq!(planned, json!(["later · planned"]), "{planned}");
    // The status filter tells them apart too.
    let filtered = |status: &str| {
        format!(
            "(() => {{ const s = document.getElementById('filter-status'); s.value = '{status}'; \
               s.dispatchEvent(new Event('change')); \
               return [...document.querySelectorAll('tbody.deployment')].filter(g => !g.hidden).map(g => g.dataset.deploymentGroup); }})()"
        )
    };
    assert_eq!(page.eval(&filtered("FAILED")).await, json!([broken]));
    assert_eq!(page.eval(&filtered("DRIFTED")).await, json!([checked]));
    page.eval(&filtered("")).await;

    // The stack: `later` never ran (its dependency failed): no green INIT_COMPLETE.
    page.eval("document.querySelector('nav.views button[data-view=\"stacks\"]').click(); true")
        .await;
    page.wait_for(
        "the stacks list",
        WAIT,
        "document.querySelector('#stacks tr[data-stack-id=\"small\"]') !== null",
    )
    .await;
    page.eval("document.querySelector('#stacks tr[data-stack-id=\"small\"]').click(); true")
        .await;
    let unit =
        |key: &str| format!("document.querySelector('#stack-units tr[data-unit=\"{key}\"]')");
    let stack = page
        .wait_for(
            "the stack's detail",
            WAIT,
            &format!(
                "document.body.dataset.stackShown === 'small' && {later} !== null && {{ \
                   later: {later}.querySelector('.badge').textContent, \
                   laterColour: getComputedStyle({later}.querySelector('.badge')).backgroundColor, \
                   ok: {ok}.querySelector('.badge').textContent, \
                   okColour: getComputedStyle({ok}.querySelector('.badge')).backgroundColor }}",
                later = unit("later"),
                ok = unit("ok"),
            ),
        )
        .await;
    assert_eq!(stack["ok"], Value::from("CREATE_COMPLETE"), "{stack}");
    assert_eq!(stack["later"], Value::from("NOT RUN"), "{stack}");
    assert_ne!(stack["laterColour"], stack["okColour"], "{stack}");

    // Long reasons (the stack's, the unit's, the operation's) wrap inside their column:
    // nothing runs past its box or the panel, and each takes several lines.
    let fits = page
        .eval(&format!(
            "(() => {{ const panel = document.getElementById('stack-detail').getBoundingClientRect(); \
               const at = {{ stack: document.getElementById('stack-reason'), \
                 unit: {broken}.querySelector('.sub.reason'), \
                 operation: document.querySelector('#stack-operations tr[data-operation] td.detail') }}; \
               const out = {{}}; \
               for (const [k, e] of Object.entries(at)) {{ \
                 if (!e) {{ out[k] = 'missing'; continue; }} \
                 const r = e.getBoundingClientRect(); \
                 const line = parseFloat(getComputedStyle(e).lineHeight) || 16; \
                 out[k] = !e.textContent.includes('0123456789abcdef0123456789abcdef') ? 'no long reason: ' + e.textContent \
                   : e.scrollWidth > e.clientWidth + 1 ? 'overflows its box' \
                   : r.right > panel.right + 1 ? 'runs past the panel' \
                   : r.height < 2 * line ? 'one line' : 'wraps'; \
               }} \
               return out; }})()",
            broken = unit("broken"),
        ))
        .await;
    assert_eq!(
        fits,
        json!({"stack": "wraps", "unit": "wraps", "operation": "wraps"}),
        "{fits}"
    );
    assert_eq!(
        page.eval("document.getElementById('banner').hidden").await,
        Value::from(true)
    );
}
