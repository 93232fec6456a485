//! Memory and knowledge graph on the wire: `MemoryQuery` and
//! `MemoryMutation`, merged into the roots. Reads need the `memory:read`
//! scope, writes `memory:write` (API keys; bearer tokens get both from any
//! tenant role). Resolvers only decode ids, call `domain.memory` /
//! `domain.graph` and wrap the results.

use std::collections::HashMap;

use async_graphql::{
    ComplexObject, Context, Enum, ID, InputObject, Json, MaybeUndefined, Object, SimpleObject,
    connection::Connection,
    dataloader::{DataLoader, Loader},
};
use brainstem_domain::{
    Domain, EntityId, MemoryId, RelationId, TenantScope,
    graph::{
        self, Entity as DomainEntity, EntityFilter as DomainEntityFilter, NewEntity, NewRelation,
        Relation as DomainRelation,
    },
    memory::{
        self as dm, Memory as DomainMemory, MemoryEvent as DomainMemoryEvent,
        MemoryFilter as DomainMemoryFilter, MemoryUpdate, NewMemory, SearchQuery,
    },
};
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{
    domain,
    ids::{self, NodeType, encode},
    principal,
    query::page_request,
    types::connection,
};
use crate::error::ResultExt;

const READ: &str = "memory:read";
const WRITE: &str = "memory:write";

fn read_scope(ctx: &Context<'_>) -> async_graphql::Result<TenantScope> {
    principal(ctx)?.require_scope(READ).gql()
}

fn write_scope(ctx: &Context<'_>) -> async_graphql::Result<TenantScope> {
    principal(ctx)?.require_scope(WRITE).gql()
}

fn memory_id(id: &ID) -> async_graphql::Result<MemoryId> {
    ids::decode_as(id, NodeType::Memory)
        .map(MemoryId::from)
        .gql()
}

fn entity_id(id: &ID) -> async_graphql::Result<EntityId> {
    ids::decode_as(id, NodeType::KgEntity)
        .map(EntityId::from)
        .gql()
}

/// Batches entity lookups of one request (a list of memories with their
/// subjects, relations with their ends). Keys carry the tenant scope, so a
/// batch never mixes tenants; nothing is cached across requests.
pub struct EntityLoader(pub Domain);

impl Loader<(TenantScope, EntityId)> for EntityLoader {
    type Value = DomainEntity;
    type Error = async_graphql::Error;

    async fn load(
        &self,
        keys: &[(TenantScope, EntityId)],
    ) -> Result<HashMap<(TenantScope, EntityId), DomainEntity>, async_graphql::Error> {
        let mut by_scope: HashMap<TenantScope, Vec<EntityId>> = HashMap::new();
        for (scope, id) in keys {
            by_scope.entry(*scope).or_default().push(*id);
        }
        let mut out = HashMap::new();
        for (scope, ids) in by_scope {
            for (id, entity) in self.0.graph.get_many(scope, &ids).await.gql()? {
                out.insert((scope, id), entity);
            }
        }
        Ok(out)
    }
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

/// The loaders this area puts in the schema's data.
pub(crate) fn loaders(domain: &Domain) -> (DataLoader<EntityLoader>, DataLoader<MentionLoader>) {
    (
        DataLoader::new(EntityLoader(domain.clone()), tokio::spawn),
        DataLoader::new(MentionLoader(domain.clone()), tokio::spawn),
    )
}

async fn load_entity(
    ctx: &Context<'_>,
    scope: TenantScope,
    id: EntityId,
) -> async_graphql::Result<DomainEntity> {
    ctx.data::<DataLoader<EntityLoader>>()?
        .load_one((scope, id))
        .await?
        .ok_or(brainstem_domain::Error::not_found("entity"))
        .gql()
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
}

impl From<dm::Status> for MemoryStatus {
    fn from(s: dm::Status) -> Self {
        match s {
            dm::Status::Active => MemoryStatus::Active,
            dm::Status::Archived => MemoryStatus::Archived,
            dm::Status::Expired => MemoryStatus::Expired,
        }
    }
}

impl From<MemoryStatus> for dm::Status {
    fn from(s: MemoryStatus) -> Self {
        match s {
            MemoryStatus::Active => dm::Status::Active,
            MemoryStatus::Archived => dm::Status::Archived,
            MemoryStatus::Expired => dm::Status::Expired,
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
        Ok(Some(KgEntity(load_entity(ctx, scope, subject).await?)))
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
            .filter_map(|id| found.get(&(scope, *id)).cloned().map(KgEntity))
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

/// A knowledge-graph entity: a customer, a carrier, a product…
#[derive(Clone, Debug)]
pub struct KgEntity(pub DomainEntity);

#[Object]
impl KgEntity {
    pub(crate) async fn id(&self) -> ID {
        encode(NodeType::KgEntity, self.0.id.uuid())
    }
    /// Lowercase type, e.g. `motor_carrier`.
    #[graphql(name = "type")]
    async fn entity_type(&self) -> &str {
        &self.0.entity_type
    }
    async fn name(&self) -> &str {
        &self.0.name
    }
    /// Canonical key, unique per tenant and type.
    async fn key(&self) -> &str {
        &self.0.key
    }
    async fn properties(&self) -> Json<serde_json::Value> {
        Json(self.0.properties.clone())
    }
    async fn created_at(&self) -> DateTime<Utc> {
        self.0.created_at
    }
    async fn updated_at(&self) -> DateTime<Utc> {
        self.0.updated_at
    }
}

/// A typed, weighted edge between two entities.
#[derive(Clone, Debug)]
pub struct KgRelation(pub DomainRelation);

#[Object]
impl KgRelation {
    pub(crate) async fn id(&self) -> ID {
        encode(NodeType::KgRelation, self.0.id.uuid())
    }
    /// Uppercase type, e.g. `SUPPLIES` or `KNOWS`.
    #[graphql(name = "type")]
    async fn relation_type(&self) -> &str {
        &self.0.relation_type
    }
    async fn from(&self, ctx: &Context<'_>) -> async_graphql::Result<KgEntity> {
        let scope = read_scope(ctx)?;
        Ok(KgEntity(
            domain(ctx).graph.get(scope, self.0.from).await.gql()?,
        ))
    }
    async fn to(&self, ctx: &Context<'_>) -> async_graphql::Result<KgEntity> {
        let scope = read_scope(ctx)?;
        Ok(KgEntity(
            domain(ctx).graph.get(scope, self.0.to).await.gql()?,
        ))
    }
    async fn from_id(&self) -> ID {
        encode(NodeType::KgEntity, self.0.from.uuid())
    }
    async fn to_id(&self) -> ID {
        encode(NodeType::KgEntity, self.0.to.uuid())
    }
    /// Symmetric types have no direction and are stored once.
    async fn symmetric(&self) -> bool {
        self.0.symmetric
    }
    async fn weight(&self) -> f64 {
        self.0.weight
    }
    async fn properties(&self) -> Json<serde_json::Value> {
        Json(self.0.properties.clone())
    }
    async fn valid_from(&self) -> DateTime<Utc> {
        self.0.valid_from
    }
    async fn valid_to(&self) -> Option<DateTime<Utc>> {
        self.0.valid_to
    }
    async fn provenance(&self) -> Option<&str> {
        self.0.provenance.as_deref()
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
    /// Reciprocal Rank Fusion (k = 60), normalised to (0, 1].
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

/// An entity reached from the centre, and how many hops away.
#[derive(SimpleObject)]
pub struct Neighbor {
    pub entity: KgEntity,
    pub distance: i32,
}

#[derive(SimpleObject)]
pub struct Neighborhood {
    pub center: KgEntity,
    /// Nearest first.
    pub neighbors: Vec<Neighbor>,
    pub relations: Vec<KgRelation>,
}

impl From<graph::Neighborhood> for Neighborhood {
    fn from(n: graph::Neighborhood) -> Self {
        Self {
            center: KgEntity(n.center),
            neighbors: n
                .neighbors
                .into_iter()
                .map(|x| Neighbor {
                    entity: KgEntity(x.entity),
                    distance: x.distance as i32,
                })
                .collect(),
            relations: n.relations.into_iter().map(KgRelation).collect(),
        }
    }
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
    ) -> async_graphql::Result<Vec<super::tasks::Task>> {
        let scope = principal(ctx)?.require_scope("tasks:read").gql()?;
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
        Ok(tasks.into_iter().map(super::tasks::Task).collect())
    }

    /// How many of the subject's tasks are not finished (pending work).
    async fn open_tasks(&self, ctx: &Context<'_>) -> async_graphql::Result<i64> {
        let scope = principal(ctx)?.require_scope("tasks:read").gql()?;
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

#[derive(InputObject, Default)]
pub struct EntityFilter {
    #[graphql(name = "type")]
    pub entity_type: Option<String>,
    /// Case-insensitive part of the name.
    pub name_contains: Option<String>,
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

    /// Memories of the caller's tenant, oldest first.
    async fn memories(
        &self,
        ctx: &Context<'_>,
        filter: Option<MemoryFilter>,
        first: Option<i32>,
        after: Option<String>,
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
            .list(scope, domain_filter, page_request(first, after)?)
            .await
            .gql()?;
        Ok(connection(page, |m| m.id.uuid(), Memory))
    }

    /// Hybrid search: keyword and vector candidates fused with Reciprocal
    /// Rank Fusion (k = 60), then score, tier and knowledge-graph boosts
    /// (together at most 1.5×). Only active, current facts unless
    /// `includeHistorical`.
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

    /// What is known about a knowledge-graph entity.
    async fn dossier(&self, ctx: &Context<'_>, subject_id: ID) -> async_graphql::Result<Dossier> {
        let scope = read_scope(ctx)?;
        let subject = entity_id(&subject_id)?;
        let d = domain(ctx)
            .memory
            .dossier(scope, subject, Utc::now())
            .await
            .gql()?;
        Ok(Dossier {
            subject_id: subject.uuid(),
            subject: KgEntity(d.subject),
            facts: d.facts.into_iter().map(Memory).collect(),
            insights: d.insights.into_iter().map(Memory).collect(),
            recent_events: d.recent_events.into_iter().map(Memory).collect(),
            neighborhood: d.neighborhood.into(),
        })
    }

    /// One knowledge-graph entity of the caller's tenant.
    async fn entity(&self, ctx: &Context<'_>, id: ID) -> async_graphql::Result<KgEntity> {
        let scope = read_scope(ctx)?;
        let id = entity_id(&id)?;
        Ok(KgEntity(domain(ctx).graph.get(scope, id).await.gql()?))
    }

    /// Knowledge-graph entities of the caller's tenant, oldest first.
    async fn entities(
        &self,
        ctx: &Context<'_>,
        filter: Option<EntityFilter>,
        first: Option<i32>,
        after: Option<String>,
    ) -> async_graphql::Result<Connection<String, KgEntity>> {
        let scope = read_scope(ctx)?;
        let filter = filter.unwrap_or_default();
        let page = domain(ctx)
            .graph
            .list(
                scope,
                DomainEntityFilter {
                    entity_type: filter.entity_type,
                    name_contains: filter.name_contains,
                },
                page_request(first, after)?,
            )
            .await
            .gql()?;
        Ok(connection(page, |e| e.id.uuid(), KgEntity))
    }

    /// Entities within `depth` (1–3) hops of an entity over current
    /// relations, optionally of the given types only.
    async fn neighborhood(
        &self,
        ctx: &Context<'_>,
        entity_id: ID,
        #[graphql(default = 1)] depth: i32,
        relation_types: Option<Vec<String>>,
    ) -> async_graphql::Result<Neighborhood> {
        let scope = read_scope(ctx)?;
        let center = self::entity_id(&entity_id)?;
        let depth = u32::try_from(depth).unwrap_or(0);
        let n = domain(ctx)
            .graph
            .neighborhood(
                scope,
                center,
                depth,
                &relation_types.unwrap_or_default(),
                Utc::now(),
            )
            .await
            .gql()?;
        Ok(n.into())
    }
}

#[derive(InputObject)]
pub struct RememberInput {
    /// The fact, 1–20,000 characters.
    pub content: String,
    /// Defaults to `WORKING`.
    pub tier: Option<MemoryTier>,
    /// Free-form, e.g. `insight`, `event`, `preference`; defaults to `insight`.
    pub category: Option<String>,
    /// The entity the fact is about.
    pub subject_id: Option<ID>,
    /// Other entities the fact mentions (they boost it in searches that name them).
    pub mention_ids: Option<Vec<ID>>,
    /// 0–1, defaults to 0.5.
    pub importance: Option<f64>,
    /// 0–1, defaults to 1.
    pub confidence: Option<f64>,
    pub source_task_id: Option<Uuid>,
    /// Defaults to now.
    pub valid_from: Option<DateTime<Utc>>,
    /// An older fact this one replaces; it stops being current.
    pub supersedes_id: Option<ID>,
}

#[derive(SimpleObject)]
pub struct RememberPayload {
    pub memory: Memory,
    /// The fact merged into an existing near-duplicate, whose old text is
    /// now a version.
    pub merged: bool,
    /// A vector was stored (false when the embedder failed).
    pub embedded: bool,
}

#[derive(InputObject)]
pub struct RecordMemoryOutcomeInput {
    pub memory_id: ID,
    pub outcome: MemoryOutcome,
    pub source_task_id: Option<Uuid>,
}

#[derive(SimpleObject)]
pub struct RecordMemoryOutcomePayload {
    pub memory: Memory,
    pub score_before: f64,
    pub score_after: f64,
}

#[derive(InputObject)]
pub struct UpdateMemoryInput {
    pub id: ID,
    /// A new text; the old one is kept as a version.
    pub content: Option<String>,
    pub category: Option<String>,
    pub importance: Option<f64>,
    pub confidence: Option<f64>,
    /// A new tier restarts the tier's lifetime.
    pub tier: Option<MemoryTier>,
    /// `null` clears the subject; leaving it out keeps it.
    pub subject_id: MaybeUndefined<ID>,
}

#[derive(SimpleObject)]
pub struct MemoryPayload {
    pub memory: Memory,
}

#[derive(InputObject)]
pub struct ArchiveMemoryInput {
    pub id: ID,
}

#[derive(InputObject)]
pub struct ReindexMemoriesInput {
    /// Only memories without a vector of the current model.
    #[graphql(default = false)]
    pub only_missing: bool,
}

#[derive(SimpleObject)]
pub struct ReindexMemoriesPayload {
    pub reindexed: i32,
    pub failed: i32,
}

#[derive(InputObject)]
pub struct UpsertEntityInput {
    #[graphql(name = "type")]
    pub entity_type: String,
    pub name: String,
    /// Canonical key within the type; defaults to the name, lowercased.
    pub key: Option<String>,
    /// A JSON object; replaces the stored properties when given.
    pub properties: Option<Json<serde_json::Value>>,
}

#[derive(SimpleObject)]
pub struct UpsertEntityPayload {
    pub entity: KgEntity,
    pub created: bool,
}

#[derive(InputObject)]
pub struct RelateInput {
    #[graphql(name = "type")]
    pub relation_type: String,
    pub from_id: ID,
    pub to_id: ID,
    /// Defaults to 1.
    pub weight: Option<f64>,
    pub properties: Option<Json<serde_json::Value>>,
    pub valid_from: Option<DateTime<Utc>>,
    pub valid_to: Option<DateTime<Utc>>,
    /// Where the relation came from, e.g. `task:<id>` or a source name.
    pub provenance: Option<String>,
}

#[derive(SimpleObject)]
pub struct RelatePayload {
    pub relation: KgRelation,
    pub created: bool,
}

#[derive(Default)]
pub struct MemoryMutation;

#[Object]
impl MemoryMutation {
    /// Remember a fact. A near-duplicate of an active fact with the same tier
    /// and subject merges into it.
    async fn remember(
        &self,
        ctx: &Context<'_>,
        input: RememberInput,
    ) -> async_graphql::Result<RememberPayload> {
        let scope = write_scope(ctx)?;
        let new = NewMemory {
            content: input.content,
            tier: input.tier.map(Into::into),
            category: input.category,
            subject: input.subject_id.as_ref().map(entity_id).transpose()?,
            mentions: input
                .mention_ids
                .unwrap_or_default()
                .iter()
                .map(entity_id)
                .collect::<async_graphql::Result<Vec<_>>>()?,
            importance: input.importance,
            confidence: input.confidence,
            source_task: input.source_task_id,
            valid_from: input.valid_from,
            supersedes: input.supersedes_id.as_ref().map(memory_id).transpose()?,
        };
        let r = domain(ctx).memory.remember(scope, new).await.gql()?;
        Ok(RememberPayload {
            memory: Memory(r.memory),
            merged: r.merged,
            embedded: r.embedded,
        })
    }

    /// Report how using a memory turned out.
    async fn record_memory_outcome(
        &self,
        ctx: &Context<'_>,
        input: RecordMemoryOutcomeInput,
    ) -> async_graphql::Result<RecordMemoryOutcomePayload> {
        let scope = write_scope(ctx)?;
        let id = memory_id(&input.memory_id)?;
        let r = domain(ctx)
            .memory
            .record_outcome(scope, id, input.outcome.into(), input.source_task_id)
            .await
            .gql()?;
        Ok(RecordMemoryOutcomePayload {
            memory: Memory(r.memory),
            score_before: r.score_before,
            score_after: r.score_after,
        })
    }

    async fn update_memory(
        &self,
        ctx: &Context<'_>,
        input: UpdateMemoryInput,
    ) -> async_graphql::Result<MemoryPayload> {
        let scope = write_scope(ctx)?;
        let id = memory_id(&input.id)?;
        let subject = match &input.subject_id {
            MaybeUndefined::Undefined => None,
            MaybeUndefined::Null => Some(None),
            MaybeUndefined::Value(id) => Some(Some(entity_id(id)?)),
        };
        let m = domain(ctx)
            .memory
            .update(
                scope,
                id,
                MemoryUpdate {
                    content: input.content,
                    category: input.category,
                    importance: input.importance,
                    confidence: input.confidence,
                    tier: input.tier.map(Into::into),
                    subject,
                },
            )
            .await
            .gql()?;
        Ok(MemoryPayload { memory: Memory(m) })
    }

    /// Take a memory out of search and lists; it stays readable by id.
    async fn archive_memory(
        &self,
        ctx: &Context<'_>,
        input: ArchiveMemoryInput,
    ) -> async_graphql::Result<MemoryPayload> {
        let scope = write_scope(ctx)?;
        let id = memory_id(&input.id)?;
        let m = domain(ctx).memory.archive(scope, id).await.gql()?;
        Ok(MemoryPayload { memory: Memory(m) })
    }

    /// Embed the tenant's active memories again (after changing the
    /// embedder or its dimension, or to fill vectors missed while it was down).
    async fn reindex_memories(
        &self,
        ctx: &Context<'_>,
        input: ReindexMemoriesInput,
    ) -> async_graphql::Result<ReindexMemoriesPayload> {
        let scope = write_scope(ctx)?;
        let r = domain(ctx)
            .memory
            .reindex(scope, input.only_missing)
            .await
            .gql()?;
        Ok(ReindexMemoriesPayload {
            reindexed: i32::try_from(r.reindexed).unwrap_or(i32::MAX),
            failed: i32::try_from(r.failed).unwrap_or(i32::MAX),
        })
    }

    /// Create a knowledge-graph entity, or update the one with the same type
    /// and key.
    async fn upsert_entity(
        &self,
        ctx: &Context<'_>,
        input: UpsertEntityInput,
    ) -> async_graphql::Result<UpsertEntityPayload> {
        let scope = write_scope(ctx)?;
        let (entity, created) = domain(ctx)
            .graph
            .upsert_entity(
                scope,
                NewEntity {
                    entity_type: input.entity_type,
                    name: input.name,
                    key: input.key,
                    properties: input.properties.map(|j| j.0),
                },
            )
            .await
            .gql()?;
        Ok(UpsertEntityPayload {
            entity: KgEntity(entity),
            created,
        })
    }

    /// Create or update the relation of a type between two entities.
    async fn relate(
        &self,
        ctx: &Context<'_>,
        input: RelateInput,
    ) -> async_graphql::Result<RelatePayload> {
        let scope = write_scope(ctx)?;
        let (relation, created) = domain(ctx)
            .graph
            .relate(
                scope,
                NewRelation {
                    relation_type: input.relation_type,
                    from: entity_id(&input.from_id)?,
                    to: entity_id(&input.to_id)?,
                    weight: input.weight,
                    properties: input.properties.map(|j| j.0),
                    valid_from: input.valid_from,
                    valid_to: input.valid_to,
                    provenance: input.provenance,
                },
            )
            .await
            .gql()?;
        Ok(RelatePayload {
            relation: KgRelation(relation),
            created,
        })
    }
}

/// Resolve a `Node` of one of this area's types.
pub(crate) async fn node(
    ctx: &Context<'_>,
    ty: NodeType,
    uuid: Uuid,
) -> async_graphql::Result<super::types::Node> {
    use super::types::Node;
    let scope = read_scope(ctx)?;
    let domain = domain(ctx);
    match ty {
        NodeType::Memory => Ok(Node::Memory(Memory(
            domain.memory.get(scope, MemoryId::from(uuid)).await.gql()?,
        ))),
        NodeType::KgEntity => Ok(Node::KgEntity(KgEntity(
            domain.graph.get(scope, EntityId::from(uuid)).await.gql()?,
        ))),
        NodeType::KgRelation => Ok(Node::KgRelation(KgRelation(
            domain
                .graph
                .get_relation(scope, RelationId::from(uuid))
                .await
                .gql()?,
        ))),
        _ => Err(brainstem_domain::Error::not_found("node")).gql(),
    }
}
