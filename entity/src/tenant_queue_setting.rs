//! `tenant_queue_settings`: a tenant's place in the fair queue: its weight,
//! its running limit and its model budgets (null: the platform's default).

use sea_orm::entity::prelude::*;

use crate::TenantOwned;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "tenant_queue_settings")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub tenant_id: Uuid,
    /// The tenant's share of slots against other tenants with work.
    pub weight: Option<f64>,
    /// Tasks of the tenant running at once, across every process.
    pub max_running: Option<i32>,
    /// Model calls per minute.
    pub llm_rpm: Option<i32>,
    /// Model tokens per minute.
    pub llm_tpm: Option<i32>,
    pub updated_by: String,
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
