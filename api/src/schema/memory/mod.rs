//! Memories on the wire: a tenant's facts with their versions and outcome
//! events, hybrid search, and the dossier of a subject. Reads need the
//! `memory:read` scope, writes `memory:write` (API keys; bearer tokens get
//! both from any tenant role). Resolvers only decode ids, call
//! `domain.memory` and wrap the results; the entities a memory names come
//! from the graph area.
//!
//! - [`mutation`]: remember, record an outcome, update, archive, reindex.
//! - [`import`]: `importMemories`, batches of memories with per-item results.
//! - [`import_job`]: `startMemoryImport`, a JSON Lines file imported in the
//!   background as a job, and the job's progress.

pub mod import;
pub mod import_job;
pub mod mutation;

use std::collections::HashMap;

use async_graphql::{
    ComplexObject, Context, Enum, ID, InputObject, Object, SimpleObject,
    connection::Connection,
    dataloader::{DataLoader, Loader},
};
use brainstem_domain::{
    Domain, EntityId, MemoryId, TenantScope,
    graph::Moment,
    memory::{
        self as dm, Memory as DomainMemory, MemoryEvent as DomainMemoryEvent,
        MemoryFilter as DomainMemoryFilter, SearchQuery,
    },
};
use chrono::{DateTime, Utc};
use uuid::Uuid;

pub(crate) use self::import_job::{import_job_id, import_job_node};
pub use self::{
    import::MemoryImportMutation,
    import_job::{MemoryImportJob, MemoryImportJobMutation, MemoryImportJobQuery},
    mutation::MemoryMutation,
};
use super::{
    context::{domain, require_scope},
    graph::{EntityLoader, KgEntity, Neighborhood, entity_id, load_entity},
    ids::{self, NodeType, encode},
    page::{ListOrder, connection, ordered_page_request},
    tasks::Task,
};
use crate::error::ResultExt;

const READ: &str = "memory:read";
const WRITE: &str = "memory:write";

pub(super) fn read_scope(ctx: &Context<'_>) -> async_graphql::Result<TenantScope> {
    require_scope(ctx, READ)
}

pub(super) fn write_scope(ctx: &Context<'_>) -> async_graphql::Result<TenantScope> {
    require_scope(ctx, WRITE)
}

pub(super) fn memory_id(id: &ID) -> async_graphql::Result<MemoryId> {
    ids::decode_as(id, NodeType::Memory)
        .map(MemoryId::from)
        .gql()
}

/// Batches "which entities does this memory mention" for lists of memories.
pub struct MentionLoader(pub Domain);

impl Loader<(TenantScope, MemoryId)> for MentionLoader {
    type Value = Vec<EntityId>;
    type Error = async_graphql::Error;

    async fn load(
        &self,
        keys: &[(TenantScope, MemoryId)],
    ) -> Result<HashMap<(TenantScope, MemoryId), Vec<EntityId>>, async_graphql::Error> {
        let mut by_scope: HashMap<TenantScope, Vec<MemoryId>> = HashMap::new();
        for (scope, id) in keys {
            by_scope.entry(*scope).or_default().push(*id);
        }
        let mut out = HashMap::new();
        for (scope, ids) in by_scope {
            for (id, mentions) in self.0.memory.mentions_of(scope, &ids).await.gql()? {
                out.insert((scope, id), mentions);
            }
        }
        Ok(out)
    }
}

/// The mention loader this area puts in the schema's data.
pub(super) fn mention_loader(domain: &Domain) -> DataLoader<MentionLoader> {
    DataLoader::new(
        MentionLoader(domain.clone()),
        brainstem_domain::row_security::spawn,
    )
}

/// Which legs of `searchMemories` run.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SearchMode {
    /// Keyword and vector legs, fused; the default.
    Hybrid,
    /// The vector leg only (no hits when the query cannot be embedded).
    Vector,
    /// The keyword leg only, every match counted; the query is not embedded.
    Keyword,
}

impl From<SearchMode> for dm::SearchMode {
    fn from(m: SearchMode) -> Self {
        match m {
            SearchMode::Hybrid => dm::SearchMode::Hybrid,
            SearchMode::Vector => dm::SearchMode::Vector,
            SearchMode::Keyword => dm::SearchMode::Keyword,
        }
    }
}

/// Where a memory lives, which decides its lifetime.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryTier {
    /// Fresh facts; expire after 24 hours unless promoted.
    Working,
    /// Proven facts (score ≥ 0.7, ≥ 2 uses); expire 30 days after promotion.
    History,
    /// Strongly proven facts (score ≥ 0.9, ≥ 3 uses); permanent.
    Patterns,
    /// Document text; permanent, never outcome-scored.
    Documents,
    /// Curated facts; permanent, never outcome-scored, at most 1000 active
    /// per tenant by default.
    MemoryBank,
}

impl From<MemoryTier> for dm::Tier {
    fn from(t: MemoryTier) -> Self {
        match t {
            MemoryTier::Working => dm::Tier::Working,
            MemoryTier::History => dm::Tier::History,
            MemoryTier::Patterns => dm::Tier::Patterns,
            MemoryTier::Documents => dm::Tier::Documents,
            MemoryTier::MemoryBank => dm::Tier::MemoryBank,
        }
    }
}

impl From<dm::Tier> for MemoryTier {
    fn from(t: dm::Tier) -> Self {
        match t {
            dm::Tier::Working => MemoryTier::Working,
            dm::Tier::History => MemoryTier::History,
            dm::Tier::Patterns => MemoryTier::Patterns,
            dm::Tier::Documents => MemoryTier::Documents,
            dm::Tier::MemoryBank => MemoryTier::MemoryBank,
        }
    }
}

#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryStatus {
    Active,
    /// Taken out of search: by `archiveMemory`, a score below 0.2, or the
    /// `MEMORY_BANK` cap.
    Archived,
    /// Its tier's lifetime ran out.
    Expired,
    /// In the bin (`deleteMemory`): `restoreMemory` brings it back until
    /// it is purged, `memory_purge_after_days` (30) after.
    Deleted,
}

impl From<dm::Status> for MemoryStatus {
    fn from(s: dm::Status) -> Self {
        match s {
            dm::Status::Active => MemoryStatus::Active,
            dm::Status::Archived => MemoryStatus::Archived,
            dm::Status::Expired => MemoryStatus::Expired,
            dm::Status::Deleted => MemoryStatus::Deleted,
        }
    }
}

impl From<MemoryStatus> for dm::Status {
    fn from(s: MemoryStatus) -> Self {
        match s {
            MemoryStatus::Active => dm::Status::Active,
            MemoryStatus::Archived => dm::Status::Archived,
            MemoryStatus::Expired => dm::Status::Expired,
            MemoryStatus::Deleted => dm::Status::Deleted,
        }
    }
}

/// How using a memory turned out.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryOutcome {
    /// Score +0.2.
    Worked,
    /// Score −0.3.
    Failed,
    /// Score +0.05.
    Partial,
    /// Score unchanged; counts as a use.
    Unknown,
}

impl From<MemoryOutcome> for dm::Outcome {
    fn from(o: MemoryOutcome) -> Self {
        match o {
            MemoryOutcome::Worked => dm::Outcome::Worked,
            MemoryOutcome::Failed => dm::Outcome::Failed,
            MemoryOutcome::Partial => dm::Outcome::Partial,
            MemoryOutcome::Unknown => dm::Outcome::Unknown,
        }
    }
}

/// A fact a tenant keeps.
#[derive(Clone, Debug)]
pub struct Memory(pub DomainMemory);

#[Object]
impl Memory {
    pub(crate) async fn id(&self) -> ID {
        encode(NodeType::Memory, self.0.id.uuid())
    }

    async fn tier(&self) -> MemoryTier {
        self.0.tier.into()
    }

    async fn category(&self) -> &str {
        &self.0.category
    }

    async fn content(&self) -> &str {
        &self.0.content
    }

    /// The knowledge-graph entity the fact is about.
    async fn subject(&self, ctx: &Context<'_>) -> async_graphql::Result<Option<KgEntity>> {
        let Some(subject) = self.0.subject else {
            return Ok(None);
        };
        let scope = read_scope(ctx)?;
        Ok(Some(KgEntity::from(
            load_entity(ctx, scope, subject).await?,
        )))
    }

    /// Other entities the fact mentions.
    async fn mentions(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<KgEntity>> {
        let scope = read_scope(ctx)?;
        let ids = ctx
            .data::<DataLoader<MentionLoader>>()?
            .load_one((scope, self.0.id))
            .await?
            .unwrap_or_default();
        let found = ctx
            .data::<DataLoader<EntityLoader>>()?
            .load_many(ids.iter().map(|id| (scope, *id)))
            .await?;
        Ok(ids
            .iter()
            .filter_map(|id| found.get(&(scope, *id)).cloned().map(KgEntity::from))
            .collect())
    }

    /// Learned usefulness, 0..1; starts at 0.5.
    async fn score(&self) -> f64 {
        self.0.score
    }

    /// Outcomes recorded.
    async fn uses(&self) -> i32 {
        self.0.uses
    }

    async fn importance(&self) -> f64 {
        self.0.importance
    }

    async fn confidence(&self) -> f64 {
        self.0.confidence
    }

    /// The task that produced the fact.
    async fn source_task_id(&self) -> Option<Uuid> {
        self.0.source_task
    }

    async fn valid_from(&self) -> DateTime<Utc> {
        self.0.valid_from
    }

    /// Set when a newer fact superseded this one.
    async fn valid_to(&self) -> Option<DateTime<Utc>> {
        self.0.valid_to
    }

    async fn superseded_by_id(&self) -> Option<ID> {
        self.0
            .superseded_by
            .map(|id| encode(NodeType::Memory, id.uuid()))
    }

    async fn status(&self) -> MemoryStatus {
        self.0.status.into()
    }

    async fn expires_at(&self) -> Option<DateTime<Utc>> {
        self.0.expires_at
    }

    /// 1 for the first text; +1 per update or merge.
    async fn version(&self) -> i32 {
        self.0.version
    }

    /// Whether a vector is stored (if not, only keyword search finds it).
    async fn embedded(&self) -> bool {
        self.0.embedding_model.is_some()
    }

    async fn embedding_model(&self) -> Option<&str> {
        self.0.embedding_model.as_deref()
    }

    async fn last_used_at(&self) -> Option<DateTime<Utc>> {
        self.0.last_used_at
    }

    async fn created_at(&self) -> DateTime<Utc> {
        self.0.created_at
    }

    async fn updated_at(&self) -> DateTime<Utc> {
        self.0.updated_at
    }

    /// Earlier texts, oldest first.
    async fn versions(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<MemoryVersion>> {
        let scope = read_scope(ctx)?;
        Ok(domain(ctx)
            .memory
            .versions(scope, self.0.id)
            .await
            .gql()?
            .into_iter()
            .map(|v| MemoryVersion {
                version: v.version,
                content: v.content,
                reason: v.reason,
                created_at: v.created_at,
            })
            .collect())
    }

    /// Outcomes and lifecycle transitions, oldest first.
    async fn events(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<MemoryEvent>> {
        let scope = read_scope(ctx)?;
        Ok(domain(ctx)
            .memory
            .events(scope, self.0.id)
            .await
            .gql()?
            .into_iter()
            .map(MemoryEvent)
            .collect())
    }
}

/// An earlier text of a memory.
#[derive(SimpleObject)]
pub struct MemoryVersion {
    pub version: i32,
    pub content: String,
    /// `UPDATED` or `MERGED`.
    pub reason: String,
    /// When it was replaced.
    pub created_at: DateTime<Utc>,
}

/// An outcome or a lifecycle transition of a memory.
pub struct MemoryEvent(DomainMemoryEvent);

#[Object]
impl MemoryEvent {
    /// `OUTCOME`, `MERGED`, `SUPERSEDED`, `PROMOTED`, `ARCHIVED` or `EXPIRED`.
    async fn kind(&self) -> &str {
        &self.0.kind
    }
    async fn outcome(&self) -> Option<&str> {
        self.0.outcome.as_deref()
    }
    async fn score_before(&self) -> Option<f64> {
        self.0.score_before
    }
    async fn score_after(&self) -> Option<f64> {
        self.0.score_after
    }
    async fn tier_before(&self) -> Option<&str> {
        self.0.tier_before.as_deref()
    }
    async fn tier_after(&self) -> Option<&str> {
        self.0.tier_after.as_deref()
    }
    async fn source_task_id(&self) -> Option<Uuid> {
        self.0.source_task
    }
    async fn created_at(&self) -> DateTime<Utc> {
        self.0.created_at
    }
}

/// One search result and the reasons for its place.
#[derive(SimpleObject)]
pub struct MemoryHit {
    pub memory: Memory,
    /// 1-based rank in the keyword list; null if keyword search missed it.
    pub keyword_rank: Option<i32>,
    /// 1-based rank in the vector list; null if vector search missed it.
    pub vector_rank: Option<i32>,
    /// Cosine similarity to the query, when the vector leg found it.
    pub vector_similarity: Option<f64>,
    /// The legs fused (vector similarity, plus a small bonus for keyword
    /// evidence above a floor; README, "How fusion ranks"), in [0, 1].
    pub fused_score: f64,
    pub score_boost: f64,
    pub tier_boost: f64,
    pub graph_boost: f64,
    /// Product of the three boosts, capped at 1.5.
    pub boost: f64,
    /// `fusedScore × boost`; hits are sorted by it.
    pub final_score: f64,
}

#[derive(SimpleObject)]
pub struct MemorySearchResult {
    pub hits: Vec<MemoryHit>,
    /// False when the query could not be embedded: keyword results only.
    pub vector_used: bool,
}

/// What is known about a subject.
#[derive(SimpleObject)]
#[graphql(complex)]
pub struct Dossier {
    pub subject: KgEntity,
    /// Every current fact about the subject or mentioning it, strongest first.
    pub facts: Vec<Memory>,
    /// Facts that are not events (insights, preferences, warnings), top 10.
    pub insights: Vec<Memory>,
    /// Facts of category `event`, newest first, top 10.
    pub recent_events: Vec<Memory>,
    /// Entities one hop away and the relations to them.
    pub neighborhood: Neighborhood,
    #[graphql(skip)]
    pub subject_id: Uuid,
}

/// The dossier's view of the tasks table, which needs `tasks:read` as well.
#[ComplexObject]
impl Dossier {
    /// The subject's most recent tasks, newest first (`first`: 1-50,
    /// default 10).
    async fn recent_tasks(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 10)] first: i32,
    ) -> async_graphql::Result<Vec<Task>> {
        let scope = require_scope(ctx, "tasks:read")?;
        if !(1..=50).contains(&first) {
            return Err(brainstem_domain::Error::validation(
                "first must be between 1 and 50",
            ))
            .gql();
        }
        let tasks = domain(ctx)
            .tasks
            .recent_of_subject(scope, self.subject_id, None, first as u64)
            .await
            .gql()?;
        Ok(tasks.into_iter().map(Task).collect())
    }

    /// How many of the subject's tasks are not finished (pending work).
    async fn open_tasks(&self, ctx: &Context<'_>) -> async_graphql::Result<i64> {
        let scope = require_scope(ctx, "tasks:read")?;
        let open = domain(ctx)
            .tasks
            .open_of_subject(scope, self.subject_id, None)
            .await
            .gql()?;
        Ok(i64::try_from(open).unwrap_or(i64::MAX))
    }
}

#[derive(InputObject, Default)]
pub struct MemoryFilter {
    pub tiers: Option<Vec<MemoryTier>>,
    pub categories: Option<Vec<String>>,
    pub subject_id: Option<ID>,
    /// Defaults to `ACTIVE`.
    pub status: Option<MemoryStatus>,
}

/// The tenant's active memories against the current embedder.
#[derive(SimpleObject)]
pub struct MemoryEmbeddings {
    /// The embedder's model, recorded with each vector.
    pub model: String,
    /// Active memories with a vector of `model`.
    pub embedded: i32,
    /// Active memories without one, still to embed.
    pub pending: i32,
}

#[derive(Default)]
pub struct MemoryQuery;

#[Object]
impl MemoryQuery {
    /// One memory of the caller's tenant.
    async fn memory(&self, ctx: &Context<'_>, id: ID) -> async_graphql::Result<Memory> {
        let scope = read_scope(ctx)?;
        let id = memory_id(&id)?;
        Ok(Memory(domain(ctx).memory.get(scope, id).await.gql()?))
    }

    /// Memories of the caller's tenant, oldest first unless `orderBy`.
    #[allow(clippy::too_many_arguments)]
    async fn memories(
        &self,
        ctx: &Context<'_>,
        filter: Option<MemoryFilter>,
        first: Option<i32>,
        after: Option<String>,
        last: Option<i32>,
        before: Option<String>,
        order_by: Option<ListOrder>,
    ) -> async_graphql::Result<Connection<String, Memory>> {
        let scope = read_scope(ctx)?;
        let filter = filter.unwrap_or_default();
        let domain_filter = DomainMemoryFilter {
            tiers: filter
                .tiers
                .unwrap_or_default()
                .into_iter()
                .map(Into::into)
                .collect(),
            categories: filter.categories.unwrap_or_default(),
            subject: filter.subject_id.as_ref().map(entity_id).transpose()?,
            status: filter.status.map(Into::into),
        };
        let page = domain(ctx)
            .memory
            .list(
                scope,
                domain_filter,
                ordered_page_request(first, after, last, before, order_by)?,
            )
            .await
            .gql()?;
        Ok(connection(page, |m| m.id.uuid(), Memory))
    }

    /// How far the tenant's memories are from the current embedder. After
    /// a switch of embedder, `pending` counts down to 0 as the background
    /// re-embedding works; until a memory is embedded again, searches find
    /// it by its words only.
    async fn memory_embeddings(
        &self,
        ctx: &Context<'_>,
    ) -> async_graphql::Result<MemoryEmbeddings> {
        let scope = read_scope(ctx)?;
        let status = domain(ctx).memory.embedding_status(scope).await.gql()?;
        let count = |n: u64| i32::try_from(n).unwrap_or(i32::MAX);
        Ok(MemoryEmbeddings {
            model: status.model,
            embedded: count(status.embedded),
            pending: count(status.pending),
        })
    }

    /// Hybrid search: keyword and vector candidates fused (the vectors
    /// decide, keyword hits above a relevance floor break near-ties), then
    /// score, tier and knowledge-graph boosts (together at most 1.5×).
    /// `mode` runs one leg only. Only active, current facts unless
    /// `includeHistorical`. With `asOf`, the memories as they stood then:
    /// created by then, and not yet superseded, expired or deleted then.
    #[allow(clippy::too_many_arguments)]
    async fn search_memories(
        &self,
        ctx: &Context<'_>,
        query: String,
        #[graphql(desc = "Only memories about this entity or mentioning it.")] subject: Option<ID>,
        tiers: Option<Vec<MemoryTier>>,
        categories: Option<Vec<String>>,
        #[graphql(desc = "1–50.", default = 10)] limit: i32,
        #[graphql(default = false)] include_historical: bool,
        #[graphql(default_with = "SearchMode::Hybrid")] mode: SearchMode,
        as_of: Option<DateTime<Utc>>,
    ) -> async_graphql::Result<MemorySearchResult> {
        let scope = read_scope(ctx)?;
        let results = domain(ctx)
            .memory
            .search(
                scope,
                SearchQuery {
                    text: query,
                    subject: subject.as_ref().map(entity_id).transpose()?,
                    tiers: tiers
                        .unwrap_or_default()
                        .into_iter()
                        .map(Into::into)
                        .collect(),
                    categories: categories.unwrap_or_default(),
                    limit: Some(usize::try_from(limit).unwrap_or(0)),
                    include_historical,
                    mode: mode.into(),
                    as_of,
                },
            )
            .await
            .gql()?;
        Ok(MemorySearchResult {
            vector_used: results.vector_used,
            hits: results
                .hits
                .into_iter()
                .map(|h| MemoryHit {
                    keyword_rank: h.keyword_rank.map(|r| r as i32),
                    vector_rank: h.vector_rank.map(|r| r as i32),
                    vector_similarity: h.vector_similarity.map(f64::from),
                    fused_score: h.fused_score,
                    score_boost: h.score_boost,
                    tier_boost: h.tier_boost,
                    graph_boost: h.graph_boost,
                    boost: h.boost,
                    final_score: h.final_score,
                    memory: Memory(h.memory),
                })
                .collect(),
        })
    }

    /// What is known about a knowledge-graph entity; with `asOf`, what was
    /// known to hold then: the facts created by then and not yet
    /// superseded, expired or deleted, and the relations that held then.
    async fn dossier(
        &self,
        ctx: &Context<'_>,
        subject_id: ID,
        as_of: Option<DateTime<Utc>>,
    ) -> async_graphql::Result<Dossier> {
        let scope = read_scope(ctx)?;
        let subject = entity_id(&subject_id)?;
        let d = domain(ctx)
            .memory
            .dossier_at(scope, subject, Moment::of(as_of, Utc::now()))
            .await
            .gql()?;
        Ok(Dossier {
            subject_id: subject.uuid(),
            subject: KgEntity(d.subject, as_of),
            facts: d.facts.into_iter().map(Memory).collect(),
            insights: d.insights.into_iter().map(Memory).collect(),
            recent_events: d.recent_events.into_iter().map(Memory).collect(),
            neighborhood: Neighborhood::at(d.neighborhood, as_of),
        })
    }
}

/// A memory of the caller's tenant.
pub(crate) async fn memory_node(ctx: &Context<'_>, uuid: Uuid) -> async_graphql::Result<Memory> {
    let scope = read_scope(ctx)?;
    let memory = domain(ctx)
        .memory
        .get(scope, MemoryId::from(uuid))
        .await
        .gql()?;
    Ok(Memory(memory))
}
