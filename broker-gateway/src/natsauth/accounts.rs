//! The broker's keys in the state directory, and minting accounts and users with them.
//!
//! | file | what |
//! |---|---|
//! | `operator.nk`, `operator.jwt` | the operator: signs every account JWT |
//! | `system.nk`, `system.jwt` | the system account (the broker's own; account JWTs are pushed through it) |
//! | `accounts/<tenant>/account.nk`, `.jwt` | the tenant's (state) account: its streams, KV buckets, heartbeats, the gateway's users; exports the agents' services ([`super::edge`]) |
//! | `accounts/<tenant>/events.nk`, `.jwt` | the tenant's events account: the event stream `FLUE_EVT`; exports the listeners' services ([`super::listen`]) |
//! | `accounts/<tenant>/edge.nk`, `.jwt` | the tenant's edge account: no JetStream, imports the agents' services; its agents and leaf nodes |
//! | `accounts/<tenant>/listen.nk`, `.jwt` | the tenant's listener account: no JetStream, imports the listeners' services; its listeners |
//!
//! Keys are made once and kept; an account JWT is re-signed (a later `iat`) when a user is
//! revoked, never made afresh, so revocations survive. A state directory written before
//! the edge account existed (issue 22) is brought to this layout when its accounts are
//! read: the state account re-signed with its exports, the edge account made. One written
//! before the listener account existed has its events account re-signed with the
//! listeners' exports and every user it issued until then revoked (listeners of the
//! events account: their replies could reach its streams), the listener account made.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use flue_proto::TenantId;
use flue_proto::creds::UserCreds;
use nkeys::KeyPair;

use super::jwt::{self, Account, AccountLimits, Claims, Permissions, User};
use super::{NatsAuthError, edge, listen};
use crate::state::StateDir;

/// Operator seed file.
pub const OPERATOR_KEY: &str = "operator.nk";
/// Operator JWT file.
pub const OPERATOR_JWT: &str = "operator.jwt";
/// System account seed file.
pub const SYSTEM_KEY: &str = "system.nk";
/// System account JWT file.
pub const SYSTEM_JWT: &str = "system.jwt";
/// Directory of the tenants' accounts.
pub const ACCOUNTS_DIR: &str = "accounts";

/// Which of a tenant's four accounts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccountKind {
    /// The tenant (state) account: requests, responses, KV buckets, heartbeats; only the
    /// gateway's users.
    Tenant,
    /// The events account: the event stream only.
    Events,
    /// The edge account: no JetStream, the agents' services imported from the tenant
    /// account; agents and leaf nodes.
    Edge,
    /// The listener account: no JetStream, the listeners' services imported from the
    /// events account; listeners.
    Listen,
}

impl AccountKind {
    /// Every kind, each exporter before its importer (tenant before edge, events before
    /// listener).
    pub const ALL: [Self; 4] = [Self::Tenant, Self::Events, Self::Edge, Self::Listen];

    fn stem(self) -> &'static str {
        match self {
            Self::Tenant => "account",
            Self::Events => "events",
            Self::Edge => "edge",
            Self::Listen => "listen",
        }
    }

    fn name(self, tenant: &TenantId) -> String {
        match self {
            Self::Tenant => tenant.to_string(),
            Self::Events => format!("{tenant} events"),
            Self::Edge => format!("{tenant} edge"),
            Self::Listen => format!("{tenant} listeners"),
        }
    }

    /// What the account JWT holds besides its revocations: limits, imports, exports.
    /// `tenant_key` and `events_key` are the public keys of the tenant and events
    /// accounts (what the edge and listener accounts import from).
    fn shape(self, tenant: &TenantId, tenant_key: &str, events_key: &str) -> Account {
        match self {
            Self::Tenant => Account {
                exports: edge::exports(tenant),
                ..Account::new(AccountLimits::unlimited_with_jetstream())
            },
            Self::Events => Account {
                exports: listen::exports(tenant),
                ..Account::new(AccountLimits::unlimited_with_jetstream())
            },
            Self::Edge => Account {
                imports: edge::imports(tenant, tenant_key),
                ..Account::new(AccountLimits::unlimited_without_jetstream())
            },
            Self::Listen => Account {
                imports: listen::imports(tenant, events_key),
                ..Account::new(AccountLimits::unlimited_without_jetstream())
            },
        }
    }
}

/// Now, in unix seconds.
pub fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// The seed in `name` (made with `make` when missing) as a key pair.
pub fn key(dir: &StateDir, name: &str, make: fn() -> KeyPair) -> Result<KeyPair, NatsAuthError> {
    let seed = dir.load_or_create(name, || make().seed().map_err(|e| e.to_string()))?;
    KeyPair::from_seed(&seed).map_err(|e| NatsAuthError::BadKey {
        path: dir.path().join(name),
        reason: e.to_string(),
    })
}

/// The JWT in `name`, signed first by `sign` when missing.
pub fn jwt_file(
    dir: &StateDir,
    name: &str,
    sign: impl FnOnce() -> Result<String, jwt::JwtError>,
) -> Result<String, NatsAuthError> {
    let mut made = None;
    let text = dir.load_or_create(name, || match sign() {
        Ok(jwt) => Ok(jwt),
        Err(e) => {
            let reason = e.to_string();
            made = Some(e);
            Err(reason)
        }
    });
    match (text, made) {
        (_, Some(e)) => Err(e.into()),
        (text, None) => Ok(text?),
    }
}

/// The directory of `tenant`'s accounts (0700, made when missing).
pub fn tenant_dir(root: &Path, tenant: &TenantId) -> Result<StateDir, NatsAuthError> {
    StateDir::open(&root.join(ACCOUNTS_DIR))?;
    Ok(StateDir::open(
        &root.join(ACCOUNTS_DIR).join(tenant.as_str()),
    )?)
}

/// The tenants that have accounts, sorted.
pub fn tenants(root: &Path) -> Result<Vec<TenantId>, NatsAuthError> {
    let dir = root.join(ACCOUNTS_DIR);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(NatsAuthError::Io { path: dir, source }),
    };
    let mut tenants = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| NatsAuthError::Io {
            path: dir.clone(),
            source,
        })?;
        let name = entry.file_name();
        // Only directories named like a tenant id that hold an account key count.
        if let Some(tenant) = name.to_str().and_then(|n| n.parse::<TenantId>().ok())
            && entry.path().join("account.nk").exists()
        {
            tenants.push(tenant);
        }
    }
    tenants.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    Ok(tenants)
}

/// One of a tenant's accounts: its key and its current JWT.
pub struct AccountKeys {
    /// The account's key pair: signs its users.
    pub key: KeyPair,
    /// The account JWT the broker knows.
    pub jwt: String,
}

/// Loads (or makes, signed by `operator`) one of `tenant`'s accounts. One whose JWT lacks
/// the imports or exports of today's layout (a state directory of an older gateway) is
/// re-signed with them, its revocations kept.
pub fn account(
    dir: &StateDir,
    tenant: &TenantId,
    kind: AccountKind,
    operator: &KeyPair,
) -> Result<AccountKeys, NatsAuthError> {
    let tenant_key = key(
        dir,
        &format!("{}.nk", AccountKind::Tenant.stem()),
        KeyPair::new_account,
    )?;
    let events_key = key(
        dir,
        &format!("{}.nk", AccountKind::Events.stem()),
        KeyPair::new_account,
    )?;
    let key = match kind {
        AccountKind::Tenant => tenant_key.clone(),
        AccountKind::Events => events_key.clone(),
        _ => key(dir, &format!("{}.nk", kind.stem()), KeyPair::new_account)?,
    };
    let shape = kind.shape(tenant, &tenant_key.public_key(), &events_key.public_key());
    let name = format!("{}.jwt", kind.stem());
    let jwt = jwt_file(dir, &name, || {
        let mut claims = Claims::new(key.public_key(), kind.name(tenant), shape.clone());
        jwt::encode(operator, &mut claims, now())
    })?;
    let current: Claims<Account> = jwt::decode(&jwt)?;
    if current.nats.imports == shape.imports && current.nats.exports == shape.exports {
        return Ok(AccountKeys { key, jwt });
    }
    let _locked = lock(dir, kind)?;
    // Read again under the lock: another process may have re-signed it meanwhile.
    let text = dir.load_or_create(&name, || Err("the account JWT is missing".into()))?;
    let mut claims: Claims<Account> = jwt::decode(&text)?;
    if claims.nats.imports == shape.imports && claims.nats.exports == shape.exports {
        return Ok(AccountKeys { key, jwt: text });
    }
    let issued = now().max(claims.iat + 1);
    if kind == AccountKind::Events && !exports_listeners(&claims.nats, tenant) {
        // Users of the events account issued until now are listeners made before the
        // listener account (and gateways' own users, minted afresh at each start): every
        // one is revoked; `flue events credentials` mints listeners of the new account.
        claims
            .nats
            .revocations
            .insert(REVOKE_ALL.to_owned(), issued);
        tracing::warn!(
            %tenant,
            "listener credentials minted before the listener account (issue 22) are revoked: mint new ones (`flue events credentials`, `POST /v1/listener-credentials`)"
        );
    }
    claims.nats.imports = shape.imports;
    claims.nats.exports = shape.exports;
    claims.nats.limits = shape.limits;
    let jwt = jwt::encode(operator, &mut claims, issued)?;
    dir.write_secret(&name, &jwt)?;
    tracing::warn!(
        %tenant,
        account = kind.stem(),
        "account JWT re-signed for the state and edge layout (issue 22): agents minted before keep working until their server's credentials are rotated (`flue server rotate-credentials`); rotate every server, and run `flue-gateway leaf-config` again for each tenant network"
    );
    Ok(AccountKeys { key, jwt })
}

/// The revocation key standing for every user of the account (`jwt.All`): a user JWT
/// issued at or before its time is refused.
pub const REVOKE_ALL: &str = "*";

/// Whether the events account `claims` already export the listeners' services (an events
/// account of a state directory made before the listener account does not).
fn exports_listeners(claims: &Account, tenant: &TenantId) -> bool {
    let creates = flue_proto::subject::listener_creates(tenant);
    claims
        .exports
        .iter()
        .any(|e| e.subject.starts_with(&creates))
}

/// The time until which the account JWT `jwt` revokes every user ([`REVOKE_ALL`]), if it
/// does.
pub fn revoked_all(jwt: &str) -> Result<Option<i64>, NatsAuthError> {
    let claims: Claims<Account> = jwt::decode(jwt)?;
    Ok(claims.nats.revocations.get(REVOKE_ALL).copied())
}

/// Adds `user_pub` to the revocations of one of `tenant`'s accounts (JWTs of that user
/// issued now or before are refused), re-signs and stores the account JWT, and returns it.
pub fn revoke(
    dir: &StateDir,
    kind: AccountKind,
    operator: &KeyPair,
    user_pub: &str,
) -> Result<String, NatsAuthError> {
    check_user_key(user_pub)?;
    let _locked = lock(dir, kind)?;
    let name = format!("{}.jwt", kind.stem());
    let current = dir.load_or_create(&name, || Err("the account JWT is missing".into()))?;
    let mut claims: Claims<Account> = jwt::decode(&current)?;
    let now = now();
    claims.nats.revocations.insert(user_pub.to_owned(), now);
    // The broker keeps an update only if it is newer than the JWT it has.
    let issued = now.max(claims.iat + 1);
    let jwt = jwt::encode(operator, &mut claims, issued)?;
    dir.write_secret(&name, &jwt)?;
    Ok(jwt)
}

/// Locks one account's JWT against other processes until the file returned is dropped:
/// the gateway and `flue-gateway leaf-config` (offline, another process) both revoke, and
/// each reads, changes and writes the whole JWT, so one would lose the other's revocation.
fn lock(dir: &StateDir, kind: AccountKind) -> Result<std::fs::File, NatsAuthError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let path = dir.path().join(format!(".{}.lock", kind.stem()));
    let io = |source| {
        NatsAuthError::State(crate::state::StateError::Io {
            path: path.clone(),
            source,
        })
    };
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(io)?;
    // Held for the few milliseconds of a read, an edit and a write.
    file.lock().map_err(io)?;
    Ok(file)
}

/// A new user of `account` (a fresh nkey) with `permissions`: its `.creds`.
pub fn mint_user(
    account: &KeyPair,
    name: &str,
    permissions: Permissions,
) -> Result<UserCreds, NatsAuthError> {
    mint_user_after(account, name, permissions, None)
}

/// [`mint_user`], issued after `revoked_all` (an account's [`REVOKE_ALL`] time, which may
/// be this very second): nats-server checks neither the issue time's being past nor
/// anything but expiry and `nbf`.
pub fn mint_user_after(
    account: &KeyPair,
    name: &str,
    permissions: Permissions,
    revoked_all: Option<i64>,
) -> Result<UserCreds, NatsAuthError> {
    let user = KeyPair::new_user();
    let issued = revoked_all.map_or(now(), |t| now().max(t + 1));
    let mut claims = Claims::new(user.public_key(), name, User::new(permissions));
    let jwt = jwt::encode(account, &mut claims, issued)?;
    let seed = user.seed().map_err(jwt::JwtError::Key)?;
    Ok(UserCreds { jwt, seed })
}

/// A new user of `account` (a fresh nkey) that only a leaf node's link may use: a plain
/// client connection with it is refused by the broker (`allowed_connection_types`).
pub fn mint_leaf_user(
    account: &KeyPair,
    name: &str,
    permissions: Permissions,
) -> Result<UserCreds, NatsAuthError> {
    let user = KeyPair::new_user();
    let mut claims = User::new(permissions);
    claims.allowed_connection_types = vec![jwt::CONNECTION_TYPE_LEAFNODE.to_owned()];
    let mut claims = Claims::new(user.public_key(), name, claims);
    let jwt = jwt::encode(account, &mut claims, now())?;
    let seed = user.seed().map_err(jwt::JwtError::Key)?;
    Ok(UserCreds { jwt, seed })
}

/// A user JWT for the user key `user_pub` (whose seed someone else holds), signed by
/// `account`.
pub fn sign_user(
    account: &KeyPair,
    user_pub: &str,
    name: &str,
    permissions: Permissions,
) -> Result<String, NatsAuthError> {
    check_user_key(user_pub)?;
    let mut claims = Claims::new(user_pub, name, User::new(permissions));
    Ok(jwt::encode(account, &mut claims, now())?)
}

/// Refuses anything but a user public key (`U…`).
fn check_user_key(user_pub: &str) -> Result<(), NatsAuthError> {
    match KeyPair::from_public_key(user_pub).map(|k| k.key_pair_type()) {
        Ok(nkeys::KeyPairType::User) => Ok(()),
        _ => Err(NatsAuthError::NotAUserKey(user_pub.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_state_account_is_re_signed_with_its_exports_and_keeps_its_revocations() {
        let root = tempfile::tempdir().expect("tempdir");
        let operator = KeyPair::new_operator();
        let tenant: TenantId = "acme".parse().expect("id");
        let dir = tenant_dir(root.path(), &tenant).expect("dir");
        // The layout before the edge account: the tenant account alone, no exports, one
        // revoked user.
        let key = key(&dir, "account.nk", KeyPair::new_account).expect("key");
        let mut old = Claims::new(
            key.public_key(),
            "acme",
            Account::new(AccountLimits::unlimited_with_jetstream()),
        );
        let revoked = KeyPair::new_user().public_key();
        old.nats.revocations.insert(revoked.clone(), 1_000);
        let far_future = now() + 1_000;
        let jwt = jwt::encode(&operator, &mut old, far_future).expect("signed");
        dir.write_secret("account.jwt", &jwt).expect("written");

        let state = account(&dir, &tenant, AccountKind::Tenant, &operator).expect("state");
        let claims: Claims<Account> = jwt::decode(&state.jwt).expect("claims");
        assert_eq!(claims.nats.exports, edge::exports(&tenant));
        assert_eq!(claims.nats.revocations.get(&revoked), Some(&1_000));
        assert!(
            claims.iat > far_future,
            "not newer than the JWT the broker holds"
        );
        let stored = std::fs::read_to_string(dir.path().join("account.jwt")).expect("read");
        assert_eq!(stored.trim(), state.jwt, "the re-signed JWT is stored");

        let edge_account = account(&dir, &tenant, AccountKind::Edge, &operator).expect("edge");
        let edge: Claims<Account> = jwt::decode(&edge_account.jwt).expect("claims");
        assert_eq!(edge.nats.imports, edge::imports(&tenant, &key.public_key()));
        assert_eq!(
            edge.nats.limits,
            AccountLimits::unlimited_without_jetstream()
        );
        // Read again, nothing changes.
        let again = account(&dir, &tenant, AccountKind::Tenant, &operator).expect("state");
        assert_eq!(again.jwt, state.jwt);
    }

    #[test]
    fn an_older_events_account_revokes_every_user_issued_before_and_later_users_are_issued_after() {
        let root = tempfile::tempdir().expect("tempdir");
        let operator = KeyPair::new_operator();
        let tenant: TenantId = "acme".parse().expect("id");
        let dir = tenant_dir(root.path(), &tenant).expect("dir");
        // The layout before the listener account: an events account without exports.
        let events_key = key(&dir, "events.nk", KeyPair::new_account).expect("key");
        let mut old = Claims::new(
            events_key.public_key(),
            "acme events",
            Account::new(AccountLimits::unlimited_with_jetstream()),
        );
        let jwt = jwt::encode(&operator, &mut old, now() - 10).expect("signed");
        dir.write_secret("events.jwt", &jwt).expect("written");

        let events = account(&dir, &tenant, AccountKind::Events, &operator).expect("events");
        let claims: Claims<Account> = jwt::decode(&events.jwt).expect("claims");
        assert_eq!(claims.nats.exports, listen::exports(&tenant));
        let all = revoked_all(&events.jwt)
            .expect("read")
            .expect("every user revoked");
        assert!(all >= claims.iat, "{all} {}", claims.iat);
        // A user minted now (the gateway's own) is issued after that time.
        let user =
            mint_user_after(&events.key, "gw", Permissions::default(), Some(all)).expect("minted");
        let user: Claims<User> = jwt::decode(&user.jwt).expect("claims");
        assert!(user.iat > all);
        // Read again: re-signed no more, nothing revoked again.
        let again = account(&dir, &tenant, AccountKind::Events, &operator).expect("events");
        assert_eq!(again.jwt, events.jwt);
        let listen = account(&dir, &tenant, AccountKind::Listen, &operator).expect("listen");
        let listen: Claims<Account> = jwt::decode(&listen.jwt).expect("claims");
        assert_eq!(
            listen.nats.imports,
            listen::imports(&tenant, &events_key.public_key())
        );
        assert!(listen.nats.revocations.is_empty());
    }
}
