//! [`Pace`]: requests-per-minute and tokens-per-minute budgets for model
//! calls, for the whole process (`llm_rpm`, `llm_tpm`) and per tenant
//! (`tenant_queue_settings.llm_rpm`, `llm_tpm`), enforced *before* a call:
//! a call over a budget waits its turn instead of collecting a provider's
//! 429s.
//!
//! Each budget is a bucket holding a minute's worth (its capacity) that
//! refills continuously; a call takes one request and its estimated tokens
//! (prompt + `max_tokens`) from every bucket that applies, or waits until
//! all of them can give it. The wait is admission (`kernel::waiting`), so
//! it extends the step's timeout. The buckets live in this process: with N
//! processes the provider may see up to N times a budget (as with the
//! request rate limits), which keeps a call free of database writes.
//!
//! A tenant's own budgets are read from the database at most once every
//! [`SETTINGS_TTL`]; the tenant is the one the calling work runs as
//! (`kernel::row_security`), so a step's calls count against its task's
//! tenant.

use std::{collections::HashMap, sync::Mutex, time::Duration};

use brainstem_entity::{TenantId, TenantOwned, TenantScope, tenant_queue_setting};
use sea_orm::DatabaseConnection;
use tokio::time::Instant;

use crate::kernel::{
    row_security::{self, RowAccess},
    waiting,
};

/// How long a tenant's budgets are kept before they are read again.
pub const SETTINGS_TTL: Duration = Duration::from_secs(30);

/// Requests and tokens per minute; 0 is no budget.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PerMinute {
    pub requests: u32,
    pub tokens: u32,
}

/// One budget's bucket: how much it held at `at`.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    level: f64,
    at: Instant,
}

impl Bucket {
    fn full(capacity: u32, now: Instant) -> Self {
        Self {
            level: f64::from(capacity),
            at: now,
        }
    }

    /// Refill to `now`; then how long until `amount` is there (zero: now).
    fn wait_for(&mut self, capacity: u32, amount: f64, now: Instant) -> Duration {
        let per_second = f64::from(capacity) / 60.0;
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.level = (self.level + elapsed * per_second).min(f64::from(capacity));
        self.at = now;
        // A call larger than a whole minute's budget waits for a full
        // bucket, then goes (it could never fit otherwise).
        let amount = amount.min(f64::from(capacity));
        if self.level >= amount {
            Duration::ZERO
        } else {
            Duration::from_secs_f64((amount - self.level) / per_second)
        }
    }
}

/// The buckets of one scope (the process, or one tenant).
#[derive(Debug, Default)]
struct Buckets {
    requests: Option<Bucket>,
    tokens: Option<Bucket>,
}

impl Buckets {
    /// How long until a call of `tokens` fits `limits` (zero: now).
    fn wait_for(&mut self, limits: PerMinute, tokens: u64, now: Instant) -> Duration {
        let mut wait = Duration::ZERO;
        if limits.requests > 0 {
            let b = self
                .requests
                .get_or_insert_with(|| Bucket::full(limits.requests, now));
            wait = wait.max(b.wait_for(limits.requests, 1.0, now));
        }
        if limits.tokens > 0 {
            let b = self
                .tokens
                .get_or_insert_with(|| Bucket::full(limits.tokens, now));
            wait = wait.max(b.wait_for(limits.tokens, tokens as f64, now));
        }
        wait
    }

    fn take(&mut self, limits: PerMinute, tokens: u64) {
        if limits.requests > 0
            && let Some(b) = &mut self.requests
        {
            b.level -= 1.0;
        }
        if limits.tokens > 0
            && let Some(b) = &mut self.tokens
        {
            b.level -= (tokens as f64).min(f64::from(limits.tokens));
        }
    }
}

#[derive(Debug, Default)]
struct State {
    global: Buckets,
    tenants: HashMap<TenantId, Buckets>,
    /// Tenants' own budgets, with when they were read.
    limits: HashMap<TenantId, (PerMinute, Instant)>,
}

/// The process's model-call budgets. Cheap to share behind an `Arc`.
#[derive(Debug, Default)]
pub struct Pace {
    global: PerMinute,
    /// Where tenants' own budgets are read; none: only the global one.
    db: Option<DatabaseConnection>,
    state: Mutex<State>,
}

impl Pace {
    /// The process-wide `global` budgets, and tenants' own from `db`.
    pub fn new(global: PerMinute, db: Option<DatabaseConnection>) -> Self {
        Self {
            global,
            db,
            state: Mutex::default(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A poisoned lock only means a panic mid-update of plain numbers.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The current work's tenant's own budgets (cached).
    async fn tenant_limits(&self, tenant: TenantId) -> PerMinute {
        let now = Instant::now();
        if let Some((limits, at)) = self.state().limits.get(&tenant)
            && now.duration_since(*at) < SETTINGS_TTL
        {
            return *limits;
        }
        let Some(db) = &self.db else {
            return PerMinute::default();
        };
        let row = tenant_queue_setting::Entity::find_in(TenantScope::new(tenant))
            .one(db)
            .await;
        let limits = match row {
            Ok(row) => {
                let n = |v: Option<i32>| v.and_then(|v| u32::try_from(v).ok()).unwrap_or(0);
                PerMinute {
                    requests: n(row.as_ref().and_then(|r| r.llm_rpm)),
                    tokens: n(row.as_ref().and_then(|r| r.llm_tpm)),
                }
            }
            Err(err) => {
                tracing::warn!(%err, "could not read the tenant's model budgets");
                PerMinute::default()
            }
        };
        let mut state = self.state();
        if state.limits.len() > 10_000 {
            state.limits.clear();
        }
        state.limits.insert(tenant, (limits, now));
        limits
    }

    /// Wait until a call of about `tokens` fits every budget that applies,
    /// then take it from them.
    pub async fn admit(&self, tokens: u64) {
        let tenant = match row_security::current() {
            Some(RowAccess::Tenant(t)) => Some(t),
            _ => None,
        };
        let own = match tenant {
            Some(t) => self.tenant_limits(t).await,
            None => PerMinute::default(),
        };
        if self.global == PerMinute::default() && own == PerMinute::default() {
            return;
        }
        waiting::admission(async {
            loop {
                let wait = {
                    let now = Instant::now();
                    let mut state = self.state();
                    let mut wait = state.global.wait_for(self.global, tokens, now);
                    if let Some(t) = tenant {
                        let b = state.tenants.entry(t).or_default();
                        wait = wait.max(b.wait_for(own, tokens, now));
                    }
                    if wait.is_zero() {
                        state.global.take(self.global, tokens);
                        if let Some(t) = tenant {
                            state.tenants.entry(t).or_default().take(own, tokens);
                        }
                    }
                    wait
                };
                if wait.is_zero() {
                    return;
                }
                tokio::time::sleep(wait).await;
            }
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_gives_a_minute_then_refills_over_the_minute() {
        let start = Instant::now();
        let limits = PerMinute {
            requests: 60,
            tokens: 0,
        };
        let mut b = Buckets::default();
        for _ in 0..60 {
            assert_eq!(b.wait_for(limits, 0, start), Duration::ZERO);
            b.take(limits, 0);
        }
        // The 61st waits a second (60 a minute).
        let wait = b.wait_for(limits, 0, start);
        assert!((wait.as_secs_f64() - 1.0).abs() < 0.01, "{wait:?}");
        assert_eq!(
            b.wait_for(limits, 0, start + Duration::from_secs(1)),
            Duration::ZERO
        );
    }

    #[test]
    fn tokens_wait_for_their_share_and_a_huge_call_for_a_full_minute() {
        let start = Instant::now();
        let limits = PerMinute {
            requests: 0,
            tokens: 6000,
        };
        let mut b = Buckets::default();
        assert_eq!(b.wait_for(limits, 5000, start), Duration::ZERO);
        b.take(limits, 5000);
        // 1000 left; 3000 more is 2000 short at 100 a second: 20 s.
        let wait = b.wait_for(limits, 3000, start);
        assert!((wait.as_secs_f64() - 20.0).abs() < 0.01, "{wait:?}");
        // Larger than the budget: it waits for a full bucket, not forever.
        let wait = b.wait_for(limits, 60_000, start);
        assert!((wait.as_secs_f64() - 50.0).abs() < 0.01, "{wait:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_over_the_global_budget_waits_instead_of_failing() {
        let pace = Pace::new(
            PerMinute {
                requests: 2,
                tokens: 0,
            },
            None,
        );
        let started = tokio::time::Instant::now();
        pace.admit(10).await;
        pace.admit(10).await;
        assert!(started.elapsed() < Duration::from_secs(1));
        // The third waits for the bucket to give one more (30 s at 2 a
        // minute).
        pace.admit(10).await;
        assert!(
            started.elapsed() >= Duration::from_secs(29),
            "{:?}",
            started.elapsed()
        );
    }
}
