//! The broker connection as the HTTP side sees it: up or not, and when it came back.

use tokio::sync::watch;

/// The gateway's broker connection state; cheap to clone.
#[derive(Debug, Clone)]
pub struct BrokerLink {
    client: async_nats::Client,
    reconnected: watch::Receiver<u64>,
}

impl BrokerLink {
    /// Wraps the gateway's client; `reconnected` changes each time the connection is made
    /// (again), as the client's event callback reports it.
    pub fn new(client: async_nats::Client, reconnected: watch::Receiver<u64>) -> Self {
        Self {
            client,
            reconnected,
        }
    }

    /// True while the connection is up. Checked before an API call that needs the broker,
    /// so that calls made during an outage answer 503 at once instead of waiting for a
    /// broker call to time out.
    pub fn is_connected(&self) -> bool {
        self.client.connection_state() == async_nats::connection::State::Connected
    }

    /// Changes each time the connection is made again.
    pub fn reconnected(&self) -> watch::Receiver<u64> {
        self.reconnected.clone()
    }
}
