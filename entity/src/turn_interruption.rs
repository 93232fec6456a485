//! `turn_interruptions`: a conversation's turn that a later turn interrupted
//! or rolled back (the later turn and the strategy); the turn's audit
//! record, and what leaves a rolled-back turn out of the history.

use sea_orm::entity::prelude::*;

use crate::TenantOwned;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "turn_interruptions")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub conversation_id: Uuid,
    /// The interrupted turn.
    pub task_id: Uuid,
    /// The turn that interrupted it.
    pub by_task_id: Uuid,
    /// `INTERRUPT` or `ROLLBACK`.
    pub strategy: String,
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
