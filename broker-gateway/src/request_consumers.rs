//! Where the broker keeps the state of the servers' request consumers (`--request-consumer-storage`).
//!
//! Every registered server has a durable pull consumer on the request stream. With file
//! storage (the default) nats-server 2.15 stops each one in turn at shutdown and waits
//! ~10 ms for its state flusher (`consumerFileStore.waitOnFlusher` sleeps 10 ms), so a
//! broker's shutdown or restart takes ~10.7 ms per registered server: 107 s at 10,000,
//! ~9 min at 50,000 (docs/benchmarks.md). Memory storage has no flusher and stops at once.
//! Its cost is durability: a single broker forgets memory consumers when it restarts, so
//! they are allowed only where JetStream replicates them (`--replicas` 3 or more), and a
//! restart of *every* node at once starts them over from the stream's first message.

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

#[cfg(test)]
mod tests {
    use super::*;

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
