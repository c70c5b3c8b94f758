//! NATS JWTs (v2): the claims of operators, accounts and users, and their encoding.
//!
//! The shape follows `nats-io/jwt` v2 (`claims.go`, `operator_claims.go`,
//! `account_claims.go`, `user_claims.go`, `types.go`): header
//! `{"typ":"JWT","alg":"ed25519-nkey"}`, then the claims, each part base64url without
//! padding, then the issuer nkey's ed25519 signature over `header.claims`. `jti` is, as in
//! `ClaimsData.hash`, the unpadded base32 of SHA-512/256 over the standard claims (`jti`
//! left out). nats-server itself is the judge: the integration tests start it with what
//! this module writes.

use std::collections::BTreeMap;

use data_encoding::{BASE32_NOPAD, BASE64URL_NOPAD};
use nkeys::KeyPair;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The JWT header every NATS v2 JWT carries.
const HEADER: &str = r#"{"typ":"JWT","alg":"ed25519-nkey"}"#;
/// The claims version nats-server expects of v2 JWTs.
const VERSION: u8 = 2;
/// `-1`: no limit, in every numeric limit of a NATS JWT.
pub const NO_LIMIT: i64 = -1;
/// The connection type of a leaf node's link (`nats-io/jwt` v2 `ConnectionTypeLeafnode`),
/// for [`User::allowed_connection_types`].
pub const CONNECTION_TYPE_LEAFNODE: &str = "LEAFNODE";

/// A NATS JWT's claims: the standard ones and the NATS-specific part `nats`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Claims<N> {
    /// Expiry (unix seconds), none when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exp: Option<i64>,
    /// The claims' id: a hash of the standard claims, set by [`encode`].
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub jti: String,
    /// Issued at (unix seconds), set by [`encode`]; a revocation covers JWTs issued at or
    /// before its time.
    pub iat: i64,
    /// The issuer's public nkey, set by [`encode`].
    pub iss: String,
    /// A name for people (tenant, server, role).
    pub name: String,
    /// The public nkey the claims are about.
    pub sub: String,
    /// The NATS-specific claims.
    pub nats: N,
}

impl<N> Claims<N> {
    /// Claims about `sub`, named `name`; [`encode`] fills in the rest.
    pub fn new(sub: impl Into<String>, name: impl Into<String>, nats: N) -> Self {
        Self {
            exp: None,
            jti: String::new(),
            iat: 0,
            iss: String::new(),
            name: name.into(),
            sub: sub.into(),
            nats,
        }
    }
}

/// The standard claims as `ClaimsData` marshals them (field order of the Go struct), what
/// `jti` hashes.
#[derive(Serialize)]
struct Standard<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    exp: Option<i64>,
    iat: i64,
    iss: &'a str,
    name: &'a str,
    sub: &'a str,
}

/// The `nats` part of an operator JWT.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Operator {
    /// Keys that may sign accounts besides the operator's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signing_keys: Vec<String>,
    /// The system account's public key.
    pub system_account: String,
    /// `operator`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Claims version, 2.
    pub version: u8,
}

impl Operator {
    /// An operator whose system account is `system_account`.
    pub fn new(system_account: impl Into<String>) -> Self {
        Self {
            signing_keys: Vec::new(),
            system_account: system_account.into(),
            kind: "operator".into(),
            version: VERSION,
        }
    }
}

/// The `nats` part of an account JWT.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Account {
    /// Connection, data and JetStream limits.
    pub limits: AccountLimits,
    /// Revoked user keys → unix seconds: a user JWT of that key issued at or before that
    /// time is refused, and its connections are closed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub revocations: BTreeMap<String, i64>,
    /// Permissions of users whose JWT sets none.
    #[serde(default, skip_serializing_if = "Permissions::is_empty")]
    pub default_permissions: Permissions,
    /// Subjects of other accounts this one reaches (a tenant's edge account: the agent
    /// services of its state account, [`super::edge`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub imports: Vec<Import>,
    /// Subjects other accounts may import (a tenant's state account: the agent services).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exports: Vec<Export>,
    /// `account`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Claims version, 2.
    pub version: u8,
}

impl Account {
    /// An account with these limits and nothing revoked.
    pub fn new(limits: AccountLimits) -> Self {
        Self {
            limits,
            revocations: BTreeMap::new(),
            default_permissions: Permissions::default(),
            imports: Vec::new(),
            exports: Vec::new(),
            kind: "account".into(),
            version: VERSION,
        }
    }
}

/// An export of an account JWT (`nats-io/jwt` v2 `Export`): a service, or a stream (the
/// data keys' puts, [`super::edge::data_puts`], into the edge account; the events, to the
/// listener account). Public: no activation token, so any account may import it, and only
/// the operator (the gateway's state directory) signs accounts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Export {
    /// A name for people.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The subject (wildcards allowed) requests, or a stream's messages, are published on.
    pub subject: String,
    /// `service` or `stream`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `Stream` when one request gets several answers (a pull of a batch), absent for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_type: Option<String>,
}

impl Export {
    /// A public service export of `subject`, one answer per request.
    pub fn service(name: impl Into<String>, subject: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            subject: subject.into(),
            kind: "service".into(),
            response_type: None,
        }
    }

    /// A public stream export of `subject`: its messages are delivered to importers'
    /// subscribers too; nothing an importer publishes comes back.
    pub fn stream(name: impl Into<String>, subject: impl Into<String>) -> Self {
        Self {
            kind: "stream".into(),
            ..Self::service(name, subject)
        }
    }

    /// A public service export of `subject` whose requests may get several answers.
    pub fn streamed_service(name: impl Into<String>, subject: impl Into<String>) -> Self {
        Self {
            response_type: Some("Stream".into()),
            ..Self::service(name, subject)
        }
    }
}

/// An import of an account JWT (`nats-io/jwt` v2 `Import`). A service: a request published
/// on `local_subject` (or `subject` when absent) in the importing account is published on
/// `subject` in `account`, and its answers come back. A stream: what is published on
/// `subject` in `account` is delivered to the importing account's subscribers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Import {
    /// A name for people.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The subject in the exporting account.
    pub subject: String,
    /// The exporting account's public key.
    pub account: String,
    /// The subject the importer's clients publish on, when not `subject`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_subject: Option<String>,
    /// `service` or `stream`.
    #[serde(rename = "type")]
    pub kind: String,
}

/// `limits` of an account JWT (`OperatorLimits`: NATS, account and JetStream limits
/// flattened). A JetStream limit of 0 (absent) disables JetStream for the account.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AccountLimits {
    /// Subscriptions.
    pub subs: i64,
    /// Bytes in flight.
    pub data: i64,
    /// Largest message payload.
    pub payload: i64,
    /// Imports.
    pub imports: i64,
    /// Exports.
    pub exports: i64,
    /// Whether exports may use wildcards.
    pub wildcards: bool,
    /// Client connections.
    pub conn: i64,
    /// Leaf node connections.
    pub leaf: i64,
    /// JetStream memory storage, bytes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub mem_storage: i64,
    /// JetStream file storage, bytes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub disk_storage: i64,
    /// JetStream streams.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub streams: i64,
    /// JetStream consumers.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub consumer: i64,
}

impl AccountLimits {
    /// No limits and no JetStream (the system account).
    pub fn unlimited_without_jetstream() -> Self {
        Self {
            subs: NO_LIMIT,
            data: NO_LIMIT,
            payload: NO_LIMIT,
            imports: NO_LIMIT,
            exports: NO_LIMIT,
            wildcards: true,
            conn: NO_LIMIT,
            leaf: NO_LIMIT,
            mem_storage: 0,
            disk_storage: 0,
            streams: 0,
            consumer: 0,
        }
    }

    /// No limits, JetStream included (a tenant's accounts: the broker's own limits and
    /// the streams' `max_consumers` are what bound them).
    pub fn unlimited_with_jetstream() -> Self {
        Self {
            mem_storage: NO_LIMIT,
            disk_storage: NO_LIMIT,
            streams: NO_LIMIT,
            consumer: NO_LIMIT,
            ..Self::unlimited_without_jetstream()
        }
    }
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// The `nats` part of a user JWT.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct User {
    /// Subjects the user may publish to; empty allows everything in its account.
    #[serde(rename = "pub", default, skip_serializing_if = "Permission::is_empty")]
    pub publish: Permission,
    /// Subjects the user may subscribe to; empty allows everything in its account.
    #[serde(rename = "sub", default, skip_serializing_if = "Permission::is_empty")]
    pub subscribe: Permission,
    /// Subscriptions.
    pub subs: i64,
    /// Bytes in flight.
    pub data: i64,
    /// Largest message payload.
    pub payload: i64,
    /// The only kinds of connection the user may make (e.g. [`CONNECTION_TYPE_LEAFNODE`]);
    /// empty allows every kind.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_connection_types: Vec<String>,
    /// `user`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Claims version, 2.
    pub version: u8,
}

impl User {
    /// A user with these permissions and no limits of its own (never a bearer token: the
    /// client must prove it holds the seed).
    pub fn new(permissions: Permissions) -> Self {
        Self {
            publish: permissions.publish,
            subscribe: permissions.subscribe,
            subs: NO_LIMIT,
            data: NO_LIMIT,
            payload: NO_LIMIT,
            allowed_connection_types: Vec::new(),
            kind: "user".into(),
            version: VERSION,
        }
    }
}

/// Publish and subscribe permissions.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Permissions {
    /// What may be published.
    #[serde(rename = "pub", default, skip_serializing_if = "Permission::is_empty")]
    pub publish: Permission,
    /// What may be subscribed to.
    #[serde(rename = "sub", default, skip_serializing_if = "Permission::is_empty")]
    pub subscribe: Permission,
}

impl Permissions {
    fn is_empty(&self) -> bool {
        self.publish.is_empty() && self.subscribe.is_empty()
    }
}

/// Allowed and denied subjects (wildcards allowed); deny wins.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Permission {
    /// Allowed subjects; empty with an empty `deny` means everything.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// Denied subjects.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
}

impl Permission {
    /// True when it restricts nothing.
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }
}

/// Why a JWT could not be made or read.
#[derive(Debug, thiserror::Error)]
pub enum JwtError {
    /// The key cannot sign (a public key only) or verify.
    #[error("nkey error: {0}")]
    Key(#[source] nkeys::error::Error),
    /// Not three base64url parts of JSON.
    #[error("not a NATS JWT: {0}")]
    Malformed(&'static str),
    /// The claims are not the JSON expected.
    #[error("the JWT claims are not valid")]
    Claims(#[source] serde_json::Error),
    /// The signature is not the issuer's.
    #[error("the JWT signature does not verify against its issuer")]
    BadSignature,
}

/// Signs `claims` as `issuer`: sets `iss`, `iat` (`now`, unix seconds) and `jti`, and
/// returns the JWT.
pub fn encode<N: Serialize>(
    issuer: &KeyPair,
    claims: &mut Claims<N>,
    now: i64,
) -> Result<String, JwtError> {
    claims.iss = issuer.public_key();
    claims.iat = now;
    claims.jti = String::new();
    let standard = Standard {
        exp: claims.exp,
        iat: claims.iat,
        iss: &claims.iss,
        name: &claims.name,
        sub: &claims.sub,
    };
    // Plain structs of strings and numbers always serialise.
    let standard = serde_json::to_vec(&standard).map_err(JwtError::Claims)?;
    let hash = ring::digest::digest(&ring::digest::SHA512_256, &standard);
    claims.jti = BASE32_NOPAD.encode(hash.as_ref());
    let body = serde_json::to_vec(claims).map_err(JwtError::Claims)?;
    let signed = format!(
        "{}.{}",
        BASE64URL_NOPAD.encode(HEADER.as_bytes()),
        BASE64URL_NOPAD.encode(&body)
    );
    let signature = issuer.sign(signed.as_bytes()).map_err(JwtError::Key)?;
    Ok(format!("{signed}.{}", BASE64URL_NOPAD.encode(&signature)))
}

/// Reads a JWT's claims after checking its header and its signature by the issuer it
/// names (who that issuer may be is the caller's question).
pub fn decode<N: DeserializeOwned>(jwt: &str) -> Result<Claims<N>, JwtError> {
    use flue_proto::nats_jwt::{NatsJwtError, verified_claims};
    verified_claims(jwt).map_err(|e| match e {
        NatsJwtError::Malformed(why) => JwtError::Malformed(why),
        NatsJwtError::Claims(e) => JwtError::Claims(e),
        NatsJwtError::Issuer => JwtError::Malformed("the issuer is not a public nkey"),
        NatsJwtError::BadSignature => JwtError::BadSignature,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_encoded_user_jwt_has_the_standard_structure_and_verifies() {
        let account = KeyPair::new_account();
        let user = KeyPair::new_user();
        let mut perms = Permissions::default();
        perms.publish.allow.push("flue.t.resp.s".into());
        let mut claims = Claims::new(user.public_key(), "web1", User::new(perms));
        let jwt = encode(&account, &mut claims, 1_700_000_000).expect("encodes");

        let parts: Vec<&str> = jwt.split('.').collect();
        assert_eq!(parts.len(), 3);
        let header = BASE64URL_NOPAD.decode(parts[0].as_bytes()).expect("b64");
        assert_eq!(header, HEADER.as_bytes());
        let body: serde_json::Value =
            serde_json::from_slice(&BASE64URL_NOPAD.decode(parts[1].as_bytes()).expect("b64"))
                .expect("json");
        assert_eq!(body["iss"], account.public_key());
        assert_eq!(body["sub"], user.public_key());
        assert_eq!(body["iat"], 1_700_000_000);
        assert_eq!(body["nats"]["type"], "user");
        assert_eq!(body["nats"]["version"], 2);
        assert_eq!(body["nats"]["pub"]["allow"][0], "flue.t.resp.s");
        assert!(body["nats"].get("bearer_token").is_none());
        assert!(body["nats"].get("issuer_account").is_none());
        // 32 bytes of SHA-512/256 in unpadded base32.
        assert_eq!(body["jti"].as_str().expect("jti").len(), 52);

        let back: Claims<User> = decode(&jwt).expect("decodes");
        assert_eq!(back, claims);
    }

    #[test]
    fn a_tampered_jwt_is_refused() {
        let account = KeyPair::new_account();
        let mut claims = Claims::new(
            KeyPair::new_user().public_key(),
            "u",
            User::new(Permissions::default()),
        );
        let jwt = encode(&account, &mut claims, 1).expect("encodes");
        claims.name = "someone else".into();
        let body = BASE64URL_NOPAD.encode(&serde_json::to_vec(&claims).expect("json"));
        let parts: Vec<&str> = jwt.split('.').collect();
        let forged = format!("{}.{body}.{}", parts[0], parts[2]);
        assert!(matches!(
            decode::<User>(&forged),
            Err(JwtError::BadSignature)
        ));
        assert!(matches!(decode::<User>("a.b"), Err(JwtError::Malformed(_))));
    }

    #[test]
    fn a_users_allowed_connection_types_are_written_only_when_restricted() {
        let mut user = User::new(Permissions::default());
        let open = serde_json::to_value(&user).expect("json");
        assert!(open.get("allowed_connection_types").is_none(), "{open}");
        user.allowed_connection_types = vec![CONNECTION_TYPE_LEAFNODE.to_owned()];
        let leaf = serde_json::to_value(&user).expect("json");
        assert_eq!(
            leaf["allowed_connection_types"],
            serde_json::json!(["LEAFNODE"])
        );
    }

    #[test]
    fn account_limits_enable_jetstream_only_when_asked() {
        let with = serde_json::to_value(AccountLimits::unlimited_with_jetstream()).expect("json");
        assert_eq!(with["consumer"], -1);
        assert_eq!(with["disk_storage"], -1);
        let without =
            serde_json::to_value(AccountLimits::unlimited_without_jetstream()).expect("json");
        assert!(without.get("disk_storage").is_none() && without.get("consumer").is_none());
    }
}
