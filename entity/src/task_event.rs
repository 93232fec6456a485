//! `task_events`: The append-only event log of a task, with a per-task sequence number.
//! Rows are written in the same transaction as the change they describe and
//! never updated.

use sea_orm::entity::prelude::*;

use crate::TenantOwned;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "task_events")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub task_id: Uuid,
    pub seq: i64,
    pub kind: String,
    pub step_id: Option<String>,
    pub tool: Option<String>,
    pub status: Option<String>,
    pub summary: String,
    pub error: Option<String>,
    /// Keys of the data a step produced; values are not logged.
    pub data_keys: Json,
    /// Event details, PII redacted.
    pub data: Json,
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
