//! The signature of a delivery: `v1=<lowercase hex HMAC-SHA256(secret, "<timestamp>.<body>")>`.
//!
//! The timestamp (Unix seconds, also sent in `flue-timestamp`) is part of what is signed,
//! so a receiver that refuses old timestamps also refuses replayed deliveries.

use std::fmt::Write as _;

use flue_proto::webhook::SIGNATURE_VERSION;
use ring::hmac;

/// The `flue-signature` header value of `body` sent at `timestamp` under `secret`.
pub fn signature(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
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
    fn matches_python_hmac() {
        // python3 -c 'import hmac,hashlib;print(hmac.new(b"0123456789abcdef",
        //   b"1700000000.{}", hashlib.sha256).hexdigest())'
        assert_eq!(
            signature(b"0123456789abcdef", 1_700_000_000, b"{}"),
            "v1=e4f8e2ecae2295b2ddb2f0b5584c8275e226c0ebe9b3b819e70156bb67122e3e"
        );
    }
}
