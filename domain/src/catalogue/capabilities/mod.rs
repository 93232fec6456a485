//! Capabilities: the platform's catalogue of products and tenants'
//! subscriptions to them.
//!
//! A **capability** (platform-owned: its tables are platform tables, like
//! `tenants`, read and written without a tenant scope) has a key, a name, a description, the
//! plans it brings (full definitions, checked like `publishPlan`), the
//! partner HTTP tools it registers ([`partner`]) and its limits. The intents
//! it brings are those of its plans; the tools it needs are those its plans
//! name. Only a platform admin publishes one, through an audited
//! [`PlatformScope`](crate::kernel::audit::PlatformScope). Each publish
//! bumps the capability's version; its plans are stored again with that
//! version, and rows are never changed, so a task that named a plan before
//! a republish still finds it.
//!
//! A **subscription** (tenant-owned, one per tenant and capability) is
//! `TRIAL` (until its end), `ACTIVE`, `CANCELLED` or `EXPIRED`. A trial past
//! its end *is* expired: [`effective_status`] computes the status with an
//! explicit `now` wherever a subscription is read, and the maintenance pass
//! [`Capabilities::expire_trials`] (run by the executor's reaper) stores it.
//!
//! **How capability plans reach a tenant's tasks** (see
//! [`crate::catalogue::plans::Plans::available`]): a tenant's tasks may run its own
//! plans and the current plans of the capabilities it subscribes to (ACTIVE,
//! or TRIAL before its end). Intent detection considers only those, plus
//! the fallback `general_instruction`. `startTask(planKey:)` looks for the
//! tenant's own plan of that key first (a tenant may override a capability's
//! plan), then for a capability's; naming the plan, or the intent, of a
//! capability the tenant does not subscribe to is `FORBIDDEN` with a message
//! naming the capability. When a subscription lapses, tasks not yet planned
//! fail at planning, and a running task fails at its next partner-tool step.
//!
//! # Files
//!
//! - this file: the [`Capabilities`] service and the catalogue's constants.
//! - `capability`: the record ([`Capability`], [`Limits`],
//!   [`PartnerToolDef`]) and the catalogue's reads.
//! - `publish`: publishing a capability (platform admins), its check, and
//!   the signing secret of its partner tools.
//! - `subscriptions`: [`Subscription`] and its status, subscribe, cancel,
//!   expire trials.
//! - `catalogue`: what a tenant may use at an instant (plans, intents,
//!   partner tools) and the monthly task quota, for the planner and the
//!   executor.
//! - [`partner`]: the partner HTTP tool and its request signature.

mod capability;
mod catalogue;
pub mod partner;
mod publish;
mod subscriptions;

use std::sync::Arc;

use sea_orm::DatabaseConnection;

use crate::{Error, Result, catalogue::tool::ToolRegistry, kernel::crypto::Keyring};
use capability::plan_of;
pub use capability::{Capability, Limits, PartnerToolDef};
use catalogue::catalogue_row;
pub(crate) use catalogue::{
    all_current_plans, all_partner_tools, check_intent, check_quota, partner_tools, plan_by_id,
    plan_by_id_for_tenant, plan_for_tenant, plan_version_for_tenant, subscribed_plans,
    subscribed_tools,
};
pub use publish::{CapabilityDef, Published};
pub use subscriptions::{Subscription, SubscriptionStatus, effective_status, is_on};

/// Every partner tool's key starts with this.
pub const PARTNER_PREFIX: &str = "partner.";
/// Signing secrets start with this, so they are recognisable.
pub const SECRET_PREFIX: &str = "bcs_";
/// Default and largest timeout of a partner tool call.
pub const DEFAULT_TOOL_TIMEOUT_MS: u64 = 10_000;
pub const MAX_TOOL_TIMEOUT_MS: u64 = 120_000;
/// The longest trial a tenant may start.
pub const MAX_TRIAL_DAYS: u32 = 365;

/// The catalogue and the subscriptions.
#[derive(Clone)]
pub struct Capabilities {
    db: DatabaseConnection,
    registry: ToolRegistry,
    keyring: Option<Arc<Keyring>>,
}

impl Capabilities {
    pub fn new(db: DatabaseConnection, registry: ToolRegistry) -> Self {
        Self {
            db,
            registry,
            keyring: None,
        }
    }

    /// Seal signing secrets with `keyring` (the connections' keys).
    pub fn with_keyring(mut self, keyring: Arc<Keyring>) -> Self {
        self.keyring = Some(keyring);
        self
    }

    fn keyring(&self) -> Result<&Keyring> {
        self.keyring.as_deref().ok_or_else(|| {
            Error::internal("no encryption key is configured (connection_encryption_key)")
        })
    }
}
