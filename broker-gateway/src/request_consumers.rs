//! How the broker keeps the servers' request consumers: where their state lives
//! (`--request-consumer-storage`) and on how many nodes (`--request-consumer-replicas`).
//!
//! Every registered server has a durable pull consumer on the request stream. With file
//! storage (the default) nats-server 2.15 stops each one in turn at shutdown and waits
//! ~10 ms for its state flusher (`consumerFileStore.waitOnFlusher` sleeps 10 ms), so a
//! broker's shutdown or restart takes ~10.7 ms per registered server: 107 s at 10,000,
//! ~9 min at 50,000 (docs/benchmarks.md). No broker setting changes it (the wait is a
//! sleep, not a disk write: `sync_interval: always`, a store on RAM, more streams, no
//! client connected all measured the same); it is nats-server's code (issue 24, point 7,
//! not met). Memory storage has no flusher and stops at once.
//! Its cost is durability: a single broker forgets memory consumers when it restarts, so
//! they are allowed only where JetStream replicates them (`--replicas` 3 or more), and a
//! restart of *every* node at once starts them over from the stream's first message.
//!
//! On a cluster each replicated consumer is a Raft group of its own on every node that
//! holds it: ~0.2–0.3 of a core per 1,000 servers at idle with three replicas. With one
//! (`--request-consumer-replicas 1`) the requests are still on the stream's nodes, but a
//! server's read position is on one node: while that node is down the server receives
//! nothing (its requests wait in the stream), and with memory storage that node's restart
//! starts its consumers over (the agents answer the redeliveries from their ledgers).

use std::fmt;

/// Fewest stream replicas memory-storage request consumers are allowed with: a consumer
/// replicated on three nodes keeps its state while one of them is down or restarting.
pub const MIN_REPLICAS_FOR_MEMORY: usize = 3;

/// How the broker stores each server's request consumer state (delivered and acknowledged
/// sequences). Applies to consumers created from then on; existing ones keep theirs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum RequestConsumerStorage {
    /// On disk, like the stream: kept across any restart, ~10 ms per consumer at shutdown.
    #[default]
    File,
    /// In the broker's memory, replicated on the stream's nodes: no shutdown cost; a
    /// restart of every node at once redelivers the requests still in the stream, which
    /// agents answer from their ledgers (nothing runs twice).
    Memory,
}

impl RequestConsumerStorage {
    /// Whether JetStream is asked to keep the consumer's state in memory (`mem_storage`).
    pub fn in_memory(self) -> bool {
        self == Self::Memory
    }

    /// Refuses memory storage with fewer than [`MIN_REPLICAS_FOR_MEMORY`] replicas.
    pub fn check(self, replicas: usize) -> Result<(), MemoryNeedsReplicas> {
        if self.in_memory() && replicas < MIN_REPLICAS_FOR_MEMORY {
            return Err(MemoryNeedsReplicas { replicas });
        }
        Ok(())
    }
}

impl fmt::Display for RequestConsumerStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::File => "file",
            Self::Memory => "memory",
        })
    }
}

/// `--request-consumer-storage memory` was given with too few `--replicas`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "--request-consumer-storage memory needs --replicas {MIN_REPLICAS_FOR_MEMORY} or more (a JetStream cluster), not {replicas}: a single broker forgets memory-storage consumers when it restarts, and every agent would lose its request queue"
)]
pub struct MemoryNeedsReplicas {
    /// The `--replicas` given.
    pub replicas: usize,
}

/// How the gateway creates each server's request consumer, checked against `--replicas`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RequestConsumers {
    /// Where the consumer's state is kept.
    pub storage: RequestConsumerStorage,
    /// Nodes the consumer is kept on; `None`: the request stream's count (JetStream's
    /// default, a consumer that follows its stream).
    pub replicas: Option<usize>,
}

impl RequestConsumers {
    /// The consumers `--request-consumer-storage` and `--request-consumer-replicas` ask
    /// for, refused when they do not fit a request stream of `stream_replicas` copies:
    /// memory storage needs a replicated stream ([`MIN_REPLICAS_FOR_MEMORY`]; the stream,
    /// not the consumer, since it is the stream that keeps the requests a forgetful
    /// consumer delivers again), and a consumer cannot have more copies than its stream.
    pub fn checked(
        storage: RequestConsumerStorage,
        replicas: Option<usize>,
        stream_replicas: usize,
    ) -> Result<Self, RequestConsumersError> {
        storage.check(stream_replicas)?;
        if let Some(given) = replicas
            && !(1..=stream_replicas).contains(&given)
        {
            return Err(RequestConsumersError::Replicas {
                given,
                stream: stream_replicas,
            });
        }
        Ok(Self { storage, replicas })
    }

    /// The consumer's `num_replicas` as JetStream takes it: 0 means the stream's.
    pub fn num_replicas(&self) -> usize {
        self.replicas.unwrap_or(0)
    }
}

/// Request consumer settings that do not fit the request stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestConsumersError {
    /// Memory storage without a replicated stream.
    #[error(transparent)]
    Storage(#[from] MemoryNeedsReplicas),
    /// More consumer replicas than the stream has.
    #[error(
        "--request-consumer-replicas {given} is more than --replicas {stream}: a request consumer is kept on its stream's nodes, so give 1 to {stream} (or leave it out for {stream})"
    )]
    Replicas {
        /// The `--request-consumer-replicas` given.
        given: usize,
        /// The `--replicas` of the request stream.
        stream: usize,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consumer_replicas_are_refused_above_the_streams() {
        let file = RequestConsumerStorage::File;
        let error = RequestConsumers::checked(file, Some(3), 1).expect_err("refused");
        assert_eq!(
            error,
            RequestConsumersError::Replicas {
                given: 3,
                stream: 1
            }
        );
        assert!(
            error
                .to_string()
                .starts_with("--request-consumer-replicas 3 is more than --replicas 1"),
            "{error}"
        );
        let one = RequestConsumers::checked(file, Some(1), 3).expect("R1 on an R3 stream");
        assert_eq!(one.num_replicas(), 1);
        let default = RequestConsumers::checked(file, None, 3).expect("the stream's");
        assert_eq!(default.num_replicas(), 0);
    }

    #[test]
    fn memory_consumers_with_one_replica_need_a_replicated_stream_only() {
        let memory = RequestConsumerStorage::Memory;
        assert!(RequestConsumers::checked(memory, Some(1), 3).is_ok());
        assert_eq!(
            RequestConsumers::checked(memory, Some(1), 1),
            Err(RequestConsumersError::Storage(MemoryNeedsReplicas {
                replicas: 1
            }))
        );
    }

    #[test]
    fn memory_consumers_are_refused_without_three_replicas() {
        let memory = RequestConsumerStorage::Memory;
        assert_eq!(memory.check(1), Err(MemoryNeedsReplicas { replicas: 1 }));
        assert!(memory.check(2).is_err());
        assert_eq!(memory.check(3), Ok(()));
        assert_eq!(RequestConsumerStorage::File.check(1), Ok(()));
        let message = memory.check(1).expect_err("refused").to_string();
        assert!(message.contains("--request-consumer-storage memory needs --replicas 3"));
    }
}
