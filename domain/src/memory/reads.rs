//! Reading memories: by id, in pages, their mentions, versions and events,
//! and hybrid search ([`Memories::search`]): a keyword leg and a vector leg
//! run side by side, fused (the vectors decide, words break near-ties) and
//! boosted by score, tier and the entities the query names (see [`rank`]).
//! A caller may ask for one leg only ([`SearchMode`]); boosts apply either
//! way.
//!
//! Reads never write: a tool that uses search results reports back with
//! [`Memories::record_outcome`]. Without a query vector (the embedder
//! failed) search returns keyword results only (`vector_used: false`).

use std::collections::HashMap;

use brainstem_entity::{
    EntityId, MemoryId, TenantOwned, TenantScope, memory, memory_event, memory_mention,
    memory_version,
};
use chrono::{DateTime, Utc};
use sea_orm::{ColumnTrait, QueryFilter, QueryOrder};
use uuid::Uuid;

use super::{
    CandidateFilter, MAX_SEARCH_LIMIT, Memories, Memory, MemoryEvent, MemoryVersion, Status, Tier,
    embedder, keyword, rank, record::category,
};
use crate::{
    Error, Result,
    kernel::page::{self, Page, PageRequest},
    memory::graph::Entity,
};

/// Filter of [`Memories::list`].
#[derive(Clone, Debug, Default)]
pub struct MemoryFilter {
    pub tiers: Vec<Tier>,
    pub categories: Vec<String>,
    pub subject: Option<EntityId>,
    /// Defaults to `ACTIVE`.
    pub status: Option<Status>,
}

/// Which legs of search run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SearchMode {
    /// Both, fused (keyword hits below the relevance floor left out).
    #[default]
    Hybrid,
    /// Vectors only (no hits when the query cannot be embedded).
    Vector,
    /// Words only, every match counted; the query is not embedded.
    Keyword,
}

impl SearchMode {
    fn label(self) -> &'static str {
        match self {
            Self::Hybrid => "hybrid",
            Self::Vector => "vector",
            Self::Keyword => "keyword",
        }
    }
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
    pub mode: SearchMode,
    /// Search the memories as they stood at this instant
    /// ([`CandidateFilter::as_of`]).
    pub as_of: Option<DateTime<Utc>>,
}

/// One search result with the reasons for its place.
#[derive(Clone, Debug)]
pub struct SearchHit {
    pub memory: Memory,
    pub keyword_rank: Option<usize>,
    pub vector_rank: Option<usize>,
    pub vector_similarity: Option<f32>,
    /// Normalised fused score, [0, 1].
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

impl Memories {
    pub async fn get(&self, scope: TenantScope, id: MemoryId) -> Result<Memory> {
        self.model(scope, id).await?.try_into()
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
        let began = std::time::Instant::now();
        let asked = query.mode;
        let results = self.ranked(scope, query).await?;
        let mode = if asked == SearchMode::Hybrid && !results.vector_used {
            "keyword"
        } else {
            asked.label()
        };
        crate::kernel::metrics::metrics()
            .memory_search_duration
            .get_or_create(&crate::kernel::metrics::ModeLabels { mode: mode.into() })
            .observe(began.elapsed().as_secs_f64());
        Ok(results)
    }

    /// [`Self::search`]'s work.
    async fn ranked(&self, scope: TenantScope, query: SearchQuery) -> Result<SearchResults> {
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
            as_of: query.as_of,
            embedding_model: None,
        };
        // Each leg fetches three times the limit, so fusion has room to
        // reorder (the "fairness multiplier").
        let k = (limit * 3).max(20);
        let mode = query.mode;
        let query_vector = match mode {
            SearchMode::Keyword => None,
            SearchMode::Hybrid | SearchMode::Vector => self.embed(text).await,
        };
        let keyword_leg = async {
            match mode {
                SearchMode::Vector => Ok(Vec::new()),
                SearchMode::Hybrid | SearchMode::Keyword => {
                    keyword::search(&self.db, scope, text, k, &filter, &self.common).await
                }
            }
        };
        let vector_filter = self.of_current_model(filter.clone());
        let vector_leg = async {
            match &query_vector {
                Some(v) => self
                    .index
                    .nearest(scope, v, k, &vector_filter, false)
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

        let mut ids: Vec<Uuid> = keyword_hits.iter().map(|id| id.uuid()).collect();
        ids.extend(vector_hits.iter().map(|(id, _)| id.uuid()));
        ids.sort();
        ids.dedup();
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
        // Coverage is weighed over every candidate either leg returned.
        let candidates: Vec<&memory::Model> = ids.iter().filter_map(|id| models.get(id)).collect();
        let texts: Vec<&str> = candidates.iter().map(|m| m.content.as_str()).collect();
        let coverage: HashMap<Uuid, f64> = candidates
            .iter()
            .map(|m| m.id)
            .zip(keyword::coverages(&keyword::terms(text), &texts))
            .collect();
        let keyword_hits: Vec<rank::KeywordHit> = keyword_hits
            .iter()
            .map(|id| (*id, coverage.get(&id.uuid()).copied().unwrap_or(0.0)))
            .collect();
        let fused = rank::fuse(
            (mode != SearchMode::Vector).then_some(keyword_hits.as_slice()),
            vector_used.then_some(vector_hits.as_slice()),
        );
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
}
