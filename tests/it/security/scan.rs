//! Reading every place a hidden value must not be: every stream message and KV entry the
//! broker holds, its store on disk, agents' state dirs, API reads and logs.

use std::collections::BTreeMap;
use std::path::Path;

use async_nats::jetstream;
use flue_tests::{Agent, Flue};
use futures_util::StreamExt;

/// A distinctive random string, so that any copy of it anywhere is found.
pub fn random_secret(label: &str) -> String {
    let mut bytes = [0_u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes).expect("rand");
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("flue{label}{hex}")
}

/// The names of the streams `js`'s account holds.
pub async fn stream_names(js: &jetstream::Context) -> Vec<String> {
    js.stream_names()
        .map(|n| n.expect("stream name"))
        .collect()
        .await
}

/// Every message of every stream (KV buckets are the `KV_*` streams), read raw by
/// sequence, payloads and headers, by stream.
pub async fn stream_bytes(client: async_nats::Client) -> BTreeMap<String, Vec<u8>> {
    let js = jetstream::new(client);
    let names = stream_names(&js).await;
    let mut streams = BTreeMap::new();
    for name in names {
        let mut stream = js.get_stream(&name).await.expect("stream");
        let state = stream.info().await.expect("info").state.clone();
        let mut bytes = Vec::new();
        for seq in state.first_sequence..=state.last_sequence {
            // Deleted or purged messages leave gaps: nothing to read there.
            let Ok(message) = stream.get_raw_message(seq).await else {
                continue;
            };
            bytes.extend_from_slice(&message.payload);
            for (key, values) in message.headers.iter() {
                bytes.extend_from_slice(key.to_string().as_bytes());
                for value in values {
                    bytes.extend_from_slice(value.as_str().as_bytes());
                }
            }
        }
        streams.insert(name, bytes);
    }
    streams
}

/// Every file under `dir`, concatenated.
pub fn files_bytes(dir: &Path) -> Vec<u8> {
    let mut all = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).expect("read dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                todo.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                all.extend_from_slice(&bytes);
            }
        }
    }
    all
}

/// True when `needle` occurs in `haystack`.
pub fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// The body of a successful `GET path` on the gateway.
pub async fn api_text(flue: &Flue, path: &str) -> String {
    let url = format!("{}{path}", flue.gateway.url());
    let response = flue.http().get(&url).send().await.expect("GET");
    assert!(
        response.status().is_success(),
        "GET {path}: {}",
        response.status()
    );
    response.text().await.expect("body")
}

/// The bytes of every place a hidden value must not be, by name: every message of every
/// stream (KV buckets included) and the broker's store on disk, which must each hold
/// something; the agents' state dirs (ledgers); API reads (the listing and `paths`);
/// the gateway's and the agents' logs.
pub async fn everything(flue: &Flue, agents: &[Agent], paths: &[String]) -> Vec<(String, Vec<u8>)> {
    // The tenant account's streams and buckets, and the events account's FLUE_EVT.
    let mut streams = stream_bytes(flue.nats.client().await).await;
    streams.extend(stream_bytes(flue.nats.events_client().await).await);
    for stream in [
        "FLUE_REQ",
        "FLUE_RESP",
        "FLUE_EVT",
        "KV_flue_deployments",
        "KV_flue_configs",
    ] {
        assert!(
            streams.get(stream).is_some_and(|b| !b.is_empty()),
            "{stream} read"
        );
    }
    let raw = streams.into_values().flatten().collect();
    // The file store is not compressed: a value in the clear would be there as it is.
    let disk = files_bytes(flue.nats.store_dir());
    let mut places = vec![
        ("stream messages".to_owned(), raw),
        ("broker store".to_owned(), disk),
    ];
    for agent in agents {
        let dir = flue.path(&format!("agent-{}", agent.server));
        places.push((
            format!("state dir of agent {}", agent.server),
            files_bytes(&dir),
        ));
        places.push((
            format!("log of agent {}", agent.server),
            agent.logs().lines().join("\n").into_bytes(),
        ));
    }
    places.push((
        "gateway log".to_owned(),
        flue.gateway.logs().lines().join("\n").into_bytes(),
    ));
    let listing = "/v1/deployments".to_owned();
    for path in std::iter::once(&listing).chain(paths) {
        places.push((
            format!("GET {path}"),
            api_text(flue, path).await.into_bytes(),
        ));
    }
    places
}

/// Fails naming the place and the secret when any of `secrets` is in any of `places`.
pub fn assert_nowhere(places: &[(String, Vec<u8>)], secrets: &[&str]) {
    for secret in secrets {
        for (place, bytes) in places {
            assert!(!contains(bytes, secret), "{place} holds {secret}");
        }
    }
}
