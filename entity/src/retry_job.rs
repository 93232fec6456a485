//! `retry_jobs`: one bulk retry of a tenant's failed tasks (`retryTasks`):
//! what it was asked, how far it got, and the lease of the process working
//! on it.

use sea_orm::entity::prelude::*;

use crate::TenantOwned;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "retry_jobs")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub tenant_id: Uuid,
    /// The filter the tasks were matched with, as given.
    pub filter: Json,
    /// The most tasks the job takes.
    pub max_tasks: i32,
    /// Run each task from its first step rather than its failed one.
    pub from_start: bool,
    /// `RUNNING` or `COMPLETED`.
    pub status: String,
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
