//! `memory_import_jobs`: one upload of a JSON Lines file of memories
//! (`startMemoryImport`): how many lines it has, how many were handled by
//! outcome, and the lease of the process working on it.

use sea_orm::entity::prelude::*;

use crate::TenantOwned;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "memory_import_jobs")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub tenant_id: Uuid,
    /// The uploaded file's name, as the client gave it.
    pub file_name: Option<String>,
    /// `RUNNING` or `COMPLETED`.
    pub status: String,
    /// Non-blank lines in the file.
    pub total: i64,
    pub created: i64,
    pub merged: i64,
    pub skipped: i64,
    pub failed: i64,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<DateTimeUtc>,
    pub created_by: String,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
    pub finished_at: Option<DateTimeUtc>,
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
