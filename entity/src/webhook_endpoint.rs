//! `webhook_endpoints`: where a tenant wants its task events posted. The
//! signing secret is stored only sealed (AES-256-GCM), with its key's id.

use sea_orm::entity::prelude::*;

use crate::TenantOwned;

#[derive(Clone, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_endpoints")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub tenant_id: Uuid,
    /// Unique in the tenant.
    pub name: String,
    #[sea_orm(column_type = "Text")]
    pub url: String,
    /// The events it receives, space-separated (`task.completed task.failed`).
    pub events: String,
    /// Base64 of nonce ‖ ciphertext ‖ tag of the signing secret.
    #[sea_orm(column_type = "Text")]
    pub secret_ciphertext: String,
    pub secret_key_id: String,
    pub created_by: String,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

// Written by hand so that a row printed by mistake shows no ciphertext.
impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("webhook_endpoint::Model")
            .field("id", &self.id)
            .field("tenant_id", &self.tenant_id)
            .field("name", &self.name)
            .field("url", &self.url)
            .field("events", &self.events)
            .finish_non_exhaustive()
    }
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
