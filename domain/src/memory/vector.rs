//! The vector leg of memory search, behind one trait with a PostgreSQL and a
//! SQLite implementation (sea-query cannot describe a `vector` column on
//! SQLite, so vectors stay out of every SeaORM entity).
//!
//! **PostgreSQL** ([`PgVectorIndex`]): `memory_embeddings(memory_id,
//! tenant_id, model, embedding vector(D))`, keyed by `(tenant_id,
//! memory_id)` like every tenant table. D is configuration, so the table
//! is created by [`VectorIndex::prepare`] at startup, not by a migration. If
//! the table exists with another dimension, it is dropped and recreated
//! empty and every memory is marked "not embedded": keyword search keeps
//! working, and `reindexMemories` fills the vectors again per tenant.
//!
//! Every search is under a tenant filter, so the HNSW indexes are **per
//! tenant** (partial indexes, `WHERE tenant_id = '…'`; cosine, m = 16,
//! ef_construction = 64, over the vectors cast to `halfvec`: half the size
//! and a fifth faster to search than full precision, for the same recall;
//! the hits are then ordered by their exact distance), and only for tenants
//! that need one:
//!
//! - a tenant with fewer than `tenant_index_rows` vectors (default 10,000)
//!   is searched **exactly**: its rows come from the primary key's
//!   `(tenant_id, memory_id)` btree and are sorted by distance. That is a few
//!   milliseconds at that size, and recall is 1.
//! - a tenant with more gets its own HNSW index from
//!   [`VectorIndex::maintain`] (the memory maintenance job): built with
//!   `CREATE INDEX CONCURRENTLY`, so writes go on meanwhile, by one process
//!   at a time (a session advisory lock). Searches use it once it is valid,
//!   with `hnsw.ef_search` from configuration; until then the tenant is
//!   searched exactly. A tenant with a running import job is left until
//!   the job is completed (its runner then builds the index): one bulk
//!   build instead of every imported vector inserted into a growing graph.
//!
//! One index over every tenant's rows would serve no query well: an HNSW
//! scan returns its `ef_search` nearest rows *before* the tenant filter
//! applies, so a small tenant's search walks the whole graph to find its own
//! rows, and its recall depends on everyone else's data. A per-tenant index
//! is the graph of exactly the rows a search may return. Index scans still
//! run with `hnsw.iterative_scan = relaxed_order` (pgvector ≥ 0.8), so that
//! rows dropped by the other filters (archived, superseded, tiers) never
//! leave a search short of `limit` rows, and with
//! `plan_cache_mode = force_custom_plan`, so that the planner sees the
//! tenant id and can match the partial index.
//!
//! **SQLite** ([`SqliteVectorIndex`]): f32 little-endian blobs, searched
//! exactly in Rust — an embedded install holds few enough memories per
//! tenant for a linear scan.
//!
//! Imports use the batch forms: [`VectorIndex::upsert_many`] (multi-row
//! inserts) and [`VectorIndex::nearest_each`] (each query's nearest memory
//! for a whole batch: one `LATERAL` statement on PostgreSQL, one pass over
//! the tenant's candidate vectors on SQLite); an import job reads the
//! tenant's vectors once with [`VectorIndex::scan_rows`] and keeps them
//! ([`super::duplicate_scan`]).

use crate::kernel::{
    db::{BeginWrite, sqlx_error},
    job_lease,
    session_lock::SessionLock,
};
use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use brainstem_entity::{MemoryId, TenantScope};
use chrono::{DateTime, Utc};
use ndarray::{Array2, ArrayView2, Axis, Slice};
use sea_orm::{
    ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbBackend, TransactionTrait, sqlx,
};
use sqlx::Row as _;
use uuid::Uuid;

use super::{
    duplicate_scan::ScanRow,
    embedder::cosine,
    sql::{CandidateFilter, Sql, push_filter, tenant_condition},
};
use crate::{
    Error, Result,
    kernel::{
        db::Backend,
        row_security::{self, Bypass, as_platform},
    },
};

/// Largest dimension an HNSW index on `vector` accepts.
pub const MAX_DIMENSION: usize = 2000;

/// A memory and its cosine similarity to the query.
pub type Scored = (MemoryId, f32);

#[async_trait::async_trait]
pub trait VectorIndex: Send + Sync + 'static {
    /// Make the storage ready for vectors of this index's dimension.
    async fn prepare(&self) -> Result<()>;
    /// Store (or replace) a memory's vector, in the caller's transaction.
    async fn upsert(
        &self,
        txn: &DatabaseTransaction,
        scope: TenantScope,
        id: MemoryId,
        model: &str,
        v: &[f32],
    ) -> Result<()>;
    /// Forget a memory's vector, in the caller's transaction.
    async fn remove(
        &self,
        txn: &DatabaseTransaction,
        scope: TenantScope,
        id: MemoryId,
    ) -> Result<()>;
    /// Up to `k` memories passing `filter`, most similar first. `exact`
    /// bypasses any approximate index (benchmarks compare the two).
    async fn nearest(
        &self,
        scope: TenantScope,
        query: &[f32],
        k: usize,
        filter: &CandidateFilter,
        exact: bool,
    ) -> Result<Vec<Scored>>;
    /// Build the per-tenant indexes that are due; how many were built.
    /// Nothing to do where searches are always exact.
    async fn maintain(&self) -> Result<u64> {
        Ok(0)
    }
    /// Store (or replace) many memories' vectors of one model, in the
    /// caller's transaction: one statement per chunk of rows instead of one
    /// per memory (imports).
    async fn upsert_many(
        &self,
        txn: &DatabaseTransaction,
        scope: TenantScope,
        model: &str,
        rows: &[(MemoryId, &[f32])],
    ) -> Result<()> {
        for (id, v) in rows {
            self.upsert(txn, scope, *id, model, v).await?;
        }
        Ok(())
    }
    /// For each query, the most similar memory passing `filter` (what
    /// [`VectorIndex::nearest`] with `k = 1` answers) if its similarity is
    /// at least `floor` (`f32::NEG_INFINITY`: any), for a whole batch of
    /// queries at once. A caller after near-duplicates passes its
    /// threshold: a scan then spends one comparison on each lower score.
    async fn nearest_each(
        &self,
        scope: TenantScope,
        queries: &[&[f32]],
        filter: &CandidateFilter,
        floor: f32,
    ) -> Result<Vec<Option<Scored>>> {
        let mut found = Vec::with_capacity(queries.len());
        for q in queries {
            found.push(
                self.nearest(scope, q, 1, filter, false)
                    .await?
                    .into_iter()
                    .next()
                    .filter(|(_, similarity)| *similarity >= floor),
            );
        }
        Ok(found)
    }
    /// The scope's memories changed since `since` (every one when `None`),
    /// as a near-duplicate scan reads them: each with its vector when it
    /// has one of `model` ([`super::duplicate_scan`]).
    async fn scan_rows(
        &self,
        scope: TenantScope,
        model: &str,
        since: Option<DateTime<Utc>>,
    ) -> Result<Vec<ScanRow>>;
}

/// pgvector's candidate-list size for [`VectorIndex::nearest_each`]
/// through a tenant's HNSW index: each query wants its one nearest, and only
/// if it is a near-duplicate.
const NEAREST_EACH_EF_SEARCH: usize = 40;

/// Rows per multi-row vector insert (well under both backends' limits on
/// bound parameters).
const UPSERT_CHUNK: usize = 200;

/// How the PostgreSQL vector leg searches and indexes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VectorSettings {
    /// Length of every vector.
    pub dimension: usize,
    /// pgvector's candidate-list size for HNSW scans (raised to `k` when
    /// smaller): higher means better recall and slower searches.
    pub ef_search: usize,
    /// A tenant with at least this many vectors gets its own HNSW index;
    /// smaller tenants are searched exactly.
    pub tenant_index_rows: usize,
}

/// The index for the connection's backend.
pub fn for_connection(db: &DatabaseConnection, settings: VectorSettings) -> Arc<dyn VectorIndex> {
    match Backend::of(db) {
        Backend::Postgres => Arc::new(PgVectorIndex {
            db: db.clone(),
            settings,
            routes: Arc::default(),
        }),
        Backend::Sqlite => Arc::new(SqliteVectorIndex {
            db: db.clone(),
            dimension: settings.dimension,
        }),
    }
}

/// `[x,y,…]`, pgvector's text form.
pub fn pg_vector_literal(v: &[f32]) -> String {
    let mut s = String::with_capacity(v.len() * 10 + 2);
    s.push('[');
    for (i, x) in v.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&x.to_string());
    }
    s.push(']');
    s
}

/// The name of a tenant's own HNSW index (63 bytes at most, as PostgreSQL
/// wants).
pub fn tenant_index_name(tenant: Uuid) -> String {
    format!("ix_memory_embeddings_hnsw_{}", tenant.simple())
}

/// How long a search trusts what it learnt about a tenant's own index.
const ROUTE_TTL: Duration = Duration::from_secs(30);

/// Tenants remembered at most (the map is cleared when full).
const ROUTE_LIMIT: usize = 10_000;

/// `maintenance_work_mem` for a tenant index's build: an HNSW build is
/// several times faster while its graph fits in it (a 100,000-vector
/// 256-d graph takes about 100 MB; PostgreSQL's default is 64 MB).
const BUILD_MEMORY: &str = "256MB";

/// The lock held while building tenant indexes.
const BUILD_LOCK: &str = "brainstem.memory_vector_indexes";

/// Per tenant: does it have a valid HNSW index of its own, and since when
/// do we know.
type Routes = Mutex<HashMap<Uuid, (bool, Instant)>>;

pub struct PgVectorIndex {
    db: DatabaseConnection,
    settings: VectorSettings,
    routes: Arc<Routes>,
}

impl PgVectorIndex {
    /// Whether the tenant's own index exists and is valid (cached for
    /// [`ROUTE_TTL`]).
    async fn has_own_index(&self, tenant: Uuid) -> Result<bool> {
        if let Ok(routes) = self.routes.lock()
            && let Some((indexed, at)) = routes.get(&tenant)
            && at.elapsed() < ROUTE_TTL
        {
            return Ok(*indexed);
        }
        let mut sql = Sql::new(DbBackend::Postgres);
        sql.push(
            "SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid \
             WHERE c.relname = ",
        )
        .bind(tenant_index_name(tenant))
        .push(" AND i.indisvalid AND i.indisready) AS indexed");
        let indexed = self
            .db
            .query_one_raw(sql.statement())
            .await?
            .map(|row| row.try_get::<bool>("", "indexed"))
            .transpose()?
            .unwrap_or(false);
        if let Ok(mut routes) = self.routes.lock() {
            if routes.len() >= ROUTE_LIMIT {
                routes.clear();
            }
            routes.insert(tenant, (indexed, Instant::now()));
        }
        Ok(indexed)
    }

    /// Build the missing tenant indexes on `conn`, which holds the build
    /// lock.
    async fn build_missing(&self, conn: &mut sqlx::PgConnection) -> Result<u64> {
        let threshold = self.settings.tenant_index_rows.max(1) as i64;
        // Tenants big enough, and whether each has an index already (a
        // failed concurrent build leaves an invalid one behind).
        let rows = sqlx::query(
            "SELECT t.tenant_id, i.indisvalid FROM \
               (SELECT tenant_id FROM memory_embeddings GROUP BY tenant_id HAVING count(*) >= $1) t \
             LEFT JOIN pg_class c ON c.relname = 'ix_memory_embeddings_hnsw_' || replace(t.tenant_id::text, '-', '') \
             LEFT JOIN pg_index i ON i.indexrelid = c.oid \
             WHERE NOT EXISTS (SELECT 1 FROM memory_import_jobs j WHERE j.tenant_id = t.tenant_id \
               AND j.status = $2 AND j.lease_expires_at > now()) \
             ORDER BY t.tenant_id",
        )
        .bind(threshold)
        .bind(job_lease::RUNNING)
        .fetch_all(&mut *conn)
        .await
        .map_err(sqlx_error)?;
        let mut built = 0;
        for row in rows {
            let tenant: Uuid = row.try_get("tenant_id").map_err(sqlx_error)?;
            let valid: Option<bool> = row.try_get("indisvalid").map_err(sqlx_error)?;
            let name = tenant_index_name(tenant);
            match valid {
                Some(true) => continue,
                Some(false) => {
                    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                        "DROP INDEX CONCURRENTLY IF EXISTS {name}"
                    )))
                    .execute(&mut *conn)
                    .await
                    .map_err(sqlx_error)?;
                }
                None => {}
            }
            let started = Instant::now();
            // The tenant id is a `Uuid`, formatted by us: nothing to escape.
            // The session's own memory for the build (see BUILD_MEMORY),
            // set back after it whatever happens.
            // (Two statements: a concurrent build cannot share a query
            // string, which PostgreSQL runs as one transaction.)
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "SET maintenance_work_mem = '{BUILD_MEMORY}'"
            )))
            .execute(&mut *conn)
            .await
            .map_err(sqlx_error)?;
            let build = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON memory_embeddings \
                 USING hnsw ((embedding::halfvec({dimension})) halfvec_cosine_ops) \
                 WITH (m = 16, ef_construction = 64) WHERE tenant_id = '{tenant}'",
                dimension = self.settings.dimension
            )))
            .execute(&mut *conn)
            .await;
            sqlx::raw_sql("RESET maintenance_work_mem")
                .execute(&mut *conn)
                .await
                .map_err(sqlx_error)?;
            build.map_err(sqlx_error)?;
            tracing::info!(%tenant, seconds = started.elapsed().as_secs_f64(), "built a tenant's vector index");
            if let Ok(mut routes) = self.routes.lock() {
                routes.remove(&tenant);
            }
            built += 1;
        }
        Ok(built)
    }
}

/// The vector table is made here, not by a migration (its column type
/// follows the configured dimension), so its row-level security policy is
/// made here too, once, like the migration's for the other tenant tables.
async fn protect_with_row_security(txn: &DatabaseTransaction) -> Result<()> {
    let exists = txn
        .query_one_raw(sea_orm::Statement::from_string(
            DbBackend::Postgres,
            "SELECT 1 AS one FROM pg_policies \
             WHERE tablename = 'memory_embeddings' AND policyname = 'tenant_rows'",
        ))
        .await?
        .is_some();
    if !exists {
        txn.execute_unprepared(&row_security::policy_sql("memory_embeddings"))
            .await?;
    }
    Ok(())
}

#[async_trait::async_trait]
impl VectorIndex for PgVectorIndex {
    async fn prepare(&self) -> Result<()> {
        let dimension = self.settings.dimension;
        if dimension == 0 || dimension > MAX_DIMENSION {
            return Err(Error::validation(format!(
                "embedding_dimension must be 1..={MAX_DIMENSION}"
            )));
        }
        // A schema change of the whole store (under the maintenance bypass:
        // a changed dimension clears every tenant's embedding model).
        let txn = as_platform(Bypass::Maintenance, self.db.begin_write()).await?;
        // Replicas starting together must not race to create the table.
        txn.execute_unprepared(
            "SELECT pg_advisory_xact_lock(hashtext('brainstem.memory_embeddings'))",
        )
        .await?;
        let current = txn
            .query_one_raw(sea_orm::Statement::from_string(
                DbBackend::Postgres,
                "SELECT format_type(a.atttypid, a.atttypmod) AS ty FROM pg_attribute a \
                 WHERE a.attrelid = to_regclass('memory_embeddings') AND a.attname = 'embedding'",
            ))
            .await?
            .map(|row| row.try_get::<String>("", "ty"))
            .transpose()?;
        let wanted = format!("vector({dimension})");
        if current.as_deref() == Some(wanted.as_str()) {
            // Earlier versions kept one HNSW index over every tenant.
            txn.execute_unprepared("DROP INDEX IF EXISTS ix_memory_embeddings_hnsw")
                .await?;
            protect_with_row_security(&txn).await?;
            txn.commit().await?;
            return Ok(());
        }
        if let Some(old) = &current {
            tracing::warn!(
                old = %old,
                new = %wanted,
                "embedding_dimension changed: dropping stored vectors; run reindexMemories in each tenant"
            );
            // Its tenant indexes go with it.
            txn.execute_unprepared("DROP TABLE memory_embeddings")
                .await?;
            // unscoped: a schema change of the whole store, not tenant data access.
            txn.execute_unprepared("UPDATE memories SET embedding_model = NULL")
                .await?;
        }
        txn.execute_unprepared(&format!(
            "CREATE TABLE memory_embeddings (\
               memory_id uuid NOT NULL, \
               tenant_id uuid NOT NULL, \
               model text NOT NULL, \
               embedding {wanted} NOT NULL, \
               CONSTRAINT pk_memory_embeddings PRIMARY KEY (tenant_id, memory_id), \
               CONSTRAINT fk_memory_embeddings_memory FOREIGN KEY (tenant_id, memory_id) \
                 REFERENCES memories (tenant_id, id) ON DELETE CASCADE)"
        ))
        .await?;
        protect_with_row_security(&txn).await?;
        txn.commit().await?;
        if let Ok(mut routes) = self.routes.lock() {
            routes.clear();
        }
        Ok(())
    }

    async fn upsert(
        &self,
        txn: &DatabaseTransaction,
        scope: TenantScope,
        id: MemoryId,
        model: &str,
        v: &[f32],
    ) -> Result<()> {
        check_dimension(v, self.settings.dimension)?;
        let mut sql = Sql::new(DbBackend::Postgres);
        sql.push("INSERT INTO memory_embeddings (memory_id, tenant_id, model, embedding) VALUES (")
            .bind(id.uuid())
            .push(", ")
            .bind(scope.tenant_id().uuid())
            .push(", ")
            .bind(model.to_owned())
            .push(", ")
            .bind(pg_vector_literal(v))
            .push(
                "::vector) ON CONFLICT (tenant_id, memory_id) DO UPDATE SET model = EXCLUDED.model, \
                   embedding = EXCLUDED.embedding",
            );
        txn.execute_raw(sql.statement()).await?;
        Ok(())
    }

    async fn remove(
        &self,
        txn: &DatabaseTransaction,
        scope: TenantScope,
        id: MemoryId,
    ) -> Result<()> {
        remove(txn, DbBackend::Postgres, scope, id).await
    }

    async fn nearest(
        &self,
        scope: TenantScope,
        query: &[f32],
        k: usize,
        filter: &CandidateFilter,
        exact: bool,
    ) -> Result<Vec<Scored>> {
        check_dimension(query, self.settings.dimension)?;
        if k == 0 {
            return Ok(Vec::new());
        }
        let tenant = scope.tenant_id().uuid();
        let indexed = !exact && self.has_own_index(tenant).await?;
        let literal = pg_vector_literal(query);
        let mut sql = Sql::new(DbBackend::Postgres);
        // The candidates, each with its distance. Only the id and the
        // distance are carried to the sort, never the vector.
        sql.push(if indexed {
            "WITH c AS MATERIALIZED (SELECT e.memory_id, e.embedding <=> "
        } else {
            "SELECT memory_id, distance FROM (SELECT e.memory_id, e.embedding <=> "
        })
        .bind(literal.clone())
        .push("::vector AS distance FROM memory_embeddings e JOIN memories m ON m.id = e.memory_id WHERE e.tenant_id = ")
        .bind(tenant)
        .push(" AND ");
        tenant_condition(&mut sql, scope);
        push_filter(&mut sql, scope, filter);
        if indexed {
            // Ordered by the tenant's HNSW index (half precision), then by
            // the exact distance.
            let half = format!("::halfvec({})", self.settings.dimension);
            sql.push(&format!(" ORDER BY e.embedding{half} <=> "))
                .bind(literal)
                .push(&format!(
                    "::vector{half} LIMIT {k}) SELECT memory_id, distance FROM c ORDER BY distance, memory_id"
                ));
        } else {
            // `OFFSET 0` keeps the subquery apart, so no index can order
            // it: every candidate is scored.
            sql.push(&format!(
                " OFFSET 0) s ORDER BY distance, memory_id LIMIT {k}"
            ));
        }
        // Custom plans: tenants differ in size by orders of magnitude, and
        // a plan cached for one (say, a sequential scan for a big tenant's
        // exact search) can be ruinous for another; the partial index can
        // only be matched when the planner sees the tenant id.
        let settings = if indexed {
            format!(
                "SET LOCAL plan_cache_mode = force_custom_plan; \
                 SET LOCAL hnsw.iterative_scan = relaxed_order; \
                 SET LOCAL hnsw.ef_search = {}",
                k.max(self.settings.ef_search).clamp(1, 1000)
            )
        } else {
            // Parallel workers double the cost of a scan this small (they
            // favour a nested loop over the hash join).
            "SET LOCAL plan_cache_mode = force_custom_plan; \
             SET LOCAL max_parallel_workers_per_gather = 0"
                .to_owned()
        };
        let txn = self.db.begin().await?;
        txn.execute_unprepared(&settings).await?;
        let rows = txn.query_all_raw(sql.statement()).await?;
        txn.commit().await?;
        rows.into_iter()
            .map(|row| {
                let id: Uuid = row.try_get("", "memory_id")?;
                let distance: f64 = row.try_get("", "distance")?;
                Ok((MemoryId::from(id), (1.0 - distance) as f32))
            })
            .collect()
    }

    async fn upsert_many(
        &self,
        txn: &DatabaseTransaction,
        scope: TenantScope,
        model: &str,
        rows: &[(MemoryId, &[f32])],
    ) -> Result<()> {
        for chunk in rows.chunks(UPSERT_CHUNK) {
            let mut sql = Sql::new(DbBackend::Postgres);
            sql.push(
                "INSERT INTO memory_embeddings (memory_id, tenant_id, model, embedding) VALUES ",
            );
            for (i, (id, v)) in chunk.iter().enumerate() {
                check_dimension(v, self.settings.dimension)?;
                if i > 0 {
                    sql.push(", ");
                }
                sql.push("(")
                    .bind(id.uuid())
                    .push(", ")
                    .bind(scope.tenant_id().uuid())
                    .push(", ")
                    .bind(model.to_owned())
                    .push(", ")
                    .bind(pg_vector_literal(v))
                    .push("::vector)");
            }
            sql.push(
                " ON CONFLICT (tenant_id, memory_id) DO UPDATE SET model = EXCLUDED.model, \
                   embedding = EXCLUDED.embedding",
            );
            txn.execute_raw(sql.statement()).await?;
        }
        Ok(())
    }

    /// One statement for the whole batch: each query's nearest memory in a
    /// `LATERAL` subquery, through the tenant's HNSW index when it has one
    /// (its few best by half precision, then the exact distance), else
    /// exactly against the candidates read once.
    async fn nearest_each(
        &self,
        scope: TenantScope,
        queries: &[&[f32]],
        filter: &CandidateFilter,
        floor: f32,
    ) -> Result<Vec<Option<Scored>>> {
        let mut found = vec![None; queries.len()];
        if queries.is_empty() {
            return Ok(found);
        }
        let tenant = scope.tenant_id().uuid();
        let indexed = self.has_own_index(tenant).await?;
        let half = format!("::halfvec({})", self.settings.dimension);
        let mut sql = Sql::new(DbBackend::Postgres);
        if !indexed {
            // Without an index every query scores every candidate: the
            // candidates are read (and filtered) once, not once per query.
            sql.push("WITH c AS MATERIALIZED (SELECT e.memory_id, e.embedding \
                      FROM memory_embeddings e JOIN memories m ON m.id = e.memory_id WHERE e.tenant_id = ")
                .bind(tenant)
                .push(" AND ");
            tenant_condition(&mut sql, scope);
            push_filter(&mut sql, scope, filter);
            sql.push(") ");
        }
        sql.push("SELECT q.i, n.memory_id, n.distance FROM (VALUES ");
        for (i, v) in queries.iter().enumerate() {
            check_dimension(v, self.settings.dimension)?;
            if i > 0 {
                sql.push(", ");
            }
            sql.push(&format!("({i}, "))
                .bind(pg_vector_literal(v))
                .push("::vector)");
        }
        if indexed {
            sql.push(") AS q(i, v) CROSS JOIN LATERAL (SELECT e.memory_id, e.embedding <=> q.v AS distance \
                      FROM memory_embeddings e JOIN memories m ON m.id = e.memory_id WHERE e.tenant_id = ")
                .bind(tenant)
                .push(" AND ");
            tenant_condition(&mut sql, scope);
            push_filter(&mut sql, scope, filter);
            sql.push(&format!(
                " ORDER BY e.embedding{half} <=> q.v{half} LIMIT 4) n"
            ));
        } else {
            sql.push(") AS q(i, v) CROSS JOIN LATERAL (SELECT c.memory_id, c.embedding <=> q.v AS distance \
                      FROM c ORDER BY distance, c.memory_id LIMIT 1) n");
        }
        let settings = if indexed {
            // A near-duplicate is almost the same vector: a short candidate
            // list finds it (searches use `ef_search`, for recall deep in
            // the list).
            format!(
                "SET LOCAL plan_cache_mode = force_custom_plan; \
                 SET LOCAL hnsw.iterative_scan = relaxed_order; \
                 SET LOCAL hnsw.ef_search = {NEAREST_EACH_EF_SEARCH}"
            )
        } else {
            "SET LOCAL plan_cache_mode = force_custom_plan; \
             SET LOCAL max_parallel_workers_per_gather = 0"
                .to_owned()
        };
        let txn = self.db.begin().await?;
        txn.execute_unprepared(&settings).await?;
        let rows = txn.query_all_raw(sql.statement()).await?;
        txn.commit().await?;
        for row in rows {
            let i: i32 = row.try_get("", "i")?;
            let id: Uuid = row.try_get("", "memory_id")?;
            let distance: f64 = row.try_get("", "distance")?;
            let similarity = (1.0 - distance) as f32;
            if let Some(slot) = usize::try_from(i).ok().and_then(|i| found.get_mut(i))
                && similarity >= floor
                && slot.is_none_or(|(_, best): Scored| similarity > best)
            {
                *slot = Some((MemoryId::from(id), similarity));
            }
        }
        Ok(found)
    }

    async fn scan_rows(
        &self,
        scope: TenantScope,
        model: &str,
        since: Option<DateTime<Utc>>,
    ) -> Result<Vec<ScanRow>> {
        let dimension = self.settings.dimension;
        scan_rows(&self.db, DbBackend::Postgres, scope, model, since, |row| {
            let text: Option<String> = row.try_get("", "v")?;
            text.map(|t| parse_pg_vector(&t, dimension)).transpose()
        })
        .await
    }

    async fn maintain(&self) -> Result<u64> {
        let Some(mut lock) = SessionLock::try_take(&self.db, BUILD_LOCK).await? else {
            return Ok(0);
        };
        let Some(conn) = lock.connection() else {
            return Ok(0); // SQLite, where this index never runs
        };
        let built = self.build_missing(conn).await;
        lock.release().await?;
        built
    }
}

pub struct SqliteVectorIndex {
    db: DatabaseConnection,
    dimension: usize,
}

#[async_trait::async_trait]
impl VectorIndex for SqliteVectorIndex {
    async fn prepare(&self) -> Result<()> {
        if self.dimension == 0 || self.dimension > MAX_DIMENSION {
            return Err(Error::validation(format!(
                "embedding_dimension must be 1..={MAX_DIMENSION}"
            )));
        }
        // The blob table comes from a migration; vectors of another
        // dimension are skipped by searches until reindexed.
        Ok(())
    }

    async fn upsert(
        &self,
        txn: &DatabaseTransaction,
        scope: TenantScope,
        id: MemoryId,
        model: &str,
        v: &[f32],
    ) -> Result<()> {
        check_dimension(v, self.dimension)?;
        let blob: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        let mut sql = Sql::new(DbBackend::Sqlite);
        sql.push("INSERT INTO memory_embeddings (memory_id, tenant_id, model, dimension, vector) VALUES (")
            .bind(id.uuid())
            .push(", ")
            .bind(scope.tenant_id().uuid())
            .push(", ")
            .bind(model.to_owned())
            .push(", ")
            .bind(self.dimension as i64)
            .push(", ")
            .bind(blob)
            .push(") ON CONFLICT (memory_id) DO UPDATE SET model = excluded.model, \
                   dimension = excluded.dimension, vector = excluded.vector");
        txn.execute_raw(sql.statement()).await?;
        Ok(())
    }

    async fn remove(
        &self,
        txn: &DatabaseTransaction,
        scope: TenantScope,
        id: MemoryId,
    ) -> Result<()> {
        remove(txn, DbBackend::Sqlite, scope, id).await
    }

    async fn upsert_many(
        &self,
        txn: &DatabaseTransaction,
        scope: TenantScope,
        model: &str,
        rows: &[(MemoryId, &[f32])],
    ) -> Result<()> {
        for chunk in rows.chunks(UPSERT_CHUNK) {
            let mut sql = Sql::new(DbBackend::Sqlite);
            sql.push("INSERT INTO memory_embeddings (memory_id, tenant_id, model, dimension, vector) VALUES ");
            for (i, (id, v)) in chunk.iter().enumerate() {
                check_dimension(v, self.dimension)?;
                if i > 0 {
                    sql.push(", ");
                }
                let blob: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                sql.push("(")
                    .bind(id.uuid())
                    .push(", ")
                    .bind(scope.tenant_id().uuid())
                    .push(", ")
                    .bind(model.to_owned())
                    .push(", ")
                    .bind(self.dimension as i64)
                    .push(", ")
                    .bind(blob)
                    .push(")");
            }
            sql.push(
                " ON CONFLICT (memory_id) DO UPDATE SET model = excluded.model, \
                   dimension = excluded.dimension, vector = excluded.vector",
            );
            txn.execute_raw(sql.statement()).await?;
        }
        Ok(())
    }

    /// One pass over the tenant's candidate vectors for the whole batch,
    /// scored on a blocking thread: a batch of a thousand against a
    /// tenant's thousands of vectors is seconds of arithmetic that must
    /// not hold an async worker (other requests run there).
    async fn nearest_each(
        &self,
        scope: TenantScope,
        queries: &[&[f32]],
        filter: &CandidateFilter,
        floor: f32,
    ) -> Result<Vec<Option<Scored>>> {
        if queries.is_empty() {
            return Ok(Vec::new());
        }
        for q in queries {
            check_dimension(q, self.dimension)?;
        }
        let mut sql = Sql::new(DbBackend::Sqlite);
        sql.push("SELECT e.memory_id, e.vector FROM memory_embeddings e JOIN memories m ON m.id = e.memory_id WHERE e.tenant_id = ")
            .bind(scope.tenant_id().uuid())
            .push(" AND e.dimension = ")
            .bind(self.dimension as i64)
            .push(" AND ");
        tenant_condition(&mut sql, scope);
        push_filter(&mut sql, scope, filter);
        let rows = self.db.query_all_raw(sql.statement()).await?;
        let candidates = rows
            .into_iter()
            .map(|row| {
                let id: Uuid = row.try_get("", "memory_id")?;
                let blob: Vec<u8> = row.try_get("", "vector")?;
                Ok((MemoryId::from(id), blob))
            })
            .collect::<Result<Vec<_>>>()?;
        let queries: Vec<Vec<f32>> = queries.iter().map(|q| q.to_vec()).collect();
        let dimension = self.dimension;
        tokio::task::spawn_blocking(move || best_of_each(&queries, &candidates, dimension, floor))
            .await
            .map_err(|e| Error::internal(format!("the nearest-memory scan stopped: {e}")))
    }

    async fn scan_rows(
        &self,
        scope: TenantScope,
        model: &str,
        since: Option<DateTime<Utc>>,
    ) -> Result<Vec<ScanRow>> {
        let dimension = self.dimension;
        scan_rows(&self.db, DbBackend::Sqlite, scope, model, since, |row| {
            let blob: Option<Vec<u8>> = row.try_get("", "v")?;
            Ok(blob.filter(|b| b.len() == dimension * 4).map(|b| {
                b.chunks_exact(4)
                    .map(|x| f32::from_le_bytes([x[0], x[1], x[2], x[3]]))
                    .collect()
            }))
        })
        .await
    }

    async fn nearest(
        &self,
        scope: TenantScope,
        query: &[f32],
        k: usize,
        filter: &CandidateFilter,
        _exact: bool,
    ) -> Result<Vec<Scored>> {
        check_dimension(query, self.dimension)?;
        let mut sql = Sql::new(DbBackend::Sqlite);
        sql.push("SELECT e.memory_id, e.vector FROM memory_embeddings e JOIN memories m ON m.id = e.memory_id WHERE e.tenant_id = ")
            .bind(scope.tenant_id().uuid())
            .push(" AND e.dimension = ")
            .bind(self.dimension as i64)
            .push(" AND ");
        tenant_condition(&mut sql, scope);
        push_filter(&mut sql, scope, filter);
        let rows = self.db.query_all_raw(sql.statement()).await?;
        let mut scored = Vec::with_capacity(rows.len());
        for row in rows {
            let id: Uuid = row.try_get("", "memory_id")?;
            let blob: Vec<u8> = row.try_get("", "vector")?;
            let v: Vec<f32> = blob
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            scored.push((MemoryId::from(id), cosine(query, &v)));
        }
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        scored.truncate(k);
        Ok(scored)
    }
}

/// [`VectorIndex::scan_rows`] on either backend; `vector` reads a row's
/// `v` (the vector column, or NULL when the memory has no vector of the
/// model).
async fn scan_rows(
    db: &DatabaseConnection,
    backend: DbBackend,
    scope: TenantScope,
    model: &str,
    since: Option<DateTime<Utc>>,
    vector: impl Fn(&sea_orm::QueryResult) -> Result<Option<Vec<f32>>>,
) -> Result<Vec<ScanRow>> {
    let column = match backend {
        DbBackend::Postgres => "e.embedding::text",
        _ => "e.vector",
    };
    let mut sql = Sql::new(backend);
    sql.push("SELECT m.id, m.tier, m.subject_id, m.status, m.valid_to, m.expires_at, CASE WHEN m.embedding_model = ")
        .bind(model.to_owned())
        .push(&format!(
            " THEN {column} END AS v FROM memories m LEFT JOIN memory_embeddings e \
             ON e.tenant_id = m.tenant_id AND e.memory_id = m.id WHERE "
        ));
    tenant_condition(&mut sql, scope);
    if let Some(since) = since {
        sql.push(" AND m.updated_at >= ").bind(since);
    }
    let rows = db.query_all_raw(sql.statement()).await?;
    rows.iter()
        .map(|row| {
            Ok(ScanRow {
                id: MemoryId::from(row.try_get::<Uuid>("", "id")?),
                tier: row.try_get("", "tier")?,
                subject: row.try_get("", "subject_id")?,
                status: row.try_get("", "status")?,
                valid_to: row.try_get("", "valid_to")?,
                expires_at: row.try_get("", "expires_at")?,
                vector: vector(row)?,
            })
        })
        .collect()
}

/// A vector in pgvector's text form, `[x,y,…]`.
fn parse_pg_vector(text: &str, dimension: usize) -> Result<Vec<f32>> {
    let inner = text
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .ok_or_else(|| Error::internal("a stored vector is not in pgvector's text form"))?;
    let mut v = Vec::with_capacity(dimension);
    for x in inner.split(',') {
        v.push(
            x.parse::<f32>()
                .map_err(|e| Error::internal(format!("a stored vector: {e}")))?,
        );
    }
    Ok(v)
}

/// Candidates scored per matrix product in [`best_in`] (bounds its
/// memory: a thousand queries by this many scores is 4 MB, which stays in
/// a core's cache while the best of each row is picked).
const SCAN_CHUNK: usize = 1024;

/// Each query's most similar candidate with a similarity of at least
/// `floor` (cosine; ties to the smaller id, as in `nearest`), the
/// candidates' vectors as stored little-endian blobs. A zero vector (query
/// or candidate) is never a match.
fn best_of_each(
    queries: &[Vec<f32>],
    candidates: &[(MemoryId, Vec<u8>)],
    dimension: usize,
    floor: f32,
) -> Vec<Option<Scored>> {
    let mut found: Vec<Option<Scored>> = vec![None; queries.len()];
    let queries = unit_rows(
        queries.iter().map(|q| q.iter().copied()),
        queries.len(),
        dimension,
    );
    for chunk in candidates.chunks(SCAN_CHUNK) {
        let vectors = unit_rows(
            chunk.iter().map(|(_, blob)| {
                blob.chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            }),
            chunk.len(),
            dimension,
        );
        let ids: Vec<MemoryId> = chunk.iter().map(|(id, _)| *id).collect();
        let best = best_in(&queries, &ids, vectors.rows.view(), &vectors.zero, floor);
        for (slot, hit) in found.iter_mut().zip(best) {
            *slot = better(*slot, hit);
        }
    }
    found
}

/// Each query's most similar row of `rows` (unit vectors; `ids` name
/// them) with a similarity of at least `floor`, leaving out the rows `skip`
/// marks: one matrix product per chunk of [`SCAN_CHUNK`] rows. Ties go to
/// the smaller id; a zero query matches nothing. A caller that only wants
/// near-duplicates passes its threshold as `floor`: the scores under it,
/// nearly all of them, then cost one comparison each.
pub(super) fn best_in(
    queries: &UnitRows,
    ids: &[MemoryId],
    rows: ArrayView2<'_, f32>,
    skip: &[bool],
    floor: f32,
) -> Vec<Option<Scored>> {
    let mut found: Vec<Option<Scored>> = vec![None; queries.zero.len()];
    let mut from = 0;
    while from < ids.len() {
        let to = (from + SCAN_CHUNK).min(ids.len());
        let scores = queries
            .rows
            .dot(&rows.slice_axis(Axis(0), Slice::from(from..to)).t());
        let (ids, skip) = (&ids[from..to], &skip[from..to]);
        for ((row, q_zero), slot) in scores.outer_iter().zip(&queries.zero).zip(found.iter_mut()) {
            if *q_zero {
                continue;
            }
            for (at, similarity) in row.iter().enumerate() {
                if *similarity >= floor && !skip[at] {
                    *slot = better(*slot, Some((ids[at], *similarity)));
                }
            }
        }
        from = to;
    }
    found
}

/// The better of two hits: the more similar, else the smaller id.
pub(super) fn better(a: Option<Scored>, b: Option<Scored>) -> Option<Scored> {
    match (a, b) {
        (Some((a_id, a_sim)), Some((b_id, b_sim))) => {
            if b_sim > a_sim || (b_sim == a_sim && b_id < a_id) {
                b
            } else {
                a
            }
        }
        (a, None) => a,
        (None, b) => b,
    }
}

/// Vectors as the rows of a matrix, each scaled to length 1, and which
/// were zero (left zero).
pub(super) struct UnitRows {
    pub rows: Array2<f32>,
    pub zero: Vec<bool>,
}

pub(super) fn unit_rows<I>(
    vectors: impl Iterator<Item = I>,
    count: usize,
    dimension: usize,
) -> UnitRows
where
    I: Iterator<Item = f32>,
{
    let mut rows = Array2::<f32>::zeros((count, dimension));
    let mut zero = Vec::with_capacity(count);
    for (mut row, v) in rows.outer_iter_mut().zip(vectors) {
        for (x, value) in row.iter_mut().zip(v) {
            *x = value;
        }
        let n = row.iter().map(|x| x * x).sum::<f32>().sqrt();
        zero.push(n == 0.0);
        if n > 0.0 {
            row.mapv_inplace(|x| x / n);
        }
    }
    UnitRows { rows, zero }
}

fn check_dimension(v: &[f32], dimension: usize) -> Result<()> {
    if v.len() == dimension {
        Ok(())
    } else {
        Err(Error::internal(format!(
            "vector has {} dimensions, the index {dimension}",
            v.len()
        )))
    }
}

async fn remove(
    txn: &DatabaseTransaction,
    backend: DbBackend,
    scope: TenantScope,
    id: MemoryId,
) -> Result<()> {
    let mut sql = Sql::new(backend);
    sql.push("DELETE FROM memory_embeddings WHERE tenant_id = ")
        .bind(scope.tenant_id().uuid())
        .push(" AND memory_id = ")
        .bind(id.uuid());
    txn.execute_raw(sql.statement()).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn id(n: u128) -> MemoryId {
        MemoryId::from(Uuid::from_u128(n))
    }

    #[test]
    fn each_query_gets_its_most_similar_candidate_across_chunks() {
        // More candidates than one chunk; the best for the first query is
        // in the second chunk, and two equal best for the second query tie
        // to the smaller id whatever their order.
        let mut candidates: Vec<(MemoryId, Vec<u8>)> = (0..SCAN_CHUNK as u128 + 10)
            .map(|n| (id(1_000 + n), blob(&[0.0, 1.0, 1.0])))
            .collect();
        candidates.push((id(7), blob(&[2.0, 0.1, 0.0])));
        candidates.push((id(9), blob(&[0.0, 0.0, 3.0])));
        candidates.push((id(8), blob(&[0.0, 0.0, 0.5])));
        candidates.push((id(1), blob(&[0.0, 0.0, 0.0])));
        let queries = vec![vec![1.0, 0.0, 0.0], vec![0.0, 0.0, 1.0], vec![0.0; 3]];
        let found = best_of_each(&queries, &candidates, 3, f32::NEG_INFINITY);
        let (first, similarity) = found[0].expect("a match");
        assert_eq!(first, id(7));
        assert!((similarity - 2.0 / (4.01f32).sqrt()).abs() < 1e-5);
        assert_eq!(found[1].map(|(m, _)| m), Some(id(8)));
        assert_eq!(found[2], None, "a zero query matches nothing");
    }

    #[test]
    fn a_floor_drops_every_score_under_it_and_skips_marked_rows() {
        let rows = unit_rows(
            [[1.0, 0.0], [0.6, 0.8], [0.8, 0.6]]
                .iter()
                .map(|v| v.iter().copied()),
            3,
            2,
        );
        let queries = unit_rows(std::iter::once([1.0f32, 0.0].into_iter()), 1, 2);
        let ids = [id(1), id(2), id(3)];
        let none_skipped = [false; 3];
        let best = |floor: f32, skip: &[bool]| {
            best_in(&queries, &ids, rows.rows.view(), skip, floor)[0].map(|(m, _)| m)
        };
        assert_eq!(best(0.9, &none_skipped), Some(id(1)));
        assert_eq!(
            best(0.9, &[true, false, false]),
            None,
            "0.8 and 0.6 are under 0.9"
        );
        assert_eq!(best(0.7, &[true, false, false]), Some(id(3)));
        assert_eq!(best(f32::NEG_INFINITY, &[true, false, true]), Some(id(2)));
    }

    #[test]
    fn zero_candidates_never_match() {
        let candidates = vec![(id(1), blob(&[0.0, 0.0]))];
        assert_eq!(
            best_of_each(&[vec![1.0, 0.0]], &candidates, 2, f32::NEG_INFINITY),
            vec![None]
        );
    }
}
