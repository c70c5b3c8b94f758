//! Moving servers' request consumers to their sealed names ([`crate::consumer_names`]) as
//! their agents ask, through their heartbeats.

use std::collections::HashMap;
use std::time::Duration;

use flue_proto::{ServerId, TenantId};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::broker::Broker;
use crate::error::chain;

/// How long after a failed move the next heartbeat may try again.
const RETRY: Duration = Duration::from_secs(5);
/// How long a server settled for its agent instance is not looked at again: its consumer
/// may get the older name back under the same agent (a broker that lost its consumers,
/// made again at a registration, [`Broker::ensure_request_consumer`]).
const RECHECK: Duration = Duration::from_secs(600);

/// One server's agent asking, by a heartbeat: the server and that agent's instance.
pub type Asked = (ServerId, String);

/// What was done for one server's agent instance.
enum Done {
    /// Moved, or found with nothing to move, then: nothing more for this instance
    /// until [`RECHECK`] later.
    Settled(Instant),
    /// Failed; may be tried again from then.
    RetryFrom(Instant),
}

/// Moves the request consumer of each server named on `asked` (an agent pulling the
/// sealed name said so in a heartbeat) with [`Broker::seal_request_consumer`], once per
/// agent instance and [`RECHECK`] (a server deregistered and registered again gets the
/// older name back, [`Broker::ensure_request_consumer`], and its next agent instance has it
/// moved again), until `shutdown`. So one broker look-up per agent start and per server
/// every [`RECHECK`] is all this costs once every consumer has moved.
pub async fn run(
    broker: Broker,
    tenant: TenantId,
    mut asked: UnboundedReceiver<Asked>,
    shutdown: CancellationToken,
) {
    let mut done: HashMap<ServerId, (String, Done)> = HashMap::new();
    loop {
        let (server, instance) = tokio::select! {
            biased;
            () = shutdown.cancelled() => return,
            asked = asked.recv() => match asked {
                Some(asked) => asked,
                None => return,
            },
        };
        let now = Instant::now();
        let skip = match done.get(&server) {
            Some((seen, Done::Settled(at))) => *seen == instance && *at + RECHECK > now,
            Some((seen, Done::RetryFrom(at))) => *seen == instance && *at > now,
            None => false,
        };
        if skip {
            continue;
        }
        let outcome = match broker.seal_request_consumer(&tenant, &server).await {
            Ok(_) => Done::Settled(now),
            Err(e) => {
                warn!(server.id = %server, error = %chain(&e), "cannot move the server's request consumer to its sealed name; trying again at a later heartbeat");
                Done::RetryFrom(now + RETRY)
            }
        };
        done.insert(server, (instance, outcome));
    }
}
