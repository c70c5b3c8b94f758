//! The broker connection as the HTTP side sees it: up or not, and when it came back.

use tokio::sync::watch;

/// The gateway's broker connection state; cheap to clone.
#[derive(Debug, Clone)]
pub struct BrokerLink {
    client: async_nats::Client,
    /// The events account's connection, when it is another one than `client`.
    events: Option<async_nats::Client>,
    reconnected: watch::Receiver<u64>,
}

impl BrokerLink {
    /// Wraps the gateway's client; `reconnected` changes each time the connection is made
    /// (again), as the client's event callback reports it.
    pub fn new(client: async_nats::Client, reconnected: watch::Receiver<u64>) -> Self {
        Self {
            client,
            events: None,
            reconnected,
        }
    }

    /// Also counts `events` (a tenant's events account connection): the link is up only
    /// while both connections are.
    pub fn with_events(mut self, events: async_nats::Client) -> Self {
        self.events = Some(events);
        self
    }

    /// True while the connection is up. Checked before an API call that needs the broker,
    /// so that calls made during an outage answer 503 at once instead of waiting for a
    /// broker call to time out.
    pub fn is_connected(&self) -> bool {
        let up = |c: &async_nats::Client| {
            c.connection_state() == async_nats::connection::State::Connected
        };
        up(&self.client) && self.events.as_ref().is_none_or(up)
    }

    /// Changes each time the connection is made again.
    pub fn reconnected(&self) -> watch::Receiver<u64> {
        self.reconnected.clone()
    }
}
