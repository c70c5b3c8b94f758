//! A round trip through the broker on one connection: the only proof a test has that the
//! broker has read what that connection sent before, its subscriptions among them.

use async_nats::{Client, Request, RequestErrorKind};

use crate::WAIT;

/// Returns once the broker has read everything `client` sent before this call, so that a
/// message another connection publishes from then on finds `client`'s subscriptions.
///
/// `client.flush()` is no such proof: async-nats (0.51) only writes its buffer to the
/// socket, with no PING / PONG, and the broker reads each connection in a loop of its own,
/// so another client's publish can be handled before a subscription still in the socket
/// or the broker's read buffer; core NATS drops a message nobody subscribes to. A request
/// on `client` is read after the subscriptions, and the broker answers it on the same
/// connection: a reply from whoever serves `probe` (the JetStream API), or "no
/// responders", which the broker sends itself while handling the publish when nobody
/// subscribes to `probe` (`client.new_inbox()` for a client free to publish anywhere).
/// `probe` must be a subject `client` may publish to (a refused publish gets no answer);
/// for "no responders", none of `client`'s own subscriptions may match it either (the
/// publish would be delivered to them, and nobody would answer).
pub async fn broker_has_read(client: &Client, probe: &str) {
    let request = Request::new().timeout(Some(WAIT));
    match client.send_request(probe.to_owned(), request).await {
        Ok(_) => {}
        Err(e) if e.kind() == RequestErrorKind::NoResponders => {}
        Err(e) => panic!(
            "the broker did not answer a request to {probe} (one this client may publish to?): {e}"
        ),
    }
}
