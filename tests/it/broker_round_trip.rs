//! When another client's message finds a subscription: once a round trip on the
//! subscriber's connection ([`broker_has_read`]) has returned, not once its flush has.
//! A relay holds what the subscriber writes, as a loaded machine may hold it in a socket
//! or in the broker's read buffer, so the order is forced, not left to chance.

use std::net::SocketAddr;

use bytes::Bytes;
use flue_tests::{Nats, WAIT, broker_has_read};
use futures_util::StreamExt as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A TCP relay between one client and the broker whose client-to-broker direction can be
/// held: what the client writes meanwhile waits in the relay until it is released.
struct Relay {
    addr: SocketAddr,
    held: watch::Sender<bool>,
}

impl Relay {
    async fn start(broker: &Nats) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("relay address");
        let broker = broker.url().trim_start_matches("nats://").to_owned();
        let (held, mut gate) = watch::channel(false);
        tokio::spawn(async move {
            let (client, _) = listener.accept().await.expect("accept");
            let upstream = TcpStream::connect(broker)
                .await
                .expect("connect the broker");
            let (mut from_client, mut to_client) = client.into_split();
            let (mut from_broker, mut to_broker) = upstream.into_split();
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut from_broker, &mut to_client).await;
            });
            let mut buf = vec![0; 64 * 1024];
            while let Ok(n @ 1..) = from_client.read(&mut buf).await {
                if gate.wait_for(|held| !held).await.is_err()
                    || to_broker.write_all(&buf[..n]).await.is_err()
                {
                    break;
                }
            }
        });
        Relay { addr, held }
    }

    fn url(&self) -> String {
        format!("nats://{}", self.addr)
    }

    fn hold(&self) {
        self.held.send_replace(true);
    }

    fn release(&self) {
        self.held.send_replace(false);
    }
}

#[tokio::test]
async fn a_subscription_gets_another_clients_messages_once_a_round_trip_returned_not_once_flushed()
{
    let nats = Nats::start().await;
    let relay = Relay::start(&nats).await;
    let subscriber = async_nats::connect(relay.url())
        .await
        .expect("connect through the relay");
    let publisher = nats.client().await;

    relay.hold();
    let mut sub = subscriber.subscribe("marker").await.expect("subscribe");
    tokio::time::timeout(WAIT, subscriber.flush())
        .await
        .expect("the flush returns with the subscription still on its way")
        .expect("flush");
    let probe = subscriber.new_inbox();
    let read = broker_has_read(&subscriber, &probe);
    tokio::pin!(read);
    assert!(
        futures_util::poll!(&mut read).is_pending(),
        "the round trip returned at once"
    );
    publisher
        .publish("marker", Bytes::from_static(b"early"))
        .await
        .expect("publish");
    // The broker has handled "early" (nobody subscribed to it yet), and the subscriber's
    // client had all that time to write its subscription and request to the relay.
    broker_has_read(&publisher, &publisher.new_inbox()).await;
    assert!(
        futures_util::poll!(&mut read).is_pending(),
        "the round trip returned while the relay held the subscription"
    );
    relay.release();
    tokio::time::timeout(WAIT, read)
        .await
        .expect("the round trip returns once the relay lets it through");
    publisher
        .publish("marker", Bytes::from_static(b"late"))
        .await
        .expect("publish");
    let first = tokio::time::timeout(WAIT, sub.next())
        .await
        .expect("a message within WAIT")
        .expect("subscription open");
    assert_eq!(
        String::from_utf8_lossy(&first.payload),
        "late",
        "\"early\", published after the subscriber's flush, was dropped: the broker had not read the subscription"
    );
}
