//! The broker's disconnect advisories of a tenant's agent accounts: nats-server publishes
//! one on `$SYS.ACCOUNT.<account>.DISCONNECT` (system account) for every client connection
//! of the account that closes, from whichever node of a cluster held it. Agents are users
//! of the tenant's edge account; an agent not yet rotated after an upgrade to that layout
//! is still a user of the tenant (state) account, so both are followed.

use flue_proto::{BrokerConnection, jsapi};
use futures_util::StreamExt;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::{Disconnect, PresenceTracker};

/// Where a tenant's disconnect advisories are read: the gateway's system-account
/// connection and the public keys of the accounts its agents are users of (operator mode
/// only).
#[derive(Debug, Clone)]
pub struct Advisories {
    /// The system-account connection.
    pub system: async_nats::Client,
    /// The agents' accounts' public keys (`A…`): the edge account, then the tenant account.
    pub accounts: Vec<String>,
}

/// Tells `tracker` of every closed connection of the accounts `advisories` names, until
/// `cancel` (or the system connection closes: the gateway stops). The tracker's presence
/// task ([`super::run`]) makes the transitions.
pub async fn follow_disconnects(
    tracker: PresenceTracker,
    advisories: Advisories,
    cancel: CancellationToken,
) {
    let mut subscriptions = Vec::with_capacity(advisories.accounts.len());
    for account in &advisories.accounts {
        let subject = jsapi::account_disconnects(account);
        match advisories.system.subscribe(subject.clone()).await {
            Ok(s) => subscriptions.push(s),
            Err(e) => {
                warn!(error = %e, subject, "cannot follow the broker's disconnect advisories; a closed agent connection is seen as a silence");
                return;
            }
        }
    }
    let mut closed = futures_util::stream::select_all(subscriptions);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            msg = closed.next() => match msg {
                Some(msg) => {
                    if let Some((connection, how)) = parse(&msg.payload) {
                        tracker.disconnected(&connection, how);
                    }
                }
                None => return,
            },
        }
    }
}

/// nats-server's `DisconnectEventMsg`, the parts presence reads.
#[derive(Debug, Deserialize)]
struct DisconnectEvent {
    server: Node,
    client: Client,
    #[serde(default)]
    reason: String,
}

/// The server (node) that held the connection.
#[derive(Debug, Deserialize)]
struct Node {
    id: String,
}

/// The closed connection.
#[derive(Debug, Deserialize)]
struct Client {
    id: u64,
}

/// The connection an advisory reports closed and how, when its reason means the client
/// is gone ([`Disconnect::from_reason`]); `None` for anything else (another reason, not
/// an advisory).
pub(super) fn parse(payload: &[u8]) -> Option<(BrokerConnection, Disconnect)> {
    let event: DisconnectEvent = serde_json::from_slice(payload).ok()?;
    let how = Disconnect::from_reason(&event.reason)?;
    Some((
        BrokerConnection {
            server_id: event.server.id,
            client_id: event.client.id,
        },
        how,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_advisory_names_the_connection_and_only_an_end_that_means_the_client_left() {
        // nats-server 2.15.1's advisory, as it arrives (shortened).
        let advisory = |reason: &str| {
            serde_json::json!({
                "type": "io.nats.server.advisory.v1.client_disconnect",
                "id": "x", "timestamp": "2026-12-05T12:00:00Z",
                "server": {"name": "n1", "host": "127.0.0.1", "id": "NABC", "ver": "2.15.1", "seq": 9},
                "client": {"id": 42, "acc": "AXYZ", "user": "UAGENT", "name_tag": "tenant t", "kind": "Client", "client_type": "nats"},
                "sent": {"msgs": 1, "bytes": 2}, "received": {"msgs": 3, "bytes": 4},
                "reason": reason
            })
            .to_string()
        };
        let (connection, how) = parse(advisory("Client Closed").as_bytes()).expect("parsed");
        assert_eq!(
            connection,
            BrokerConnection {
                server_id: "NABC".into(),
                client_id: 42
            }
        );
        assert_eq!(how, Disconnect::Closed);
        assert_eq!(parse(advisory("Server Shutdown").as_bytes()), None);
        assert_eq!(parse(b"not json"), None);
    }
}
