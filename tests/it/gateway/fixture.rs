//! A nats-server with a gateway on it, and helpers to call the API in-process.

use async_nats::jetstream;
use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use flue_gateway::{Config, Gateway};
use flue_proto::creds::AgentCredentials;
use flue_proto::{seal, subject};
use serde_json::{Value, json};
use tower::ServiceExt;

use flue_tests::{Nats, Tokens};

/// A nats-server and a gateway on it; the gateway stops before the server.
pub struct Fixture {
    pub gateway: Option<Gateway>,
    pub app: Router,
    pub nats: Nats,
    /// One token per role, from the gateway's temp state dir.
    pub tokens: Tokens,
    state: tempfile::TempDir,
    /// The user seed of each server registered through [`Fixture::register`]: the test
    /// plays its agent, whose answers must be signed with it.
    pub seeds: std::sync::Mutex<std::collections::HashMap<String, String>>,
}

impl Fixture {
    pub async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    pub async fn start_with(tweak: impl FnOnce(&mut Config)) -> Self {
        let nats = Nats::start().await;
        let state = tempfile::tempdir().expect("tempdir");
        let mut config = Config::new(nats.url());
        config.listen = "127.0.0.1:0".parse().expect("addr");
        config.timeout_sweep_ms = 50;
        config.state_dir = state.path().join("gateway");
        // In-process gateway on the anonymous test broker (no `flue-gateway init`).
        config.insecure_dev_broker = true;
        tweak(&mut config);
        let tokens = Tokens::new(&config.state_dir);
        let gateway = Gateway::start(config).await.expect("gateway starts");
        let app = gateway.router();
        Self {
            gateway: Some(gateway),
            app,
            nats,
            tokens,
            state,
            seeds: Default::default(),
        }
    }

    /// Registers server `id`, keeping the user seed of the credentials it hands out.
    pub async fn register(&self, id: &str) -> StatusCode {
        let (s, body) = self
            .call(Method::POST, "/v1/servers", Some(json!({"id": id})))
            .await;
        if let Some(text) = body["credentials"].as_str() {
            let creds = flue_proto::creds::AgentCredentials::parse(text).expect("credentials");
            self.seeds
                .lock()
                .expect("seeds")
                .insert(id.to_owned(), creds.user.seed);
        }
        s
    }

    /// The user key of server `id`, registered through [`Fixture::register`].
    pub fn user_key(&self, id: &str) -> nkeys::KeyPair {
        let seeds = self.seeds.lock().expect("seeds");
        nkeys::KeyPair::from_seed(seeds.get(id).expect("registered here")).expect("seed")
    }

    /// Opens a hidden value stored by the fixture's gateway (sealed to its own key).
    pub fn open_at_rest(&self, value: &Value) -> Value {
        let keys = flue_gateway::state::StateDir::open(&self.state_dir())
            .expect("state dir")
            .gateway_keys()
            .expect("keys");
        seal::open(value, &keys.sealing, &keys.sealing).expect("opens")
    }

    /// The gateway's state dir, for a second gateway with the same keys.
    pub fn state_dir(&self) -> std::path::PathBuf {
        self.state.path().join("gateway")
    }

    pub async fn call(
        &self,
        method: Method,
        uri: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut req = Request::builder().method(method).uri(uri);
        let body = match body {
            Some(v) => {
                req = req.header(header::CONTENT_TYPE, "application/json");
                Body::from(serde_json::to_vec(&v).expect("json"))
            }
            None => Body::empty(),
        };
        self.send(req.body(body).expect("request")).await
    }

    /// Sends `req`, with a token of a role its route allows unless it has one already.
    pub async fn send(&self, mut req: Request<Body>) -> (StatusCode, Value) {
        if !req.headers().contains_key(header::AUTHORIZATION) {
            let token = self.tokens.for_route(req.method(), req.uri().path());
            let value = format!("Bearer {token}").parse().expect("header value");
            req.headers_mut().insert(header::AUTHORIZATION, value);
        }
        let resp = self.app.clone().oneshot(req).await.expect("infallible");
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .expect("body");
        let value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| json!(String::from_utf8_lossy(&bytes)));
        (status, value)
    }

    pub async fn post_raw(
        &self,
        uri: &str,
        content_type: Option<&str>,
        body: impl Into<Body>,
    ) -> (StatusCode, Value) {
        let mut req = Request::builder().method(Method::POST).uri(uri);
        if let Some(ct) = content_type {
            req = req.header(header::CONTENT_TYPE, ct);
        }
        self.send(req.body(body.into()).expect("request")).await
    }

    pub async fn jetstream(&self) -> jetstream::Context {
        jetstream::new(async_nats::connect(self.nats.url()).await.expect("connect"))
    }

    /// Stops the gateway and starts a new one on the same broker and state dir (what a
    /// restart or a second gateway sees), its config changed by `tweak` first.
    pub async fn restart_with(&mut self, tweak: impl FnOnce(&mut Config)) {
        if let Some(g) = self.gateway.take() {
            g.shutdown().await;
        }
        let mut config = Config::new(self.nats.url());
        config.listen = "127.0.0.1:0".parse().expect("addr");
        config.timeout_sweep_ms = 50;
        config.state_dir = self.state_dir();
        config.insecure_dev_broker = true;
        tweak(&mut config);
        let gateway = Gateway::start(config).await.expect("gateway restarts");
        self.app = gateway.router();
        self.gateway = Some(gateway);
    }

    /// The deployments bucket, as any client of the broker reads and writes it.
    pub async fn deployments_bucket(&self) -> jetstream::kv::Store {
        self.jetstream()
            .await
            .get_key_value(subject::DEPLOYMENTS_BUCKET)
            .await
            .expect("the deployments bucket")
    }

    /// Deployment `id`'s record of tenant `default` as stored (JSON), if there is one.
    pub async fn stored_record(&self, id: &str) -> Option<Value> {
        let entry = self
            .deployments_bucket()
            .await
            .get(format!("default.{id}"))
            .await
            .expect("read")?;
        Some(serde_json::from_slice(&entry).expect("a stored record is JSON"))
    }

    pub async fn shutdown(mut self) {
        if let Some(g) = self.gateway.take() {
            g.shutdown().await;
        }
    }
}

pub fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or_default()
}

pub fn message(body: &Value) -> &str {
    body["error"]["message"].as_str().unwrap_or_default()
}

pub fn script_config(id: &str) -> Value {
    json!({
        "id": id,
        "group": "script",
        "config": "#!/bin/sh\necho hi",
        "inputs": [{"name": "foo", "default": "dflt"}, {"name": "secret", "hidden": true}],
        "outputs": [{"name": "result"}]
    })
}

/// Returns the credentials minted for `web1` (its agent's keys).
pub async fn config_and_server(fx: &Fixture) -> AgentCredentials {
    let (s, _) = fx
        .call(Method::POST, "/v1/configs", Some(script_config("c1")))
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let (s, registration) = fx
        .call(Method::POST, "/v1/servers", Some(json!({"id": "web1"})))
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let text = registration["credentials"].as_str().expect("credentials");
    let creds = AgentCredentials::parse(text).expect("credentials parse");
    // The test plays web1's agent: its answers are signed with this seed.
    fx.seeds
        .lock()
        .expect("seeds")
        .insert("web1".to_owned(), creds.user.seed.clone());
    creds
}
