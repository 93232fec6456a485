//! Identity: tenants, their API keys, a platform admin acting in a
//! tenant, and the announcements of revoked credentials.
//!
//! Invariants:
//! - An API key's secret is stored only as its hash; the lookup by hash is
//!   the one unscoped read of `api_keys`.
//! - Acting in a tenant opens an audited platform scope first.
//! - Revoking a key announces it, after the change commits, to every
//!   process (`revocations`), so open connections holding it stop.

pub mod acting;
pub mod api_keys;
pub mod revocations;
pub mod tenants;
