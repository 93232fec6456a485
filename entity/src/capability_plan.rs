//! `capability_plans`: the plans a capability brings, one row per plan and
//! capability version. Rows are never changed, so a task that named a plan
//! before a republish still finds the version it named.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "capability_plans")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub capability_id: Uuid,
    /// The capability version this plan was published with (its version).
    pub version: i32,
    /// Owned by one capability across the catalogue.
    pub key: String,
    pub intent: String,
    pub description: String,
    pub priority: i32,
    pub patterns: Json,
    pub steps: Json,
    pub created_by: String,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
