//! `connections`: a tenant's credentials for an external system. The secret
//! part is stored only encrypted (AES-256-GCM), with the id of its key.

use sea_orm::entity::prelude::*;

use crate::TenantOwned;

#[derive(Clone, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "connections")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub tenant_id: Uuid,
    /// Unique per tenant; what tools ask for.
    pub name: String,
    /// Which system it connects to, e.g. `http`, `smtp`, `salesforce`.
    pub kind: String,
    /// Settings that are not secret (base URL, account id, …).
    pub config: Json,
    /// Base64 of nonce ‖ ciphertext ‖ tag of the secret JSON; `None` when the
    /// connection has no secret.
    pub secret_ciphertext: Option<String>,
    /// Which encryption key sealed `secret_ciphertext`.
    pub secret_key_id: Option<String>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

// Written by hand so that a row printed by mistake shows no ciphertext.
impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("connection::Model")
            .field("id", &self.id)
            .field("tenant_id", &self.tenant_id)
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("has_secret", &self.secret_ciphertext.is_some())
            .field("secret_key_id", &self.secret_key_id)
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
