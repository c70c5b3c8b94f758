//! `flue-client`: the typed Rust client (SDK) for the Flue gateway HTTP API.
//!
//! - [`Client`]: one async method per gateway endpoint, plus
//!   [`Client::wait_until_terminal`], which follows a deployment by long-polling;
//! - [`ClientError`]: why a call failed (API error, unreachable gateway, …);
//! - [`events`]: the event stream (SSE) as typed items.
//!
//! It compiles neither clap nor a YAML parser: the stack engine is `flue-stack`, the
//! command line `flue-cli`.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flue_proto::operation::{StackOperation, SubmitOperation};
use flue_proto::stack_export::{AbandonStack, StackExport};
use flue_proto::{
    Config, ConfigId, ConfigSpec, CreateDeployment, CreateTenant, Deployment, DeploymentId,
    DeploymentStatus, ErrorBody, NEXT_CURSOR_HEADER, PutStack, RegisterServer, Registration,
    Server, ServerId, Stack, StackId, StackUnit, Tenant,
};
use reqwest::{Method, RequestBuilder, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;

mod error;
pub mod events;
#[cfg(any(test, feature = "test-support"))]
pub mod test_support;
mod tls;

pub use error::ClientError;

/// Longest single long-poll the gateway accepts (`wait_secs` 0..=60).
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// How long an ordinary (non long-poll) request may take, connection included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long establishing a TCP connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Slack added to a long-poll's own wait before the client gives up on the request.
const LONG_POLL_SLACK: Duration = Duration::from_secs(15);
/// Largest page the gateway serves (`limit` 1..=1000).
const MAX_PAGE_LIMIT: usize = 1000;
/// Longest piece of a non-JSON error body quoted in an [`ClientError::Api`] message.
const MAX_QUOTED_BODY: usize = 200;

/// A handle on one gateway; cheap to clone (the connection pool is shared).
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: Url,
    /// Sent as `Authorization: Bearer` on every request; never printed.
    token: Option<Bearer>,
    /// Other gateways of the same cluster ([`Client::with_other_gateways`]).
    others: Vec<Client>,
}

/// Gives the bearer token to send with the next request: for a holder that renews a
/// short-lived token (the gateway's engine workers mint their own).
pub type TokenSource = Arc<dyn Fn() -> String + Send + Sync>;

/// Where the bearer token comes from.
#[derive(Clone)]
enum Bearer {
    Fixed(Arc<str>),
    Source(TokenSource),
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base.as_str())
            .field("token", &self.token.as_ref().map(|_| "<hidden>"))
            .finish()
    }
}

impl Client {
    /// Builds a client for the gateway at `base_url`, e.g. `http://127.0.0.1:8470`;
    /// an `https://` gateway is verified against the system's root certificates.
    ///
    /// A path in the URL is kept as a prefix, so a gateway behind a proxy at
    /// `http://host/flue/` works.
    pub fn new(base_url: &str) -> Result<Client, ClientError> {
        Client::with_ca(base_url, None)
    }

    /// Builds a client for the gateway at `base_url` that trusts only the CA
    /// certificates in `ca_file` (PEM) when given, else the system's root certificates.
    pub fn with_ca(base_url: &str, ca_file: Option<&Path>) -> Result<Client, ClientError> {
        let invalid = |reason: String| ClientError::InvalidUrl {
            url: base_url.to_owned(),
            reason,
        };
        let mut base = Url::parse(base_url).map_err(|e| invalid(e.to_string()))?;
        let https = match base.scheme() {
            "http" => false,
            "https" => true,
            other => {
                return Err(invalid(format!(
                    "scheme {other:?} is not supported, use http:// or https://"
                )));
            }
        };
        if base.query().is_some() || base.fragment().is_some() {
            return Err(invalid("must not have a query or fragment".to_owned()));
        }
        // `Url::join` replaces the last path segment unless the path ends with '/'.
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        let tls = tls::client_config(ca_file, https)?;
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .tls_backend_preconfigured(tls)
            .build()
            .map_err(|source| ClientError::Http {
                url: base.to_string(),
                source,
            })?;
        Ok(Client {
            http,
            base,
            token: None,
            others: Vec::new(),
        })
    }

    /// The same client knowing `others`, gateways of the same cluster (the same
    /// tenants, tokens, stacks and operations), which [`Client::gateways`] hands out: for
    /// a caller that follows an operation through whichever gateway answers.
    pub fn with_other_gateways(mut self, others: Vec<Client>) -> Client {
        self.others = others.into_iter().flat_map(|c| c.gateways()).collect();
        self
    }

    /// This gateway, then the others given to [`Client::with_other_gateways`], each a
    /// client of one gateway.
    pub fn gateways(&self) -> Vec<Client> {
        let mut first = self.clone();
        let others = std::mem::take(&mut first.others);
        std::iter::once(first).chain(others).collect()
    }

    /// The same client sending `token` (from `flue-gateway token` or `POST /v1/tokens`)
    /// as `Authorization: Bearer` on every request; an empty token sends none.
    pub fn with_token(mut self, token: impl Into<String>) -> Client {
        let token = token.into();
        self.token = (!token.trim().is_empty()).then(|| Bearer::Fixed(Arc::from(token.trim())));
        self
    }

    /// The same client asking `source` for the token before each request, so that a
    /// long operation outlives any one short-lived token.
    pub fn with_token_source(mut self, source: TokenSource) -> Client {
        self.token = Some(Bearer::Source(source));
        self
    }

    /// A request to `url` carrying the token, if there is one.
    pub(crate) fn request(&self, method: Method, url: Url) -> RequestBuilder {
        let request = self.http.request(method, url);
        match &self.token {
            Some(Bearer::Fixed(token)) => request.bearer_auth(token),
            Some(Bearer::Source(source)) => request.bearer_auth(source()),
            None => request,
        }
    }

    /// The gateway's base URL, always ending with `/`.
    pub fn base_url(&self) -> &Url {
        &self.base
    }

    /// `POST /v1/tenants`: creates a tenant (or returns the one stored under that id).
    pub async fn create_tenant(&self, tenant: &CreateTenant) -> Result<Tenant, ClientError> {
        self.send_json(Method::POST, "v1/tenants", tenant).await
    }

    /// `GET /v1/tenants`: the tenants the gateway serves, by id.
    pub async fn list_tenants(&self) -> Result<Vec<Tenant>, ClientError> {
        self.get("v1/tenants").await
    }

    /// `POST /v1/configs`: creates a config (or returns the identical one already stored).
    pub async fn create_config(&self, spec: &ConfigSpec) -> Result<Config, ClientError> {
        self.send_json(Method::POST, "v1/configs", spec).await
    }

    /// `GET /v1/configs/{id}`.
    pub async fn get_config(&self, id: &ConfigId) -> Result<Config, ClientError> {
        self.get(&format!("v1/configs/{id}")).await
    }

    /// `POST /v1/servers`: registers a server (idempotent) and returns its agent bootstrap.
    pub async fn register_server(
        &self,
        server: &RegisterServer,
    ) -> Result<Registration, ClientError> {
        self.send_json(Method::POST, "v1/servers", server).await
    }

    /// `POST /v1/servers/{id}/credentials`: mints new credentials for the server; the
    /// answer's `credentials` holds them (a secret, handed out once).
    pub async fn rotate_server_credentials(
        &self,
        id: &ServerId,
    ) -> Result<Registration, ClientError> {
        self.send_json(
            Method::POST,
            &format!("v1/servers/{id}/credentials"),
            &serde_json::json!({}),
        )
        .await
    }

    /// `POST /v1/listener-credentials` (admin): a new listener user of the caller's
    /// tenant's events account.
    pub async fn create_listener_credentials(
        &self,
    ) -> Result<flue_proto::creds::ListenerCredentials, ClientError> {
        self.send_json(
            Method::POST,
            "v1/listener-credentials",
            &serde_json::json!({}),
        )
        .await
    }

    /// `GET /v1/listener-consumers` (admin): the NATS listeners' consumers on the
    /// tenant's event stream.
    pub async fn list_listener_consumers(
        &self,
    ) -> Result<flue_proto::creds::ListenerConsumers, ClientError> {
        self.get("v1/listener-consumers").await
    }

    /// `DELETE /v1/listener-consumers/{name}` (admin).
    pub async fn delete_listener_consumer(&self, name: &str) -> Result<(), ClientError> {
        let mut url = self.url("v1/listener-consumers")?;
        let base = url.to_string();
        url.path_segments_mut()
            .map_err(|()| ClientError::InvalidUrl {
                url: base,
                reason: "the gateway URL cannot take a path".to_owned(),
            })?
            .push(name);
        let request = self
            .request(Method::DELETE, url.clone())
            .timeout(REQUEST_TIMEOUT);
        self.send_bytes(request, &url).await.map(drop)
    }

    /// `GET /v1/servers/{id}`.
    pub async fn get_server(&self, id: &ServerId) -> Result<Server, ClientError> {
        self.get(&format!("v1/servers/{id}")).await
    }

    /// `GET /v1/servers`, every page: every registered server, oldest first.
    pub async fn list_servers(&self) -> Result<Vec<Server>, ClientError> {
        self.list_servers_up_to(usize::MAX).await
    }

    /// The first `most` servers, oldest first, read page by page.
    pub async fn list_servers_up_to(&self, most: usize) -> Result<Vec<Server>, ClientError> {
        self.collect_pages("v1/servers?", most).await
    }

    /// `GET /v1/servers?limit=N&cursor=C`: one page of servers, oldest first, and the
    /// cursor of the next (none on the last page).
    pub async fn list_servers_page(
        &self,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<Page<Server>, ClientError> {
        self.get_page("v1/servers?", limit, cursor).await
    }

    /// The first `most` deployments (only `server`'s, if given) in creation order, as
    /// summaries (no outputs, stdout or stderr), read page by page.
    pub async fn list_deployments_up_to(
        &self,
        server: Option<&ServerId>,
        most: usize,
    ) -> Result<Vec<Deployment>, ClientError> {
        let base = match server {
            Some(s) => format!("v1/deployments?server={s}&"),
            None => "v1/deployments?".to_owned(),
        };
        self.collect_pages(&base, most).await
    }

    /// `GET /v1/deployments?limit=N&cursor=C`: one page of deployment summaries in
    /// creation order, and the cursor of the next (none on the last page).
    pub async fn list_deployments_page(
        &self,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<Page<Deployment>, ClientError> {
        self.get_page("v1/deployments?", limit, cursor).await
    }

    /// Follows the pages of `base` (a path ending in `?` or `&`) until `most` items or
    /// the last page.
    async fn collect_pages<T: DeserializeOwned>(
        &self,
        base: &str,
        most: usize,
    ) -> Result<Vec<T>, ClientError> {
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        while items.len() < most {
            let limit = (most - items.len()).min(MAX_PAGE_LIMIT);
            let page = self.get_page(base, limit, cursor.as_deref()).await?;
            items.extend(page.items);
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        items.truncate(most);
        Ok(items)
    }

    async fn get_page<T: DeserializeOwned>(
        &self,
        base: &str,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<Page<T>, ClientError> {
        let mut path = format!("{base}limit={limit}");
        if let Some(cursor) = cursor {
            // Cursors are hex: nothing to escape.
            path.push_str("&cursor=");
            path.push_str(cursor);
        }
        let url = self.url(&path)?;
        let request = self
            .request(Method::GET, url.clone())
            .timeout(REQUEST_TIMEOUT);
        let (body, next) = self
            .send_bytes_with(request, &url, NEXT_CURSOR_HEADER)
            .await?;
        let items =
            serde_json::from_slice(body.as_ref()).map_err(|source| ClientError::Decode {
                url: url.to_string(),
                source,
            })?;
        Ok(Page { items, next })
    }

    /// `DELETE /v1/servers/{id}`: deregisters the server (refused with 409 while it has
    /// QUEUED or IN_PROGRESS deployments).
    pub async fn delete_server(&self, id: &ServerId) -> Result<(), ClientError> {
        let url = self.url(&format!("v1/servers/{id}"))?;
        let request = self
            .request(Method::DELETE, url.clone())
            .timeout(REQUEST_TIMEOUT);
        self.send_bytes(request, &url).await.map(drop)
    }

    /// `GET /v1/servers/{id}/deployments`, every page: the server's deployments, oldest
    /// first.
    pub async fn list_server_deployments(
        &self,
        id: &ServerId,
    ) -> Result<Vec<Deployment>, ClientError> {
        self.collect_pages(&format!("v1/servers/{id}/deployments?"), usize::MAX)
            .await
    }

    /// `GET /v1/servers/{id}/deployments?limit=N&cursor=C`: one page of the server's
    /// deployments, oldest first, and the cursor of the next (none on the last page).
    pub async fn list_server_deployments_page(
        &self,
        id: &ServerId,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<Page<Deployment>, ClientError> {
        self.get_page(&format!("v1/servers/{id}/deployments?"), limit, cursor)
            .await
    }

    /// `POST /v1/deployments`: queues a deployment and returns it (status QUEUED).
    ///
    /// With [`CreateDeployment::skip_if_unchanged_from`], an unchanged deployment is not
    /// created and the one named there is returned instead (its id tells them apart).
    pub async fn create_deployment(
        &self,
        deployment: &CreateDeployment,
    ) -> Result<Deployment, ClientError> {
        self.send_json(Method::POST, "v1/deployments", deployment)
            .await
    }

    /// `PUT /v1/agent-builds/{sha256}/chunks/{n}`: uploads chunk `n` of the agent build
    /// whose SHA-256 is `sha256` ([`flue_proto::upgrade::CHUNK_SIZE`] bytes, the last
    /// one fewer).
    pub async fn put_build_chunk(
        &self,
        sha256: &str,
        n: u64,
        chunk: Vec<u8>,
    ) -> Result<(), ClientError> {
        let url = self.url(&format!("v1/agent-builds/{sha256}/chunks/{n}"))?;
        let request = self
            .request(Method::PUT, url.clone())
            .timeout(REQUEST_TIMEOUT)
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .body(chunk);
        self.send_bytes(request, &url).await.map(drop)
    }

    /// `GET /v1/deployments/{id}`.
    pub async fn get_deployment(&self, id: &DeploymentId) -> Result<Deployment, ClientError> {
        self.get(&format!("v1/deployments/{id}")).await
    }

    /// `GET /v1/stacks`, every page: every stack's head (no units), sorted by id.
    pub async fn list_stacks(&self) -> Result<Vec<Stack>, ClientError> {
        self.collect_pages("v1/stacks?", usize::MAX).await
    }

    /// `GET /v1/stacks?limit=N&cursor=C`: one page of stack heads (no units) sorted by
    /// id, and the cursor of the next (none on the last page).
    pub async fn list_stacks_page(
        &self,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<Page<Stack>, ClientError> {
        self.get_page("v1/stacks?", limit, cursor).await
    }

    /// `GET /v1/stacks/{id}/units?limit=N&cursor=C`: one page of the stack's units
    /// sorted by key, and the cursor of the next (none on the last page).
    pub async fn stack_units_page(
        &self,
        id: &StackId,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<Page<StackUnit>, ClientError> {
        self.get_page(&format!("v1/stacks/{id}/units?"), limit, cursor)
            .await
    }

    /// `GET /v1/stacks/{id}`: the whole stack, every unit included.
    pub async fn get_stack(&self, id: &StackId) -> Result<Stack, ClientError> {
        self.get(&format!("v1/stacks/{id}")).await
    }

    /// `PUT /v1/stacks/{id}`: creates the stack (no `expected_revision`; `conflict` when
    /// it exists) or replaces it if still at `expected_revision` (`revision_mismatch`
    /// otherwise); returns the stack as stored, with its new revision and the units the
    /// write named (`changed_units`; without it, every unit of `state.units`).
    pub async fn put_stack(&self, id: &StackId, put: &PutStack) -> Result<Stack, ClientError> {
        self.send_json(Method::PUT, &format!("v1/stacks/{id}"), put)
            .await
    }

    /// `POST /v1/stacks/{id}/operations`: queues a stack operation for the gateways'
    /// engine workers; returns it as queued (its id names it from then on).
    pub async fn submit_operation(
        &self,
        id: &StackId,
        body: &SubmitOperation,
    ) -> Result<StackOperation, ClientError> {
        self.send_json(Method::POST, &format!("v1/stacks/{id}/operations"), body)
            .await
    }

    /// `GET /v1/stacks/{id}/operations/{op}`: where the operation stands, with its
    /// progress lines.
    pub async fn get_operation(
        &self,
        id: &StackId,
        op: &str,
    ) -> Result<StackOperation, ClientError> {
        self.get(&format!("v1/stacks/{id}/operations/{op}")).await
    }

    /// The stack's `most` newest operations, newest first, read page by page.
    pub async fn list_operations_up_to(
        &self,
        id: &StackId,
        most: usize,
    ) -> Result<Vec<StackOperation>, ClientError> {
        self.collect_pages(&format!("v1/stacks/{id}/operations?"), most)
            .await
    }

    /// `GET /v1/stacks/{id}/operations?limit=N&cursor=C`: one page of the stack's
    /// operations, newest first, and the cursor of the next (none on the last page).
    pub async fn list_operations_page(
        &self,
        id: &StackId,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<Page<StackOperation>, ClientError> {
        self.get_page(&format!("v1/stacks/{id}/operations?"), limit, cursor)
            .await
    }

    /// `GET /v1/stacks/{id}/export`: the stack's whole record, the configs and
    /// deployments its units name and its data space (hidden values sealed).
    pub async fn export_stack(&self, id: &StackId) -> Result<StackExport, ClientError> {
        self.get(&format!("v1/stacks/{id}/export")).await
    }

    /// `POST /v1/stacks/{id}/abandon`: forgets the stack without running anything, if it
    /// is still at `expected_revision`.
    pub async fn abandon_stack(
        &self,
        id: &StackId,
        expected_revision: u64,
    ) -> Result<(), ClientError> {
        let url = self.url(&format!("v1/stacks/{id}/abandon"))?;
        let request = self
            .request(Method::POST, url.clone())
            .json(&AbandonStack { expected_revision })
            .timeout(REQUEST_TIMEOUT);
        self.send_bytes(request, &url).await.map(drop)
    }

    /// `POST /v1/stacks/{id}/adopt`: recreates the stack from an export without running
    /// anything; returns it as stored.
    pub async fn adopt_stack(
        &self,
        id: &StackId,
        export: &StackExport,
    ) -> Result<Stack, ClientError> {
        self.send_json(Method::POST, &format!("v1/stacks/{id}/adopt"), export)
            .await
    }

    /// `DELETE /v1/stacks/{id}`: removes the stack and its data space; with
    /// `expected_revision`, only if the stack is still at that revision.
    pub async fn delete_stack(
        &self,
        id: &StackId,
        expected_revision: Option<u64>,
    ) -> Result<(), ClientError> {
        let mut path = format!("v1/stacks/{id}");
        if let Some(revision) = expected_revision {
            path.push_str(&format!("?expected_revision={revision}"));
        }
        let url = self.url(&path)?;
        let request = self
            .request(Method::DELETE, url.clone())
            .timeout(REQUEST_TIMEOUT);
        self.send_bytes(request, &url).await.map(drop)
    }

    /// One long-poll: waits up to `wait` (clamped to [`MAX_WAIT`], rounded up to whole
    /// seconds) until the status differs from `after_status`, or without one until it
    /// is terminal, and returns the record as it then is.
    pub async fn wait_deployment(
        &self,
        id: &DeploymentId,
        after_status: Option<DeploymentStatus>,
        wait: Duration,
    ) -> Result<Deployment, ClientError> {
        let secs = wait_secs(wait);
        let mut path = format!("v1/deployments/{id}?wait_secs={secs}");
        if let Some(status) = after_status {
            path.push_str(&format!("&after_status={status}"));
        }
        let url = self.url(&path)?;
        let request = self
            .request(Method::GET, url.clone())
            .timeout(Duration::from_secs(secs) + LONG_POLL_SLACK);
        self.send(request, &url).await
    }

    /// Long-polls until the deployment is terminal, calling `on_change` with the record
    /// each time a new status is seen (the first read included), so a caller can show
    /// progress without polling at a fixed interval.
    ///
    /// Fails with [`ClientError::Timeout`] when `timeout` passes first.
    pub async fn wait_until_terminal(
        &self,
        id: &DeploymentId,
        timeout: Duration,
        mut on_change: impl FnMut(&Deployment),
    ) -> Result<Deployment, ClientError> {
        let started = Instant::now();
        let mut current = self.get_deployment(id).await?;
        on_change(&current);
        while !current.status.is_terminal() {
            let remaining = timeout.saturating_sub(started.elapsed());
            if remaining.is_zero() {
                return Err(ClientError::Timeout {
                    id: id.clone(),
                    waited: timeout,
                });
            }
            let next = self
                .wait_deployment(id, Some(current.status), remaining)
                .await?;
            if next.status != current.status {
                on_change(&next);
            }
            current = next;
        }
        Ok(current)
    }

    fn url(&self, path: &str) -> Result<Url, ClientError> {
        self.base.join(path).map_err(|e| ClientError::InvalidUrl {
            url: format!("{}{path}", self.base),
            reason: e.to_string(),
        })
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        let url = self.url(path)?;
        let request = self
            .request(Method::GET, url.clone())
            .timeout(REQUEST_TIMEOUT);
        self.send(request, &url).await
    }

    async fn send_json<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: &B,
    ) -> Result<T, ClientError> {
        let url = self.url(path)?;
        let request = self
            .request(method, url.clone())
            .timeout(REQUEST_TIMEOUT)
            .json(body);
        self.send(request, &url).await
    }

    async fn send<T: DeserializeOwned>(
        &self,
        request: RequestBuilder,
        url: &Url,
    ) -> Result<T, ClientError> {
        let body = self.send_bytes(request, url).await?;
        serde_json::from_slice(body.as_ref()).map_err(|source| ClientError::Decode {
            url: url.to_string(),
            source,
        })
    }

    /// Sends `request` and returns the body of a 2xx answer; any other is an error.
    async fn send_bytes(
        &self,
        request: RequestBuilder,
        url: &Url,
    ) -> Result<impl AsRef<[u8]> + use<>, ClientError> {
        self.send_bytes_with(request, url, "")
            .await
            .map(|(body, _)| body)
    }

    /// [`Client::send_bytes`], and the value of response header `header` if present.
    async fn send_bytes_with(
        &self,
        request: RequestBuilder,
        url: &Url,
        header: &str,
    ) -> Result<(impl AsRef<[u8]> + use<>, Option<String>), ClientError> {
        tracing::debug!(url = %url, "gateway request");
        let response = request
            .send()
            .await
            .map_err(|e| ClientError::transport(url, e))?;
        let value = (!header.is_empty())
            .then(|| response.headers().get(header))
            .flatten()
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let status = response.status().as_u16();
        let body = response
            .bytes()
            .await
            .map_err(|e| ClientError::transport(url, e))?;
        tracing::debug!(url = %url, status, bytes = body.len(), "gateway answer");
        if !(200..300).contains(&status) {
            return Err(api_error(status, &body));
        }
        Ok((body, value))
    }
}

/// One page of a paginated listing.
#[derive(Debug, Clone)]
pub struct Page<T> {
    /// The page's items.
    pub items: Vec<T>,
    /// The cursor of the next page; `None` on the last.
    pub next: Option<String>,
}

/// Whole seconds to ask the gateway to wait: rounded up, at most [`MAX_WAIT`].
fn wait_secs(wait: Duration) -> u64 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    secs.min(MAX_WAIT.as_secs())
}

/// Decodes an error answer; a body that is not an [`ErrorBody`] (a proxy's HTML page,
/// say) is quoted, shortened, under the code `unexpected_response`.
fn api_error(status: u16, body: &[u8]) -> ClientError {
    if let Ok(ErrorBody { error }) = serde_json::from_slice::<ErrorBody>(body) {
        return ClientError::Api {
            status,
            code: error.code,
            message: error.message,
        };
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    let message = match text.char_indices().nth(MAX_QUOTED_BODY) {
        _ if text.is_empty() => "empty body".to_owned(),
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    };
    ClientError::Api {
        status,
        code: "unexpected_response".to_owned(),
        message,
    }
}

#[cfg(test)]
mod tests;
