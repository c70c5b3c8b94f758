//! Bearer tokens: minting and checking the JWTs (HS256 over the gateway's `token.key`)
//! whose claims are [`TokenClaims`].
//!
//! The check is all local (signature, expiry, kind); whether a token was revoked is the
//! caller's question ([`super::revoked`]), asked only of a token whose signature holds.

use std::time::Duration;

use flue_proto::TenantId;
use flue_proto::auth::{MAX_TOKEN_TTL_SECS, Role, TICKET_TTL_SECS, TokenClaims};
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use time::OffsetDateTime;

/// Why a token is not accepted. The messages are written for the client and never
/// quote the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not a JWT, or its claims are not Flue's.
    #[error("the bearer token is malformed (not a flue token)")]
    Malformed,
    /// Signed with another key (or altered).
    #[error("the bearer token's signature is not valid")]
    BadSignature,
    /// Past its `exp`.
    #[error("the bearer token has expired")]
    Expired,
    /// Its id is on the revocation list.
    #[error("the bearer token was revoked")]
    Revoked,
    /// An event-stream ticket used as a bearer token, or a token used as a ticket.
    #[error("{0}")]
    WrongKind(&'static str),
}

/// Why a token cannot be minted.
#[derive(Debug, thiserror::Error)]
pub enum MintError {
    /// The lifetime is 0 or longer than [`MAX_TOKEN_TTL_SECS`].
    #[error("ttl must be between 1 second and {MAX_TOKEN_TTL_SECS} seconds (366 days), got {0}")]
    Ttl(u64),
    /// The name is empty, too long or has control characters.
    #[error("name must be 1 to 128 printable characters")]
    Name,
    /// An operator token names a tenant, or another role names none.
    #[error("{0}")]
    Tenant(&'static str),
    /// The JWT library failed to sign.
    #[error("cannot sign the token")]
    Sign(#[source] jsonwebtoken::errors::Error),
}

/// What to put in a new token.
#[derive(Debug, Clone)]
pub struct NewToken {
    /// The holder's name (`sub`).
    pub name: String,
    /// Its tenant (none for an operator).
    pub tenant: Option<TenantId>,
    /// Its role.
    pub role: Role,
    /// Its lifetime.
    pub ttl: Duration,
}

/// A minted token and its claims.
#[derive(Clone)]
pub struct Minted {
    /// The JWT text.
    pub token: String,
    /// What it says.
    pub claims: TokenClaims,
}

impl std::fmt::Debug for Minted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Minted")
            .field("token", &"<hidden>")
            .field("claims", &self.claims)
            .finish()
    }
}

/// Mints a token valid from `now` for `new.ttl`, with a fresh random id.
pub fn mint(secret: &[u8], new: &NewToken, now: OffsetDateTime) -> Result<Minted, MintError> {
    let ttl = new.ttl.as_secs();
    if ttl == 0 || ttl > MAX_TOKEN_TTL_SECS {
        return Err(MintError::Ttl(ttl));
    }
    let name_ok = !new.name.is_empty()
        && new.name.chars().count() <= 128
        && !new.name.chars().any(char::is_control);
    if !name_ok {
        return Err(MintError::Name);
    }
    match (new.role, &new.tenant) {
        (Role::Operator, Some(_)) => {
            return Err(MintError::Tenant("an operator token belongs to no tenant"));
        }
        (Role::Operator, None) | (_, Some(_)) => {}
        (_, None) => return Err(MintError::Tenant("a tenant token needs a tenant")),
    }
    let iat = now.unix_timestamp();
    let claims = TokenClaims {
        sub: new.name.clone(),
        tenant: new.tenant.clone(),
        role: new.role,
        iat,
        exp: iat.saturating_add(i64::try_from(ttl).unwrap_or(i64::MAX)),
        jti: token_id(secret, new.tenant.as_ref()),
        ticket: false,
    };
    sign(secret, claims)
}

/// How a token id starts: `f1`, then 16 hex digits of randomness, then 16 of a MAC that
/// binds it to its tenant ([`token_id`]). Ids minted before are 32 hex digits.
const TOKEN_ID_PREFIX: &str = "f1";

/// A fresh token id for a token of `tenant` (`None`: an operator's): random, and bound
/// to its tenant by a MAC under the gateway's token key, so that a revocation can tell a
/// token of the caller's tenant from one of another tenant ([`id_belongs_to`]) without
/// any record of the tokens minted (they are minted offline too, `flue-gateway token`).
fn token_id(secret: &[u8], tenant: Option<&TenantId>) -> String {
    let random = uuid::Uuid::new_v4().simple().to_string();
    let random = &random[..16];
    format!(
        "{TOKEN_ID_PREFIX}{random}{}",
        id_mac(secret, tenant, random)
    )
}

/// The MAC part of a token id: the first 8 bytes of HMAC-SHA256 over its tenant and its
/// random part, in hex.
fn id_mac(secret: &[u8], tenant: Option<&TenantId>, random: &str) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret);
    let mut ctx = ring::hmac::Context::with_key(&key);
    ctx.update(b"flue token id\0");
    ctx.update(tenant.map_or("", TenantId::as_str).as_bytes());
    ctx.update(b"\0");
    ctx.update(random.as_bytes());
    data_encoding::HEXLOWER.encode(&ctx.sign().as_ref()[..8])
}

/// Whose token id `id` is, as far as it can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdOwner {
    /// Minted for this tenant.
    Tenant,
    /// Minted before ids named their tenant (32 hex digits): anyone's.
    Unknown,
    /// Not an id this gateway minted for this tenant: another tenant's, or no token's.
    Other,
}

/// Whether `id` is the id of a token minted for `tenant` under `secret`.
pub fn id_belongs_to(secret: &[u8], tenant: &TenantId, id: &str) -> IdOwner {
    let is_hex = |s: &str| s.bytes().all(|b| b.is_ascii_hexdigit());
    if id.len() == 32 && is_hex(id) {
        return IdOwner::Unknown;
    }
    let Some(rest) = id.strip_prefix(TOKEN_ID_PREFIX) else {
        return IdOwner::Other;
    };
    if rest.len() != 32 || !is_hex(rest) {
        return IdOwner::Other;
    }
    let (random, mac) = rest.split_at(16);
    // Compared without an early exit: the MAC is what a guesser would be timing.
    let expected = id_mac(secret, Some(tenant), random);
    let differ = expected
        .bytes()
        .zip(mac.to_ascii_lowercase().bytes())
        .fold(0u8, |acc, (a, b)| acc | (a ^ b));
    if differ == 0 {
        IdOwner::Tenant
    } else {
        IdOwner::Other
    }
}

/// An event-stream ticket for the holder of `claims`: same tenant, role and id, valid
/// [`TICKET_TTL_SECS`] (never past the token's own expiry).
pub fn ticket(
    secret: &[u8],
    claims: &TokenClaims,
    now: OffsetDateTime,
) -> Result<Minted, MintError> {
    let iat = now.unix_timestamp();
    let ttl = i64::try_from(TICKET_TTL_SECS).unwrap_or(i64::MAX);
    let claims = TokenClaims {
        iat,
        exp: iat.saturating_add(ttl).min(claims.exp),
        ticket: true,
        ..claims.clone()
    };
    sign(secret, claims)
}

/// Signs `claims` as they are (tests use it to make expired tokens).
pub fn sign(secret: &[u8], claims: TokenClaims) -> Result<Minted, MintError> {
    let token = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(secret),
    )
    .map_err(MintError::Sign)?;
    Ok(Minted { token, claims })
}

/// Checks a bearer token: signature, expiry, and that it is not a ticket.
pub fn verify_bearer(secret: &[u8], token: &str) -> Result<TokenClaims, TokenError> {
    let claims = verify(secret, token)?;
    if claims.ticket {
        return Err(TokenError::WrongKind(
            "an event-stream ticket is not a bearer token; it is accepted only as ?ticket= on GET /v1/events",
        ));
    }
    Ok(claims)
}

/// Checks an event-stream ticket: signature, expiry, and that it is a ticket.
pub fn verify_ticket(secret: &[u8], ticket: &str) -> Result<TokenClaims, TokenError> {
    let claims = verify(secret, ticket)?;
    if !claims.ticket {
        return Err(TokenError::WrongKind(
            "?ticket= takes a ticket from POST /v1/events/tickets, not a bearer token",
        ));
    }
    Ok(claims)
}

fn verify(secret: &[u8], token: &str) -> Result<TokenClaims, TokenError> {
    let mut validation = Validation::new(Algorithm::HS256);
    validation.leeway = 0;
    validation.validate_aud = false;
    validation.set_required_spec_claims(&["exp", "iat", "jti", "sub"]);
    let data = jsonwebtoken::decode::<TokenClaims>(
        token.as_bytes(),
        &DecodingKey::from_secret(secret),
        &validation,
    )
    .map_err(|e| match e.kind() {
        ErrorKind::InvalidSignature => TokenError::BadSignature,
        ErrorKind::ExpiredSignature => TokenError::Expired,
        _ => TokenError::Malformed,
    })?;
    Ok(data.claims)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_id_names_its_tenant_and_no_other() {
        let secret = b"0123456789abcdef0123456789abcdef";
        let a: TenantId = "a".parse().expect("tenant");
        let b: TenantId = "b".parse().expect("tenant");
        let new = NewToken {
            name: "ci".into(),
            tenant: Some(a.clone()),
            role: Role::Engine,
            ttl: Duration::from_secs(60),
        };
        let id = mint(secret, &new, OffsetDateTime::now_utc())
            .expect("minted")
            .claims
            .jti;
        assert!(id.starts_with("f1") && id.len() == 34, "{id}");
        assert_eq!(id_belongs_to(secret, &a, &id), IdOwner::Tenant);
        assert_eq!(id_belongs_to(secret, &b, &id), IdOwner::Other);
        assert_eq!(id_belongs_to(b"another key", &a, &id), IdOwner::Other);
        let mut forged = id.clone();
        forged.replace_range(33.., if id.ends_with('0') { "1" } else { "0" });
        assert_eq!(id_belongs_to(secret, &a, &forged), IdOwner::Other);
        let legacy = uuid::Uuid::new_v4().simple().to_string();
        assert_eq!(id_belongs_to(secret, &b, &legacy), IdOwner::Unknown);
        for other in ["", "f1", "nobody-minted-this", &id[..33]] {
            assert_eq!(id_belongs_to(secret, &a, other), IdOwner::Other, "{other}");
        }
    }

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    fn engine() -> NewToken {
        NewToken {
            name: "ci".into(),
            tenant: Some(TenantId::new("default").expect("tenant")),
            role: Role::Engine,
            ttl: Duration::from_secs(3600),
        }
    }

    #[test]
    fn a_minted_token_verifies_and_says_what_it_was_given() {
        let minted = mint(SECRET, &engine(), OffsetDateTime::now_utc()).expect("mint");
        let claims = verify_bearer(SECRET, &minted.token).expect("valid");
        assert_eq!(claims, minted.claims);
        assert_eq!(claims.role, Role::Engine);
        assert_eq!(claims.exp - claims.iat, 3600);
        assert!(!format!("{minted:?}").contains(&minted.token));
    }

    #[test]
    fn each_failure_has_its_own_reason() {
        let now = OffsetDateTime::now_utc();
        let minted = mint(SECRET, &engine(), now).expect("mint");
        let other = b"another secret of thirty-two by!";
        assert_eq!(
            verify_bearer(other, &minted.token),
            Err(TokenError::BadSignature)
        );
        assert_eq!(
            verify_bearer(SECRET, "not.a.jwt"),
            Err(TokenError::Malformed)
        );
        assert_eq!(verify_bearer(SECRET, ""), Err(TokenError::Malformed));
        let expired = sign(
            SECRET,
            TokenClaims {
                exp: now.unix_timestamp() - 10,
                ..minted.claims.clone()
            },
        )
        .expect("sign");
        assert_eq!(
            verify_bearer(SECRET, &expired.token),
            Err(TokenError::Expired)
        );
        let ticket = ticket(SECRET, &minted.claims, now).expect("ticket");
        assert!(matches!(
            verify_bearer(SECRET, &ticket.token),
            Err(TokenError::WrongKind(_))
        ));
        assert!(matches!(
            verify_ticket(SECRET, &minted.token),
            Err(TokenError::WrongKind(_))
        ));
        let t = verify_ticket(SECRET, &ticket.token).expect("ticket valid");
        assert_eq!(t.jti, minted.claims.jti);
        assert!(t.exp - t.iat <= 60);
    }

    #[test]
    fn bad_requests_for_tokens_are_refused() {
        let now = OffsetDateTime::now_utc();
        let mut new = engine();
        new.ttl = Duration::ZERO;
        assert!(matches!(mint(SECRET, &new, now), Err(MintError::Ttl(0))));
        new.ttl = Duration::from_secs(MAX_TOKEN_TTL_SECS + 1);
        assert!(matches!(mint(SECRET, &new, now), Err(MintError::Ttl(_))));
        let mut new = engine();
        new.name = "a\nb".into();
        assert!(matches!(mint(SECRET, &new, now), Err(MintError::Name)));
        let mut new = engine();
        new.tenant = None;
        assert!(matches!(mint(SECRET, &new, now), Err(MintError::Tenant(_))));
        new.role = Role::Operator;
        assert!(mint(SECRET, &new, now).is_ok());
    }
}
