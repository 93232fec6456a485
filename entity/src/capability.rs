//! `capabilities`: the platform's catalogue. A capability is a product a
//! tenant subscribes to: the plans, intents and partner tools it brings and
//! its limits. Platform-owned (no tenant); written only by platform admins
//! through an audited `PlatformScope`.

use sea_orm::entity::prelude::*;

#[derive(Clone, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "capabilities")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    /// Unique; e.g. `insurance.loss_run_chaser`.
    pub key: String,
    pub name: String,
    pub description: String,
    /// Bumped by every publish; the plans of this version are current.
    pub version: i32,
    /// `{"max_tasks_per_month": n}`; absent keys mean no limit.
    pub limits: Json,
    /// Base64 of nonce ‖ ciphertext ‖ tag of the HMAC secret that signs
    /// calls to the capability's partner tools.
    pub secret_ciphertext: String,
    /// Which encryption key sealed `secret_ciphertext`.
    pub secret_key_id: String,
    pub published_by: String,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
    /// When a platform admin archived it; `None` while it is offered.
    pub archived_at: Option<DateTimeUtc>,
}

// Written by hand so that a row printed by mistake shows no ciphertext.
impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("capability::Model")
            .field("id", &self.id)
            .field("key", &self.key)
            .field("version", &self.version)
            .field("secret_key_id", &self.secret_key_id)
            .finish_non_exhaustive()
    }
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
