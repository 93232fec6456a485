//! `plans`: One published version of a plan. Publishing creates a new row;
//! a row's definition never changes (archiving only stamps `archived_at`).

use sea_orm::entity::prelude::*;

use crate::TenantOwned;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "plans")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub key: String,
    pub version: i32,
    pub intent: String,
    pub description: String,
    pub priority: i32,
    /// Intent-detection patterns (regular expressions).
    pub patterns: Json,
    /// The ordered step definitions.
    pub steps: Json,
    pub created_by: String,
    pub created_at: DateTimeUtc,
    /// When the plan's key was archived (on every version); `None` while
    /// the plan may start tasks.
    pub archived_at: Option<DateTimeUtc>,
    /// Tasks of this plan with the same concurrency key running at once
    /// (`None`: no limit).
    pub max_concurrent: Option<i32>,
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
