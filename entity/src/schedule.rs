//! `schedules`: a tenant's plans started on a cron expression.

use sea_orm::entity::prelude::*;

use crate::TenantOwned;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "schedules")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub tenant_id: Uuid,
    /// Unique in the tenant.
    pub name: String,
    pub plan_key: String,
    /// Five fields (minute hour day month weekday), or six with seconds.
    pub cron: String,
    /// An IANA zone, e.g. `Europe/Paris`.
    pub time_zone: String,
    /// The input of each run's task.
    #[sea_orm(column_type = "Text")]
    pub input: String,
    pub payload: Json,
    /// `ACTIVE` or `PAUSED`.
    pub status: String,
    /// The next due time; `None` while paused.
    pub next_run_at: Option<DateTimeUtc>,
    pub last_run_at: Option<DateTimeUtc>,
    pub last_task_id: Option<Uuid>,
    pub created_by: String,
    pub created_at: DateTimeUtc,
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
