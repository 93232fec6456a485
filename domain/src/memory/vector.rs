//! The vector leg of memory search, behind one trait with a PostgreSQL and a
//! SQLite implementation (sea-query cannot describe a `vector` column on
//! SQLite, so vectors stay out of every SeaORM entity).
//!
//! **PostgreSQL** ([`PgVectorIndex`]): `memory_embeddings(memory_id,
//! tenant_id, model, embedding vector(D))` with an HNSW index (cosine,
//! m = 16, ef_construction = 64). D is configuration, so the table is created
//! by [`VectorIndex::prepare`] at startup, not by a migration. If the table
//! exists with another dimension, it is dropped and recreated empty and every
//! memory is marked "not embedded": keyword search keeps working, and
//! `reindexMemories` fills the vectors again per tenant.
//!
//! Tenant filters and HNSW: an HNSW scan returns its `ef_search` nearest
//! rows *before* the `WHERE` applies, so a selective tenant filter can leave
//! fewer than `limit` rows. Each search runs in a short transaction with
//! `SET LOCAL hnsw.iterative_scan = relaxed_order` (pgvector ≥ 0.8): the scan
//! keeps walking the graph until the filtered query has its rows (bounded by
//! `hnsw.max_scan_tuples`), and the outer `ORDER BY` restores exact order.
//! This was chosen over per-tenant partial indexes, which would need DDL per
//! tenant and do not scale to thousands of tenants.
//!
//! **SQLite** ([`SqliteVectorIndex`]): f32 little-endian blobs, searched
//! exactly in Rust — an embedded install holds few enough memories per
//! tenant for a linear scan.

use std::sync::Arc;

use brainstem_entity::{MemoryId, TenantScope};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, TransactionTrait};
use uuid::Uuid;

use super::{
    embedder::cosine,
    sql::{CandidateFilter, Sql, push_filter, tenant_condition},
};
use crate::{Error, Result, db::Backend};

/// Largest dimension an HNSW index on `vector` accepts.
pub const MAX_DIMENSION: usize = 2000;

/// A memory and its cosine similarity to the query.
pub type Scored = (MemoryId, f32);

#[async_trait::async_trait]
pub trait VectorIndex: Send + Sync + 'static {
    /// Make the storage ready for vectors of this index's dimension.
    async fn prepare(&self) -> Result<()>;
    /// Store (or replace) a memory's vector.
    async fn upsert(&self, scope: TenantScope, id: MemoryId, model: &str, v: &[f32]) -> Result<()>;
    /// Forget a memory's vector.
    async fn remove(&self, scope: TenantScope, id: MemoryId) -> Result<()>;
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
}

/// The index for the connection's backend. `ef_search` is pgvector's
/// candidate-list size for HNSW scans (raised to `k` when smaller): higher
/// means better recall and slower searches.
pub fn for_connection(
    db: &DatabaseConnection,
    dimension: usize,
    ef_search: usize,
) -> Arc<dyn VectorIndex> {
    match Backend::of(db) {
        Backend::Postgres => Arc::new(PgVectorIndex {
            db: db.clone(),
            dimension,
            ef_search,
        }),
        Backend::Sqlite => Arc::new(SqliteVectorIndex {
            db: db.clone(),
            dimension,
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

pub struct PgVectorIndex {
    db: DatabaseConnection,
    dimension: usize,
    ef_search: usize,
}

#[async_trait::async_trait]
impl VectorIndex for PgVectorIndex {
    async fn prepare(&self) -> Result<()> {
        if self.dimension == 0 || self.dimension > MAX_DIMENSION {
            return Err(Error::validation(format!(
                "embedding_dimension must be 1..={MAX_DIMENSION}"
            )));
        }
        let txn = self.db.begin().await?;
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
        let wanted = format!("vector({})", self.dimension);
        if current.as_deref() == Some(wanted.as_str()) {
            txn.commit().await?;
            return Ok(());
        }
        if let Some(old) = &current {
            tracing::warn!(
                old = %old,
                new = %wanted,
                "embedding_dimension changed: dropping stored vectors; run reindexMemories in each tenant"
            );
            txn.execute_unprepared("DROP TABLE memory_embeddings")
                .await?;
            // unscoped: a schema change of the whole store, not tenant data access.
            txn.execute_unprepared("UPDATE memories SET embedding_model = NULL")
                .await?;
        }
        txn.execute_unprepared(&format!(
            "CREATE TABLE memory_embeddings (\
               memory_id uuid NOT NULL CONSTRAINT pk_memory_embeddings PRIMARY KEY \
                 CONSTRAINT fk_memory_embeddings_memory REFERENCES memories(id) ON DELETE CASCADE, \
               tenant_id uuid NOT NULL, \
               model text NOT NULL, \
               embedding {wanted} NOT NULL)"
        ))
        .await?;
        txn.execute_unprepared(
            "CREATE INDEX ix_memory_embeddings_tenant ON memory_embeddings (tenant_id, memory_id)",
        )
        .await?;
        txn.execute_unprepared(
            "CREATE INDEX ix_memory_embeddings_hnsw ON memory_embeddings \
             USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)",
        )
        .await?;
        txn.commit().await?;
        Ok(())
    }

    async fn upsert(&self, scope: TenantScope, id: MemoryId, model: &str, v: &[f32]) -> Result<()> {
        check_dimension(v, self.dimension)?;
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
                "::vector) ON CONFLICT (memory_id) DO UPDATE SET model = EXCLUDED.model, \
                   embedding = EXCLUDED.embedding",
            );
        self.db.execute_raw(sql.statement()).await?;
        Ok(())
    }

    async fn remove(&self, scope: TenantScope, id: MemoryId) -> Result<()> {
        remove(&self.db, DbBackend::Postgres, scope, id).await
    }

    async fn nearest(
        &self,
        scope: TenantScope,
        query: &[f32],
        k: usize,
        filter: &CandidateFilter,
        exact: bool,
    ) -> Result<Vec<Scored>> {
        check_dimension(query, self.dimension)?;
        if k == 0 {
            return Ok(Vec::new());
        }
        let literal = pg_vector_literal(query);
        let mut sql = Sql::new(DbBackend::Postgres);
        sql.push("WITH c AS MATERIALIZED (SELECT e.memory_id, e.embedding <=> ")
            .bind(literal.clone())
            .push("::vector AS distance FROM memory_embeddings e JOIN memories m ON m.id = e.memory_id WHERE e.tenant_id = ")
            .bind(scope.tenant_id().uuid())
            .push(" AND ");
        tenant_condition(&mut sql, scope);
        push_filter(&mut sql, scope, filter);
        // `+ 0` hides the ordering from the HNSW index: an exact scan.
        sql.push(" ORDER BY (e.embedding <=> ")
            .bind(literal)
            .push(if exact { "::vector) + 0" } else { "::vector)" })
            .push(&format!(
                " LIMIT {k}) SELECT memory_id, distance FROM c ORDER BY distance, memory_id"
            ));
        let txn = self.db.begin().await?;
        txn.execute_unprepared("SET LOCAL hnsw.iterative_scan = relaxed_order")
            .await?;
        txn.execute_unprepared(&format!(
            "SET LOCAL hnsw.ef_search = {}",
            k.max(self.ef_search).clamp(1, 1000)
        ))
        .await?;
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

    async fn upsert(&self, scope: TenantScope, id: MemoryId, model: &str, v: &[f32]) -> Result<()> {
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
        self.db.execute_raw(sql.statement()).await?;
        Ok(())
    }

    async fn remove(&self, scope: TenantScope, id: MemoryId) -> Result<()> {
        remove(&self.db, DbBackend::Sqlite, scope, id).await
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
    db: &DatabaseConnection,
    backend: DbBackend,
    scope: TenantScope,
    id: MemoryId,
) -> Result<()> {
    let mut sql = Sql::new(backend);
    sql.push("DELETE FROM memory_embeddings WHERE tenant_id = ")
        .bind(scope.tenant_id().uuid())
        .push(" AND memory_id = ")
        .bind(id.uuid());
    db.execute_raw(sql.statement()).await?;
    Ok(())
}
