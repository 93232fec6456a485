//! Identity: tenants, their API keys, and a platform admin acting in a
//! tenant.
//!
//! Invariants:
//! - An API key's secret is stored only as its hash; the lookup by hash is
//!   the one unscoped read of `api_keys`.
//! - Acting in a tenant opens an audited platform scope first.

pub mod acting;
pub mod api_keys;
pub mod tenants;
