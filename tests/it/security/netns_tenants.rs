//! Issue 10 point 9, tenants apart: two tenant networks in network namespaces
//! ([`TenantNetworks`]), each with its leaf node bound to its own tenant's edge account and linked
//! to the hub over TLS. The second hears none of the first's subjects and finds none of its
//! streams' consumers, and a leaf node that does not trust the hub's certificate never links.

use flue_proto::{TenantId, subject};
use flue_tests::TestCa;
use flue_tests::netns::{Reach, at};
use flue_tests::tenant_net::{LEAF_LINKED, PROBE_LIMIT, TENANT_NATS_PORT, TenantNetworks};

#[tokio::test]
async fn a_second_tenant_network_has_its_own_leaf_node_and_no_path_into_the_first() {
    let mut env = TenantNetworks::start().await;
    let t1 = env.add_tenant_network("t1", &["web1"]).await;
    let t2 = env.add_tenant_network("t2", &["web1"]).await;
    env.start_agent(t1, "web1", &[]).await;
    let t1_leaf = at(env.tenants[t1].link.b, TENANT_NATS_PORT);

    // t1's leaf node listens on its link address: cp, linked to t1, gets through...
    let reach = env.cp.probe(t1_leaf, PROBE_LIMIT).await;
    assert_eq!(reach, Reach::Connected, "t1's leaf from cp");
    // ...t2 has no route there...
    let t2_net = &env.tenants[t2];
    let reach = t2_net.ns.probe(t1_leaf, PROBE_LIMIT).await;
    assert_eq!(reach, Reach::Unreachable, "t1's leaf from t2");
    // ...and even sending everything to the control plane gets nowhere: cp does not forward.
    t2_net
        .ns
        .ip(&["route", "add", "default", "via", &t2_net.link.a.to_string()]);
    let reach = t2_net.ns.probe(t1_leaf, PROBE_LIMIT).await;
    assert!(
        matches!(reach, Reach::Unreachable | Reach::TimedOut),
        "t1's leaf from t2 routed through cp: {reach:?}"
    );

    // Subjects: each leaf node is bound to its tenant's account, so nothing t1's agents
    // publish reaches t2's network, whatever t2 subscribes to...
    let heard = second_tenant_hears_the_first_tenants_subjects(&env, t1, t2, "web1").await;
    assert!(!heard, "t2's leaf node heard t1's heartbeats");
    // ...nor do t1's streams: t2's whole account, through its own leaf node, does not find
    // web1's request consumer, which t1's account, through t1's leaf node, does (under its
    // sealed name: its agent, started above, had it moved there). t2's link may ask only
    // about its own web1's consumer (the control: JetStream answers that it does not
    // exist, t2's web1 being unregistered); the question about t1's goes unanswered (t2's
    // leaf node does not forward what its link may not send) or, were it forwarded, would
    // find nothing in t2's account.
    let web1 = "web1".parse().expect("id");
    let consumer = env.sealed_request_consumer("t1", "web1");
    let from_t1 = consumer_lookup(&env, t1, &consumer, WAIT_SECS).await;
    assert_eq!(from_t1, "found", "t1 looks up its own consumer");
    let own = subject::request_consumer(&tenant("t2"), &web1);
    let control = consumer_lookup(&env, t2, &own, WAIT_SECS).await;
    assert!(
        control.starts_with("not found"),
        "t2 asks about its own server's consumer: {control}"
    );
    let from_t2 = consumer_lookup(&env, t2, &consumer, 3).await;
    assert!(
        from_t2.starts_with("not found") || from_t2 == "no answer",
        "t2 looked up t1's consumer: {from_t2}"
    );
}

/// Tenant `id`.
fn tenant(id: &str) -> TenantId {
    TenantId::new(id).expect("tenant id")
}

/// How long a lookup expected to be answered keeps asking, in seconds (within
/// [`flue_tests::WAIT`]).
const WAIT_SECS: u64 = 20;

/// Whether a client with the whole of tenant network `net`'s edge account, connected to its
/// leaf node, finds `consumer` on the request stream (JetStream domain `flue`, across the
/// leaf node): `found`, `not found: …` with what JetStream answered, or `no answer` when
/// nothing answered for `secs` seconds. It asks with the inbox prefix of the agent of
/// `web1` (the server the network's leaf node serves): the hub delivers nothing else to
/// the leaf.
async fn consumer_lookup(env: &TenantNetworks, net: usize, consumer: &str, secs: u64) -> String {
    let net = &env.tenants[net];
    let creds = env.edge_user_creds(&net.name);
    let inbox = subject::agent_inbox_prefix(&tenant(&net.name), &"web1".parse().expect("id"));
    let run = net
        .ns
        .command(flue_tests::repo_root().join(".venv/bin/python"))
        .args(["-c", LOOKUP])
        .arg(format!("nats://127.0.0.1:{TENANT_NATS_PORT}"))
        .arg(&creds)
        .args([subject::JETSTREAM_DOMAIN, subject::REQUEST_STREAM, consumer])
        .arg(secs.to_string())
        .arg(inbox)
        .output();
    let out = tokio::time::timeout(flue_tests::WAIT, run)
        .await
        .expect("the lookup finishes")
        .expect("run python");
    assert!(
        out.status.success(),
        "lookup failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Looks a consumer up through a leaf node. Right after a leaf node links, the hub's
/// JetStream API interest may not have crossed it yet ("no responders", which nats-py's
/// JetStream raises as `ServiceUnavailableError`): retried until JetStream answers or the
/// given seconds have passed.
const LOOKUP: &str = r#"
import asyncio, sys, time, nats
from nats.js.errors import NotFoundError, ServiceUnavailableError
from nats.errors import NoRespondersError, TimeoutError
async def main():
    url, creds, domain, stream, consumer, secs, inbox = sys.argv[1:8]
    nc = await nats.connect(url, user_credentials=creds, inbox_prefix=inbox)
    js = nc.jetstream(domain=domain, timeout=1)
    deadline = time.monotonic() + float(secs)
    while time.monotonic() < deadline:
        try:
            await js.consumer_info(stream, consumer)
            print("found")
            return
        except NotFoundError as e:
            print("not found:", e.description)
            return
        except (NoRespondersError, ServiceUnavailableError, TimeoutError):
            await asyncio.sleep(0.05)
    print("no answer")
asyncio.run(main())
"#;

/// Whether a client of tenant network `second`'s leaf node hears the heartbeats that
/// `server`'s agent in network `first` publishes. A spy in `first`, started after the one in
/// `second`, is the control: once it heard two heartbeats after both spies were ready, the
/// first of them had a whole heartbeat interval to reach the second network, so the
/// second network's spy has heard it or never will. Each spy has the whole of its own
/// tenant's edge account (the one its leaf node is bound to) and subscribes to every Flue
/// subject.
async fn second_tenant_hears_the_first_tenants_subjects(
    env: &TenantNetworks,
    first: usize,
    second: usize,
    server: &str,
) -> bool {
    let wildcard = "flue.>";
    let (first, second) = (&env.tenants[first], &env.tenants[second]);
    let creds = env.edge_user_creds(&second.name);
    let spy = env
        .subject_spy(&second.ns, TENANT_NATS_PORT, &creds, false, wildcard)
        .await;
    let creds = env.edge_user_creds(&first.name);
    let control = env
        .subject_spy(&first.ns, TENANT_NATS_PORT, &creds, false, wildcard)
        .await;
    let hb = subject::heartbeat(&tenant(&first.name), &server.parse().expect("id"));
    let ready = control.logs().len();
    control
        .logs()
        .wait_for_after(ready, &hb, flue_tests::WAIT)
        .await;
    let first_heartbeat = ready
        + control
            .logs()
            .lines()
            .iter()
            .skip(ready)
            .position(|l| *l == hb)
            .expect("the control heard it");
    control
        .logs()
        .wait_for_after(first_heartbeat + 1, &hb, flue_tests::WAIT)
        .await;
    let theirs = format!("flue.{}.", first.name);
    spy.logs().lines().iter().any(|l| l.starts_with(&theirs))
}

#[tokio::test]
async fn a_leaf_node_that_does_not_trust_the_hubs_certificate_never_links() {
    let mut env = TenantNetworks::start().await;
    // The control: a leaf node given the CA that issued the hub's certificate links.
    let t1 = env.add_tenant_network("t1", &["web1"]).await;
    let linked = env.tenants[t1].leaf.logs().lines().join("\n");
    assert!(linked.contains(LEAF_LINKED), "{linked}");

    // Another CA: the leaf node refuses the hub's certificate, attempt after attempt.
    let stranger = TestCa::new();
    let t2 = env
        .add_tenant_network_trusting("t2", &["web1"], &stranger.ca_file())
        .await;
    let leaf = env.tenants[t2].leaf.logs();
    let refusal = "certificate signed by unknown authority";
    let first = leaf.wait_for(refusal, flue_tests::WAIT).await;
    let first = leaf
        .lines()
        .iter()
        .position(|l| *l == first)
        .expect("the refusal is logged");
    leaf.wait_for_after(first + 1, refusal, flue_tests::WAIT)
        .await;
    assert!(
        !leaf.lines().iter().any(|l| l.contains(LEAF_LINKED)),
        "the leaf node trusting another CA linked: {:?}",
        leaf.lines()
    );
    // The hub saw the handshake fail too: nothing but TLS stood between them.
    env.hub
        .logs()
        .wait_for("TLS leafnode handshake error", flue_tests::WAIT)
        .await;
}
