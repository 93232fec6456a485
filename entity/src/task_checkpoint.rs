//! `task_checkpoints`: a task's state as one settled step left it (one row
//! per settled step; an agent loop's iterations are steps), with its
//! digest and the event that settled it. Appended with the step's events,
//! never updated; a fork copies the rows of the steps it keeps.

use sea_orm::entity::prelude::*;

use crate::TenantOwned;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "task_checkpoints")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub task_id: Uuid,
    /// Its place among the task's settled steps, from 0.
    pub position: i32,
    pub step_id: String,
    /// For an agent loop's iteration step: which iteration (from 1).
    pub iteration: Option<i32>,
    /// The sequence of the event that settled the step, in `source_task_id`.
    pub seq: i64,
    /// The task whose run settled the step: this one, or for a step a fork
    /// copied, the task it was first settled in.
    pub source_task_id: Uuid,
    pub state: Json,
    /// SHA-256 (hex) of the state's canonical JSON (keys sorted).
    pub state_digest: String,
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
