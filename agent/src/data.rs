//! The stack data space: keys a hook on one server puts and a hook on another gets,
//! stored in the JetStream KV bucket [`subject::DATA_BUCKET`] under the running
//! deployment's stack.
//!
//! While a hook runs, the agent serves a unix socket ([`server`]) that the hook reaches with
//! `flue-agent data put | get | delete` ([`cli`]), one JSON line each way ([`wire`]). The
//! agent, not the hook, decides the scope: every key lands under
//! `<tenant>.<stack>.` of the running deployment ([`space`]), so a hook can touch only
//! its own stack's keys. A wait for a key that is not there yet subscribes to the key's
//! subject on core NATS: no JetStream consumer is ever created.
//!
//! [`subject::DATA_BUCKET`]: flue_proto::subject::DATA_BUCKET

pub mod cli;
pub(crate) mod server;
pub(crate) mod space;
pub(crate) mod wire;

/// Largest value a key may hold, in bytes: room for addresses, certificates and small
/// documents, far below the broker's message limit.
pub const MAX_VALUE_BYTES: usize = 256 * 1024;

/// File name of the data socket inside the agent's state dir.
pub const SOCKET_FILE: &str = "data.sock";

/// Environment variable that tells a hook where the data socket is.
pub const SOCKET_ENV: &str = "FLUE_DATA_SOCKET";

/// How a wait is written in messages: whole seconds as `120s`, anything else in ms.
pub fn format_wait(wait: std::time::Duration) -> String {
    if wait.subsec_nanos() == 0 {
        format!("{}s", wait.as_secs())
    } else {
        format!("{}ms", wait.as_millis())
    }
}
