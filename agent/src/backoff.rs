//! Jittered exponential backoff, shared by reconnects, consumer look-ups and retries.
//!
//! Thousands of agents lose the same broker at the same moment when it restarts; without
//! jitter they would all come back in lock-step. The random factor needs no quality, so a
//! tiny xorshift seeded from the clock and the pid does, rather than another crate.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// First delay, before jitter.
pub const BASE_DELAY: Duration = Duration::from_millis(100);
/// Largest delay, before jitter.
pub const MAX_DELAY: Duration = Duration::from_secs(5);

/// State of the process-wide xorshift generator; 0 means "not seeded yet".
static RNG: AtomicU64 = AtomicU64::new(0);

fn seed() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    // xorshift must never hold 0.
    (nanos ^ (u64::from(std::process::id()) << 32)) | 1
}

fn xorshift(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}

/// A pseudo-random factor in `[0.5, 1.5)`.
pub fn jitter_factor() -> f64 {
    let mut prev = RNG.load(Ordering::Relaxed);
    let next = loop {
        let cur = if prev == 0 { seed() } else { prev };
        let next = xorshift(cur);
        match RNG.compare_exchange_weak(prev, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => break next,
            Err(actual) => prev = actual,
        }
    };
    // The top 53 bits make an exactly representable fraction in [0, 1).
    0.5 + (next >> 11) as f64 / (1u64 << 53) as f64
}

/// Delay before retry number `attempt` (0-based): `BASE_DELAY * 2^attempt`, capped at
/// [`MAX_DELAY`], times [`jitter_factor`].
pub fn delay(attempt: u32) -> Duration {
    let doubled = BASE_DELAY.saturating_mul(1u32 << attempt.min(16));
    doubled.min(MAX_DELAY).mul_f64(jitter_factor())
}

/// Counts consecutive failures and hands out the matching [`delay`].
#[derive(Debug, Default)]
pub struct Backoff {
    attempt: u32,
}

impl Backoff {
    /// The delay before the next retry; each call lengthens the next one.
    pub fn next_delay(&mut self) -> Duration {
        let d = delay(self.attempt);
        self.attempt = self.attempt.saturating_add(1);
        d
    }

    /// Back to the shortest delay after a success.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_then_cap_with_jitter_in_bounds() {
        for _ in 0..200 {
            let f = jitter_factor();
            assert!((0.5..1.5).contains(&f), "{f}");
        }
        let first = delay(0);
        assert!(
            first >= BASE_DELAY / 2 && first < BASE_DELAY * 3 / 2,
            "{first:?}"
        );
        let capped = delay(40);
        assert!(
            capped >= MAX_DELAY / 2 && capped < MAX_DELAY * 3 / 2,
            "{capped:?}"
        );
        let mut b = Backoff::default();
        let _ = b.next_delay();
        let _ = b.next_delay();
        assert_eq!(b.attempt, 2);
        b.reset();
        assert_eq!(b.attempt, 0);
    }
}
