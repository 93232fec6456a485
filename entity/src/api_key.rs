//! `api_keys`: partner credentials. Only a SHA-256 hash of the secret is kept.

use sea_orm::entity::prelude::*;

use crate::TenantOwned;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "api_keys")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub name: String,
    /// The first characters of the secret, shown so people can tell keys apart.
    pub prefix: String,
    /// Hex SHA-256 of the whole secret.
    #[sea_orm(unique)]
    pub secret_hash: String,
    /// Scope names, e.g. `["tasks:read", "admin"]`.
    pub scopes: Json,
    /// Who created it, e.g. `user:…` or `api_key:…`.
    pub created_by: String,
    pub created_at: DateTimeUtc,
    pub revoked_at: Option<DateTimeUtc>,
    pub last_used_at: Option<DateTimeUtc>,
    /// This key's own rate limit (requests per second), overriding the
    /// configured default; `None` uses the default.
    pub rate_limit_per_second: Option<f64>,
    /// This key's own burst; `None` uses the default.
    pub rate_limit_burst: Option<i32>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

impl TenantOwned for Entity {
    fn tenant_column() -> Column {
        Column::TenantId
    }
    fn id_column() -> Column {
        Column::Id
    }
}
