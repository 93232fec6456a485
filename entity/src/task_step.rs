//! `task_steps`: One attempt of one step: resolved args (PII redacted), output, error,
//! timings and the idempotency key the tool was given.

use sea_orm::entity::prelude::*;

use crate::TenantOwned;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "task_steps")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub task_id: Uuid,
    pub step_id: String,
    pub tool: String,
    pub attempt: i32,
    pub status: String,
    pub args: Json,
    pub output: Json,
    pub summary: String,
    pub error: Option<String>,
    pub idempotency_key: String,
    pub usage: Json,
    pub started_at: DateTimeUtc,
    pub finished_at: DateTimeUtc,
    pub duration_ms: i64,
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
