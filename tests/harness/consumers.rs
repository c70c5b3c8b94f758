//! Servers' request consumers as the broker holds them: a server's consumer has the older
//! name ([`subject::request_consumer`]) until its agent makes the gateway move it to its
//! sealed one ([`subject::sealed_request_consumer`], only the gateway can compute it).

use async_nats::jetstream;
use flue_proto::{ServerId, TenantId, subject};
use futures_util::TryStreamExt as _;

/// The name server `server` of `tenant`'s request consumer has now on the request stream
/// `js` reaches (a user of the tenant's state account): its sealed one when the stream has
/// it, else the older one (which may not exist either).
pub async fn request_consumer(js: &jetstream::Context, tenant: &str, server: &str) -> String {
    let (tenant, server): (TenantId, ServerId) = (
        tenant.parse().expect("tenant id"),
        server.parse().expect("server id"),
    );
    let sealed = sealed_prefix(&tenant, &server);
    let names: Vec<String> = js
        .get_stream_no_info(subject::REQUEST_STREAM)
        .await
        .expect("request stream")
        .consumer_names()
        .try_collect()
        .await
        .expect("the request stream's consumer names");
    names
        .into_iter()
        .find(|n| n.strip_prefix(&sealed).is_some_and(is_tag))
        .unwrap_or_else(|| subject::request_consumer(&tenant, &server))
}

/// What server `server`'s sealed request consumer's name starts with (the tag follows).
pub fn sealed_prefix(tenant: &TenantId, server: &ServerId) -> String {
    subject::sealed_request_consumer(tenant, server, "")
}

/// Whether `rest` is a sealed name's tag (32 lower-case hex digits).
pub fn is_tag(rest: &str) -> bool {
    rest.len() == 32 && rest.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The name of the gateways' response consumer on the response stream `js` reaches: its
/// sealed one (`flue-gateway-<tag>`) in operator mode, `flue-gateway` on a development
/// broker. Waits, bounded, for a gateway to have made it.
pub async fn response_consumer(js: &jetstream::Context) -> String {
    let base = subject::GATEWAY_RESPONSE_CONSUMER;
    let deadline = tokio::time::Instant::now() + crate::WAIT;
    loop {
        let names: Vec<String> = js
            .get_stream_no_info(subject::RESPONSE_STREAM)
            .await
            .expect("response stream")
            .consumer_names()
            .try_collect()
            .await
            .expect("the response stream's consumer names");
        let found = names.into_iter().find(|n| {
            n == base
                || n.strip_prefix(base)
                    .and_then(|rest| rest.strip_prefix('-'))
                    .is_some_and(is_tag)
        });
        if let Some(name) = found {
            return name;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no gateway made the response consumer"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Has server `server` of `tenant`'s request consumer moved to its sealed name as an agent
/// of this release would: heartbeats on `client` (a user of the tenant's state account)
/// saying it pulls the sealed one, with an hour's interval so that it stays online for the
/// test, until the broker has the sealed consumer (bounded by [`crate::WAIT`]). Its name.
pub async fn sealed_by_heartbeat(
    client: &async_nats::Client,
    tenant: &str,
    server: &str,
) -> String {
    let js = jetstream::new(client.clone());
    let (t, s): (TenantId, ServerId) = (
        tenant.parse().expect("tenant id"),
        server.parse().expect("server id"),
    );
    let legacy = subject::request_consumer(&t, &s);
    let deadline = tokio::time::Instant::now() + crate::WAIT;
    for seq in 1.. {
        let beat = flue_proto::Heartbeat {
            v: flue_proto::PROTOCOL_VERSION,
            tenant: t.clone(),
            server: s.clone(),
            instance: format!("sealing-{server}"),
            seq,
            interval_ms: 3_600_000,
            state: flue_proto::HeartbeatState::Alive,
            metrics: None,
            ledger_created_at: None,
            agent_version: None,
            connection: None,
            sealed_consumer: true,
        };
        let payload = serde_json::to_vec(&beat).expect("json");
        client
            .publish(subject::heartbeat(&t, &s), payload.into())
            .await
            .expect("publish a heartbeat");
        let now = request_consumer(&js, tenant, server).await;
        if now != legacy {
            return now;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the gateway never moved {legacy} to its sealed name"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    unreachable!("heartbeats are numbered without end")
}
