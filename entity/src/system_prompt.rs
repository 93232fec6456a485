//! `system_prompts`: a tenant's governed system prompt, versioned; at most one version is `ACTIVE`.

use sea_orm::entity::prelude::*;

use crate::TenantOwned;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "system_prompts")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub version: i32,
    pub content: String,
    /// `DRAFT`, `ACTIVE` or `RETIRED`.
    pub status: String,
    pub created_by: String,
    pub created_at: DateTimeUtc,
    pub activated_by: Option<String>,
    pub activated_at: Option<DateTimeUtc>,
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
