//! Sealed values: how a hidden value travels and rests, encrypted to the one key that may
//! read it (a curve25519 nkeys xkey), as `{"$flue_sealed": "<base64url, no padding>"}`.
//!
//! The ciphertext is an xkey box (`xkv1`, nonce, XSalsa20-Poly1305): opening it needs the
//! recipient's seed and the sender's public key, and proves the sender held its seed. Who
//! sealed a value is known from where it is, so it is not written down:
//!
//! | where | sender → recipient |
//! |---|---|
//! | KV records (inputs, config defaults, outputs) | gateway → gateway |
//! | a request on `FLUE_REQ` | gateway → the server's agent |
//! | an answer on `FLUE_RESP`, the agent's ledger | agent → gateway |
//!
//! The plaintext is the value's JSON text, so any JSON value (not only strings) can be
//! sealed and reads back bit for bit.

use nkeys::XKey;
use ring::hmac;
use serde_json::Value;

/// The one field of a sealed value's object.
pub const SEALED_FIELD: &str = "$flue_sealed";

/// Bytes of an xkey box's nonce.
const NONCE_BYTES: usize = 24;

/// Why a value could not be sealed or opened. Never carries the value.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    /// The value is not `{"$flue_sealed": "..."}`.
    #[error("the value is not sealed")]
    NotSealed,
    /// The sealed text is not base64url.
    #[error("the sealed value is not base64url")]
    Encoding,
    /// Wrong key, wrong sender or altered ciphertext (the box does not say which).
    #[error("the sealed value cannot be opened with this key from this sender")]
    Open,
    /// The opened bytes are not a JSON value.
    #[error("the opened value is not JSON")]
    Json,
    /// A key is not a valid xkey (or has no private half where one is needed).
    #[error("invalid sealing key: {0}")]
    Key(String),
}

/// The public xkey `text` (`X...`), to seal to or to open from.
pub fn public_key(text: &str) -> Result<XKey, SealError> {
    XKey::from_public_key(text).map_err(|e| SealError::Key(e.to_string()))
}

/// The xkey of the seed `text` (`SX...`).
pub fn seed_key(text: &str) -> Result<XKey, SealError> {
    XKey::from_seed(text).map_err(|e| SealError::Key(e.to_string()))
}

/// True when `value` has the sealed form (whether or not it opens).
pub fn is_sealed(value: &Value) -> bool {
    sealed_text(value).is_some()
}

fn sealed_text(value: &Value) -> Option<&str> {
    let object = value.as_object()?;
    if object.len() != 1 {
        return None;
    }
    object.get(SEALED_FIELD)?.as_str()
}

fn wrap(sealed: &[u8]) -> Value {
    let mut object = serde_json::Map::new();
    object.insert(
        SEALED_FIELD.to_owned(),
        Value::String(data_encoding::BASE64URL_NOPAD.encode(sealed)),
    );
    Value::Object(object)
}

/// Seals `value` from `sender` (a seed) to `recipient` (a public key), with a random nonce.
pub fn seal(value: &Value, sender: &XKey, recipient: &XKey) -> Result<Value, SealError> {
    let plain = serde_json::to_vec(value).map_err(|_| SealError::Json)?;
    let sealed = sender
        .seal(&plain, recipient)
        .map_err(|e| SealError::Key(e.to_string()))?;
    Ok(wrap(&sealed))
}

/// Seals like [`seal`], but the same inputs always give the same bytes: the nonce is an
/// HMAC, keyed by the sender's seed, of the recipient, `context` and the plaintext.
///
/// For what must be rebuilt identically (a request whose digest was recorded before it
/// was published). A nonce repeats only with the same plaintext under the same keys, which
/// gives the same ciphertext and reveals nothing new; nobody without the sender's seed can
/// compute a nonce, so it is no oracle for guessing the plaintext.
pub fn seal_derived(
    value: &Value,
    sender: &XKey,
    recipient: &XKey,
    context: &[u8],
) -> Result<Value, SealError> {
    let plain = serde_json::to_vec(value).map_err(|_| SealError::Json)?;
    let seed = sender.seed().map_err(|e| SealError::Key(e.to_string()))?;
    let key = hmac::Key::new(hmac::HMAC_SHA256, seed.as_bytes());
    let mut mac = hmac::Context::with_key(&key);
    mac.update(recipient.public_key().as_bytes());
    // Lengths first, so that no two (context, plaintext) pairs hash the same bytes.
    mac.update(&(context.len() as u64).to_be_bytes());
    mac.update(context);
    mac.update(&plain);
    let tag = mac.sign();
    let nonce = crypto_box::Nonce::clone_from_slice(&tag.as_ref()[..NONCE_BYTES]);
    let sealed = sender
        .seal_with_nonce(&plain, recipient, nonce)
        .map_err(|e| SealError::Key(e.to_string()))?;
    Ok(wrap(&sealed))
}

/// Opens `value`, sealed by `sender` (a public key) to `recipient` (a seed).
pub fn open(value: &Value, recipient: &XKey, sender: &XKey) -> Result<Value, SealError> {
    let text = sealed_text(value).ok_or(SealError::NotSealed)?;
    let sealed = data_encoding::BASE64URL_NOPAD
        .decode(text.as_bytes())
        .map_err(|_| SealError::Encoding)?;
    let plain = recipient
        .open(&sealed, sender)
        .map_err(|_| SealError::Open)?;
    serde_json::from_slice(&plain).map_err(|_| SealError::Json)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_sealed_value_opens_only_for_its_recipient_from_its_sender() {
        let (gateway, agent, other) = (XKey::new(), XKey::new(), XKey::new());
        let value = json!({"password": "s3cret", "port": 0.1, "list": [1, null]});
        let sealed = seal(&value, &gateway, &agent).expect("sealed");
        assert!(is_sealed(&sealed));
        assert!(!sealed.to_string().contains("s3cret"), "{sealed}");
        assert_eq!(open(&sealed, &agent, &gateway).expect("opens"), value);
        assert!(matches!(
            open(&sealed, &other, &gateway),
            Err(SealError::Open)
        ));
        assert!(matches!(
            open(&sealed, &agent, &other),
            Err(SealError::Open)
        ));
        assert!(matches!(
            open(&json!("plain"), &agent, &gateway),
            Err(SealError::NotSealed)
        ));
    }

    #[test]
    fn random_seals_differ_and_derived_seals_repeat_only_for_the_same_input() {
        let (gateway, agent) = (XKey::new(), XKey::new());
        let value = json!("s3cret");
        assert_ne!(
            seal(&value, &gateway, &agent).expect("sealed"),
            seal(&value, &gateway, &agent).expect("sealed")
        );
        let a = seal_derived(&value, &gateway, &agent, b"d1.pw").expect("sealed");
        assert_eq!(
            a,
            seal_derived(&value, &gateway, &agent, b"d1.pw").expect("sealed")
        );
        assert_ne!(
            a,
            seal_derived(&value, &gateway, &agent, b"d2.pw").expect("sealed")
        );
        assert_ne!(
            a,
            seal_derived(&json!("other"), &gateway, &agent, b"d1.pw").expect("sealed")
        );
        assert_eq!(open(&a, &agent, &gateway).expect("opens"), value);
    }

    #[test]
    fn altered_or_malformed_seals_are_refused() {
        let (gateway, agent) = (XKey::new(), XKey::new());
        let sealed = seal(&json!("s3cret"), &gateway, &agent).expect("sealed");
        let text = sealed[SEALED_FIELD].as_str().expect("text").to_owned();
        let mut bytes = data_encoding::BASE64URL_NOPAD
            .decode(text.as_bytes())
            .expect("b64");
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let altered = json!({SEALED_FIELD: data_encoding::BASE64URL_NOPAD.encode(&bytes)});
        assert!(matches!(
            open(&altered, &agent, &gateway),
            Err(SealError::Open)
        ));
        let garbled = json!({SEALED_FIELD: "not base64!"});
        assert!(matches!(
            open(&garbled, &agent, &gateway),
            Err(SealError::Encoding)
        ));
        assert!(!is_sealed(&json!({SEALED_FIELD: text, "extra": 1})));
        assert!(!is_sealed(&json!({SEALED_FIELD: 1})));
    }
}
