//! A circuit breaker per provider, so that a provider that is down costs
//! callers nothing but a fast, retryable error.
//!
//! - **Closed**: calls go through; `failures` consecutive provider failures
//!   (default 5) open it. Any success resets the count.
//! - **Open**: calls fail at once until `cooldown` (default 30 s) has passed.
//! - **Half-open**: one trial call goes through; its success closes the
//!   breaker, its failure opens it for another cool-down. If the trial never
//!   reports (its caller was cancelled), another trial is allowed after a
//!   further cool-down.
//!
//! The seed gives no numbers for a breaker; 5 failures and 30 s match its
//! retry schedule (3 attempts per call, so two failed calls open it) and its
//! 30 s stream-gap timeout. The clock is passed in, so the state machine is
//! tested without waiting.

use std::{sync::Mutex, time::Duration};

use tokio::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Consecutive failures that open the breaker (0 disables it).
    pub failures: u32,
    /// How long it stays open before a trial call.
    pub cooldown: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            failures: 5,
            cooldown: Duration::from_secs(30),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BreakerState {
    Closed,
    Open { until: Instant },
    HalfOpen,
}

#[derive(Debug)]
enum State {
    Closed {
        failures: u32,
    },
    Open {
        until: Instant,
    },
    /// A trial call started at `trial_at` is under way.
    HalfOpen {
        trial_at: Instant,
    },
}

#[derive(Debug)]
pub struct Breaker {
    config: BreakerConfig,
    state: Mutex<State>,
}

impl Breaker {
    pub fn new(config: BreakerConfig) -> Self {
        Self {
            config,
            state: Mutex::new(State::Closed { failures: 0 }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave the state invalid.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// May a call start at `now`? `Err` holds how long until one may.
    pub fn admit(&self, now: Instant) -> Result<(), Duration> {
        let mut state = self.lock();
        match *state {
            State::Closed { .. } => Ok(()),
            State::Open { until } if now < until => Err(until - now),
            State::Open { .. } => {
                *state = State::HalfOpen { trial_at: now };
                Ok(())
            }
            State::HalfOpen { trial_at } => {
                let next = trial_at + self.config.cooldown;
                if now < next {
                    Err(next - now)
                } else {
                    *state = State::HalfOpen { trial_at: now };
                    Ok(())
                }
            }
        }
    }

    /// A call succeeded (or the provider answered at all).
    pub fn success(&self) {
        *self.lock() = State::Closed { failures: 0 };
    }

    /// A call failed because of the provider.
    pub fn failure(&self, now: Instant) {
        if self.config.failures == 0 {
            return;
        }
        let mut state = self.lock();
        let open = State::Open {
            until: now + self.config.cooldown,
        };
        *state = match *state {
            State::Closed { failures } if failures + 1 < self.config.failures => State::Closed {
                failures: failures + 1,
            },
            _ => open,
        };
    }

    pub fn state(&self, now: Instant) -> BreakerState {
        match *self.lock() {
            State::Closed { .. } => BreakerState::Closed,
            State::Open { until } if now < until => BreakerState::Open { until },
            State::Open { .. } | State::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker() -> Breaker {
        Breaker::new(BreakerConfig {
            failures: 3,
            cooldown: Duration::from_secs(30),
        })
    }

    #[test]
    fn opens_after_consecutive_failures_only() {
        let b = breaker();
        let t = Instant::now();
        b.failure(t);
        b.failure(t);
        b.success(); // resets the count
        b.failure(t);
        b.failure(t);
        assert_eq!(b.state(t), BreakerState::Closed);
        assert_eq!(b.admit(t), Ok(()));
        b.failure(t);
        assert_eq!(
            b.state(t),
            BreakerState::Open {
                until: t + Duration::from_secs(30)
            }
        );
        assert_eq!(
            b.admit(t + Duration::from_secs(10)),
            Err(Duration::from_secs(20))
        );
    }

    #[test]
    fn half_open_admits_one_trial_that_closes_or_reopens() {
        let b = breaker();
        let t = Instant::now();
        for _ in 0..3 {
            b.failure(t);
        }
        // After the cool-down: one trial, others wait.
        let t1 = t + Duration::from_secs(30);
        assert_eq!(b.state(t1), BreakerState::HalfOpen);
        assert_eq!(b.admit(t1), Ok(()));
        assert!(b.admit(t1 + Duration::from_secs(1)).is_err());
        // The trial fails: open for another cool-down.
        b.failure(t1 + Duration::from_secs(2));
        assert_eq!(
            b.state(t1 + Duration::from_secs(2)),
            BreakerState::Open {
                until: t1 + Duration::from_secs(32)
            }
        );
        // The next trial succeeds: closed.
        let t2 = t1 + Duration::from_secs(32);
        assert_eq!(b.admit(t2), Ok(()));
        b.success();
        assert_eq!(b.state(t2), BreakerState::Closed);
        assert_eq!(b.admit(t2), Ok(()));
    }

    #[test]
    fn a_trial_that_never_reports_is_replaced_after_a_cool_down() {
        let b = breaker();
        let t = Instant::now();
        for _ in 0..3 {
            b.failure(t);
        }
        let t1 = t + Duration::from_secs(30);
        assert_eq!(b.admit(t1), Ok(()));
        assert!(b.admit(t1 + Duration::from_secs(29)).is_err());
        assert_eq!(b.admit(t1 + Duration::from_secs(30)), Ok(()));
    }

    #[test]
    fn zero_failures_disables_the_breaker() {
        let b = Breaker::new(BreakerConfig {
            failures: 0,
            cooldown: Duration::from_secs(30),
        });
        let t = Instant::now();
        for _ in 0..100 {
            b.failure(t);
        }
        assert_eq!(b.admit(t), Ok(()));
    }
}
