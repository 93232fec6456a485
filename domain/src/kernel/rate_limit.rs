//! Token buckets for request rate limits: per API key, per tenant, and per
//! client address for anonymous callers (an IPv6 client by its /64, the
//! block one subscriber usually holds); and per client address for failed
//! authentications (a bad token or API key, an unsigned or badly signed
//! hook delivery), so that guessing costs the server a bounded number of
//! lookups: an address that has used up its failures is refused before
//! any credential it sends is looked up, and successes cost it nothing.
//!
//! Buckets live in this process's memory, so each replica enforces its own
//! limits: with N replicas behind a load balancer a client may get up to N
//! times the configured rate. That keeps the check free of database round
//! trips; a shared limiter can replace [`RateLimiter`] behind the same calls.
//!
//! Time is passed in (`now`) rather than read here, so the arithmetic is
//! tested with explicit instants.

use std::{
    collections::HashMap,
    hash::Hash,
    net::{IpAddr, Ipv6Addr},
    sync::Mutex,
    time::{Duration, Instant},
};

use brainstem_entity::{ApiKeyId, TenantId};

use crate::{Actor, Error, Principal, Result};

/// A sustained rate and the burst a bucket holds. A rate of 0 disables the
/// limit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rate {
    /// Tokens added per second.
    pub per_second: f64,
    /// Bucket capacity: how many requests may arrive at once.
    pub burst: u32,
}

impl Rate {
    pub const UNLIMITED: Rate = Rate {
        per_second: 0.0,
        burst: 0,
    };

    pub fn new(per_second: f64, burst: u32) -> Self {
        Self { per_second, burst }
    }

    pub fn is_unlimited(self) -> bool {
        self.per_second <= 0.0
    }

    /// The capacity, never below one request (a burst of 0 with a positive
    /// rate would otherwise refuse everything).
    fn capacity(self) -> f64 {
        f64::from(self.burst.max(1))
    }
}

/// One bucket: how many tokens it held at `at`.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(rate: Rate, now: Instant) -> Self {
        Self {
            tokens: rate.capacity(),
            at: now,
        }
    }

    /// Refill up to `now` (a clock that went backwards refills nothing).
    fn refill(&mut self, rate: Rate, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate.per_second).min(rate.capacity());
        if now > self.at {
            self.at = now;
        }
    }

    /// Take one token, or say how long until one is there.
    fn take(&mut self, rate: Rate, now: Instant) -> std::result::Result<(), Duration> {
        self.refill(rate, now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64(
                (1.0 - self.tokens) / rate.per_second,
            ))
        }
    }

    /// Whether the bucket would be full at `now`, so forgetting it changes
    /// nothing.
    fn is_full_at(&self, rate: Rate, now: Instant) -> bool {
        let mut probe = *self;
        probe.refill(rate, now);
        probe.tokens >= rate.capacity()
    }
}

/// Buckets of one kind (per key, per tenant), created full on first use.
#[derive(Debug)]
pub struct Buckets<K> {
    buckets: Mutex<HashMap<K, Bucket>>,
}

/// How many buckets a map may hold before full ones are forgotten.
const PRUNE_ABOVE: usize = 10_000;

impl<K: Eq + Hash + Copy> Default for Buckets<K> {
    fn default() -> Self {
        Self {
            buckets: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Eq + Hash + Copy> Buckets<K> {
    /// Take a token from `key`'s bucket, or say how long to wait.
    pub fn take(&self, key: K, rate: Rate, now: Instant) -> std::result::Result<(), Duration> {
        if rate.is_unlimited() {
            return Ok(());
        }
        // A poisoned lock only means another request panicked mid-update;
        // the map of plain numbers is still usable.
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Pruning judges every bucket by the rate at hand; a key with a rate
        // of its own may be forgotten a little early, which errs on the
        // lenient side and keeps the map bounded.
        if buckets.len() > PRUNE_ABOVE {
            buckets.retain(|_, b| !b.is_full_at(rate, now));
        }
        buckets
            .entry(key)
            .or_insert_with(|| Bucket::full(rate, now))
            .take(rate, now)
    }

    /// Whether `key`'s bucket holds a token, without taking it; else how
    /// long until it will.
    fn peek(&self, key: K, rate: Rate, now: Instant) -> std::result::Result<(), Duration> {
        if rate.is_unlimited() {
            return Ok(());
        }
        let buckets = self
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match buckets.get(&key) {
            Some(bucket) => {
                let mut probe = *bucket;
                probe.take(rate, now)
            }
            None => Ok(()),
        }
    }

    /// Give back a token taken by mistake (when a later check refused the
    /// request, so it did not run).
    fn give_back(&self, key: K, rate: Rate) {
        if rate.is_unlimited() {
            return;
        }
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(bucket) = buckets.get_mut(&key) {
            bucket.tokens = (bucket.tokens + 1.0).min(rate.capacity());
        }
    }
}

/// The configured limits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateLimits {
    /// Each API key's default rate (a key may carry its own).
    pub per_key: Rate,
    /// Each tenant's rate, shared by all its callers.
    pub per_tenant: Rate,
    /// The rate of anonymous operations from one client address.
    pub per_anonymous_address: Rate,
    /// The rate of failed authentications from one client address.
    pub per_failed_auth_address: Rate,
}

impl Default for RateLimits {
    fn default() -> Self {
        Self {
            per_key: Rate::new(20.0, 40),
            per_tenant: Rate::new(100.0, 200),
            per_anonymous_address: Rate::new(5.0, 20),
            per_failed_auth_address: Rate::new(1.0, 30),
        }
    }
}

/// Per-key, per-tenant and per-address buckets for every operation.
#[derive(Debug, Default)]
pub struct RateLimiter {
    limits: RateLimits,
    keys: Buckets<ApiKeyId>,
    tenants: Buckets<TenantId>,
    addresses: Buckets<IpAddr>,
    failures: Buckets<IpAddr>,
}

impl RateLimiter {
    pub fn new(limits: RateLimits) -> Self {
        Self {
            limits,
            keys: Buckets::default(),
            tenants: Buckets::default(),
            addresses: Buckets::default(),
            failures: Buckets::default(),
        }
    }

    pub fn limits(&self) -> RateLimits {
        self.limits
    }

    /// Admit one operation of `principal`, or refuse it with
    /// [`Error::RateLimited`]. `key_rate` is the API key's own rate, when it
    /// has one. Callers without a tenant (a platform admin) are not limited.
    pub fn check(&self, principal: &Principal, key_rate: Option<Rate>, now: Instant) -> Result<()> {
        let key = match principal.actor {
            Actor::ApiKey(id) => Some((id, key_rate.unwrap_or(self.limits.per_key))),
            Actor::User(_) | Actor::Hook(_) => None,
        };
        if let Some((id, rate)) = key
            && let Err(wait) = self.keys.take(id, rate, now)
        {
            return Err(limited("this API key", wait));
        }
        if let Some(tenant) = principal.tenant
            && let Err(wait) = self.tenants.take(tenant, self.limits.per_tenant, now)
        {
            // The request does not run, so it must not count against the key.
            if let Some((id, rate)) = key {
                self.keys.give_back(id, rate);
            }
            return Err(limited("this tenant", wait));
        }
        Ok(())
    }

    /// Admit one operation of an anonymous caller at `address`, or refuse
    /// it with [`Error::RateLimited`].
    pub fn check_anonymous(&self, address: IpAddr, now: Instant) -> Result<()> {
        self.addresses
            .take(
                address_block(address),
                self.limits.per_anonymous_address,
                now,
            )
            .map_err(|wait| limited("anonymous requests from this address", wait))
    }
}

impl RateLimiter {
    /// Refuse a caller at `address` that has used up its failed
    /// authentications, before its credential costs a lookup. Takes
    /// nothing: only [`RateLimiter::record_failure`] does.
    pub fn check_failures(&self, address: IpAddr, now: Instant) -> Result<()> {
        self.failures
            .peek(
                address_block(address),
                self.limits.per_failed_auth_address,
                now,
            )
            .map_err(|wait| limited("failed authentications from this address", wait))
    }

    /// Count one failed authentication from `address`.
    pub fn record_failure(&self, address: IpAddr, now: Instant) {
        let _ = self.failures.take(
            address_block(address),
            self.limits.per_failed_auth_address,
            now,
        );
    }
}

/// The bucket an address counts against: itself for IPv4 (and IPv4 mapped
/// into IPv6), its /64 for IPv6, where one client often holds the block.
fn address_block(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V4(_) => address,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

fn limited(who: &str, wait: Duration) -> Error {
    // Whole seconds, rounded up, at least 1: what `Retry-After` can carry.
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    Error::RateLimited {
        message: format!("rate limit exceeded for {who}; retry in {} s", secs.max(1)),
        retry_after_secs: secs.max(1),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::Role;

    fn key_principal(key: ApiKeyId, tenant: TenantId) -> Principal {
        Principal {
            actor: Actor::ApiKey(key),
            tenant: Some(tenant),
            roles: [Role::Service].into(),
            scopes: BTreeSet::new(),
        }
    }

    fn retry_after(result: Result<()>) -> u64 {
        match result {
            Err(Error::RateLimited {
                retry_after_secs, ..
            }) => retry_after_secs,
            other => panic!("expected RateLimited, got {other:?}"),
        }
    }

    #[test]
    fn a_bucket_allows_its_burst_then_refills_at_its_rate() {
        let buckets = Buckets::default();
        let rate = Rate::new(2.0, 3);
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(buckets.take(1, rate, t0).is_ok());
        }
        let wait = buckets.take(1, rate, t0).unwrap_err();
        assert_eq!(wait, Duration::from_millis(500));
        // Half a second later one token is back, and only one.
        let t1 = t0 + Duration::from_millis(500);
        assert!(buckets.take(1, rate, t1).is_ok());
        assert!(buckets.take(1, rate, t1).is_err());
        // Long idle time refills to the burst, never above it.
        let t2 = t1 + Duration::from_secs(3600);
        for _ in 0..3 {
            assert!(buckets.take(1, rate, t2).is_ok());
        }
        assert!(buckets.take(1, rate, t2).is_err());
        // Other keys have their own bucket.
        assert!(buckets.take(2, rate, t2).is_ok());
    }

    #[test]
    fn a_clock_going_backwards_refills_nothing() {
        let buckets = Buckets::default();
        let rate = Rate::new(1.0, 1);
        let t0 = Instant::now() + Duration::from_secs(10);
        assert!(buckets.take(7, rate, t0).is_ok());
        assert!(buckets.take(7, rate, t0 - Duration::from_secs(5)).is_err());
        assert!(buckets.take(7, rate, t0 + Duration::from_secs(1)).is_ok());
    }

    #[test]
    fn a_zero_rate_disables_the_limit() {
        let buckets = Buckets::default();
        let t0 = Instant::now();
        for _ in 0..10_000 {
            assert!(buckets.take(1, Rate::UNLIMITED, t0).is_ok());
        }
        assert!(buckets.buckets.lock().unwrap().is_empty());
    }

    #[test]
    fn anonymous_callers_are_limited_per_address_and_ipv6_per_64() {
        let limiter = RateLimiter::new(RateLimits {
            per_anonymous_address: Rate::new(1.0, 2),
            ..RateLimits::default()
        });
        let t0 = Instant::now();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        assert!(limiter.check_anonymous(a, t0).is_ok());
        assert!(limiter.check_anonymous(a, t0).is_ok());
        assert_eq!(retry_after(limiter.check_anonymous(a, t0)), 1);
        // The same address mapped into IPv6 shares the bucket; another does not.
        let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
        assert!(limiter.check_anonymous(mapped, t0).is_err());
        assert!(limiter.check_anonymous(b, t0).is_ok());
        // Two addresses in one IPv6 /64 share a bucket; the next /64 does not.
        let v6 = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(limiter.check_anonymous(v6("2001:db8:0:1::1"), t0).is_ok());
        assert!(limiter.check_anonymous(v6("2001:db8:0:1::2"), t0).is_ok());
        assert!(
            limiter
                .check_anonymous(v6("2001:db8:0:1:ffff::9"), t0)
                .is_err()
        );
        assert!(limiter.check_anonymous(v6("2001:db8:0:2::1"), t0).is_ok());
    }

    #[test]
    fn retry_after_is_whole_seconds_rounded_up() {
        let limiter = RateLimiter::new(RateLimits {
            per_key: Rate::new(0.4, 1),
            per_tenant: Rate::UNLIMITED,
            per_anonymous_address: Rate::UNLIMITED,
            per_failed_auth_address: Rate::UNLIMITED,
        });
        let p = key_principal(ApiKeyId::new(), TenantId::new());
        let t0 = Instant::now();
        assert!(limiter.check(&p, None, t0).is_ok());
        // 1 token at 0.4/s takes 2.5 s: clients are told 3.
        assert_eq!(retry_after(limiter.check(&p, None, t0)), 3);
        assert_eq!(
            retry_after(limiter.check(&p, None, t0 + Duration::from_millis(2400))),
            1
        );
        assert!(
            limiter
                .check(&p, None, t0 + Duration::from_millis(2500))
                .is_ok()
        );
    }

    #[test]
    fn keys_and_tenants_are_limited_separately_and_key_rates_override() {
        let limiter = RateLimiter::new(RateLimits {
            per_key: Rate::new(1.0, 2),
            per_tenant: Rate::new(1.0, 5),
            per_anonymous_address: Rate::UNLIMITED,
            per_failed_auth_address: Rate::UNLIMITED,
        });
        let tenant = TenantId::new();
        let (a, b, c) = (ApiKeyId::new(), ApiKeyId::new(), ApiKeyId::new());
        let t0 = Instant::now();
        // Key a: its burst of 2.
        assert!(limiter.check(&key_principal(a, tenant), None, t0).is_ok());
        assert!(limiter.check(&key_principal(a, tenant), None, t0).is_ok());
        assert!(limiter.check(&key_principal(a, tenant), None, t0).is_err());
        // Key b has its own bucket; the tenant's 5 are shared.
        assert!(limiter.check(&key_principal(b, tenant), None, t0).is_ok());
        assert!(limiter.check(&key_principal(b, tenant), None, t0).is_ok());
        // Key c has a larger rate of its own, but the tenant has one token left.
        let big = Some(Rate::new(100.0, 100));
        assert!(limiter.check(&key_principal(c, tenant), big, t0).is_ok());
        let err = limiter
            .check(&key_principal(c, tenant), big, t0)
            .unwrap_err();
        assert!(err.to_string().contains("tenant"), "{err}");
        // A token user of the tenant shares the tenant bucket too.
        let user = Principal {
            actor: Actor::User("u".into()),
            tenant: Some(tenant),
            roles: [Role::Member].into(),
            scopes: BTreeSet::new(),
        };
        assert!(limiter.check(&user, None, t0).is_err());
        // Another tenant is untouched; a platform admin without a tenant is
        // never limited.
        assert!(
            limiter
                .check(&key_principal(ApiKeyId::new(), TenantId::new()), None, t0)
                .is_ok()
        );
        let admin = Principal {
            tenant: None,
            roles: [Role::PlatformAdmin].into(),
            ..user
        };
        for _ in 0..100 {
            assert!(limiter.check(&admin, None, t0).is_ok());
        }
    }

    #[test]
    fn a_request_refused_by_the_tenant_does_not_cost_the_key() {
        let limiter = RateLimiter::new(RateLimits {
            per_key: Rate::new(1.0, 1),
            per_tenant: Rate::new(1.0, 1),
            per_anonymous_address: Rate::UNLIMITED,
            per_failed_auth_address: Rate::UNLIMITED,
        });
        let tenant = TenantId::new();
        let (a, b) = (ApiKeyId::new(), ApiKeyId::new());
        let t0 = Instant::now();
        assert!(limiter.check(&key_principal(a, tenant), None, t0).is_ok());
        // b is refused by the tenant bucket; its own token stays.
        assert!(limiter.check(&key_principal(b, tenant), None, t0).is_err());
        let t1 = t0 + Duration::from_secs(1);
        assert!(limiter.check(&key_principal(b, tenant), None, t1).is_ok());
    }

    #[test]
    fn full_buckets_are_forgotten_when_the_map_grows() {
        let buckets = Buckets::default();
        let rate = Rate::new(1.0, 1);
        let t0 = Instant::now();
        for k in 0..=PRUNE_ABOVE as u32 {
            assert!(buckets.take(k, rate, t0).is_ok());
        }
        let later = t0 + Duration::from_secs(10);
        assert!(buckets.take(u32::MAX, rate, later).is_ok());
        assert_eq!(buckets.buckets.lock().unwrap().len(), 1);
    }
}
