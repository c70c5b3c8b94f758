//! Reading a NATS v2 JWT (`header.claims.signature`, each base64url without padding): the
//! one decoder the agent (its user JWT) and the gateway (the account and user JWTs it
//! minted) both use. It checks the header and the ed25519 signature by the issuer the
//! claims name (`iss`); who that issuer may be is the caller's question.

use data_encoding::BASE64URL_NOPAD;
use serde::de::DeserializeOwned;

/// Why a JWT could not be read.
#[derive(Debug, thiserror::Error)]
pub enum NatsJwtError {
    /// Not three base64url parts, or a header that is not a NATS v2 one.
    #[error("not a NATS JWT: {0}")]
    Malformed(&'static str),
    /// The claims are not the JSON expected.
    #[error("the JWT claims are not valid")]
    Claims(#[source] serde_json::Error),
    /// The claims name no issuer, or one that is not a public nkey.
    #[error("the JWT's issuer is not a public nkey")]
    Issuer,
    /// The signature is not the issuer's.
    #[error("the JWT signature does not verify against its issuer")]
    BadSignature,
}

/// The claims of `jwt` as `C`, once its header says NATS v2 and its signature verifies
/// with the key of the issuer (`iss`) its claims name.
pub fn verified_claims<C: DeserializeOwned>(jwt: &str) -> Result<C, NatsJwtError> {
    let jwt = jwt.trim();
    let mut parts = jwt.split('.');
    let (Some(header), Some(body), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(NatsJwtError::Malformed("it does not have three parts"));
    };
    let b64 = |part: &str| {
        BASE64URL_NOPAD
            .decode(part.as_bytes())
            .map_err(|_| NatsJwtError::Malformed("a part is not base64url"))
    };
    let header: serde_json::Value = serde_json::from_slice(&b64(header)?)
        .map_err(|_| NatsJwtError::Malformed("the header is not JSON"))?;
    if header["alg"] != "ed25519-nkey" || header["typ"] != "JWT" {
        return Err(NatsJwtError::Malformed("the header is not a NATS v2 one"));
    }
    let claims: serde_json::Value =
        serde_json::from_slice(&b64(body)?).map_err(NatsJwtError::Claims)?;
    let issuer = claims["iss"].as_str().ok_or(NatsJwtError::Issuer)?;
    let issuer = nkeys::KeyPair::from_public_key(issuer).map_err(|_| NatsJwtError::Issuer)?;
    let signed = &jwt[..jwt.len() - signature.len() - 1];
    issuer
        .verify(signed.as_bytes(), &b64(signature)?)
        .map_err(|_| NatsJwtError::BadSignature)?;
    serde_json::from_value(claims).map_err(NatsJwtError::Claims)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A JWT with `claims`, signed by `key` (the header NATS v2 uses).
    fn jwt(claims: &serde_json::Value, key: &nkeys::KeyPair) -> String {
        let header = BASE64URL_NOPAD.encode(br#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
        let body = BASE64URL_NOPAD.encode(&serde_json::to_vec(claims).expect("json"));
        let signed = format!("{header}.{body}");
        let signature = key.sign(signed.as_bytes()).expect("signs");
        format!("{signed}.{}", BASE64URL_NOPAD.encode(&signature))
    }

    #[test]
    fn a_jwt_signed_by_its_issuer_reads_and_any_other_is_refused() {
        let account = nkeys::KeyPair::new_account();
        let claims = serde_json::json!({"iss": account.public_key(), "sub": "U1"});
        let good = jwt(&claims, &account);
        let read: serde_json::Value = verified_claims(&good).expect("verifies");
        assert_eq!(read["sub"], "U1");
        let forged = jwt(&claims, &nkeys::KeyPair::new_account());
        assert!(matches!(
            verified_claims::<serde_json::Value>(&forged),
            Err(NatsJwtError::BadSignature)
        ));
        let no_issuer = jwt(&serde_json::json!({"sub": "U1"}), &account);
        assert!(matches!(
            verified_claims::<serde_json::Value>(&no_issuer),
            Err(NatsJwtError::Issuer)
        ));
        for junk in ["", "a.b", "a.b.c.d", "!.!.!"] {
            assert!(
                matches!(
                    verified_claims::<serde_json::Value>(junk),
                    Err(NatsJwtError::Malformed(_))
                ),
                "{junk:?}"
            );
        }
    }
}
