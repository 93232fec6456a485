//! `reviews`: A request for a human decision, and its outcome.

use sea_orm::entity::prelude::*;

use crate::TenantOwned;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "reviews")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub task_id: Uuid,
    /// The step under review, or `intent_detection`.
    pub step_id: String,
    pub reason: String,
    pub confidence: Option<f64>,
    pub proposed: Json,
    pub status: String,
    pub corrections: Json,
    pub resolved_by: Option<String>,
    pub resolved_at: Option<DateTimeUtc>,
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
