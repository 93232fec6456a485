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
//! - [`Memories::import`]`(scope, items)` → one [`Imported`] per item
//!   (`CREATED`, `MERGED`, `SKIPPED`, `FAILED`): up to
//!   [`MAX_IMPORT_BATCH`] memories at once, each judged as `remember` would,
//!   idempotent by an item key, written set-based (see [`import`]).
//! - [`Memories::start_import_job`]`(scope, created_by, file_name, file)`
//!   → [`ImportJob`]: a JSON Lines file stored as a durable job and
//!   imported in the background in batches through `import`, resumable
//!   after a crash; [`Memories::import_job`], [`Memories::import_jobs`],
//!   [`Memories::import_job_errors`] and [`Memories::watch_import_job`]
//!   read its progress (see [`import_job`], [`import_job_run`]).
//! - [`Memories::dossier`]`(scope, subject, now)` → [`Dossier`]: what is
//!   known about a knowledge-graph entity.
//! - [`Memories::get`], [`Memories::list`], [`Memories::update`],
//!   [`Memories::archive`], [`Memories::versions`], [`Memories::events`].
//! - [`Memories::reindex`]`(scope, only_missing)`, [`Memories::embedding_status`]
//!   and [`Memories::spawn_reembedding`]: vectors of the current embedder
//!   for every memory; after a change of embedder, stale memories are
//!   embedded again in the background and found by keywords meanwhile (see
//!   [`reembed`]).
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
//!
//! # Files
//!
//! - this file: the [`Memories`] service, its construction and its embedder.
//! - `record`: the record ([`Memory`], [`Tier`], [`Status`]), its settings,
//!   versions and event log, and the checks on a write's values.
//! - `writes`: remember (merge, supersede), update, archive, reindex.
//! - `import`: batches of memories, idempotent by key.
//! - `import_job`, `import_job_run`, `import_line`: a JSON Lines file as a
//!   durable import job, its runner, and the reading of one line;
//!   [`duplicate_scan`]: the job's near-duplicate lookups, in the process.
//! - `reads`: get, list, mentions, versions, events, and hybrid search.
//! - `outcomes`: [`Outcome`] and the score rule.
//! - `dossier`: what is known about a subject.
//! - [`keyword`], [`vector`], [`rank`]: the two search legs and their
//!   fusion; [`maintenance`]: tiers over time; [`graph`]: the knowledge
//!   graph.

pub mod graph;
pub mod keyword;
pub mod maintenance;
pub mod rank;
mod record;
mod sql;
pub mod vector;

mod dossier;
pub mod duplicate_scan;
pub mod forget;
mod import;
pub mod import_job;
pub mod import_job_run;
mod import_line;
mod outcomes;
mod reads;
mod reembed;
mod writes;

/// The embedders live with the models; memory uses them.
pub use crate::models::embedder;

use std::sync::Arc;

use brainstem_entity::{MemoryId, TenantOwned, TenantScope, memory};
use sea_orm::DatabaseConnection;

pub use dossier::Dossier;
pub use embedder::{Embedder, EmbedderConfig};
pub use import::{ImportItem, ImportStatus, Imported, MAX_IMPORT_BATCH, MAX_IMPORT_KEY_CHARS};
pub use import_job::{
    ImportFileLimits, ImportJob, ImportJobStatus, ImportLineError, MAX_IMPORT_ERRORS_PAGE,
};
pub use import_job_run::{IMPORT_JOB_LEASE, derived_key};
pub use maintenance::MaintenanceReport;
pub use outcomes::{Outcome, OutcomeRecorded};
pub use reads::{MemoryFilter, SearchHit, SearchMode, SearchQuery, SearchResults};
pub use record::{
    INITIAL_SCORE, MAX_CONTENT_CHARS, MAX_SEARCH_LIMIT, Memory, MemoryConfig, MemoryEvent,
    MemoryVersion, Status, Tier, round_score,
};
pub(crate) use record::{event, record_event};
pub use reembed::{EmbeddingStatus, PASS_SLICE, ReembedPass, Reindexed};
pub use sql::CandidateFilter;
pub use vector::VectorIndex;
pub use writes::{MemoryUpdate, NewMemory, Remembered};

use crate::{Error, Result, memory::graph::Graph};

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
    /// Import jobs' progress, announced within this process.
    import_progress: import_job::ImportProgress,
}

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
        let index = vector::for_connection(&db, vector_settings(&config));
        Self {
            db,
            graph,
            embedder,
            index,
            config: Arc::new(config),
            common: Arc::default(),
            import_progress: import_job::ImportProgress::default(),
        }
    }

    /// The same service reading from `replica` (a hot standby of `db`)
    /// with `graph` reading from it too: searches and reads only.
    pub fn reading_from(&self, replica: DatabaseConnection, graph: Graph) -> Self {
        Self {
            index: vector::for_connection(&replica, vector_settings(&self.config)),
            db: replica,
            graph,
            ..self.clone()
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

    /// `filter`, narrowed to vectors of the current embedder (see
    /// [`reembed`]).
    fn of_current_model(&self, filter: CandidateFilter) -> CandidateFilter {
        CandidateFilter {
            embedding_model: Some(self.embedder.model().to_owned()),
            ..filter
        }
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

    async fn model(&self, scope: TenantScope, id: MemoryId) -> Result<memory::Model> {
        memory::Entity::find_by_id_in(scope, id.uuid())
            .one(&self.db)
            .await?
            .ok_or_else(|| Error::not_found("memory"))
    }
}

fn vector_settings(config: &MemoryConfig) -> vector::VectorSettings {
    vector::VectorSettings {
        dimension: config.embedding_dimension,
        ef_search: config.hnsw_ef_search,
        tenant_index_rows: config.tenant_index_rows,
    }
}
