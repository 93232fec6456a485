//! `memory_versions`: earlier texts of a memory, kept when an update or a
//! near-duplicate merge replaces its content.

use sea_orm::entity::prelude::*;

use crate::TenantOwned;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "memory_versions")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub memory_id: Uuid,
    /// The version number the text had.
    pub version: i32,
    pub content: String,
    /// Why it was replaced: `UPDATED` or `MERGED`.
    pub reason: String,
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
