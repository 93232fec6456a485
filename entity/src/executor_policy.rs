//! `executor_policies`: a tenant's overrides of the executor policy's
//! limits (null: the platform's default).

use sea_orm::entity::prelude::*;

use crate::TenantOwned;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "executor_policies")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub max_iterations: Option<i32>,
    pub max_tool_calls: Option<i32>,
    pub tool_call_timeout_ms: Option<i64>,
    pub loop_timeout_ms: Option<i64>,
    pub max_output_tokens: Option<i32>,
    pub temperature: Option<f64>,
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
