//! `retry_job_items`: a task a bulk retry matched, with the task's event
//! sequence when it was matched and, once handled, what became of it.

use sea_orm::entity::prelude::*;

use crate::TenantOwned;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "retry_job_items")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub job_id: Uuid,
    pub task_id: Uuid,
    /// The task's `last_seq` when the job matched it: the task is retried
    /// only if it is still exactly as it was then.
    pub task_seq: i64,
    /// `None` while pending; then `RETRIED`, `SKIPPED` or `FAILED`.
    pub outcome: Option<String>,
    #[sea_orm(column_type = "Text", nullable)]
    pub error: Option<String>,
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
