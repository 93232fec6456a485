//! Memory: the facts a tenant keeps, found again by hybrid search, scored by
//! outcomes and moved between tiers by a maintenance job (DESIGN.md §7).
//!
//! # API (what tools and resolvers call)
//!
//! Every function takes the [`TenantScope`] of the caller; an id of another
//! tenant is `Error::NotFound`, exactly like an id that does not exist.
//!
//! - [`Memories::remember`]`(scope, NewMemory { content, tier, category,
//!   subject, mentions, importance, confidence, source_task, valid_from,
//!   supersedes })` → [`Remembered`] `{ memory, merged, embedded }`. A
//!   near-duplicate (cosine ≥ `dedup_threshold` with an active memory of the
//!   same tier and subject) is merged into the existing memory, whose old
//!   text becomes a version. `supersedes` closes an older fact (`valid_to`
//!   set), which then drops out of default search. If the embedder fails the
//!   memory is stored anyway, without a vector (`embedded: false`). A
//!   memory and its vector are written in one transaction; a vector that
//!   cannot be stored is rolled back to a savepoint, and the memory is kept
//!   without it.
//! - [`Memories::search`]`(scope, SearchQuery { text, subject, tiers,
//!   categories, limit, include_historical })` → ranked [`SearchHit`]s with
//!   their score breakdown (see [`rank`]). Search does not write: a tool that
//!   uses the results reports back with `record_outcome`.
//! - [`Memories::record_outcome`]`(scope, id, Outcome, source_task)`:
//!   worked +0.2, failed −0.3, partial +0.05, unknown ±0, clamped to 0..1,
//!   uses +1. `MEMORY_BANK` and `DOCUMENTS` are authoritative: their score
//!   never changes, only their uses.
//! - [`Memories::dossier`]`(scope, subject, now)` → [`Dossier`]: what is
//!   known about a knowledge-graph entity.
//! - [`Memories::get`], [`Memories::list`], [`Memories::update`],
//!   [`Memories::archive`], [`Memories::versions`], [`Memories::events`],
//!   [`Memories::reindex`].
//! - [`Memories::run_maintenance`]`(now)`: promotion, archiving, expiry and
//!   the `MEMORY_BANK` cap for every tenant (see [`maintenance`]);
//!   [`Memories::spawn_maintenance`] runs it on an interval.
//!
//! The knowledge graph itself is [`crate::memory::graph::Graph`]
//! (`upsert_entity`, `relate`, `neighborhood`).
//!
//! # Storage
//!
//! Rows are SeaORM entities (`memories`, `memory_versions`, `memory_events`,
//! `memory_mentions`). Keyword search is [`keyword`] (tsvector or FTS5) and
//! vectors live behind [`vector::VectorIndex`] (pgvector with per-tenant HNSW
//! indexes, or SQLite blobs).

pub mod graph;
pub mod keyword;
pub mod maintenance;
pub mod rank;
mod sql;
pub mod vector;

/// The embedders live with the models; memory uses them.
pub use crate::models::embedder;

use std::{collections::HashMap, sync::Arc};

use brainstem_entity::{
    EntityId, MemoryId, TenantOwned, TenantScope, memory, memory_event, memory_mention,
    memory_version,
};
use chrono::{DateTime, Duration, Utc};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, Condition, ConnectionTrait,
    DatabaseConnection, DatabaseTransaction, IntoActiveModel, QueryFilter, QueryOrder, QuerySelect,
    TransactionTrait,
};
use uuid::Uuid;

pub use embedder::{Embedder, EmbedderConfig};
pub use maintenance::MaintenanceReport;
pub use sql::CandidateFilter;

use crate::{
    Error, Result,
    kernel::page::{self, Page, PageRequest},
    memory::graph::{Entity, Graph, Neighborhood},
};

/// Where a memory lives, which decides its lifetime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tier {
    /// Fresh facts; expire after 24 h unless promoted.
    Working,
    /// Facts that proved useful; expire 30 days after promotion.
    History,
    /// Facts that proved very useful; permanent.
    Patterns,
    /// Document text; permanent, never outcome-scored.
    Documents,
    /// Curated facts (identity, preferences); permanent, never
    /// outcome-scored, at most `memory_bank_capacity` active per tenant.
    MemoryBank,
}

impl Tier {
    pub const ALL: [Tier; 5] = [
        Tier::Working,
        Tier::History,
        Tier::Patterns,
        Tier::Documents,
        Tier::MemoryBank,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Working => "WORKING",
            Tier::History => "HISTORY",
            Tier::Patterns => "PATTERNS",
            Tier::Documents => "DOCUMENTS",
            Tier::MemoryBank => "MEMORY_BANK",
        }
    }

    pub fn parse(s: &str) -> Result<Self> {
        Tier::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| Error::internal(format!("unknown memory tier `{s}`")))
    }

    /// How long a memory stays in this tier before it expires.
    pub fn ttl(self) -> Option<Duration> {
        match self {
            Tier::Working => Some(Duration::hours(24)),
            Tier::History => Some(Duration::days(30)),
            _ => None,
        }
    }

    /// Whether outcomes change the score of memories in this tier.
    pub fn is_outcome_scored(self) -> bool {
        matches!(self, Tier::Working | Tier::History | Tier::Patterns)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Active,
    Archived,
    Expired,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Active => "ACTIVE",
            Status::Archived => "ARCHIVED",
            Status::Expired => "EXPIRED",
        }
    }

    pub fn parse(s: &str) -> Result<Self> {
        [Status::Active, Status::Archived, Status::Expired]
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| Error::internal(format!("unknown memory status `{s}`")))
    }
}

/// How using a memory turned out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Worked,
    Failed,
    Partial,
    Unknown,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Worked => "WORKED",
            Outcome::Failed => "FAILED",
            Outcome::Partial => "PARTIAL",
            Outcome::Unknown => "UNKNOWN",
        }
    }

    /// The score change.
    pub fn delta(self) -> f64 {
        match self {
            Outcome::Worked => 0.2,
            Outcome::Failed => -0.3,
            Outcome::Partial => 0.05,
            Outcome::Unknown => 0.0,
        }
    }
}

/// The score of a new memory.
pub const INITIAL_SCORE: f64 = 0.5;
/// Longest content accepted, in characters.
pub const MAX_CONTENT_CHARS: usize = 20_000;
/// Most hits one search returns.
pub const MAX_SEARCH_LIMIT: usize = 50;

/// Scores are kept to four decimals, so that 0.5 + 0.2 + 0.2 is exactly the
/// 0.9 the promotion rule compares with.
pub fn round_score(x: f64) -> f64 {
    (x.clamp(0.0, 1.0) * 10_000.0).round() / 10_000.0
}

/// Memory settings, from configuration.
#[derive(Clone, Debug)]
pub struct MemoryConfig {
    /// Length of every vector; changing it needs `reindexMemories`.
    pub embedding_dimension: usize,
    pub embedder: EmbedderConfig,
    /// Cosine similarity at or above which a write merges into an existing
    /// memory.
    pub dedup_threshold: f32,
    /// Most active `MEMORY_BANK` memories a tenant keeps.
    pub memory_bank_capacity: u64,
    /// pgvector `hnsw.ef_search` for vector searches (at least the number
    /// of candidates asked for).
    pub hnsw_ef_search: usize,
    /// PostgreSQL: a tenant with at least this many vectors gets its own
    /// HNSW index (built by the maintenance job); smaller tenants are
    /// searched exactly.
    pub tenant_index_rows: usize,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        Self {
            embedding_dimension: 256,
            embedder: EmbedderConfig::Offline,
            dedup_threshold: 0.92,
            memory_bank_capacity: 1000,
            hnsw_ef_search: 250,
            tenant_index_rows: 10_000,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Memory {
    pub id: MemoryId,
    pub subject: Option<EntityId>,
    pub tier: Tier,
    pub category: String,
    pub content: String,
    pub score: f64,
    pub uses: i32,
    pub importance: f64,
    pub confidence: f64,
    pub source_task: Option<Uuid>,
    pub valid_from: DateTime<Utc>,
    pub valid_to: Option<DateTime<Utc>>,
    pub superseded_by: Option<MemoryId>,
    pub status: Status,
    pub expires_at: Option<DateTime<Utc>>,
    pub version: i32,
    /// The model of the stored vector; `None` when the memory has none.
    pub embedding_model: Option<String>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl TryFrom<memory::Model> for Memory {
    type Error = Error;

    fn try_from(m: memory::Model) -> Result<Self> {
        Ok(Self {
            id: m.id.into(),
            subject: m.subject_id.map(EntityId::from),
            tier: Tier::parse(&m.tier)?,
            category: m.category,
            content: m.content,
            score: m.score,
            uses: m.uses,
            importance: m.importance,
            confidence: m.confidence,
            source_task: m.source_task_id,
            valid_from: m.valid_from,
            valid_to: m.valid_to,
            superseded_by: m.superseded_by.map(MemoryId::from),
            status: Status::parse(&m.status)?,
            expires_at: m.expires_at,
            version: m.version,
            embedding_model: m.embedding_model,
            last_used_at: m.last_used_at,
            created_at: m.created_at,
            updated_at: m.updated_at,
        })
    }
}

/// Input of [`Memories::remember`].
#[derive(Clone, Debug, Default)]
pub struct NewMemory {
    pub content: String,
    /// Defaults to `WORKING`.
    pub tier: Option<Tier>,
    /// Free-form, lowercased (`insight`, `event`, `preference`, …); defaults
    /// to `insight`.
    pub category: Option<String>,
    pub subject: Option<EntityId>,
    /// Other entities the fact mentions.
    pub mentions: Vec<EntityId>,
    /// 0..1, defaults to 0.5.
    pub importance: Option<f64>,
    /// 0..1, defaults to 1.0.
    pub confidence: Option<f64>,
    pub source_task: Option<Uuid>,
    pub valid_from: Option<DateTime<Utc>>,
    /// An older fact this one replaces.
    pub supersedes: Option<MemoryId>,
}

#[derive(Clone, Debug)]
pub struct Remembered {
    pub memory: Memory,
    /// The write merged into an existing near-duplicate.
    pub merged: bool,
    /// A vector was stored.
    pub embedded: bool,
}

/// Filter of [`Memories::list`].
#[derive(Clone, Debug, Default)]
pub struct MemoryFilter {
    pub tiers: Vec<Tier>,
    pub categories: Vec<String>,
    pub subject: Option<EntityId>,
    /// Defaults to `ACTIVE`.
    pub status: Option<Status>,
}

/// Input of [`Memories::search`].
#[derive(Clone, Debug, Default)]
pub struct SearchQuery {
    pub text: String,
    /// Only memories about this entity or mentioning it.
    pub subject: Option<EntityId>,
    pub tiers: Vec<Tier>,
    pub categories: Vec<String>,
    /// 1..=50, defaults to 10.
    pub limit: Option<usize>,
    /// Also superseded facts.
    pub include_historical: bool,
}

/// One search result with the reasons for its place.
#[derive(Clone, Debug)]
pub struct SearchHit {
    pub memory: Memory,
    pub keyword_rank: Option<usize>,
    pub vector_rank: Option<usize>,
    pub vector_similarity: Option<f32>,
    /// Normalised RRF score, (0, 1].
    pub fused_score: f64,
    pub score_boost: f64,
    pub tier_boost: f64,
    pub graph_boost: f64,
    /// The product of the three boosts, capped at 1.5.
    pub boost: f64,
    pub final_score: f64,
}

#[derive(Clone, Debug)]
pub struct SearchResults {
    pub hits: Vec<SearchHit>,
    /// Whether the query could be embedded (if not, keyword results only).
    pub vector_used: bool,
}

/// Input of [`Memories::update`]; `None` leaves a field as it is.
#[derive(Clone, Debug, Default)]
pub struct MemoryUpdate {
    pub content: Option<String>,
    pub category: Option<String>,
    pub importance: Option<f64>,
    pub confidence: Option<f64>,
    pub tier: Option<Tier>,
    /// `Some(None)` clears the subject.
    pub subject: Option<Option<EntityId>>,
}

#[derive(Clone, Debug)]
pub struct OutcomeRecorded {
    pub memory: Memory,
    pub score_before: f64,
    pub score_after: f64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryVersion {
    pub version: i32,
    pub content: String,
    pub reason: String,
    pub created_at: DateTime<Utc>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct MemoryEvent {
    pub kind: String,
    pub outcome: Option<String>,
    pub score_before: Option<f64>,
    pub score_after: Option<f64>,
    pub tier_before: Option<String>,
    pub tier_after: Option<String>,
    pub source_task: Option<Uuid>,
    pub created_at: DateTime<Utc>,
}

/// What is known about a subject.
#[derive(Clone, Debug)]
pub struct Dossier {
    pub subject: Entity,
    /// Every current fact about the subject or mentioning it, strongest first.
    pub facts: Vec<Memory>,
    /// Facts that are not events (insights, preferences, warnings…), top 10.
    pub insights: Vec<Memory>,
    /// Facts of category `event`, newest first, top 10.
    pub recent_events: Vec<Memory>,
    /// Entities one hop away.
    pub neighborhood: Neighborhood,
    // The subject's recent tasks and pending work come from the tasks
    // table (`Tasks::of_subject`); the `memory.dossier` tool adds them.
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reindexed {
    pub reindexed: u64,
    pub failed: u64,
}

fn category(raw: Option<&str>) -> Result<String> {
    let c = raw
        .map(|s| s.trim().to_lowercase())
        .unwrap_or_else(|| "insight".into());
    if c.is_empty() || c.len() > 40 {
        return Err(Error::validation("category must have 1-40 characters"));
    }
    Ok(c)
}

fn unit(name: &str, value: Option<f64>, default: f64) -> Result<f64> {
    let v = value.unwrap_or(default);
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(Error::validation(format!("{name} must be between 0 and 1")))
    }
}

fn content(raw: &str) -> Result<String> {
    let c = raw.trim();
    if c.is_empty() || c.chars().count() > MAX_CONTENT_CHARS {
        return Err(Error::validation(format!(
            "content must have 1-{MAX_CONTENT_CHARS} characters"
        )));
    }
    Ok(c.to_owned())
}

pub(crate) async fn record_event<C: ConnectionTrait>(
    db: &C,
    scope: TenantScope,
    memory: MemoryId,
    event: MemoryEvent,
) -> Result<()> {
    memory_event::ActiveModel {
        id: Set(Uuid::now_v7()),
        tenant_id: Set(scope.tenant_id().uuid()),
        memory_id: Set(memory.uuid()),
        kind: Set(event.kind),
        outcome: Set(event.outcome),
        score_before: Set(event.score_before),
        score_after: Set(event.score_after),
        tier_before: Set(event.tier_before),
        tier_after: Set(event.tier_after),
        source_task_id: Set(event.source_task),
        created_at: Set(event.created_at),
    }
    .insert(db)
    .await?;
    Ok(())
}

pub(crate) fn event(kind: &str, now: DateTime<Utc>) -> MemoryEvent {
    MemoryEvent {
        kind: kind.into(),
        outcome: None,
        score_before: None,
        score_after: None,
        tier_before: None,
        tier_after: None,
        source_task: None,
        created_at: now,
    }
}

/// The memory service. Cheap to clone.
#[derive(Clone)]
pub struct Memories {
    db: DatabaseConnection,
    graph: Graph,
    embedder: Arc<dyn Embedder>,
    index: Arc<dyn VectorIndex>,
    config: Arc<MemoryConfig>,
    /// Lexemes too common to search for (PostgreSQL statistics).
    common: Arc<keyword::CommonLexemes>,
}

pub use vector::VectorIndex;

impl Memories {
    pub fn new(db: DatabaseConnection, graph: Graph, config: MemoryConfig) -> Result<Self> {
        let embedder = embedder::build(&config.embedder, config.embedding_dimension)?;
        Ok(Self::with_embedder(db, graph, config, embedder))
    }

    /// With a given embedder (tests and benchmarks).
    pub fn with_embedder(
        db: DatabaseConnection,
        graph: Graph,
        config: MemoryConfig,
        embedder: Arc<dyn Embedder>,
    ) -> Self {
        let index = vector::for_connection(
            &db,
            vector::VectorSettings {
                dimension: config.embedding_dimension,
                ef_search: config.hnsw_ef_search,
                tenant_index_rows: config.tenant_index_rows,
            },
        );
        Self {
            db,
            graph,
            embedder,
            index,
            config: Arc::new(config),
            common: Arc::default(),
        }
    }

    /// Make vector storage ready; call once at startup.
    pub async fn prepare(&self) -> Result<()> {
        if self.embedder.dimension() != self.config.embedding_dimension {
            return Err(Error::validation(
                "the embedder's dimension differs from embedding_dimension",
            ));
        }
        self.index.prepare().await
    }

    pub fn config(&self) -> &MemoryConfig {
        &self.config
    }

    pub fn index(&self) -> &Arc<dyn VectorIndex> {
        &self.index
    }

    pub fn embedder(&self) -> &Arc<dyn Embedder> {
        &self.embedder
    }

    /// The vector of `text`, or `None` (logged) when the embedder fails.
    async fn embed(&self, text: &str) -> Option<Vec<f32>> {
        match self.embedder.embed(&[text.to_owned()]).await {
            Ok(mut v) if v.len() == 1 => v.pop(),
            Ok(_) => {
                tracing::warn!("embedder returned no vector; continuing without one");
                None
            }
            Err(err) => {
                tracing::warn!(error = %err, "embedding failed; continuing without a vector");
                None
            }
        }
    }

    /// Store `vector` (or drop a stale one) and record the model, in the
    /// caller's transaction, so that a memory and its vector are written
    /// together. A vector that cannot be stored is rolled back to a
    /// savepoint: the memory is kept without one (keyword search still finds
    /// it, `reindexMemories` embeds it later). Only a failure of the
    /// transaction itself is an error.
    async fn set_embedding(
        &self,
        txn: &DatabaseTransaction,
        scope: TenantScope,
        id: MemoryId,
        vector: Option<&[f32]>,
    ) -> Result<bool> {
        let stored = match vector {
            Some(v) => {
                let savepoint = txn.begin().await?;
                match self
                    .index
                    .upsert(&savepoint, scope, id, self.embedder.model(), v)
                    .await
                {
                    Ok(()) => {
                        savepoint.commit().await?;
                        true
                    }
                    Err(err) => {
                        tracing::warn!(error = %err, "storing a memory vector failed");
                        savepoint.rollback().await?;
                        self.index.remove(txn, scope, id).await?;
                        false
                    }
                }
            }
            None => {
                self.index.remove(txn, scope, id).await?;
                false
            }
        };
        let model = stored.then(|| self.embedder.model().to_owned());
        memory::Entity::update_many_in(scope)
            .col_expr(
                memory::Column::EmbeddingModel,
                sea_orm::sea_query::Expr::value(model),
            )
            .filter(memory::Column::Id.eq(id.uuid()))
            .exec(txn)
            .await?;
        Ok(stored)
    }

    async fn model(&self, scope: TenantScope, id: MemoryId) -> Result<memory::Model> {
        memory::Entity::find_by_id_in(scope, id.uuid())
            .one(&self.db)
            .await?
            .ok_or_else(|| Error::not_found("memory"))
    }

    pub async fn get(&self, scope: TenantScope, id: MemoryId) -> Result<Memory> {
        self.model(scope, id).await?.try_into()
    }

    /// Remember a fact (see the module header).
    pub async fn remember(&self, scope: TenantScope, input: NewMemory) -> Result<Remembered> {
        let text = content(&input.content)?;
        let tier = input.tier.unwrap_or(Tier::Working);
        let category = category(input.category.as_deref())?;
        let importance = unit("importance", input.importance, 0.5)?;
        let confidence = unit("confidence", input.confidence, 1.0)?;
        if let Some(subject) = input.subject {
            self.graph.get(scope, subject).await?;
        }
        let mut mentions = input.mentions.clone();
        mentions.sort();
        mentions.dedup();
        for m in &mentions {
            self.graph.get(scope, *m).await?;
        }
        let superseded = match input.supersedes {
            Some(id) => Some(self.model(scope, id).await?),
            None => None,
        };
        let vector = self.embed(&text).await;
        let now = Utc::now();

        if superseded.is_none()
            && let Some(existing) = self
                .near_duplicate(scope, &text, vector.as_deref(), tier, input.subject, now)
                .await?
        {
            let id = MemoryId::from(existing.id);
            let txn = self.db.begin().await?;
            memory_version::ActiveModel {
                id: Set(Uuid::now_v7()),
                tenant_id: Set(scope.tenant_id().uuid()),
                memory_id: Set(existing.id),
                version: Set(existing.version),
                content: Set(existing.content.clone()),
                reason: Set("MERGED".into()),
                created_at: Set(now),
            }
            .insert(&txn)
            .await?;
            let mut model = existing.clone().into_active_model();
            model.content = Set(text.clone());
            model.version = Set(existing.version + 1);
            model.importance = Set(existing.importance.max(importance));
            model.confidence = Set(existing.confidence.max(confidence));
            if existing.source_task_id.is_none() {
                model.source_task_id = Set(input.source_task);
            }
            model.updated_at = Set(now);
            model.update(&txn).await?;
            self.add_mentions(&txn, scope, id, &mentions).await?;
            let mut e = event("MERGED", now);
            e.source_task = input.source_task;
            record_event(&txn, scope, id, e).await?;
            let embedded = self
                .set_embedding(&txn, scope, id, vector.as_deref())
                .await?;
            txn.commit().await?;
            return Ok(Remembered {
                memory: self.get(scope, id).await?,
                merged: true,
                embedded,
            });
        }

        let id = MemoryId::new();
        let valid_from = input.valid_from.unwrap_or(now);
        let txn = self.db.begin().await?;
        memory::ActiveModel {
            id: Set(id.uuid()),
            tenant_id: Set(scope.tenant_id().uuid()),
            subject_id: Set(input.subject.map(|s| s.uuid())),
            tier: Set(tier.as_str().into()),
            category: Set(category),
            content: Set(text),
            score: Set(INITIAL_SCORE),
            uses: Set(0),
            importance: Set(importance),
            confidence: Set(confidence),
            source_task_id: Set(input.source_task),
            valid_from: Set(valid_from),
            valid_to: Set(None),
            superseded_by: Set(None),
            status: Set(Status::Active.as_str().into()),
            expires_at: Set(tier.ttl().map(|ttl| now + ttl)),
            version: Set(1),
            embedding_model: Set(None),
            last_used_at: Set(None),
            created_at: Set(now),
            updated_at: Set(now),
        }
        .insert(&txn)
        .await?;
        self.add_mentions(&txn, scope, id, &mentions).await?;
        if let Some(old) = superseded {
            let old_id = MemoryId::from(old.id);
            let mut model = old.into_active_model();
            model.valid_to = Set(Some(valid_from.min(now)));
            model.superseded_by = Set(Some(id.uuid()));
            model.updated_at = Set(now);
            model.update(&txn).await?;
            let mut e = event("SUPERSEDED", now);
            e.source_task = input.source_task;
            record_event(&txn, scope, old_id, e).await?;
        }
        let embedded = self
            .set_embedding(&txn, scope, id, vector.as_deref())
            .await?;
        txn.commit().await?;
        Ok(Remembered {
            memory: self.get(scope, id).await?,
            merged: false,
            embedded,
        })
    }

    /// The active, current memory a new text would duplicate: by vector
    /// when there is one, else by identical text.
    async fn near_duplicate(
        &self,
        scope: TenantScope,
        text: &str,
        vector: Option<&[f32]>,
        tier: Tier,
        subject: Option<EntityId>,
        now: DateTime<Utc>,
    ) -> Result<Option<memory::Model>> {
        if let Some(v) = vector {
            let filter = CandidateFilter {
                tiers: vec![tier.as_str().to_owned()],
                exact_subject: Some(subject.map(|s| s.uuid())),
                now: Some(now),
                ..CandidateFilter::default()
            };
            let nearest = self.index.nearest(scope, v, 1, &filter, false).await?;
            if let Some((id, sim)) = nearest.first()
                && *sim >= self.config.dedup_threshold
            {
                return Ok(Some(self.model(scope, *id).await?));
            }
        }
        let mut select = memory::Entity::find_in(scope)
            .filter(memory::Column::Content.eq(text))
            .filter(memory::Column::Tier.eq(tier.as_str()))
            .filter(memory::Column::Status.eq(Status::Active.as_str()))
            .filter(memory::Column::ValidTo.is_null());
        select = match subject {
            Some(s) => select.filter(memory::Column::SubjectId.eq(s.uuid())),
            None => select.filter(memory::Column::SubjectId.is_null()),
        };
        Ok(select.one(&self.db).await?)
    }

    async fn add_mentions<C: ConnectionTrait>(
        &self,
        db: &C,
        scope: TenantScope,
        id: MemoryId,
        mentions: &[EntityId],
    ) -> Result<()> {
        if mentions.is_empty() {
            return Ok(());
        }
        let existing: Vec<Uuid> = memory_mention::Entity::find_in(scope)
            .filter(memory_mention::Column::MemoryId.eq(id.uuid()))
            .all(db)
            .await?
            .into_iter()
            .map(|m| m.entity_id)
            .collect();
        for entity in mentions.iter().filter(|e| !existing.contains(&e.uuid())) {
            memory_mention::ActiveModel {
                memory_id: Set(id.uuid()),
                entity_id: Set(entity.uuid()),
                tenant_id: Set(scope.tenant_id().uuid()),
            }
            .insert(db)
            .await?;
        }
        Ok(())
    }

    /// The entities a memory mentions (its subject not included).
    pub async fn mentions(&self, scope: TenantScope, id: MemoryId) -> Result<Vec<EntityId>> {
        Ok(memory_mention::Entity::find_in(scope)
            .filter(memory_mention::Column::MemoryId.eq(id.uuid()))
            .order_by_asc(memory_mention::Column::EntityId)
            .all(&self.db)
            .await?
            .into_iter()
            .map(|m| EntityId::from(m.entity_id))
            .collect())
    }

    /// The mentioned entities of several memories at once (for batching).
    pub async fn mentions_of(
        &self,
        scope: TenantScope,
        ids: &[MemoryId],
    ) -> Result<HashMap<MemoryId, Vec<EntityId>>> {
        let mut out: HashMap<MemoryId, Vec<EntityId>> =
            ids.iter().map(|id| (*id, Vec::new())).collect();
        if ids.is_empty() {
            return Ok(out);
        }
        let rows = memory_mention::Entity::find_in(scope)
            .filter(memory_mention::Column::MemoryId.is_in(ids.iter().map(|i| i.uuid())))
            .order_by_asc(memory_mention::Column::EntityId)
            .all(&self.db)
            .await?;
        for m in rows {
            out.entry(MemoryId::from(m.memory_id))
                .or_default()
                .push(EntityId::from(m.entity_id));
        }
        Ok(out)
    }

    pub async fn list(
        &self,
        scope: TenantScope,
        filter: MemoryFilter,
        request: PageRequest,
    ) -> Result<Page<Memory>> {
        let mut select = memory::Entity::find_in(scope)
            .filter(memory::Column::Status.eq(filter.status.unwrap_or(Status::Active).as_str()));
        if !filter.tiers.is_empty() {
            select =
                select.filter(memory::Column::Tier.is_in(filter.tiers.iter().map(|t| t.as_str())));
        }
        if !filter.categories.is_empty() {
            let cats = filter
                .categories
                .iter()
                .map(|c| category(Some(c)))
                .collect::<Result<Vec<_>>>()?;
            select = select.filter(memory::Column::Category.is_in(cats));
        }
        if let Some(subject) = filter.subject {
            select = select.filter(memory::Column::SubjectId.eq(subject.uuid()));
        }
        let page = page::fetch(&self.db, select, memory::Column::Id, request).await?;
        let items = page
            .items
            .into_iter()
            .map(Memory::try_from)
            .collect::<Result<Vec<_>>>()?;
        Ok(Page {
            items,
            has_next_page: page.has_next_page,
            has_previous_page: page.has_previous_page,
        })
    }

    /// Hybrid search (see [`rank`] for the scoring).
    pub async fn search(&self, scope: TenantScope, query: SearchQuery) -> Result<SearchResults> {
        let text = query.text.trim();
        if text.is_empty() {
            return Err(Error::validation("query must not be empty"));
        }
        let limit = query.limit.unwrap_or(10);
        if !(1..=MAX_SEARCH_LIMIT).contains(&limit) {
            return Err(Error::validation(format!(
                "limit must be 1..={MAX_SEARCH_LIMIT}"
            )));
        }
        if let Some(subject) = query.subject {
            self.graph.get(scope, subject).await?;
        }
        let categories = query
            .categories
            .iter()
            .map(|c| category(Some(c)))
            .collect::<Result<Vec<_>>>()?;
        let filter = CandidateFilter {
            tiers: query.tiers.iter().map(|t| t.as_str().to_owned()).collect(),
            categories,
            subject: query.subject.map(|s| s.uuid()),
            exact_subject: None,
            include_historical: query.include_historical,
            now: Some(Utc::now()),
        };
        // Each leg fetches three times the limit, so fusion has room to
        // reorder (the "fairness multiplier").
        let k = (limit * 3).max(20);
        let query_vector = self.embed(text).await;
        let keyword_leg = keyword::search(&self.db, scope, text, k, &filter, &self.common);
        let vector_leg = async {
            match &query_vector {
                Some(v) => self
                    .index
                    .nearest(scope, v, k, &filter, false)
                    .await
                    .map(Some),
                None => Ok(None),
            }
        };
        let (keyword_hits, vector_hits) = tokio::join!(keyword_leg, vector_leg);
        let keyword_hits = keyword_hits?;
        let vector_hits = vector_hits?;
        let vector_used = vector_hits.is_some();
        let vector_hits = vector_hits.unwrap_or_default();
        let fused = rank::rrf(&keyword_hits, &vector_hits, if vector_used { 2 } else { 1 });

        let ids: Vec<Uuid> = fused.iter().map(|f| f.id.uuid()).collect();
        let models: HashMap<Uuid, memory::Model> = if ids.is_empty() {
            HashMap::new()
        } else {
            memory::Entity::find_in(scope)
                .filter(memory::Column::Id.is_in(ids.clone()))
                .all(&self.db)
                .await?
                .into_iter()
                .map(|m| (m.id, m))
                .collect()
        };
        let linked = self.linked_entities(scope, &models).await?;
        let query_words = format!(" {} ", embedder::words(text).collect::<Vec<_>>().join(" "));

        let mut hits = Vec::with_capacity(fused.len());
        for f in fused {
            let Some(model) = models.get(&f.id.uuid()) else {
                continue;
            };
            let memory = Memory::try_from(model.clone())?;
            let matched = linked
                .get(&f.id.uuid())
                .map(|entities| {
                    entities
                        .iter()
                        .filter(|e| {
                            [&e.name, &e.key].iter().any(|n| {
                                let n = embedder::words(n).collect::<Vec<_>>().join(" ");
                                !n.is_empty() && query_words.contains(&format!(" {n} "))
                            })
                        })
                        .count()
                })
                .unwrap_or(0);
            let score_boost = rank::score_boost(
                memory.tier,
                memory.score,
                memory.importance,
                memory.confidence,
            );
            let tier_boost = rank::tier_boost(memory.tier);
            let graph_boost = rank::graph_boost(matched);
            let boost = rank::combined(score_boost, tier_boost, graph_boost);
            hits.push(SearchHit {
                keyword_rank: f.keyword_rank,
                vector_rank: f.vector_rank,
                vector_similarity: f.vector_similarity,
                fused_score: f.fused,
                score_boost,
                tier_boost,
                graph_boost,
                boost,
                final_score: f.fused * boost,
                memory,
            });
        }
        hits.sort_by(|a, b| {
            b.final_score
                .total_cmp(&a.final_score)
                .then(a.memory.id.cmp(&b.memory.id))
        });
        hits.truncate(limit);
        Ok(SearchResults { hits, vector_used })
    }

    /// Subject and mentioned entities of each memory.
    async fn linked_entities(
        &self,
        scope: TenantScope,
        models: &HashMap<Uuid, memory::Model>,
    ) -> Result<HashMap<Uuid, Vec<Entity>>> {
        if models.is_empty() {
            return Ok(HashMap::new());
        }
        let mut links: HashMap<Uuid, Vec<EntityId>> = HashMap::new();
        for m in models.values() {
            if let Some(s) = m.subject_id {
                links.entry(m.id).or_default().push(s.into());
            }
        }
        let mentions = memory_mention::Entity::find_in(scope)
            .filter(memory_mention::Column::MemoryId.is_in(models.keys().copied()))
            .all(&self.db)
            .await?;
        for m in mentions {
            links
                .entry(m.memory_id)
                .or_default()
                .push(m.entity_id.into());
        }
        let mut all: Vec<EntityId> = links.values().flatten().copied().collect();
        all.sort();
        all.dedup();
        let entities = self.graph.get_many(scope, &all).await?;
        Ok(links
            .into_iter()
            .map(|(memory, ids)| {
                let mut list: Vec<Entity> = ids
                    .iter()
                    .filter_map(|i| entities.get(i).cloned())
                    .collect();
                list.dedup_by_key(|e| e.id);
                (memory, list)
            })
            .collect())
    }

    /// Apply an outcome (see the module header for the rule).
    pub async fn record_outcome(
        &self,
        scope: TenantScope,
        id: MemoryId,
        outcome: Outcome,
        source_task: Option<Uuid>,
    ) -> Result<OutcomeRecorded> {
        // `uses` grows with every outcome, so it doubles as a version for an
        // optimistic update: a concurrent outcome makes this one retry.
        for _ in 0..5 {
            let current = self.model(scope, id).await?;
            if current.status != Status::Active.as_str() {
                return Err(Error::InvalidTransition(format!(
                    "memory is {}; outcomes apply to active memories",
                    current.status.to_lowercase()
                )));
            }
            let tier = Tier::parse(&current.tier)?;
            let before = current.score;
            let after = if tier.is_outcome_scored() {
                round_score(before + outcome.delta())
            } else {
                before
            };
            let now = Utc::now();
            let txn = self.db.begin().await?;
            let updated = memory::Entity::update_many_in(scope)
                .col_expr(
                    memory::Column::Score,
                    sea_orm::sea_query::Expr::value(after),
                )
                .col_expr(
                    memory::Column::Uses,
                    sea_orm::sea_query::Expr::value(current.uses + 1),
                )
                .col_expr(
                    memory::Column::LastUsedAt,
                    sea_orm::sea_query::Expr::value(Some(now)),
                )
                .col_expr(
                    memory::Column::UpdatedAt,
                    sea_orm::sea_query::Expr::value(now),
                )
                .filter(memory::Column::Id.eq(id.uuid()))
                .filter(memory::Column::Uses.eq(current.uses))
                .exec(&txn)
                .await?;
            if updated.rows_affected == 0 {
                txn.rollback().await?;
                continue;
            }
            let mut e = event("OUTCOME", now);
            e.outcome = Some(outcome.as_str().into());
            e.score_before = Some(before);
            e.score_after = Some(after);
            e.source_task = source_task;
            record_event(&txn, scope, id, e).await?;
            txn.commit().await?;
            return Ok(OutcomeRecorded {
                memory: self.get(scope, id).await?,
                score_before: before,
                score_after: after,
            });
        }
        Err(Error::Conflict(
            "the memory changed concurrently; retry".into(),
        ))
    }

    /// Change a memory. A new text keeps the old one as a version and is
    /// embedded again; a new tier restarts the tier's lifetime.
    pub async fn update(
        &self,
        scope: TenantScope,
        id: MemoryId,
        change: MemoryUpdate,
    ) -> Result<Memory> {
        let current = self.model(scope, id).await?;
        let now = Utc::now();
        let mut model = current.clone().into_active_model();
        let new_text = match &change.content {
            Some(c) => Some(content(c)?).filter(|c| *c != current.content),
            None => None,
        };
        if let Some(c) = &change.category {
            model.category = Set(category(Some(c))?);
        }
        if change.importance.is_some() {
            model.importance = Set(unit("importance", change.importance, 0.5)?);
        }
        if change.confidence.is_some() {
            model.confidence = Set(unit("confidence", change.confidence, 1.0)?);
        }
        if let Some(tier) = change.tier
            && tier.as_str() != current.tier
        {
            model.tier = Set(tier.as_str().into());
            model.expires_at = Set(tier.ttl().map(|ttl| now + ttl));
        }
        if let Some(subject) = change.subject {
            if let Some(s) = subject {
                self.graph.get(scope, s).await?;
            }
            model.subject_id = Set(subject.map(|s| s.uuid()));
        }
        let vector = match &new_text {
            Some(text) => Some(self.embed(text).await),
            None => None,
        };
        let txn = self.db.begin().await?;
        if let Some(text) = &new_text {
            memory_version::ActiveModel {
                id: Set(Uuid::now_v7()),
                tenant_id: Set(scope.tenant_id().uuid()),
                memory_id: Set(current.id),
                version: Set(current.version),
                content: Set(current.content.clone()),
                reason: Set("UPDATED".into()),
                created_at: Set(now),
            }
            .insert(&txn)
            .await?;
            model.content = Set(text.clone());
            model.version = Set(current.version + 1);
        }
        model.updated_at = Set(now);
        model.update(&txn).await?;
        if let Some(vector) = vector {
            self.set_embedding(&txn, scope, id, vector.as_deref())
                .await?;
        }
        txn.commit().await?;
        self.get(scope, id).await
    }

    /// Take a memory out of search and lists; it stays readable by id.
    pub async fn archive(&self, scope: TenantScope, id: MemoryId) -> Result<Memory> {
        let current = self.model(scope, id).await?;
        if current.status == Status::Archived.as_str() {
            return current.try_into();
        }
        let now = Utc::now();
        let txn = self.db.begin().await?;
        let mut model = current.into_active_model();
        model.status = Set(Status::Archived.as_str().into());
        model.updated_at = Set(now);
        model.update(&txn).await?;
        record_event(&txn, scope, id, event("ARCHIVED", now)).await?;
        txn.commit().await?;
        self.get(scope, id).await
    }

    /// Earlier texts, oldest first.
    pub async fn versions(&self, scope: TenantScope, id: MemoryId) -> Result<Vec<MemoryVersion>> {
        Ok(memory_version::Entity::find_in(scope)
            .filter(memory_version::Column::MemoryId.eq(id.uuid()))
            .order_by_asc(memory_version::Column::Version)
            .all(&self.db)
            .await?
            .into_iter()
            .map(|v| MemoryVersion {
                version: v.version,
                content: v.content,
                reason: v.reason,
                created_at: v.created_at,
            })
            .collect())
    }

    /// Outcomes and transitions, oldest first.
    pub async fn events(&self, scope: TenantScope, id: MemoryId) -> Result<Vec<MemoryEvent>> {
        Ok(memory_event::Entity::find_in(scope)
            .filter(memory_event::Column::MemoryId.eq(id.uuid()))
            .order_by_asc(memory_event::Column::Id)
            .all(&self.db)
            .await?
            .into_iter()
            .map(|e| MemoryEvent {
                kind: e.kind,
                outcome: e.outcome,
                score_before: e.score_before,
                score_after: e.score_after,
                tier_before: e.tier_before,
                tier_after: e.tier_after,
                source_task: e.source_task_id,
                created_at: e.created_at,
            })
            .collect())
    }

    /// Everything current known about `subject`.
    pub async fn dossier(
        &self,
        scope: TenantScope,
        subject: EntityId,
        now: DateTime<Utc>,
    ) -> Result<Dossier> {
        let entity = self.graph.get(scope, subject).await?;
        let mentioned: Vec<Uuid> = memory_mention::Entity::find_in(scope)
            .filter(memory_mention::Column::EntityId.eq(subject.uuid()))
            .all(&self.db)
            .await?
            .into_iter()
            .map(|m| m.memory_id)
            .collect();
        let mut about = Condition::any().add(memory::Column::SubjectId.eq(subject.uuid()));
        if !mentioned.is_empty() {
            about = about.add(memory::Column::Id.is_in(mentioned));
        }
        let rows = memory::Entity::find_in(scope)
            .filter(about)
            .filter(memory::Column::Status.eq(Status::Active.as_str()))
            .filter(
                Condition::any()
                    .add(memory::Column::ValidTo.is_null())
                    .add(memory::Column::ValidTo.gt(now)),
            )
            .filter(
                Condition::any()
                    .add(memory::Column::ExpiresAt.is_null())
                    .add(memory::Column::ExpiresAt.gt(now)),
            )
            .order_by_desc(memory::Column::Id)
            .limit(500)
            .all(&self.db)
            .await?;
        let mut facts = rows
            .into_iter()
            .map(Memory::try_from)
            .collect::<Result<Vec<_>>>()?;
        let strength = |m: &Memory| {
            rank::score_boost(m.tier, m.score, m.importance, m.confidence)
                * rank::tier_boost(m.tier)
        };
        facts.sort_by(|a, b| {
            strength(b)
                .total_cmp(&strength(a))
                .then(b.created_at.cmp(&a.created_at))
                .then(b.id.cmp(&a.id))
        });
        let insights: Vec<Memory> = facts
            .iter()
            .filter(|m| m.category != "event")
            .take(10)
            .cloned()
            .collect();
        let mut recent_events: Vec<Memory> = facts
            .iter()
            .filter(|m| m.category == "event")
            .cloned()
            .collect();
        recent_events.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
        recent_events.truncate(10);
        let neighborhood = self.graph.neighborhood(scope, subject, 1, &[], now).await?;
        Ok(Dossier {
            subject: entity,
            facts,
            insights,
            recent_events,
            neighborhood,
        })
    }

    /// Embed every active memory of the tenant again (after a model or
    /// dimension change, or to fill vectors missed while the embedder was
    /// down).
    /// With `only_missing`, only memories without a vector of the current
    /// model.
    pub async fn reindex(&self, scope: TenantScope, only_missing: bool) -> Result<Reindexed> {
        let mut result = Reindexed::default();
        let mut after: Option<Uuid> = None;
        loop {
            let mut select = memory::Entity::find_in(scope)
                .filter(memory::Column::Status.eq(Status::Active.as_str()))
                .order_by_asc(memory::Column::Id)
                .limit(embedder::MAX_BATCH as u64);
            if let Some(a) = after {
                select = select.filter(memory::Column::Id.gt(a));
            }
            if only_missing {
                select = select.filter(
                    Condition::any()
                        .add(memory::Column::EmbeddingModel.is_null())
                        .add(memory::Column::EmbeddingModel.ne(self.embedder.model())),
                );
            }
            let batch = select.all(&self.db).await?;
            let Some(last) = batch.last() else {
                break;
            };
            after = Some(last.id);
            let texts: Vec<String> = batch.iter().map(|m| m.content.clone()).collect();
            match self.embedder.embed(&texts).await {
                Ok(vectors) if vectors.len() == batch.len() => {
                    // One transaction per batch.
                    let txn = self.db.begin().await?;
                    let mut reindexed = 0;
                    for (m, v) in batch.iter().zip(vectors) {
                        if self
                            .set_embedding(&txn, scope, m.id.into(), Some(&v))
                            .await?
                        {
                            reindexed += 1;
                        }
                    }
                    txn.commit().await?;
                    result.reindexed += reindexed;
                    result.failed += batch.len() as u64 - reindexed;
                }
                Ok(_) | Err(_) => {
                    tracing::warn!("reindex: the embedder failed for a batch");
                    result.failed += batch.len() as u64;
                }
            }
        }
        Ok(result)
    }
}
