//! `memories`: facts a tenant keeps, in tiers, with a learned score. The
//! embedding lives in a separate table whose column type differs by backend,
//! and PostgreSQL adds a generated `search_tsv` column this entity does not
//! map (it is only read by raw keyword queries).

use sea_orm::entity::prelude::*;

use crate::TenantOwned;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "memories")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub tenant_id: Uuid,
    /// The knowledge-graph entity this fact is about, if any.
    pub subject_id: Option<Uuid>,
    /// `WORKING`, `HISTORY`, `PATTERNS`, `DOCUMENTS` or `MEMORY_BANK`.
    pub tier: String,
    pub category: String,
    pub content: String,
    /// Learned usefulness in 0..1; starts at 0.5.
    pub score: f64,
    /// How many outcomes have been recorded.
    pub uses: i32,
    pub importance: f64,
    pub confidence: f64,
    /// The task that produced the fact (no foreign key: tasks live elsewhere).
    pub source_task_id: Option<Uuid>,
    pub valid_from: DateTimeUtc,
    /// Set when a newer fact supersedes this one.
    pub valid_to: Option<DateTimeUtc>,
    pub superseded_by: Option<Uuid>,
    /// `ACTIVE`, `ARCHIVED` or `EXPIRED`.
    pub status: String,
    pub expires_at: Option<DateTimeUtc>,
    /// Bumped whenever the content changes; older texts are versions.
    pub version: i32,
    /// The model that embedded the current content; `None` when not embedded.
    pub embedding_model: Option<String>,
    pub last_used_at: Option<DateTimeUtc>,
    pub created_at: DateTimeUtc,
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
