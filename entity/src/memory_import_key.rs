//! `memory_import_keys`: an `importMemories` item's key, unique per tenant,
//! and the memory the item became (the one it created or the near-duplicate
//! it merged into). Importing a known key again stores nothing.

use sea_orm::entity::prelude::*;

use crate::TenantOwned;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "memory_import_keys")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub import_key: String,
    pub memory_id: Uuid,
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
