//! Credentials files: the nsc-style `.creds` text NATS tools read (a user JWT and the user's
//! nkey seed), and the agent's bundle, which is such a file followed by one Flue block.
//!
//! ```text
//! -----BEGIN NATS USER JWT-----
//! eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ...
//! ------END NATS USER JWT------
//!
//! ************************* IMPORTANT *************************
//! ...
//! -----BEGIN USER NKEY SEED-----
//! SUAM...
//! ------END USER NKEY SEED------
//!
//! *************************************************************
//!
//! -----BEGIN FLUE AGENT SETTINGS-----
//! {"tenant":"acme","server":"web1","gateway_key":"N...","gateway_xkey":"X...","xkey_seed":"SX..."}
//! ------END FLUE AGENT SETTINGS------
//! ```
//!
//! NATS tools (`nats --creds`, nats.go, nats-py, async-nats) take the first two blocks and
//! ignore the third: its line holds `{`, `"` and `:`, which their block pattern never
//! matches. The whole file is a secret: write it with mode 0600.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::ids::{ServerId, TenantId};

const JWT_BEGIN: &str = "-----BEGIN NATS USER JWT-----";
const JWT_END: &str = "------END NATS USER JWT------";
const SEED_BEGIN: &str = "-----BEGIN USER NKEY SEED-----";
const SEED_END: &str = "------END USER NKEY SEED------";
const FLUE_BEGIN: &str = "-----BEGIN FLUE AGENT SETTINGS-----";
const FLUE_END: &str = "------END FLUE AGENT SETTINGS------";

/// The answer of `POST /v1/listener-credentials`: a new user of the caller's tenant's
/// events account, allowed to read its events and replay them with its own consumers (at
/// most `consumers`, by those names), nothing else. Its `Debug` form hides the credentials.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ListenerCredentials {
    /// The tenant whose events it reads.
    pub tenant: TenantId,
    /// The `.creds` text (user JWT and seed): a secret, write it with mode 0600.
    pub credentials: String,
    /// The JetStream domain to address (`nc.jetstream(domain=…)`).
    pub js_domain: String,
    /// The event stream's name.
    pub stream: String,
    /// The listener's id (`GET /v1/listener-consumers` shows it with each consumer).
    #[serde(default)]
    pub listener: String,
    /// The only consumer names it may create on the stream (`lsn-<listener>-1` …): at
    /// most this many consumers at once. Give one as the consumer's name (an ordered
    /// consumer's too); an unnamed consumer is refused.
    #[serde(default)]
    pub consumers: Vec<String>,
}

impl fmt::Debug for ListenerCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListenerCredentials")
            .field("tenant", &self.tenant)
            .field("credentials", &"<hidden>")
            .field("js_domain", &self.js_domain)
            .field("stream", &self.stream)
            .field("listener", &self.listener)
            .field("consumers", &self.consumers)
            .finish()
    }
}

/// A NATS listener's consumer on the event stream, as `GET /v1/listener-consumers` shows
/// it to its tenant's admin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ListenerConsumer {
    /// Its name: `lsn-<listener>-<n>`, or any name a listener credential minted before
    /// names were bounded gave it.
    pub name: String,
    /// The listener credential whose consumer it is (its `listener` id); absent for a
    /// name no current credential can make.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listener: Option<String>,
    /// When the broker created it.
    #[serde(with = "time::serde::rfc3339")]
    pub created: time::OffsetDateTime,
    /// Events of the stream it has not delivered yet.
    pub pending: u64,
    /// The last time it delivered an event, if it did.
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub last_active: Option<time::OffsetDateTime>,
    /// Seconds it may stay idle before the broker deletes it (0: never, a consumer made
    /// before the stream had an idle limit).
    pub idle_limit_secs: u64,
}

/// The answer of `GET /v1/listener-consumers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ListenerConsumers {
    /// Every listener consumer of the tenant's event stream, by name.
    pub consumers: Vec<ListenerConsumer>,
}

/// A NATS user: its JWT (signed by an account) and its nkey seed.
#[derive(Clone, PartialEq, Eq)]
pub struct UserCreds {
    /// The user JWT: public, signed by the account that issued it.
    pub jwt: String,
    /// The user's nkey seed (`SU...`): secret; proves the identity the JWT names.
    pub seed: String,
}

impl UserCreds {
    /// The nsc-style text of a `.creds` file.
    pub fn to_text(&self) -> String {
        format!(
            "{JWT_BEGIN}\n{jwt}\n{JWT_END}\n\n\
             ************************* IMPORTANT *************************\n\
             NKEY Seed printed below can be used to sign and prove identity.\n\
             NKEYs are sensitive and should be treated as secrets.\n\n\
             {SEED_BEGIN}\n{seed}\n{SEED_END}\n\n\
             *************************************************************\n",
            jwt = self.jwt,
            seed = self.seed,
        )
    }

    /// Reads the JWT and seed blocks of a `.creds` text. The seed must not be empty; the
    /// JWT block may be (credentials minted where the broker does not check users).
    pub fn parse(text: &str) -> Result<Self, CredsError> {
        let seed = block(text, SEED_BEGIN, SEED_END).filter(|s| !s.is_empty());
        Ok(Self {
            jwt: block(text, JWT_BEGIN, JWT_END).ok_or(CredsError::Missing("user JWT"))?,
            seed: seed.ok_or(CredsError::Missing("user nkey seed"))?,
        })
    }
}

impl fmt::Debug for UserCreds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserCreds")
            .field("jwt", &self.jwt)
            .field("seed", &"<hidden>")
            .finish()
    }
}

/// What an agent needs besides its NATS user, carried in its credentials file.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AgentSettings {
    /// The tenant the server belongs to.
    pub tenant: TenantId,
    /// The server these credentials were minted for.
    pub server: ServerId,
    /// The gateway's request-signing public key (an ed25519 nkey): the agent runs only
    /// requests signed by it.
    pub gateway_key: String,
    /// The gateway's public curve25519 key (`X...`): hidden outputs are sealed to it.
    pub gateway_xkey: String,
    /// This server's curve25519 seed (`SX...`): hidden inputs are sealed to its public key.
    pub xkey_seed: String,
    /// The JetStream domain of the hub, when the agent reaches it through a leaf node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub js_domain: Option<String>,
}

impl fmt::Debug for AgentSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentSettings")
            .field("tenant", &self.tenant)
            .field("server", &self.server)
            .field("gateway_key", &self.gateway_key)
            .field("gateway_xkey", &self.gateway_xkey)
            .field("xkey_seed", &"<hidden>")
            .field("js_domain", &self.js_domain)
            .finish()
    }
}

/// An agent's credentials file: its NATS user (whose seed also signs its answers) and its
/// [`AgentSettings`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentCredentials {
    /// The server's NATS user.
    pub user: UserCreds,
    /// Keys and names the agent needs.
    pub settings: AgentSettings,
}

impl AgentCredentials {
    /// The file's text: a `.creds` file NATS tools can read, then the settings block.
    pub fn to_text(&self) -> String {
        // Serializing plain strings cannot fail.
        let settings = serde_json::to_string(&self.settings).unwrap_or_default();
        format!(
            "{}\n{FLUE_BEGIN}\n{settings}\n{FLUE_END}\n",
            self.user.to_text()
        )
    }

    /// Reads a credentials file's text.
    pub fn parse(text: &str) -> Result<Self, CredsError> {
        let user = UserCreds::parse(text)?;
        let settings = block(text, FLUE_BEGIN, FLUE_END).ok_or(CredsError::Missing(
            "Flue agent settings (a plain .creds file is not an agent's credentials)",
        ))?;
        let settings = serde_json::from_str(&settings).map_err(CredsError::Settings)?;
        Ok(Self { user, settings })
    }
}

/// The claims of a NATS user JWT an agent checks before using it: who issued it (its
/// account), for which user key, and when. Read by [`UserJwtClaims::verified`] only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserJwtClaims {
    /// `iss`: the public key of the account that signed it (`A…`).
    pub issuer: String,
    /// `sub`: the user public key it is about (`U…`).
    pub subject: String,
    /// `iat`: when it was issued (unix seconds).
    pub issued_at: i64,
    /// `exp`: when the broker stops accepting it (unix seconds); `None` when it never
    /// expires (Flue mints agent users without one).
    pub expires_at: Option<i64>,
    /// `name`: who it is for, for people (`agent <tenant>/<server>` for an agent's user).
    pub name: String,
    /// `nats.pub.allow`: the subjects it may publish on, which the broker enforces (an
    /// agent's name its own response and heartbeat subjects).
    pub publish_allowed: Vec<String>,
}

/// The part of a user JWT's claims [`UserJwtClaims`] reads.
#[derive(Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
struct RawUserClaims {
    iss: String,
    sub: String,
    iat: i64,
    #[serde(default)]
    exp: Option<i64>,
    #[serde(default)]
    name: String,
    nats: RawNats,
}

#[derive(Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
struct RawNats {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default, rename = "pub")]
    publish: RawPermission,
}

#[derive(Default, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
struct RawPermission {
    #[serde(default)]
    allow: Vec<String>,
}

impl UserJwtClaims {
    /// Reads a NATS v2 user JWT (`header.claims.signature`, base64url without padding)
    /// after checking its header, that it is a user's, and its ed25519 signature by the
    /// account it names as issuer. Who that account may be is the caller's question.
    pub fn verified(jwt: &str) -> Result<Self, CredsError> {
        use crate::nats_jwt::{NatsJwtError, verified_claims};
        let claims: RawUserClaims = verified_claims(jwt).map_err(|e| {
            CredsError::Jwt(match e {
                NatsJwtError::Malformed(why) => why,
                NatsJwtError::Claims(_) => "the claims are not a NATS JWT's",
                NatsJwtError::Issuer => "bad issuer key",
                NatsJwtError::BadSignature => "the signature is not its issuer's",
            })
        })?;
        if claims.nats.kind != "user" {
            return Err(CredsError::Jwt("it is not a user JWT"));
        }
        Ok(Self {
            issuer: claims.iss,
            subject: claims.sub,
            issued_at: claims.iat,
            expires_at: claims.exp.filter(|&exp| exp > 0),
            name: claims.name,
            publish_allowed: claims.nats.publish.allow,
        })
    }

    /// Whether it is the broker user of server `server` of `tenant`: it may publish that
    /// server's answers (`flue.<tenant>.resp.<server>`), the right only that server's
    /// agent user is given.
    pub fn is_agent_of(&self, tenant: &TenantId, server: &ServerId) -> bool {
        let own = crate::subject::response(tenant, server);
        self.publish_allowed.contains(&own)
    }

    /// The sealed request consumer it lets server `server` of `tenant` pull from
    /// ([`crate::subject::sealed_request_consumer_in`]), when the gateway named one.
    pub fn sealed_request_consumer(&self, tenant: &TenantId, server: &ServerId) -> Option<String> {
        crate::subject::sealed_request_consumer_in(
            tenant,
            server,
            self.publish_allowed.iter().map(String::as_str),
        )
    }

    /// The tenant and server whose answers it may publish, when it is an agent's user.
    pub fn agent_of(&self) -> Option<(TenantId, ServerId)> {
        self.publish_allowed.iter().find_map(|s| {
            let rest = s.strip_prefix("flue.")?;
            let (tenant, server) = rest.split_once(".resp.")?;
            Some((tenant.parse().ok()?, server.parse().ok()?))
        })
    }
}

/// Why a credentials text could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CredsError {
    /// A user JWT is not one, or its signature does not verify.
    #[error("not a valid NATS user JWT: {0}")]
    Jwt(&'static str),
    /// A block is absent or empty.
    #[error("the credentials file has no {0} block")]
    Missing(&'static str),
    /// The settings block is not the JSON expected.
    #[error("the Flue agent settings block is not valid")]
    Settings(#[source] serde_json::Error),
}

/// The trimmed text between the first `begin` line and the next `end` line (empty when
/// nothing is between them); `None` when there is no such block.
fn block(text: &str, begin: &str, end: &str) -> Option<String> {
    let mut lines = text.lines().map(str::trim);
    lines.find(|l| *l == begin)?;
    let mut inside = String::new();
    for line in lines {
        if line == end {
            return Some(inside);
        }
        inside.push_str(line);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> AgentCredentials {
        AgentCredentials {
            user: UserCreds {
                jwt: "eyJhbGc.eyJzdWIi.c2ln".into(),
                seed: "SUAEXAMPLESEED".into(),
            },
            settings: AgentSettings {
                tenant: "acme".parse().expect("id"),
                server: "web1".parse().expect("id"),
                gateway_key: "NGATEWAY".into(),
                gateway_xkey: "XGATEWAY".into(),
                xkey_seed: "SXSERVER".into(),
                js_domain: Some("flue".into()),
            },
        }
    }

    #[test]
    fn a_bundle_reads_back_as_written() {
        let creds = sample();
        assert_eq!(
            AgentCredentials::parse(&creds.to_text()).expect("parses"),
            creds
        );
        // CRLF line ends (a file edited on another system) read the same.
        let crlf = creds.to_text().replace('\n', "\r\n");
        assert_eq!(AgentCredentials::parse(&crlf).expect("parses"), creds);
    }

    #[test]
    fn a_bundle_is_a_creds_file() {
        let text = sample().to_text();
        assert_eq!(
            UserCreds::parse(&text).expect("user part"),
            sample().user,
            "NATS tools read the first two blocks"
        );
    }

    #[test]
    fn missing_parts_are_named() {
        let plain = sample().user.to_text();
        let e = AgentCredentials::parse(&plain).expect_err("no settings");
        assert!(e.to_string().contains("Flue agent settings"), "{e}");
        let e = UserCreds::parse("nothing here").expect_err("no jwt");
        assert!(e.to_string().contains("user JWT"), "{e}");
        let broken = sample()
            .to_text()
            .replace("\"tenant\":\"acme\"", "\"tenant\":\"a.b\"");
        assert!(matches!(
            AgentCredentials::parse(&broken),
            Err(CredsError::Settings(_))
        ));
    }

    /// A user JWT for `user` signed by `account`, with these extra claims.
    fn user_jwt(account: &nkeys::KeyPair, user: &str, extra: serde_json::Value) -> String {
        use data_encoding::BASE64URL_NOPAD;
        let header = BASE64URL_NOPAD.encode(br#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
        let mut claims = serde_json::json!({
            "iss": account.public_key(), "sub": user, "iat": 1_700_000_000,
            "nats": {"type": "user", "version": 2},
        });
        if let (Some(claims), Some(extra)) = (claims.as_object_mut(), extra.as_object()) {
            claims.extend(extra.clone());
        }
        let body = BASE64URL_NOPAD.encode(claims.to_string().as_bytes());
        let signed = format!("{header}.{body}");
        let signature = account.sign(signed.as_bytes()).expect("sign");
        format!("{signed}.{}", BASE64URL_NOPAD.encode(&signature))
    }

    #[test]
    fn a_user_jwts_expiry_is_read_and_none_means_it_never_expires() {
        let account = nkeys::KeyPair::new_account();
        let user = nkeys::KeyPair::new_user().public_key();
        let jwt = user_jwt(&account, &user, serde_json::json!({"exp": 1_800_000_000}));
        let claims = UserJwtClaims::verified(&jwt).expect("verifies");
        assert_eq!(claims.expires_at, Some(1_800_000_000));
        assert_eq!(
            (claims.subject, claims.issued_at),
            (user.clone(), 1_700_000_000)
        );
        let jwt = user_jwt(&account, &user, serde_json::json!({}));
        assert_eq!(
            UserJwtClaims::verified(&jwt).expect("verifies").expires_at,
            None
        );
        // A tampered body no longer verifies.
        let other = user_jwt(&account, &user, serde_json::json!({"exp": 1}));
        let mut parts: Vec<&str> = jwt.split('.').collect();
        parts[1] = other.split('.').nth(1).expect("body");
        assert!(UserJwtClaims::verified(&parts.join(".")).is_err());
    }

    #[test]
    fn a_user_jwt_names_the_server_whose_answers_it_may_publish() {
        let account = nkeys::KeyPair::new_account();
        let user = nkeys::KeyPair::new_user().public_key();
        let nats = serde_json::json!({"type": "user", "version": 2,
            "pub": {"allow": ["$JS.API.CONSUMER.INFO.FLUE_REQ.x", "flue.acme.resp.web2", "flue.acme.hb.web2"]}});
        let jwt = user_jwt(
            &account,
            &user,
            serde_json::json!({"name": "agent acme/web2", "nats": nats}),
        );
        let claims = UserJwtClaims::verified(&jwt).expect("verifies");
        assert_eq!(claims.name, "agent acme/web2");
        let (acme, web1, web2) = (
            "acme".parse().expect("id"),
            "web1".parse().expect("id"),
            "web2".parse().expect("id"),
        );
        assert!(claims.is_agent_of(&acme, &web2));
        assert!(!claims.is_agent_of(&acme, &web1));
        assert_eq!(claims.agent_of(), Some((acme, web2)));
        let listener = user_jwt(&account, &user, serde_json::json!({}));
        assert_eq!(
            UserJwtClaims::verified(&listener)
                .expect("verifies")
                .agent_of(),
            None
        );
    }

    #[test]
    fn debug_hides_the_seeds() {
        let shown = format!("{:?}", sample());
        assert!(
            !shown.contains("SUAEXAMPLESEED") && !shown.contains("SXSERVER"),
            "{shown}"
        );
    }
}
