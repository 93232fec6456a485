//! `kg_relations`: typed, weighted edges between two entities of one tenant.
//! Every version of a fact is a row: among current rows (`expired_at` null)
//! a relation is unique per tenant, type, from and to. Symmetric types are
//! stored once, with `from_id < to_id`.

use sea_orm::entity::prelude::*;

use crate::TenantOwned;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "kg_relations")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub relation_type: String,
    pub from_id: Uuid,
    pub to_id: Uuid,
    pub symmetric: bool,
    pub weight: f64,
    pub properties: Json,
    pub valid_from: DateTimeUtc,
    pub valid_to: Option<DateTimeUtc>,
    /// Where the relation came from (`task:<id>`, `user:<sub>`, a source name).
    pub provenance: Option<String>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
    /// When Brainstem learned this version of the fact.
    pub recorded_at: DateTimeUtc,
    /// When Brainstem retired it: a contradicting fact closed its validity,
    /// or a restatement with another validity replaced it (`superseded_by`).
    pub expired_at: Option<DateTimeUtc>,
    /// The row that replaced this one when the fact was restated with
    /// another validity.
    pub superseded_by: Option<Uuid>,
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
