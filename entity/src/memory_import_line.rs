//! `memory_import_lines`: one line of an uploaded memory import, its text
//! and, once handled, what became of it.

use sea_orm::entity::prelude::*;

use crate::TenantOwned;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "memory_import_lines")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub job_id: Uuid,
    /// The line's number in the file, from 1.
    pub line_no: i64,
    #[sea_orm(column_type = "Text")]
    pub raw: String,
    /// `None` while pending; then `CREATED`, `MERGED`, `SKIPPED` or `FAILED`.
    pub outcome: Option<String>,
    /// The memory the line created, merged into, or was imported as before.
    pub memory_id: Option<Uuid>,
    /// A failed line's error: the domain's error kind and its message.
    pub error_kind: Option<String>,
    #[sea_orm(column_type = "Text", nullable)]
    pub error_message: Option<String>,
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
