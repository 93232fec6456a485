//! `memory_mentions`: which knowledge-graph entities a memory mentions
//! (besides its subject). Search boosts memories that mention entities the
//! query is about.

use sea_orm::entity::prelude::*;

use crate::TenantOwned;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "memory_mentions")]
pub struct Model {
    /// The key starts with the tenant, as every tenant table's does
    /// (`docs/scale-out.md`).
    #[sea_orm(primary_key, auto_increment = false)]
    pub tenant_id: Uuid,
    #[sea_orm(primary_key, auto_increment = false)]
    pub memory_id: Uuid,
    #[sea_orm(primary_key, auto_increment = false)]
    pub entity_id: Uuid,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

impl TenantOwned for Entity {
    fn tenant_column() -> Column {
        Column::TenantId
    }
    fn id_column() -> Column {
        Column::MemoryId
    }
}
