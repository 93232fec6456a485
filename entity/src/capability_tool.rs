//! `capability_tools`: partner HTTP tools a capability registers. The key
//! (`partner.…`) is unique across the catalogue; a republish replaces the
//! capability's rows.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "capability_tools")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub capability_id: Uuid,
    pub key: String,
    pub description: String,
    /// The endpoint called with `POST`.
    pub url: String,
    pub input_schema: Json,
    /// `null` when the response is not checked beyond being JSON.
    pub output_schema: Option<Json>,
    pub timeout_ms: i64,
    /// The capability's retry policy for this tool (`null`: the
    /// outgoing-call default).
    pub retry: Option<Json>,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
