//! `audit_log`: a tenant's append-only log. Each row carries the SHA-256
//! of its canonical JSON form, so any later edit is detectable. Rows are
//! never updated. A platform admin's actions on no tenant are kept apart,
//! in [`crate::platform_audit_log`].

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "audit_log")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    /// The tenant acted upon (or in).
    pub tenant_id: Uuid,
    /// Who acted, e.g. `user:alice` or `api_key:…`.
    pub actor: String,
    /// What was done, e.g. `tenant.create`.
    pub action: String,
    /// What it was done to, e.g. a global id or a slug.
    pub target: String,
    /// Details with PII keys redacted.
    pub data: Json,
    /// Hex SHA-256 of the canonical JSON of the other fields (the two ids
    /// below only when set, so rows written before them verify).
    pub hash: String,
    pub created_at: DateTimeUtc,
    /// The request that did it (`X-Request-Id`), if it came from one.
    pub request_id: Option<String>,
    /// The trace it belongs to: a request's, or the task's whose work it is.
    pub trace_id: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
