//! Tokens for the tests: one per role, minted in-process with the gateway's own library
//! from the test gateway's state directory, and HTTP clients that send the right one.
//!
//! Nothing here is a way around authentication: each token is an ordinary token of one
//! role, signed with the key the gateway under test reads from its temp state dir; the
//! harness merely picks, per request, a role the route allows
//! ([`flue_gateway::auth::roles`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use flue_gateway::auth::roles;
use flue_gateway::auth::token::{self, NewToken};
use flue_gateway::state::StateDir;
use flue_proto::TenantId;
use flue_proto::auth::Role;
use reqwest::{Method, RequestBuilder};
use time::OffsetDateTime;

/// How long the harness's tokens live: longer than any test.
const TTL: Duration = Duration::from_secs(24 * 3600);

/// One token per role for one tenant (`default` unless told; operator: no tenant), and
/// the secret.
pub struct Tokens {
    secret: Vec<u8>,
    by_role: BTreeMap<Role, String>,
}

impl Tokens {
    /// Makes (or reads) the keys of the state dir at `path` and mints one token per role
    /// of tenant `default`.
    pub fn new(path: &Path) -> Tokens {
        Tokens::for_tenant(path, &default_tenant())
    }

    /// [`Tokens::new`] for the tenant `tenant` (a gateway started with `--default-tenant`).
    pub fn for_tenant(path: &Path, tenant: &TenantId) -> Tokens {
        let keys = StateDir::open(path)
            .expect("open the gateway state dir")
            .gateway_keys()
            .expect("gateway keys");
        let secret = keys.token_secret.to_vec();
        let by_role = Role::ALL
            .into_iter()
            .map(|role| {
                let tenant = (role != Role::Operator).then(|| tenant.clone());
                (role, mint(&secret, role, tenant, TTL))
            })
            .collect();
        Tokens { secret, by_role }
    }

    /// The token of `role`.
    pub fn get(&self, role: Role) -> &str {
        &self.by_role[&role]
    }

    /// The key tokens are signed with (to make expired or foreign tokens in a test).
    pub fn secret(&self) -> &[u8] {
        &self.secret
    }

    /// A token of a role `method path` allows (engine for a path no role is named for).
    pub fn for_route(&self, method: &Method, path: &str) -> &str {
        let role = roles::allowed(method, path)
            .first()
            .copied()
            .unwrap_or(Role::Engine);
        self.get(role)
    }

    /// The token a `flue ARGS…` command line needs: admin to register or remove
    /// servers, to mint their credentials and listener credentials, operator for
    /// tenants, engine for everything else it does.
    pub fn for_cli(&self, args: &[&str]) -> &str {
        let words: Vec<&str> = args
            .iter()
            .copied()
            .filter(|a| !a.starts_with('-'))
            .collect();
        match words.as_slice() {
            [
                "server",
                "register" | "deregister" | "delete" | "remove" | "rotate-credentials",
                ..,
            ] => self.get(Role::Admin),
            ["tenant", ..] => self.get(Role::Operator),
            [
                "events",
                "credentials" | "consumers" | "delete-consumer",
                ..,
            ] => self.get(Role::Admin),
            _ => self.get(Role::Engine),
        }
    }
}

/// Mints a token with the gateway's library.
pub fn mint(secret: &[u8], role: Role, tenant: Option<TenantId>, ttl: Duration) -> String {
    let new = NewToken {
        name: format!("test-{role}"),
        tenant,
        role,
        ttl,
    };
    token::mint(secret, &new, OffsetDateTime::now_utc())
        .expect("mint a token")
        .token
}

/// The tenant every harness gateway serves.
pub fn default_tenant() -> TenantId {
    TenantId::new("default").expect("tenant id")
}

/// A `reqwest` client sending, on each request, a token of a role its route allows.
#[derive(Clone)]
pub struct Http {
    client: reqwest::Client,
    tokens: Arc<Tokens>,
}

impl Http {
    /// Wraps `client` (built as a test needs it) with the gateway's tokens.
    pub fn new(client: reqwest::Client, tokens: Arc<Tokens>) -> Http {
        Http { client, tokens }
    }

    /// `method url` with `Authorization: Bearer <token of an allowed role>`.
    pub fn request(&self, method: Method, url: impl AsRef<str>) -> RequestBuilder {
        let url = url.as_ref();
        let path = reqwest::Url::parse(url)
            .map(|u| u.path().to_owned())
            .unwrap_or_default();
        let token = self.tokens.for_route(&method, &path);
        self.client.request(method, url).bearer_auth(token)
    }

    /// `GET url`.
    pub fn get(&self, url: impl AsRef<str>) -> RequestBuilder {
        self.request(Method::GET, url)
    }

    /// `POST url`.
    pub fn post(&self, url: impl AsRef<str>) -> RequestBuilder {
        self.request(Method::POST, url)
    }

    /// `PUT url`.
    pub fn put(&self, url: impl AsRef<str>) -> RequestBuilder {
        self.request(Method::PUT, url)
    }

    /// `DELETE url`.
    pub fn delete(&self, url: impl AsRef<str>) -> RequestBuilder {
        self.request(Method::DELETE, url)
    }

    /// The client without any token (for refusal tests).
    pub fn anonymous(&self) -> &reqwest::Client {
        &self.client
    }
}
