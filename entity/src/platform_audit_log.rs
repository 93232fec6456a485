//! `platform_audit_log`: the append-only log of what platform admins do on
//! no tenant (listing or creating tenants, publishing a capability). Rows
//! are hashed as [`crate::audit_log`]'s are, with an empty tenant, and are
//! never updated. The table holds no tenant's data: no row security, and a
//! table of the coordinator when tenants are sharded (`docs/scale-out.md`).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "platform_audit_log")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    /// Who acted, e.g. `user:alice`.
    pub actor: String,
    /// What was done, e.g. `tenant.create`.
    pub action: String,
    /// What it was done to, e.g. a slug.
    pub target: String,
    /// Details with PII keys redacted.
    pub data: Json,
    /// Hex SHA-256 of the canonical JSON of the other fields, the tenant
    /// empty.
    pub hash: String,
    pub created_at: DateTimeUtc,
    /// The request that did it (`X-Request-Id`), if it came from one.
    pub request_id: Option<String>,
    /// The trace it belongs to.
    pub trace_id: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
