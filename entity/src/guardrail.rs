//! `guardrails`: a tenant's rules checked before each step runs.

use sea_orm::entity::prelude::*;

use crate::TenantOwned;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "guardrails")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub name: String,
    /// The facts a step must match, e.g. `{"tool": "http_request",
    /// "args.amount_gt": 1000}`.
    pub condition: Json,
    /// `BLOCK` or `WARN`.
    pub severity: String,
    pub enabled: bool,
    pub activation_count: i64,
    pub updated_by: String,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
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
