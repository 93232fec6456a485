//! `kg_entities`: knowledge-graph nodes (a customer, a carrier, a product),
//! unique per tenant, type and canonical key.

use sea_orm::entity::prelude::*;

use crate::TenantOwned;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "kg_entities")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub entity_type: String,
    pub name: String,
    /// Canonical key within the type (e.g. a normalised name or an
    /// external id).
    pub key: String,
    pub properties: Json,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
    /// When it went to the bin (`None`: it is live). A binned entity is in
    /// no read; maintenance purges it after the restore window.
    pub deleted_at: Option<DateTimeUtc>,
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
