//! Replica counts of the gateway's streams and KV buckets (`--replicas`): on a NATS
//! cluster each of them is kept on that many nodes, so losing a node loses nothing.
//!
//! Streams are created with the count; this module also brings every stream and bucket
//! that already exists (a broker set up before `--replicas` changed, or a bucket opened by
//! code that creates it with the broker's default) to it at start. JetStream changes a
//! stream's `num_replicas` on update, in both directions, and moves its consumers along.

use async_nats::jetstream::{self, stream};
use futures_util::TryStreamExt;
use std::time::Duration;

use tracing::info;

/// Replicas of the gateway's streams and buckets when `--replicas` is not given.
pub const DEFAULT_REPLICAS: u8 = 1;
/// Most replicas JetStream keeps of a stream.
pub const MAX_REPLICAS: u8 = 5;
/// How long a changed stream may take to have a leader and every copy current: until
/// then writes to it can time out, so the gateway does not serve before.
const SETTLE: Duration = Duration::from_secs(30);
/// Pause between two looks at a changed stream (the broker announces nothing).
const SETTLE_POLL: Duration = Duration::from_millis(100);

/// Names of the streams the gateway owns in an account: its own (`FLUE_…`) and those
/// behind its KV buckets (`KV_flue_…`). Other streams of the account are left alone.
fn owned(name: &str) -> bool {
    flue_proto::subject::is_flue_stream(name)
}

/// Why the replica count of a stream could not be read or changed.
#[derive(Debug, thiserror::Error)]
pub enum ReplicasError {
    /// The account's streams could not be listed.
    #[error("cannot list the broker account's streams")]
    List(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The stream's configuration could not be read.
    #[error("cannot read stream {stream}")]
    Read {
        /// Stream name.
        stream: String,
        /// Cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The changed stream did not get a leader with every copy current in time.
    #[error("stream {stream} did not settle on {to} current replicas within {}s", SETTLE.as_secs())]
    Settle {
        /// Stream name.
        stream: String,
        /// Replicas wanted.
        to: usize,
    },
    /// The broker refused the new count: typically more replicas than the cluster has
    /// nodes, or replicas above 1 on a broker that is not a JetStream cluster.
    #[error(
        "stream {stream} has {from} replicas and the broker refused {to} (--replicas needs a JetStream cluster of at least that many nodes)"
    )]
    Change {
        /// Stream name.
        stream: String,
        /// Replicas found.
        from: usize,
        /// Replicas wanted.
        to: usize,
        /// The broker's answer.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Gives every stream the gateway owns in `js`'s account `replicas` copies; returns how
/// many it changed.
pub async fn ensure(js: &jetstream::Context, replicas: usize) -> Result<usize, ReplicasError> {
    let names: Vec<String> = js
        .stream_names()
        .try_collect()
        .await
        .map_err(|e| ReplicasError::List(e.into()))?;
    let mut changed = 0;
    for name in names.into_iter().filter(|n| owned(n)) {
        let read_err = |e: Box<dyn std::error::Error + Send + Sync>| ReplicasError::Read {
            stream: name.clone(),
            source: e,
        };
        let found = js.get_stream(&name).await.map_err(|e| read_err(e.into()))?;
        let config: stream::Config = found.cached_info().config.clone();
        if config.num_replicas == replicas {
            continue;
        }
        let from = config.num_replicas;
        let wanted = stream::Config {
            num_replicas: replicas,
            ..config
        };
        js.update_stream(&wanted)
            .await
            .map_err(|e| ReplicasError::Change {
                stream: name.clone(),
                from,
                to: replicas,
                source: e.into(),
            })?;
        settle(js, &name, replicas).await?;
        info!(stream = %name, from, to = replicas, "stream replicas changed");
        changed += 1;
    }
    Ok(changed)
}

/// Waits until stream `name` has a leader and `replicas - 1` current followers.
async fn settle(js: &jetstream::Context, name: &str, replicas: usize) -> Result<(), ReplicasError> {
    let look = async {
        loop {
            if let Ok(mut stream) = js.get_stream(name).await
                && let Ok(info) = stream.info().await
            {
                let settled = match &info.cluster {
                    // Not clustered: a single copy, nothing to wait for.
                    None => true,
                    Some(c) => {
                        c.leader.is_some()
                            && c.replicas.len() + 1 == replicas
                            && c.replicas.iter().all(|p| p.current && !p.offline)
                    }
                };
                if settled {
                    return;
                }
            }
            tokio::time::sleep(SETTLE_POLL).await;
        }
    };
    tokio::time::timeout(SETTLE, look)
        .await
        .map_err(|_| ReplicasError::Settle {
            stream: name.to_owned(),
            to: replicas,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_gateways_own_streams_are_changed() {
        for name in [
            "FLUE_REQ",
            "FLUE_EVT",
            "KV_flue_deployments",
            "KV_flue_data",
        ] {
            assert!(owned(name), "{name}");
        }
        for name in ["KV_other", "ORDERS", "flue_x", "KV_FLUE"] {
            assert!(!owned(name), "{name}");
        }
    }
}
