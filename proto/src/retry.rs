//! The workspace's one retry policy: jittered exponential backoff (`backon`), so that
//! every loop that tries again waits the same way and is written the same way.
//!
//! A [`Policy`] is a first delay (`base`) doubled after each failure up to a `cap`. Each
//! delay is then drawn between half and all of that nominal value ("equal jitter"): never
//! longer than the cap a flag or a constant promises, and never in lock-step with the
//! thousands of other agents (or gateways) that lost the same broker at the same moment.
//!
//! Three ways to use it, one per shape of loop:
//! - [`Policy::retry`]: a plain retry of one async call (`backon::Retryable`), bounded or
//!   not, stopped early by `when` / a surrounding `select!`;
//! - [`Policy::delays`]: a loop that keeps its own shape (a forever loop reset after a
//!   success, a pause raced against a reconnection or shutdown) takes its pauses from
//!   [`Delays::next_delay`];
//! - [`Policy::delay`]: a caller that only knows an attempt number (the NATS client's
//!   reconnect callback).

use std::time::Duration;

pub use backon::Retryable;
use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

/// Doublings after which any base has reached any cap (`Duration` holds < 2^64 s).
const MAX_DOUBLINGS: u32 = 96;

/// Jittered exponential backoff: `base` doubled after each failure up to `cap`, each
/// delay drawn in `[nominal / 2, nominal)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    base: Duration,
    cap: Duration,
}

impl Policy {
    /// Starts at `base`, doubles up to `cap` (a `base` above `cap` is taken as `cap`).
    pub const fn new(base: Duration, cap: Duration) -> Self {
        let base = if base.as_nanos() > cap.as_nanos() {
            cap
        } else {
            base
        };
        Self { base, cap }
    }

    /// The nominal first delay, before jitter.
    pub const fn base(&self) -> Duration {
        self.base
    }

    /// The longest nominal delay, before jitter: no delay is longer.
    pub const fn cap(&self) -> Duration {
        self.cap
    }

    /// The backon builder of this policy: backon adds a random part in `[0, d)` to each
    /// delay `d`, so it starts from half the base and stops doubling at half the cap.
    fn builder(&self) -> ExponentialBuilder {
        ExponentialBuilder::new()
            .with_min_delay(self.base.saturating_sub(self.base / 2))
            .with_max_delay(self.cap / 2)
            .with_jitter()
            .without_max_times()
    }

    /// The delays of a loop that retries until something else stops it.
    pub fn delays(&self) -> Delays {
        Delays {
            policy: *self,
            inner: self.builder().build(),
        }
    }

    /// The backoff for `call.retry(…)` ([`Retryable`]): at most `retries` retries after
    /// the first attempt, `None` for no bound.
    pub fn retry(&self, retries: Option<usize>) -> ExponentialBuilder {
        match retries {
            Some(n) => self.builder().with_max_times(n),
            None => self.builder(),
        }
    }

    /// The delay before retry number `attempt` (0-based), for a caller that counts
    /// attempts itself.
    pub fn delay(&self, attempt: u32) -> Duration {
        let nth = attempt.min(MAX_DOUBLINGS) as usize;
        self.builder().build().nth(nth).unwrap_or(self.cap)
    }
}

/// The delays of one retrying loop, longer after each failure, back to the shortest
/// after [`Delays::reset`].
#[derive(Debug)]
pub struct Delays {
    policy: Policy,
    inner: ExponentialBackoff,
}

impl Delays {
    /// The pause before the next attempt; each call lengthens the next one (up to the cap).
    pub fn next_delay(&mut self) -> Duration {
        // Unbounded: backon never ends it.
        self.inner.next().unwrap_or(self.policy.cap)
    }

    /// Back to the shortest delay, after a success.
    pub fn reset(&mut self) {
        *self = self.policy.delays();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// `d` lies in `[nominal / 2, nominal)`, give or take backon's `f32` rounding.
    fn within(d: Duration, nominal: Duration) -> bool {
        let slack = Duration::from_micros(1);
        d + slack >= nominal / 2 && d <= nominal + slack
    }

    #[test]
    fn delays_double_from_the_base_up_to_the_cap_each_jittered_below_its_nominal() {
        let policy = Policy::new(100 * MS, 5_000 * MS);
        for _ in 0..50 {
            let mut delays = policy.delays();
            for nominal in [100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000] {
                let d = delays.next_delay();
                assert!(within(d, nominal * MS), "{d:?} for {nominal} ms");
            }
        }
    }

    #[test]
    fn delays_are_jittered_not_in_lock_step() {
        let policy = Policy::new(100 * MS, 5_000 * MS);
        let firsts: std::collections::HashSet<Duration> =
            (0..20).map(|_| policy.delays().next_delay()).collect();
        assert!(firsts.len() > 1, "{firsts:?}");
    }

    #[test]
    fn a_reset_starts_again_from_the_base() {
        let policy = Policy::new(100 * MS, 5_000 * MS);
        let mut delays = policy.delays();
        for _ in 0..10 {
            delays.next_delay();
        }
        delays.reset();
        let d = delays.next_delay();
        assert!(within(d, 100 * MS), "{d:?}");
    }

    #[test]
    fn delay_of_an_attempt_number_follows_the_same_policy() {
        let policy = Policy::new(250 * MS, 10_000 * MS);
        assert!(within(policy.delay(0), 250 * MS));
        assert!(within(policy.delay(2), 1_000 * MS));
        assert!(within(policy.delay(40), 10_000 * MS));
        assert!(within(policy.delay(u32::MAX), 10_000 * MS));
    }

    #[test]
    fn a_base_above_the_cap_is_the_cap() {
        let policy = Policy::new(10_000 * MS, 2_000 * MS);
        assert_eq!(policy.base(), 2_000 * MS);
        let mut delays = policy.delays();
        for _ in 0..5 {
            let d = delays.next_delay();
            assert!(within(d, 2_000 * MS), "{d:?}");
        }
    }

    #[test]
    fn a_bounded_retry_gives_that_many_delays() {
        let policy = Policy::new(MS, 4 * MS);
        assert_eq!(policy.retry(Some(3)).build().count(), 3);
        assert_eq!(policy.retry(None).build().take(1000).count(), 1000);
    }

    #[test]
    fn a_retried_call_stops_at_success_or_at_its_bound() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        let policy = Policy::new(MS, 2 * MS);
        let calls = std::cell::Cell::new(0u32);
        let call = || async {
            calls.set(calls.get() + 1);
            if calls.get() < 3 {
                Err("not yet")
            } else {
                Ok(calls.get())
            }
        };
        assert_eq!(rt.block_on(call.retry(policy.retry(None))), Ok(3));
        calls.set(0);
        let bounded = rt.block_on(call.retry(policy.retry(Some(1))));
        assert_eq!((bounded, calls.get()), (Err("not yet"), 2));
    }
}
