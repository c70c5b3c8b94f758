//! Invariants shared by the fuzz targets: what must hold of every value that decodes.
//!
//! Each target feeds arbitrary bytes to the real decoding function (serde with the wire
//! types of `flue-proto`, axum's extractors, the HOT template parser) and, when a value
//! comes out, checks it with these helpers. A failed check panics, which libFuzzer
//! reports as a crash with the input that caused it.

use std::fmt::Debug;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Checks that `value` encodes to JSON and decodes back to an equal value: what a
/// gateway writes, an agent (or another gateway) reads the same.
pub fn round_trips<T>(value: &T)
where
    T: Serialize + DeserializeOwned + PartialEq + Debug,
{
    let text = serde_json::to_vec(value).expect("a decoded value encodes");
    let back: T = serde_json::from_slice(&text).unwrap_or_else(|e| {
        panic!(
            "re-encoded value does not decode: {e}\n{}",
            String::from_utf8_lossy(&text)
        )
    });
    assert_eq!(&back, value, "re-encoded value decodes to another value");
}

/// Checks what an id guarantees (`flue_proto::ids`): 1 to 64 bytes, nothing but
/// `[A-Za-z0-9_-]`, so never a `.`, `*`, `>` or whitespace that would change a subject.
pub fn assert_id(id: &str) {
    assert!(!id.is_empty(), "empty id");
    assert!(id.len() <= flue_proto::MAX_ID_LEN, "id too long: {id:?}");
    assert!(
        id.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
        "id holds a character outside [A-Za-z0-9_-]: {id:?}"
    );
}

/// Checks that a subject (or JetStream message id) built from decoded ids has no
/// wildcard, no whitespace and no empty token: it names exactly one subject.
pub fn assert_subject(subject: &str) {
    assert!(
        !subject
            .chars()
            .any(|c| c == '*' || c == '>' || c.is_whitespace()),
        "subject holds a wildcard or whitespace: {subject:?}"
    );
    assert!(
        subject.split('.').all(|t| !t.is_empty()),
        "subject has an empty token: {subject:?}"
    );
}
