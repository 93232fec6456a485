//! `memory_events`: append-only history of a memory — outcomes and the
//! lifecycle transitions (merge, supersede, promotion, archive, expiry).

use sea_orm::entity::prelude::*;

use crate::TenantOwned;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "memory_events")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub memory_id: Uuid,
    /// `OUTCOME`, `MERGED`, `SUPERSEDED`, `PROMOTED`, `ARCHIVED`, `EXPIRED`.
    pub kind: String,
    /// For outcomes: `WORKED`, `FAILED`, `PARTIAL` or `UNKNOWN`.
    pub outcome: Option<String>,
    pub score_before: Option<f64>,
    pub score_after: Option<f64>,
    pub tier_before: Option<String>,
    pub tier_after: Option<String>,
    pub source_task_id: Option<Uuid>,
    pub created_at: DateTimeUtc,
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
