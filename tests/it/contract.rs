//! The API contract (issue 13): the pinned schemathesis runs against a real gateway's own
//! `/openapi.json` and every answer must match the document (status, content type, body
//! schema) with no 5xx. The gateway runs with auth on, seeded with real objects (a config,
//! a server with its running agent, a finished deployment, a stack made by an operation, a
//! webhook, a token, a polling server with a deployment waiting for it) whose ids and
//! secrets schemathesis is given for path parameters, so that reads and writes reach real
//! code paths and not only 404s. Each operation gets a token of a role it allows (the
//! operator's for `/v1/tenants…`). The run is bounded (examples per operation, fixed seed)
//! and its NDJSON report read back: every operation of the document must have been
//! exercised and every check applied, none may have failed.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use flue_proto::auth::{Role, TokenCreated};
use flue_proto::operation::OperationState;
use flue_proto::poll::{Metadata, Transport};
use flue_proto::{RegisterServer, ServerId};
use flue_tests::{Agent, Flue, repo_root};
use reqwest::Method;
use serde_json::{Value, json};

use crate::operations::{accepted, ended, group_body};

/// The run's seed: the same cases every time, so a CI failure can be replayed
/// (`$FLUE_CONTRACT_SEED` explores others).
const SEED: &str = "1313";
/// Test cases per operation in the fuzzing phase (the coverage phase makes its own, from
/// the schemas' bounds): few enough for the whole test to stay around a minute on 2 busy
/// cores (`$FLUE_CONTRACT_MAX_EXAMPLES` explores further).
const MAX_EXAMPLES: &str = "6";
/// Per request. A long poll is held to one second (below); the events stream ends by itself.
const REQUEST_TIMEOUT: &str = "10";
/// The whole run, generously: it takes about a minute.
const RUN_LIMIT: Duration = Duration::from_secs(300);
/// The checks run on every answer: all of schemathesis' but two (docs/api.md, "The
/// contract"): `positive_data_acceptance` (a schema-valid request must get a 2xx) cannot
/// hold for this API, where any string is a schema-valid cursor but only real ones decode,
/// references must name objects that exist and configs obey rules no schema states;
/// `object_level_authorization` needs a second identity whose objects are another's, which
/// here is another tenant (tested by the security tests, not by this run).
const CHECKS: &str = "not_a_server_error,status_code_conformance,content_type_conformance,\
response_headers_conformance,response_schema_conformance,negative_data_rejection,\
missing_required_header,unsupported_method,allow_header_conformance,use_after_free,\
ensure_resource_availability,ignored_auth";

/// The run's settings that are not per operation: links for the stateful phase inferred from
/// the schemas only, since schemathesis 4.32.5 reads the `Location` of
/// `POST /v1/stacks/{id}/operations` as a link to `GET /v1/webhooks/{id}` and stops with
/// "Invalid OpenAPI Links Definition".
const RUN_SETTINGS: &str =
    "[phases.stateful.inference]\nalgorithms = [\"dependency-analysis\"]\n\n";

/// The gateway's flags: webhooks to the loopback target seeded; event streams of 16 MiB,
/// since each tenant `POST /v1/tenants` makes reserves its streams' size of the broker's
/// JetStream storage (1 GiB + 1.25 GiB by default) and the broker refuses a stream once its
/// disk-derived limit is reserved: a fuzzer making tenants would fill it (then 503).
const GATEWAY_FLAGS: &[&str] = &[
    "--webhook-allow",
    "127.0.0.1/32",
    "--events-max-bytes",
    "16777216",
];

/// `$var` when set (a longer or other run, by hand), else the CI value `default`.
fn setting(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.to_owned())
}

/// The pinned schemathesis: `$FLUE_SCHEMATHESIS`, else the one `scripts/test.sh` installs
/// into `.venv/schemathesis`.
fn schemathesis_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("FLUE_SCHEMATHESIS") {
        return PathBuf::from(p);
    }
    let path = repo_root().join(".venv/schemathesis/bin/schemathesis");
    assert!(
        path.exists(),
        "{} is missing: run `bash scripts/test.sh` (it installs the pinned schemathesis) \
         or set FLUE_SCHEMATHESIS",
        path.display()
    );
    path
}

/// The ids of the objects the gateway was seeded with.
struct Seeded {
    config: String,
    server: String,
    /// A registered server with no agent, for the `DELETE` of servers.
    doomed_server: String,
    deployment: String,
    stack: String,
    operation: String,
    webhook: String,
    /// A token's id, for its `DELETE` (revoking it costs nothing else here).
    token: String,
    /// A polling server, the secret of its metadata URL, a deployment waiting for it and
    /// the secret of that deployment's signal URL.
    polling: String,
    metadata_secret: String,
    polled: String,
    signal_secret: String,
}

impl Seeded {
    /// The value to give `param` of `method path` (a document path with `{…}`), if any.
    fn value(&self, method: &str, path: &str, param: &str) -> Option<&str> {
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let value = match (method, segments.as_slice(), param) {
            ("DELETE", ["v1", "servers", _], "id") => &self.doomed_server,
            // Deleting the stack would leave its reads only 404s; random ids do for this one.
            ("DELETE", ["v1", "stacks", _], _) => return None,
            (_, ["v1", "configs", ..], "id") => &self.config,
            (_, ["v1", "servers", ..], "id") => &self.server,
            (_, ["v1", "deployments", ..], "id") => &self.deployment,
            (_, ["v1", "stacks", ..], "id") => &self.stack,
            (_, ["v1", "stacks", ..], "op") => &self.operation,
            (_, ["v1", "webhooks", ..], "id") => &self.webhook,
            (_, ["v1", "tokens", ..], "id") => &self.token,
            (_, ["v1", "tenants", ..] | ["heat", ..], "tenant") => "default",
            (_, ["heat", _, "servers", ..], "id") => &self.polling,
            (_, ["heat", _, "servers", ..], "secret") => &self.metadata_secret,
            (_, ["heat", _, "deployments", ..], "id") => &self.polled,
            (_, ["heat", _, "deployments", ..], "secret") => &self.signal_secret,
            (_, ["assets", _], "name") => "dashboard.js",
            _ => return None,
        };
        Some(value)
    }
}

/// Fills the gateway with one object of every kind, through the API.
async fn seed(flue: &Flue) -> (Seeded, Agent) {
    let base = flue.gateway.url().to_owned();
    let http = flue.http();
    flue.script_config("contract-config", "#!/bin/sh\necho ok\n", &["x"], &["y"])
        .await;
    flue.register("web1").await;
    flue.register("doomed").await;
    let agent = flue.agent("web1", &[]).await;
    let deployed = flue.deploy("contract-config", "web1", &[("x", "1")]).await;
    flue.finished(&deployed.id).await;

    let log = flue.path("hooks.log");
    let created = accepted(
        &flue.gateway,
        "contract-stack",
        &group_body("create", 1, &log),
    )
    .await;
    let done = ended(&flue.gateway, "contract-stack", &created.id).await;
    assert_eq!(done.state, OperationState::Succeeded, "{done:?}");

    let webhook: Value = http
        .post(format!("{base}/v1/webhooks"))
        .json(&json!({"url": "http://127.0.0.1:9/hook", "secret": "whsec_Zmx1ZS13ZWJob29rLXRlc3Qta2V5LTAxMjM0NTY3ODk="}))
        .send()
        .await
        .expect("create a webhook")
        .json()
        .await
        .expect("a webhook");
    let token: TokenCreated = http
        .post(format!("{base}/v1/tokens"))
        .json(&json!({"role": "viewer", "ttl_secs": 3600, "name": "doomed"}))
        .send()
        .await
        .expect("create a token")
        .json()
        .await
        .expect("a token");
    // A polling server with a deployment waiting for it: its Heat metadata and signal URLs.
    let registration = flue
        .admin_client()
        .register_server(&RegisterServer {
            transport: Transport::Poll,
            id: ServerId::new("poller").expect("server id"),
            name: String::new(),
        })
        .await
        .expect("register a polling server");
    let metadata_url = registration.poll.expect("a metadata URL").metadata_url;
    let polled = flue
        .deploy("contract-config", "poller", &[("x", "2")])
        .await;
    let metadata: Metadata = reqwest::get(&metadata_url)
        .await
        .expect("read the metadata")
        .json()
        .await
        .expect("Heat metadata");
    let signal_url = metadata.deployments[0]
        .inputs
        .iter()
        .find(|i| i.name == "deploy_signal_id")
        .and_then(|i| i.value.as_str())
        .expect("a signal URL")
        .to_owned();
    let last_segment = |url: &str| url.rsplit('/').next().expect("a path").to_owned();
    let seeded = Seeded {
        config: "contract-config".to_owned(),
        server: "web1".to_owned(),
        doomed_server: "doomed".to_owned(),
        deployment: deployed.id.to_string(),
        stack: "contract-stack".to_owned(),
        operation: created.id.to_string(),
        webhook: webhook["id"].as_str().expect("a webhook id").to_owned(),
        token: token.id,
        polling: "poller".to_owned(),
        metadata_secret: last_segment(&metadata_url),
        polled: polled.id.to_string(),
        signal_secret: last_segment(&signal_url),
    };
    (seeded, agent)
}

/// One operation of the document: method (upper case) and path template.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Operation {
    method: String,
    path: String,
}

impl Operation {
    /// schemathesis' label of it, `GET /v1/configs/{id}`.
    fn label(&self) -> String {
        format!("{} {}", self.method, self.path)
    }

    /// The path parameters named in the template.
    fn path_params(&self) -> Vec<&str> {
        self.path
            .split('/')
            .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
            .collect()
    }
}

/// Every operation the document declares.
fn operations_of(document: &Value) -> BTreeSet<Operation> {
    const METHODS: &[&str] = &["get", "put", "post", "delete", "options", "head", "patch"];
    let paths = document["paths"]
        .as_object()
        .expect("the document has paths");
    paths
        .iter()
        .flat_map(|(path, item)| {
            let item = item.as_object().expect("a path item");
            item.keys()
                .filter(|k| METHODS.contains(&k.as_str()))
                .map(|m| Operation {
                    method: m.to_uppercase(),
                    path: path.clone(),
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The environment variable holding `role`'s token for the run (the configuration file
/// names it, so no token is written to disk).
fn token_var(role: Role) -> String {
    format!("FLUE_CONTRACT_TOKEN_{}", role.to_string().to_uppercase())
}

/// `schemathesis.toml`: per operation, the token of a role it allows and the seeded ids;
/// the event stream replays and ends (`follow=false`), a long poll waits one second.
fn config_file(operations: &BTreeSet<Operation>, seeded: &Seeded) -> String {
    let mut text = RUN_SETTINGS.to_owned();
    for op in operations {
        let concrete: String = op
            .path
            .split('/')
            .map(|s| if s.starts_with('{') { "x" } else { s })
            .collect::<Vec<_>>()
            .join("/");
        let method = Method::from_bytes(op.method.as_bytes()).expect("a method");
        let role = flue_gateway::auth::roles::allowed(&method, &concrete)
            .first()
            .copied();
        // Parameter name → its value as a TOML literal.
        let mut params: BTreeMap<String, String> = BTreeMap::new();
        for name in op.path_params() {
            if let Some(value) = seeded.value(&op.method, &op.path, name) {
                params.insert(format!("path.{name}"), format!("{value:?}"));
            }
        }
        match (op.method.as_str(), op.path.as_str()) {
            ("GET", "/v1/events") => {
                params.insert("query.follow".into(), "false".into());
            }
            ("GET", "/v1/deployments/{id}") => {
                params.insert("query.wait_secs".into(), "1".into());
            }
            _ => {}
        }
        if role.is_none() && params.is_empty() {
            continue;
        }
        writeln!(text, "[[operations]]\ninclude-name = {:?}", op.label()).expect("write");
        if let Some(role) = role {
            let var = token_var(role);
            writeln!(
                text,
                "headers = {{ Authorization = \"Bearer ${{{var}}}\" }}"
            )
            .expect("write");
        }
        if !params.is_empty() {
            let pairs: Vec<String> = params.iter().map(|(k, v)| format!("{k:?} = {v}")).collect();
            writeln!(text, "parameters = {{ {} }}", pairs.join(", ")).expect("write");
        }
        text.push('\n');
    }
    text
}

/// What the NDJSON report says of one operation, over all its scenarios (phases).
#[derive(Debug, Default)]
struct Tested {
    /// The scenarios' statuses: `success`, `failure`, `error`, `skip`, `interrupted`.
    statuses: BTreeSet<String>,
    /// Requests sent and answered.
    interactions: usize,
}

/// What a run did: per operation label, what its scenarios did; per check, how many times it
/// judged an answer.
#[derive(Debug, Default)]
struct Report {
    operations: BTreeMap<String, Tested>,
    checks: BTreeMap<String, usize>,
}

/// Reads the NDJSON report.
fn report_of(ndjson: &str) -> Report {
    let mut report = Report::default();
    for line in ndjson.lines().filter(|l| !l.trim().is_empty()) {
        let event: Value = serde_json::from_str(line).expect("an NDJSON line is JSON");
        let Some(finished) = event.get("ScenarioFinished") else {
            continue;
        };
        let recorder = &finished["recorder"];
        let (Some(label), Some(status)) = (recorder["label"].as_str(), finished["status"].as_str())
        else {
            continue;
        };
        let tested = report.operations.entry(label.to_owned()).or_default();
        tested.statuses.insert(status.to_owned());
        tested.interactions += recorder["interactions"].as_object().map_or(0, |i| i.len());
        let checks = recorder["checks"]
            .as_object()
            .into_iter()
            .flat_map(|c| c.values());
        for check in checks.filter_map(Value::as_array).flatten() {
            if let Some(name) = check["name"].as_str() {
                *report.checks.entry(name.to_owned()).or_default() += 1;
            }
        }
    }
    report
}

/// Runs schemathesis on `document` (the one `flue`'s gateway served, as the run's file, so
/// that the operations counted are the ones it tested) against that gateway; returns (its console output, the report's
/// report per operation, whether it exited 0).
async fn run(flue: &Flue, dir: &Path, document: &Value, config: &str) -> (String, Report, bool) {
    let config_path = dir.join("schemathesis.toml");
    std::fs::write(&config_path, config).expect("write schemathesis.toml");
    let document_path = dir.join("openapi.json");
    std::fs::write(&document_path, document.to_string()).expect("write openapi.json");
    let report = dir.join("report.ndjson");
    let mut command = tokio::process::Command::new(schemathesis_bin());
    command
        .arg("--config-file")
        .arg(&config_path)
        .arg("run")
        .arg(&document_path)
        .args(["--url", flue.gateway.url()])
        .args(["--checks", CHECKS])
        .args([
            "--max-examples",
            &setting("FLUE_CONTRACT_MAX_EXAMPLES", MAX_EXAMPLES),
        ])
        .args(["--seed", &setting("FLUE_CONTRACT_SEED", SEED)])
        .args(["--request-timeout", REQUEST_TIMEOUT])
        .args(["--workers", "1"])
        .args(["--report", "ndjson"])
        .arg("--report-ndjson-path")
        .arg(&report)
        .args(["--output-truncate", "false"])
        .env("NO_COLOR", "1")
        .env_remove("SCHEMATHESIS_HOOKS")
        .current_dir(dir)
        .kill_on_drop(true);
    for role in Role::ALL {
        command.env(token_var(role), flue.gateway.tokens().get(role));
    }
    let output = tokio::time::timeout(RUN_LIMIT, command.output())
        .await
        .unwrap_or_else(|_| panic!("schemathesis did not finish within {RUN_LIMIT:?}"))
        .expect("run schemathesis");
    let console = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let ndjson = std::fs::read_to_string(&report).unwrap_or_default();
    (console, report_of(&ndjson), output.status.success())
}

#[tokio::test]
async fn every_documented_operation_answers_as_the_document_says() {
    let flue = Flue::start_with(GATEWAY_FLAGS).await;
    let (seeded, _agent) = seed(&flue).await;
    let document: Value = reqwest::get(format!("{}/openapi.json", flue.gateway.url()))
        .await
        .expect("GET /openapi.json, no token")
        .error_for_status()
        .expect("the document is served without a token")
        .json()
        .await
        .expect("the document is JSON");
    let operations = operations_of(&document);
    assert!(!operations.is_empty(), "the document declares operations");

    let dir = tempfile::tempdir().expect("tempdir");
    let config = config_file(&operations, &seeded);
    let (console, report, exited_ok) = run(&flue, dir.path(), &document, &config).await;

    // Shown for a failing test (and with --no-capture): warnings, failures with their curl lines.
    eprintln!("schemathesis says:\n{console}");
    eprintln!("checks applied: {:?}", report.checks);
    let unapplied: Vec<&str> = CHECKS
        .split(',')
        .filter(|c| !report.checks.contains_key(*c))
        .collect();
    let report = report.operations;
    for (label, tested) in &report {
        eprintln!(
            "{label}: {} requests, {:?}",
            tested.interactions, tested.statuses
        );
    }
    let untested: Vec<String> = operations
        .iter()
        .map(Operation::label)
        .filter(|label| report.get(label).is_none_or(|t| t.interactions == 0))
        .collect();
    let failed: Vec<&String> = report
        .iter()
        .filter(|(_, t)| t.statuses.iter().any(|s| s != "success" && s != "skip"))
        .map(|(label, _)| label)
        .collect();
    assert!(
        exited_ok && untested.is_empty() && failed.is_empty() && unapplied.is_empty(),
        "the contract does not hold\nfailed: {failed:?}\nnot exercised: {untested:?}\n\
         checks never applied: {unapplied:?}\n\
         {} operations in the document, {} in the report\n\
         (schemathesis' output, with each failure's request as a curl line, is above)\n\
         schemathesis.toml:\n{config}",
        operations.len(),
        report.len(),
    );
}
