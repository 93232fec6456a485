//! `webhook_deliveries`: the outbox of task events for a tenant's webhook
//! endpoints, one row per endpoint and event, written in the transaction
//! of the change it reports.

use sea_orm::entity::prelude::*;

use crate::TenantOwned;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_deliveries")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub endpoint_id: Uuid,
    pub task_id: Uuid,
    /// The reported event's sequence number in its task.
    pub seq: i64,
    /// e.g. `task.completed`.
    pub event: String,
    /// The body posted (the same on every attempt).
    pub payload: Json,
    /// `PENDING`, `DELIVERED` or `FAILED` (attempts used up).
    pub status: String,
    pub attempts: i32,
    /// When it is next due (while `PENDING`); a worker sending it moves
    /// this past the attempt, so a crash mid-attempt retries it later.
    pub next_attempt_at: DateTimeUtc,
    pub last_attempt_at: Option<DateTimeUtc>,
    /// The HTTP status of the last answer, if one came.
    pub last_status_code: Option<i32>,
    #[sea_orm(column_type = "Text", nullable)]
    pub last_error: Option<String>,
    pub delivered_at: Option<DateTimeUtc>,
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
