//! The memory record: its tiers and statuses, the [`Memory`] read from a
//! row, its settings ([`MemoryConfig`]), its versions and its event log, and
//! the checks every write applies to a text, a category and a 0..1 value.
//!
//! Scores are rounded to four decimals ([`round_score`]) so the promotion
//! rule's comparisons are exact. Every change of a memory's score, tier or
//! status is recorded as a [`MemoryEvent`] ([`record_event`]) in the same
//! transaction as the change.

use brainstem_entity::{EntityId, MemoryId, TenantScope, memory, memory_event};
use chrono::{DateTime, Duration, Utc};
use sea_orm::{ActiveModelTrait, ActiveValue::Set, ConnectionTrait};
use uuid::Uuid;

use super::EmbedderConfig;
use crate::{Error, Result};

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
    /// In the bin: restorable until purged (`forget`).
    Deleted,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Active => "ACTIVE",
            Status::Archived => "ARCHIVED",
            Status::Expired => "EXPIRED",
            Status::Deleted => "DELETED",
        }
    }

    pub fn parse(s: &str) -> Result<Self> {
        [
            Status::Active,
            Status::Archived,
            Status::Expired,
            Status::Deleted,
        ]
        .into_iter()
        .find(|t| t.as_str() == s)
        .ok_or_else(|| Error::internal(format!("unknown memory status `{s}`")))
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
    /// Days a deleted memory or entity stays restorable before maintenance
    /// purges it.
    pub purge_after_days: u32,
    /// How large a file a memory import job takes.
    pub import_file: super::ImportFileLimits,
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
            purge_after_days: super::forget::PURGE_AFTER_DAYS,
            import_file: super::ImportFileLimits::default(),
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

pub(super) fn category(raw: Option<&str>) -> Result<String> {
    let c = raw
        .map(|s| s.trim().to_lowercase())
        .unwrap_or_else(|| "insight".into());
    if c.is_empty() || c.len() > 40 {
        return Err(Error::validation("category must have 1-40 characters"));
    }
    Ok(c)
}

pub(super) fn unit(name: &str, value: Option<f64>, default: f64) -> Result<f64> {
    let v = value.unwrap_or(default);
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(Error::validation(format!("{name} must be between 0 and 1")))
    }
}

pub(super) fn content(raw: &str) -> Result<String> {
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
