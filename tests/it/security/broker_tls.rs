//! The broker's TLS as `flue_gateway::tls` writes it, run by a real nats-server: mutual
//! TLS on the client port, and a leaf node reaching the hub's leaf-node port over TLS.

use std::time::Duration;

use flue_tests::{Gateway, Nats, TestCa, WAIT, free_port};
use futures_util::StreamExt as _;

use super::tls::gateway_exit;

#[tokio::test]
async fn a_broker_verifying_clients_admits_the_gateway_only_with_its_certificate() {
    let ca = TestCa::new();
    let nats = Nats::start_mutual_tls(&ca).await;
    let ca_file = ca.ca_file().display().to_string();

    let (ok, stderr) = gateway_exit(&["--nats-url", &nats.url(), "--nats-ca", &ca_file]).await;
    assert!(!ok, "connected without a client certificate:\n{stderr}");
    assert!(stderr.contains("cannot connect to the broker"), "{stderr}");

    let client = ca.leaf("gateway-client", &[]);
    let cert = client.cert.display().to_string();
    let key = client.key.display().to_string();
    let gateway = Gateway::start(
        &nats.url(),
        &[
            "--nats-ca",
            &ca_file,
            "--nats-cert",
            &cert,
            "--nats-key",
            &key,
        ],
    )
    .await;
    let servers = gateway
        .client()
        .list_servers()
        .await
        .expect("the API works");
    assert!(servers.is_empty());
}

/// The leaf-node side: a nats-server whose one remote is the hub's leaf-node port, its
/// `tls` block written by `remote_tls_block` (trusting `ca_file`, or the system when none).
fn leaf_config(
    dir: &std::path::Path,
    hub_leaf_port: u16,
    ca_file: Option<&std::path::Path>,
) -> std::path::PathBuf {
    let tls = match ca_file {
        Some(ca) => flue_gateway::tls::remote_tls_block(ca, None).expect("remote tls block"),
        None => "tls {\n  timeout: 2\n}\n".to_owned(),
    };
    let text = format!(
        "jetstream {{ domain: \"leaf\" }}\nleafnodes {{\n  remotes = [\n    {{\n      url: \"tls://127.0.0.1:{hub_leaf_port}\"\n{tls}    }}\n  ]\n}}\n"
    );
    let path = dir.join(format!("leaf-{}.conf", ca_file.is_some()));
    std::fs::write(&path, text).expect("write the leaf config");
    path
}

#[tokio::test]
async fn a_leaf_node_reaches_the_hub_over_tls_only_when_it_trusts_the_hub_ca() {
    let ca = TestCa::new();
    let leaf_port = free_port();
    let leaf_cert = ca.leaf("hub-leafnodes", &[]);
    let block = flue_gateway::tls::leafnode_tls_block(&flue_gateway::tls::BrokerTlsFiles {
        cert_file: leaf_cert.cert,
        key_file: leaf_cert.key,
        client_ca_file: None,
    })
    .expect("leafnode tls block");
    let hub = Nats::start_tls_with(
        &ca,
        &format!("leafnodes {{\n  listen: \"127.0.0.1:{leaf_port}\"\n{block}}}\n"),
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");

    // Without the CA the leaf cannot verify the hub: its connection fails in the handshake.
    let untrusting = Nats::start_with_config(&leaf_config(dir.path(), leaf_port, None)).await;
    untrusting
        .logs()
        .wait_for("certificate signed by unknown authority", WAIT)
        .await;
    drop(untrusting);

    let leaf =
        Nats::start_with_config(&leaf_config(dir.path(), leaf_port, Some(&ca.ca_file()))).await;
    let hub_client = hub.client().await;
    let mut sub = hub_client
        .subscribe("over.the.leaf")
        .await
        .expect("subscribe");
    hub_client.flush().await.expect("flush");
    let leaf_client = leaf.client().await;
    // Interest reaches the leaf once its connection is up: publish until one arrives.
    let arrived = async {
        loop {
            leaf_client
                .publish("over.the.leaf", "hello".into())
                .await
                .expect("publish");
            leaf_client.flush().await.expect("flush");
            if let Ok(Some(msg)) =
                tokio::time::timeout(Duration::from_millis(100), sub.next()).await
            {
                return msg;
            }
        }
    };
    let msg = tokio::time::timeout(WAIT, arrived)
        .await
        .expect("a message from the leaf reaches the hub over TLS");
    assert_eq!(&msg.payload[..], b"hello");
}
