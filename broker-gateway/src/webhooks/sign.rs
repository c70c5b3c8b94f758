//! The signatures of a delivery, in the two schemes a subscription may choose
//! ([`WebhookSignature`](flue_proto::webhook::WebhookSignature)):
//!
//! - Standard Webhooks (the default): `v1,<base64 HMAC-SHA256(key, "<id>.<timestamp>.<body>")>`,
//!   the key being what the standard's libraries read from a `whsec_<base64>` secret;
//! - `flue-v1`: `v1=<lowercase hex HMAC-SHA256(secret, "<timestamp>.<body>")>`.
//!
//! In both the timestamp (Unix seconds, also sent in its own header) is part of what is
//! signed, so a receiver that refuses old timestamps also refuses replayed deliveries.

use std::fmt::{self, Write as _};

use data_encoding::{BASE64, BASE64_NOPAD};
use flue_proto::webhook::{
    SIGNATURE_VERSION, STANDARD_MAX_KEY_BYTES, STANDARD_MIN_KEY_BYTES, STANDARD_SECRET_PREFIX,
};
use ring::hmac;

/// Why a secret is no Standard Webhooks secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StandardSecretError {
    /// It does not start with `whsec_`.
    #[error("does not start with {STANDARD_SECRET_PREFIX}")]
    Prefix,
    /// What follows `whsec_` is not standard base64.
    #[error("is not {STANDARD_SECRET_PREFIX} followed by standard base64")]
    Base64,
    /// The key it holds is too short or too long.
    #[error(
        "holds a {0}-byte key; it must hold {STANDARD_MIN_KEY_BYTES} to {STANDARD_MAX_KEY_BYTES} bytes"
    )]
    Length(usize),
}

/// The HMAC key of a Standard Webhooks secret; its `Debug` form never shows it.
pub struct StandardKey(hmac::Key);

impl StandardKey {
    /// The key of `secret`, `whsec_` followed by the standard base64 (padded or not) of
    /// 24 to 64 bytes.
    ///
    /// The official libraries (`standardwebhooks.Webhook(secret)` in Python) strip the
    /// prefix and base64-decode the rest leniently, skipping characters outside the
    /// alphabet; only strict base64 is accepted here, so every accepted secret decodes
    /// to the same key there and here.
    pub fn from_secret(secret: &str) -> Result<Self, StandardSecretError> {
        let encoded = secret
            .strip_prefix(STANDARD_SECRET_PREFIX)
            .ok_or(StandardSecretError::Prefix)?;
        let bytes = BASE64
            .decode(encoded.as_bytes())
            .or_else(|_| BASE64_NOPAD.decode(encoded.as_bytes()))
            .map_err(|_| StandardSecretError::Base64)?;
        if !(STANDARD_MIN_KEY_BYTES..=STANDARD_MAX_KEY_BYTES).contains(&bytes.len()) {
            return Err(StandardSecretError::Length(bytes.len()));
        }
        Ok(Self(hmac::Key::new(hmac::HMAC_SHA256, &bytes)))
    }
}

impl fmt::Debug for StandardKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<hidden>")
    }
}

/// The `webhook-signature` header value of `body`, message `id`, sent at `timestamp`.
pub fn standard(key: &StandardKey, id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut ctx = hmac::Context::with_key(&key.0);
    ctx.update(id.as_bytes());
    ctx.update(b".");
    ctx.update(timestamp.to_string().as_bytes());
    ctx.update(b".");
    ctx.update(body);
    format!("v1,{}", BASE64.encode(ctx.sign().as_ref()))
}

/// The `flue-signature` header value of `body` sent at `timestamp` under `secret`.
pub fn flue_v1(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    let mut ctx = hmac::Context::with_key(&key);
    ctx.update(timestamp.to_string().as_bytes());
    ctx.update(b".");
    ctx.update(body);
    let tag = ctx.sign();
    let mut text = String::with_capacity(SIGNATURE_VERSION.len() + 1 + 64);
    text.push_str(SIGNATURE_VERSION);
    text.push('=');
    for byte in tag.as_ref() {
        let _ = write!(text, "{byte:02x}");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flue_v1_matches_python_hmac() {
        // python3 -c 'import hmac,hashlib;print(hmac.new(b"0123456789abcdef",
        //   b"1700000000.{}", hashlib.sha256).hexdigest())'
        assert_eq!(
            flue_v1(b"0123456789abcdef", 1_700_000_000, b"{}"),
            "v1=e4f8e2ecae2295b2ddb2f0b5584c8275e226c0ebe9b3b819e70156bb67122e3e"
        );
    }

    #[test]
    fn standard_matches_the_official_python_package() {
        // With standardwebhooks 1.1.0 (the version scripts/test.sh pins):
        // python3 -c 'import datetime as d, standardwebhooks as s; print(s.Webhook(
        //   "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").sign("msg_p5jXN8AQM9LWM0D4loKWxJek",
        //   d.datetime.fromtimestamp(1614265330, d.timezone.utc), "{\"test\": 2432232314}"))'
        let key = StandardKey::from_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
            .expect("the standard's example secret");
        assert_eq!(
            standard(
                &key,
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1_614_265_330,
                br#"{"test": 2432232314}"#
            ),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        // Unpadded base64 is read as the Python package reads it (it appends "==").
        let unpadded =
            StandardKey::from_secret("whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
                .expect("43 characters, a 32-byte key without its padding");
        assert_eq!(
            standard(&unpadded, "m", 1, b"{}"),
            "v1,pSUjUeLUIrMUCyBzIYRJ38upRF5th3K/GYRFjt5bka0="
        );
    }

    #[test]
    fn secrets_the_official_libraries_would_read_differently_are_refused() {
        use StandardSecretError::{Base64, Length, Prefix};
        for (secret, why) in [
            ("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", Prefix),
            ("webhook-test-secret-0123456789", Prefix),
            // URL-safe characters: the Python package would skip them.
            ("whsec_MfKQ9r8GKYqrTwjUPD8I-PZIo2LaLaSw", Base64),
            ("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw!", Base64),
            ("whsec_AAAAAAAAAAAAAAAAAAAAAA==", Length(16)),
        ] {
            assert_eq!(
                StandardKey::from_secret(secret).map(|_| ()),
                Err(why),
                "{secret}"
            );
        }
        assert_eq!(
            format!(
                "{:?}",
                StandardKey::from_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
            ),
            "Ok(<hidden>)"
        );
    }
}
