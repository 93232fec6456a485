//! `task_forks`: a task started as a fork of another (or a rerun of a
//! finished one), naming the original and the step it was forked before.

use sea_orm::entity::prelude::*;

use crate::TenantOwned;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "task_forks")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub tenant_id: Uuid,
    /// The fork.
    pub task_id: Uuid,
    /// The task it was forked from.
    pub source_task_id: Uuid,
    /// The first step the fork runs (the ones before it were copied).
    pub from_step_id: String,
    /// Started by `rerunTask` (a finished task, no edits).
    pub rerun: bool,
    pub created_by: String,
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
