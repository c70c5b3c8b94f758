//! Broker authentication, the NATS way: nats-server in operator mode, one NATS account per
//! tenant (plus one holding only its events), users minted by the gateway.
//!
//! Key hierarchy: the **operator** (`O…`) signs the **accounts** (`A…`): the system
//! account and, per tenant, its tenant (state) account, its events account and its edge
//! account; each account signs its **users** (`U…`): the gateway's own users (the whole
//! state and events accounts), agents (edge account: their own queue, answers,
//! heartbeats, inbox and stacks' data keys: [`perms::agent`]), listeners (the listener
//! account, read only: [`perms::listener`]) and leaf nodes (the edge account). The edge
//! and listener accounts hold no stream: they reach the state and events accounts only
//! through the services [`edge`] and [`listen`] export, so no reply subject of an agent
//! or a listener can touch the tenant's streams. Every seed but the users' stays in the
//! gateway's state directory.
//!
//! - [`jwt`]: NATS JWT claims and their encoding;
//! - [`edge`]: the state account's exports and the edge account's imports;
//! - [`listen`]: the events account's exports and the listener account's imports;
//! - [`creates`]: listeners' consumer creations, checked and made by the gateway;
//! - [`perms`]: the agent's and the listener's permission sets;
//! - [`accounts`]: keys and account JWTs in the state directory, minting users;
//! - [`broker_conf`]: the hub's and a leaf node's nats-server configuration;
//! - [`cluster_conf`]: one configuration per node of a NATS cluster;
//! - [`push`]: sending account JWTs to the running broker (new tenants, revocations);
//! - [`admin`]: the `init`, `cluster-config`, `tenant create` and `leaf-config` subcommands.

pub mod accounts;
pub mod admin;
pub(crate) mod broker_conf;
pub(crate) mod cluster_conf;
pub mod creates;
pub(crate) mod edge;
pub mod jwt;
pub(crate) mod listen;
pub mod perms;
pub mod push;
mod users;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use flue_proto::creds::UserCreds;
use flue_proto::{ServerId, StackId, TenantId};
use nkeys::KeyPair;
use tokio::sync::Mutex;

pub use accounts::AccountKind;
use accounts::{OPERATOR_JWT, OPERATOR_KEY, SYSTEM_JWT, SYSTEM_KEY};
use broker_conf::{HubSettings, LeafSettings, Trust};
use jwt::{Account, AccountLimits, Claims, Operator, Permissions};
pub use users::BrokerUsers;

use crate::state::{StateDir, StateError};

/// Directory of the broker's files in the state directory.
pub const BROKER_DIR: &str = "broker";
/// The hub broker's configuration file, in [`BROKER_DIR`].
pub const BROKER_CONF: &str = "nats-server.conf";
/// The full resolver's directory, in [`BROKER_DIR`].
pub const RESOLVER_DIR: &str = "jwt";
/// A leaf node's configuration file, in the directory `leaf-config` writes.
pub const LEAF_CONF: &str = "leaf.conf";
/// A leaf node's credentials file, next to [`LEAF_CONF`].
pub const LEAF_CREDS: &str = "leaf.creds";
/// A leaf node's system user's credentials file, next to [`LEAF_CONF`].
pub const LEAF_SYSTEM_CREDS: &str = "leaf-system.creds";
/// A leaf node's resolver directory, next to [`LEAF_CONF`].
pub const LEAF_RESOLVER_DIR: &str = "jwt";

/// The broker's keys: mints users, re-signs accounts, writes broker configurations.
///
/// Cheap to clone. Its `Debug` form shows public keys only.
#[derive(Clone)]
pub struct NatsAuth {
    root: PathBuf,
    operator: Arc<KeyPair>,
    operator_jwt: Arc<str>,
    system: Arc<KeyPair>,
    system_jwt: Arc<str>,
    /// Serialises rewriting and pushing account JWTs: two revocations pushed out of order
    /// would let the older JWT (without the later revocation) win.
    updates: Arc<Mutex<()>>,
}

impl fmt::Debug for NatsAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NatsAuth")
            .field("root", &self.root)
            .field("operator", &self.operator.public_key())
            .field("system_account", &self.system.public_key())
            .finish()
    }
}

impl NatsAuth {
    /// Creates what is missing (operator, system account, `tenant`'s accounts) in the state
    /// directory `root`, keeping every key that exists.
    pub fn init(root: &Path, tenant: &TenantId) -> Result<Self, NatsAuthError> {
        let state = StateDir::open(root)?;
        let operator = accounts::key(&state, OPERATOR_KEY, KeyPair::new_operator)?;
        let system = accounts::key(&state, SYSTEM_KEY, KeyPair::new_account)?;
        let operator_jwt = accounts::jwt_file(&state, OPERATOR_JWT, || {
            let mut claims = Claims::new(
                operator.public_key(),
                "flue",
                Operator::new(system.public_key()),
            );
            jwt::encode(&operator, &mut claims, accounts::now())
        })?;
        let system_jwt = accounts::jwt_file(&state, SYSTEM_JWT, || {
            let account = Account::new(AccountLimits::unlimited_without_jetstream());
            let mut claims = Claims::new(system.public_key(), "SYS", account);
            jwt::encode(&operator, &mut claims, accounts::now())
        })?;
        let auth = Self::from_parts(root, operator, operator_jwt, system, system_jwt);
        auth.create_tenant_offline(tenant)?;
        Ok(auth)
    }

    /// Opens a state directory `init` has set up.
    pub fn open(root: &Path) -> Result<Self, NatsAuthError> {
        if !root.join(OPERATOR_KEY).exists() {
            return Err(NatsAuthError::NotInitialised(root.to_owned()));
        }
        let state = StateDir::open(root)?;
        let missing = || Err("missing: run `flue-gateway init`".to_owned());
        let operator = accounts::key(&state, OPERATOR_KEY, KeyPair::new_operator)?;
        let system = accounts::key(&state, SYSTEM_KEY, KeyPair::new_account)?;
        let operator_jwt = state.load_or_create(OPERATOR_JWT, missing)?;
        let system_jwt = state.load_or_create(SYSTEM_JWT, missing)?;
        Ok(Self::from_parts(
            root,
            operator,
            operator_jwt,
            system,
            system_jwt,
        ))
    }

    fn from_parts(
        root: &Path,
        operator: KeyPair,
        operator_jwt: String,
        system: KeyPair,
        system_jwt: String,
    ) -> Self {
        Self {
            root: root.to_owned(),
            operator: Arc::new(operator),
            operator_jwt: operator_jwt.into(),
            system: Arc::new(system),
            system_jwt: system_jwt.into(),
            updates: Arc::new(Mutex::new(())),
        }
    }

    /// The operator's public key (`O…`).
    pub fn operator_public_key(&self) -> String {
        self.operator.public_key()
    }

    /// The tenants that have accounts.
    pub fn tenants(&self) -> Result<Vec<TenantId>, NatsAuthError> {
        accounts::tenants(&self.root)
    }

    /// The public key of one of `tenant`'s accounts.
    pub fn account_public_key(
        &self,
        tenant: &TenantId,
        kind: AccountKind,
    ) -> Result<String, NatsAuthError> {
        Ok(self.account(tenant, kind)?.key.public_key())
    }

    /// Makes `tenant`'s four accounts in the state directory (kept if they exist, brought
    /// to today's layout if older); the broker learns of them at its next start (preload)
    /// or by [`NatsAuth::push_all`].
    pub fn create_tenant_offline(&self, tenant: &TenantId) -> Result<(), NatsAuthError> {
        let dir = accounts::tenant_dir(&self.root, tenant)?;
        for kind in AccountKind::ALL {
            accounts::account(&dir, tenant, kind, &self.operator)?;
        }
        Ok(())
    }

    /// Makes `tenant`'s accounts and pushes them to the broker `system` is connected to.
    pub async fn create_tenant(
        &self,
        tenant: &TenantId,
        system: &async_nats::Client,
    ) -> Result<(), NatsAuthError> {
        let _updating = self.updates.lock().await;
        self.create_tenant_offline(tenant)?;
        for kind in AccountKind::ALL {
            push::push(system, &self.account(tenant, kind)?.jwt).await?;
        }
        Ok(())
    }

    /// Pushes every account JWT (system account included) to the broker `system` is
    /// connected to, e.g. after a broker lost its resolver directory.
    pub async fn push_all(&self, system: &async_nats::Client) -> Result<(), NatsAuthError> {
        let _updating = self.updates.lock().await;
        for (_, jwt) in self.account_jwts()? {
            push::push(system, &jwt).await?;
        }
        Ok(())
    }

    /// Every account JWT by public key: the system account's, then each tenant's four
    /// (state, events, edge, listener: an exporter before its importer).
    pub fn account_jwts(&self) -> Result<Vec<(String, String)>, NatsAuthError> {
        let mut all = vec![(self.system.public_key(), self.system_jwt.to_string())];
        for tenant in self.tenants()? {
            for kind in AccountKind::ALL {
                let account = self.account(&tenant, kind)?;
                all.push((account.key.public_key(), account.jwt));
            }
        }
        Ok(all)
    }

    /// Writes the hub broker's configuration (`<state>/broker/nats-server.conf`, every
    /// account preloaded) and returns its path.
    pub fn write_broker_conf(&self, settings: &HubSettings) -> Result<PathBuf, NatsAuthError> {
        let broker = StateDir::open(&self.root.join(BROKER_DIR))?;
        let resolver = broker.path().join(RESOLVER_DIR);
        StateDir::open(&resolver)?;
        let trust = Trust {
            operator_jwt: &self.operator_jwt,
            system_account: &self.system.public_key(),
            accounts: self.account_jwts()?,
        };
        broker.write_secret(BROKER_CONF, &broker_conf::hub(settings, &trust, &resolver))?;
        Ok(broker.path().join(BROKER_CONF))
    }

    /// Writes a leaf node's configuration and its leaf user's credentials for a tenant's
    /// network ([`LeafNetwork`]) into `out` (`leaf.conf`, `leaf.creds`, both 0600). The leaf
    /// node is bound to the tenant's edge account (its agents are edge users) and preloads a
    /// stub of the state account ([`edge::stub_state_jwt`]); its user may do what the agents
    /// of the servers it serves need and nothing else ([`perms::leaf`]). The leaf user whose
    /// credentials `out` held (an earlier run, of the edge account or, written before the
    /// edge account existed, of the tenant account) is revoked in the account JWT stored
    /// here; the broker learns it at the gateway's next push of the accounts.
    pub fn write_leaf_conf(
        &self,
        network: &LeafNetwork,
        out: &Path,
    ) -> Result<LeafConf, NatsAuthError> {
        let tenant = &network.tenant;
        if network.servers.is_empty() {
            return Err(NatsAuthError::NoLeafServers);
        }
        let dir = StateDir::open(out)?;
        let account = self.account(tenant, AccountKind::Edge)?;
        let state = self.account(tenant, AccountKind::Tenant)?.key.public_key();
        // The leaf user these files replace is revoked first: should writing fail, the
        // files left behind hold a revoked user and a new run revokes it again, harmlessly.
        let mut replaced = None;
        for (kind, issuer) in [
            (AccountKind::Edge, account.key.public_key()),
            (AccountKind::Tenant, state.clone()),
        ] {
            if let Some(old) = replaced_leaf_user(&dir, &issuer) {
                accounts::revoke(&self.tenant_dir(tenant)?, kind, &self.operator, &old)?;
                replaced = Some(old);
            }
        }
        let account = self.account(tenant, AccountKind::Edge)?;
        let creds = self.leaf_creds(tenant, &network.servers)?;
        dir.write_secret(LEAF_CREDS, &creds.to_text())?;
        let system_creds = self.leaf_system_creds(&account.key.public_key())?;
        dir.write_secret(LEAF_SYSTEM_CREDS, &system_creds.to_text())?;
        let settings = LeafSettings {
            listen: network.listen.clone(),
            hub: network.hub.clone(),
            credentials: dir.path().join(LEAF_CREDS),
            account: account.key.public_key(),
            hub_ca: network.hub_ca.clone(),
            system_credentials: dir.path().join(LEAF_SYSTEM_CREDS),
            resolver_dir: dir.path().join(LEAF_RESOLVER_DIR),
        };
        let trust = Trust {
            operator_jwt: &self.operator_jwt,
            system_account: &self.system.public_key(),
            // nats-server refuses to start without the operator's system account; its
            // JWT is public and no user of it is bound to the hub through this leaf.
            accounts: vec![
                (self.system.public_key(), self.system_jwt.to_string()),
                (
                    state.clone(),
                    edge::stub_state_jwt(&self.operator, &state, tenant)?,
                ),
                (account.key.public_key(), account.jwt),
            ],
        };
        dir.write_secret(LEAF_CONF, &broker_conf::leaf(&settings, &trust))?;
        Ok(LeafConf {
            path: dir.path().join(LEAF_CONF),
            revoked: replaced,
        })
    }

    /// The gateway's users of `tenant` (a fresh nkey each call): the whole tenant account,
    /// and the whole events account.
    pub fn gateway_creds(
        &self,
        tenant: &TenantId,
    ) -> Result<(UserCreds, UserCreds), NatsAuthError> {
        let name = format!("flue-gateway {tenant}");
        let tenant_user = accounts::mint_user(
            &self.account(tenant, AccountKind::Tenant)?.key,
            &name,
            Permissions::default(),
        )?;
        // Issued after every user the events account revoked at once (listeners made
        // before the listener account, `accounts::account`).
        let events = self.account(tenant, AccountKind::Events)?;
        let after = accounts::revoked_all(&events.jwt)?;
        let events_user =
            accounts::mint_user_after(&events.key, &name, Permissions::default(), after)?;
        Ok((tenant_user, events_user))
    }

    /// A tenant leaf node's system account user (a fresh nkey): it may receive the JWT
    /// updates of `account` (the tenant's) and nothing else, and publish nothing, so a
    /// compromised tenant network gains no system power (see [`perms::leaf_system`]).
    /// Only a leaf node's link may use it: the broker refuses it to a plain client.
    pub fn leaf_system_creds(&self, account: &str) -> Result<UserCreds, NatsAuthError> {
        accounts::mint_leaf_user(
            &self.system,
            &format!("leaf system {account}"),
            perms::leaf_system(account),
        )
    }

    /// A system account user (a fresh nkey), to push account JWTs with.
    pub fn system_creds(&self) -> Result<UserCreds, NatsAuthError> {
        accounts::mint_user(&self.system, "flue-gateway system", Permissions::default())
    }

    /// The user JWT of server `server`'s agent, for the user key `user_pub` (the agent's
    /// seed is made by registration, not here), a user of `tenant`'s edge account allowed
    /// exactly [`perms::agent`]. Joining another stack needs a new JWT.
    pub fn agent_jwt(
        &self,
        tenant: &TenantId,
        server: &ServerId,
        user_pub: &str,
        stacks: &[StackId],
    ) -> Result<String, NatsAuthError> {
        let sealed = self.consumer_names(tenant)?.request(tenant, server);
        accounts::sign_user(
            &self.account(tenant, AccountKind::Edge)?.key,
            user_pub,
            &format!("agent {tenant}/{server}"),
            perms::agent(tenant, server, sealed.as_deref(), stacks),
        )
    }

    /// `tenant`'s sealed consumer names ([`crate::consumer_names`]), keyed by its state
    /// account's seed: every gateway of the tenant computes the same, nobody else can.
    pub fn consumer_names(
        &self,
        tenant: &TenantId,
    ) -> Result<crate::consumer_names::ConsumerNames, NatsAuthError> {
        let key = self.account(tenant, AccountKind::Tenant)?.key;
        let seed = key.seed().map_err(jwt::JwtError::Key)?;
        Ok(crate::consumer_names::ConsumerNames::sealed(
            seed.as_bytes(),
        ))
    }

    /// A new listener user of `tenant`'s listener account ([`perms::listener`]) and its
    /// listener id ([`flue_proto::subject::listener_id`], random), which names the
    /// consumers it may hold.
    pub fn listener_creds(&self, tenant: &TenantId) -> Result<(String, UserCreds), NatsAuthError> {
        let random = u64::try_from(uuid::Uuid::new_v4().as_u128() & u128::from(u64::MAX))
            .expect("masked to 64 bits");
        let listener = flue_proto::subject::listener_id(random);
        let creds = accounts::mint_user(
            &self.account(tenant, AccountKind::Listen)?.key,
            &format!("listener {tenant} {listener}"),
            perms::listener(tenant, &listener),
        )?;
        Ok((listener, creds))
    }

    /// A new leaf node user of `tenant`'s edge account for a leaf serving `servers`: their
    /// agents' rights and the tenant's data space ([`perms::leaf`]), so that the tenant
    /// network cannot reach another server's queue through the link (the leaf node also
    /// checks its own clients' permissions). Only a leaf node's link may use it: the broker
    /// refuses it to a plain client.
    pub fn leaf_creds(
        &self,
        tenant: &TenantId,
        servers: &[ServerId],
    ) -> Result<UserCreds, NatsAuthError> {
        let names: Vec<&str> = servers.iter().map(ServerId::as_str).collect();
        let sealed = self.consumer_names(tenant)?;
        accounts::mint_leaf_user(
            &self.account(tenant, AccountKind::Edge)?.key,
            &format!("leaf {tenant} {}", names.join(",")),
            perms::leaf(tenant, servers, |server| sealed.request(tenant, server)),
        )
    }

    /// Revokes the user `user_pub` of one of `tenant`'s accounts: every JWT of that key
    /// issued until now is refused, and the broker `system` is connected to closes its
    /// connections as soon as it has the re-signed account JWT (pushed here).
    pub async fn revoke_user(
        &self,
        tenant: &TenantId,
        kind: AccountKind,
        user_pub: &str,
        system: &async_nats::Client,
    ) -> Result<(), NatsAuthError> {
        let _updating = self.updates.lock().await;
        let dir = self.tenant_dir(tenant)?;
        let jwt = accounts::revoke(&dir, kind, &self.operator, user_pub)?;
        push::push(system, &jwt).await?;
        Ok(())
    }

    fn tenant_dir(&self, tenant: &TenantId) -> Result<StateDir, NatsAuthError> {
        let path = self.root.join(accounts::ACCOUNTS_DIR).join(tenant.as_str());
        if !path.join("account.nk").exists() {
            return Err(NatsAuthError::UnknownTenant(tenant.clone()));
        }
        accounts::tenant_dir(&self.root, tenant)
    }

    fn account(
        &self,
        tenant: &TenantId,
        kind: AccountKind,
    ) -> Result<accounts::AccountKeys, NatsAuthError> {
        accounts::account(&self.tenant_dir(tenant)?, tenant, kind, &self.operator)
    }
}

/// A tenant network's leaf node, as `flue-gateway leaf-config` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafNetwork {
    /// The tenant whose network it is.
    pub tenant: TenantId,
    /// The servers whose agents connect to the leaf node (at least one): its user may do
    /// what their agents need and nothing else. Adding a server to the network means
    /// writing the files again and restarting the leaf node.
    pub servers: Vec<ServerId>,
    /// The leaf's client listener (`HOST:PORT`), where the agents connect.
    pub listen: String,
    /// The hub's leaf node URL (`nats-leaf://HOST:PORT`).
    pub hub: String,
    /// The CA (PEM) the hub's certificate is verified against.
    pub hub_ca: Option<PathBuf>,
}

/// What [`NatsAuth::write_leaf_conf`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafConf {
    /// The leaf node's configuration file.
    pub path: PathBuf,
    /// The public key of the leaf user the new files replace, now revoked.
    pub revoked: Option<String>,
}

/// The tenant leaf user whose credentials `dir` holds, when `account` issued it: the
/// `leaf.creds` an earlier `leaf-config` wrote there. Anything else (no file, unreadable,
/// another account's user) is none: there is nothing of this account to revoke.
fn replaced_leaf_user(dir: &StateDir, account: &str) -> Option<String> {
    let text = std::fs::read_to_string(dir.path().join(LEAF_CREDS)).ok()?;
    let creds = UserCreds::parse(&text).ok()?;
    let claims = jwt::decode::<serde_json::Value>(&creds.jwt).ok()?;
    (claims.iss == account).then_some(claims.sub)
}

/// Why broker authentication could not be set up or used.
#[derive(Debug, thiserror::Error)]
pub enum NatsAuthError {
    /// The state directory or a file in it.
    #[error(transparent)]
    State(#[from] StateError),
    /// A directory could not be read.
    #[error("cannot read {}", path.display())]
    Io {
        /// The directory.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A seed file holds no valid nkey.
    #[error("{} is not a valid nkey seed: {reason}", path.display())]
    BadKey {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A JWT could not be made or read.
    #[error(transparent)]
    Jwt(#[from] jwt::JwtError),
    /// A `cluster-config` value is wrong.
    #[error(transparent)]
    Cluster(#[from] cluster_conf::ClusterError),
    /// `flue-gateway init` has not run on this state directory.
    #[error("{} holds no operator key: run `flue-gateway init --state-dir {}` first", .0.display(), .0.display())]
    NotInitialised(PathBuf),
    /// The tenant has no accounts.
    #[error("tenant {0} has no broker accounts: create it first")]
    UnknownTenant(TenantId),
    /// A leaf node was described without a server behind it.
    #[error("a leaf node serves at least one server (--server)")]
    NoLeafServers,
    /// Not a user public key (`U…`).
    #[error("{0:?} is not a NATS user public key")]
    NotAUserKey(String),
    /// The broker did not take an account JWT.
    #[error(transparent)]
    Push(#[from] push::PushError),
}
