//! What travels over the data socket: one JSON request line, one JSON response line.
//!
//! Both ends are the same `flue-agent` binary (the daemon serving its running hook, and the
//! `flue-agent data` command the hook runs), so this never crosses a version boundary and
//! lives here rather than in `flue-proto`.

use serde::{Deserialize, Serialize};

/// A hook's request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum DataRequest {
    /// Store `value` under `key`.
    Put {
        /// The key, inside the running deployment's stack.
        key: String,
        /// The value, UTF-8 text of at most [`super::MAX_VALUE_BYTES`].
        value: String,
    },
    /// Read `key`, waiting up to `wait_ms` for it to be put when it is not set.
    Get {
        /// The key.
        key: String,
        /// How long to wait for a missing key, in milliseconds; none: answer at once.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wait_ms: Option<u64>,
    },
    /// Remove `key` (removing a key that is not set succeeds).
    Delete {
        /// The key.
        key: String,
    },
}

/// The agent's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum DataResponse {
    /// Done; `value` is set for a get.
    Ok {
        /// The value read.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        value: Option<String>,
    },
    /// The key is not set (or was not set within the wait): `flue-agent data` exits 1.
    NotFound {
        /// What to tell the user.
        message: String,
    },
    /// Anything else that went wrong: `flue-agent data` exits 2.
    Error {
        /// What to tell the user.
        message: String,
    },
}

impl DataResponse {
    /// A success without a value.
    pub fn done() -> Self {
        Self::Ok { value: None }
    }

    /// An error with `message`.
    pub fn error(message: impl Into<String>) -> Self {
        Self::Error {
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn requests_and_responses_have_a_stable_shape() {
        let get = DataRequest::Get {
            key: "k".into(),
            wait_ms: Some(1500),
        };
        assert_eq!(
            serde_json::to_value(&get).expect("ser"),
            json!({"op": "get", "key": "k", "wait_ms": 1500})
        );
        let parsed: DataRequest =
            serde_json::from_value(json!({"op": "get", "key": "k"})).expect("de");
        assert_eq!(
            parsed,
            DataRequest::Get {
                key: "k".into(),
                wait_ms: None
            }
        );
        assert_eq!(
            serde_json::to_value(DataResponse::done()).expect("ser"),
            json!({"status": "ok"})
        );
        assert_eq!(
            serde_json::to_value(DataResponse::error("boom")).expect("ser"),
            json!({"status": "error", "message": "boom"})
        );
    }
}
