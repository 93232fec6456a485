//! Vectors of the current embedder for every memory: [`Memories::reindex`]
//! (one tenant, on request: `reindexMemories`), the background re-embedding
//! that follows a change of embedder ([`Memories::spawn_reembedding`]), and
//! what is left to do ([`Memories::embedding_status`]).
//!
//! A memory is *stale* when it is active and has no vector of the current
//! embedder's model (`embedding_model` is another model, or none: the
//! embedder was switched, its dimension changed, or it failed when the
//! memory was written).
//!
//! Invariants:
//! - **Searches never mix models.** The vector leg and the near-duplicate
//!   lookups compare only vectors of the current model
//!   ([`CandidateFilter::embedding_model`]); a stale memory is found by the
//!   keyword leg until it is embedded again, so switching the embedder
//!   never makes search answer from incomparable vectors.
//! - **A vector matches the text it was made from.** A batch is read,
//!   embedded outside any transaction, then written only for the memories
//!   whose text is still the one embedded; one changed meanwhile is left to
//!   the write that changed it.
//! - **One re-embedding at a time.** On PostgreSQL a pass holds a session
//!   lock ([`SessionLock`]: no transaction stays open for the pass) for its
//!   duration: other replicas skip theirs. Work is idempotent, so a pass
//!   cut short by a crash is simply done again.
//! - **Fair between tenants.** A pass embeds at most [`PASS_SLICE`]
//!   memories of each tenant that has stale ones before the next pass, and
//!   each tenant's position is kept between passes, so a memory the
//!   embedder keeps refusing never stops the ones after it.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::Duration,
};

use brainstem_entity::{MemoryId, TenantOwned, TenantScope, memory};
use sea_orm::{
    ColumnTrait, Condition, ConnectionTrait, DbBackend, PaginatorTrait, QueryFilter, QueryOrder,
    QuerySelect, Statement, TransactionTrait,
};
use tokio::sync::{Mutex, mpsc};
use uuid::Uuid;

use super::{Memories, Status, embedder};
use crate::{
    Result, TenantId,
    kernel::{
        db::BeginWrite,
        metrics::metrics,
        row_security::{Bypass, as_platform, as_tenant},
        session_lock::SessionLock,
    },
};

/// The lock a re-embedding pass holds.
pub const REEMBED_LOCK: &str = "brainstem.memory_reembedding";

/// Most memories of one tenant a background pass embeds before it moves on
/// to the next tenant.
pub const PASS_SLICE: usize = 1024;

/// What [`Memories::reindex`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reindexed {
    pub reindexed: u64,
    pub failed: u64,
}

/// A tenant's memories against the current embedder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmbeddingStatus {
    /// The current embedder's model.
    pub model: String,
    /// Active memories with a vector of that model.
    pub embedded: u64,
    /// Active memories without one: re-embedding still to do.
    pub pending: u64,
}

/// One background pass over every tenant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReembedPass {
    /// Memories given a vector of the current model.
    pub embedded: u64,
    /// Memories the embedder failed for, or whose vectors could not be
    /// stored (tried again in a later pass).
    pub failed: u64,
    /// Another replica's pass held the lock; nothing was done.
    pub skipped: bool,
}

/// A batch's outcome.
struct Batch {
    /// The last memory read (where the next batch starts).
    last: Uuid,
    embedded: u64,
    failed: u64,
}

impl Memories {
    /// Embed every active memory of the tenant again (after a model or
    /// dimension change, or to fill vectors missed while the embedder was
    /// down). With `only_missing`, only stale memories.
    pub async fn reindex(&self, scope: TenantScope, only_missing: bool) -> Result<Reindexed> {
        let mut result = Reindexed::default();
        let mut after = None;
        while let Some(batch) = self.embed_batch(scope, after, only_missing).await? {
            after = Some(batch.last);
            result.reindexed += batch.embedded;
            result.failed += batch.failed;
        }
        Ok(result)
    }

    /// How far the tenant's memories are from the current embedder.
    pub async fn embedding_status(&self, scope: TenantScope) -> Result<EmbeddingStatus> {
        let active = memory::Entity::find_in(scope)
            .filter(memory::Column::Status.eq(Status::Active.as_str()));
        let embedded = active
            .clone()
            .filter(memory::Column::EmbeddingModel.eq(self.embedder.model()))
            .count(&self.db)
            .await?;
        let pending = active.filter(self.stale()).count(&self.db).await?;
        Ok(EmbeddingStatus {
            model: self.embedder.model().to_owned(),
            embedded,
            pending,
        })
    }

    /// Re-embed stale memories in the background: a pass at once, passes
    /// one after another while they find work, then one every `idle`. The
    /// receiver gets every pass, in order (tests wait on it instead of
    /// sleeping); dropping it stops nothing.
    pub fn spawn_reembedding(&self, idle: Duration) -> mpsc::UnboundedReceiver<ReembedPass> {
        let memories = self.clone();
        let (tx, rx) = mpsc::unbounded_channel();
        let positions: Arc<Mutex<HashMap<TenantId, Uuid>>> = Arc::default();
        tokio::spawn(async move {
            loop {
                let pass = memories.reembed_pass(&positions).await;
                let busy = match &pass {
                    Ok(p) => {
                        if p.embedded + p.failed > 0 {
                            tracing::info!(
                                embedded = p.embedded,
                                failed = p.failed,
                                "re-embedded memories"
                            );
                        }
                        // Nobody listening is fine.
                        let _ = tx.send(*p);
                        p.embedded > 0
                    }
                    Err(err) => {
                        tracing::error!(error = %err, "re-embedding failed");
                        false
                    }
                };
                if !busy {
                    tokio::time::sleep(idle).await;
                }
            }
        });
        rx
    }

    /// One pass: up to [`PASS_SLICE`] stale memories of each tenant.
    async fn reembed_pass(
        &self,
        positions: &Mutex<HashMap<TenantId, Uuid>>,
    ) -> Result<ReembedPass> {
        as_platform(Bypass::Maintenance, async {
            let Some(lock) = SessionLock::try_take(&self.db, REEMBED_LOCK).await? else {
                return Ok(ReembedPass {
                    skipped: true,
                    ..ReembedPass::default()
                });
            };
            let mut pass = ReembedPass::default();
            for tenant in self.tenants_with_stale().await? {
                let scope = TenantScope::new(tenant);
                let start = positions.lock().await.get(&tenant).copied();
                let (done, position) = as_tenant(tenant, self.reembed_slice(scope, start)).await?;
                pass.embedded += done.embedded;
                pass.failed += done.failed;
                let mut positions = positions.lock().await;
                match position {
                    Some(p) => positions.insert(tenant, p),
                    None => positions.remove(&tenant),
                };
            }
            lock.release().await?;
            metrics().memories_reembedded.inc_by(pass.embedded);
            Ok(pass)
        })
        .await
    }

    /// Up to [`PASS_SLICE`] stale memories of one tenant after `start`
    /// (from the first when the tenant has none past it); what was done and
    /// where the next slice starts (`None`: from the first).
    async fn reembed_slice(
        &self,
        scope: TenantScope,
        start: Option<Uuid>,
    ) -> Result<(ReembedPass, Option<Uuid>)> {
        let mut done = ReembedPass::default();
        let mut after = start;
        let mut wrapped = start.is_none();
        while done.embedded + done.failed < PASS_SLICE as u64 {
            match self.embed_batch(scope, after, true).await? {
                Some(batch) => {
                    after = Some(batch.last);
                    done.embedded += batch.embedded;
                    done.failed += batch.failed;
                }
                None if wrapped => return Ok((done, None)),
                None => {
                    wrapped = true;
                    after = None;
                }
            }
        }
        Ok((done, after))
    }

    /// The tenants with stale memories.
    async fn tenants_with_stale(&self) -> Result<Vec<TenantId>> {
        let backend = self.db.get_database_backend();
        let sql = match backend {
            DbBackend::Postgres => {
                "SELECT DISTINCT tenant_id FROM memories WHERE status = 'ACTIVE' \
                 AND (embedding_model IS NULL OR embedding_model <> $1)"
            }
            _ => {
                "SELECT DISTINCT tenant_id FROM memories WHERE status = 'ACTIVE' \
                 AND (embedding_model IS NULL OR embedding_model <> ?1)"
            }
        };
        // unscoped: finding which tenants have work, not reading their data.
        let rows = self
            .db
            .query_all_raw(Statement::from_sql_and_values(
                backend,
                sql,
                [self.embedder.model().into()],
            ))
            .await?;
        rows.iter()
            .map(|r| Ok(TenantId::from(r.try_get::<Uuid>("", "tenant_id")?)))
            .collect()
    }

    /// Active memories without a vector of the current model.
    fn stale(&self) -> Condition {
        Condition::any()
            .add(memory::Column::EmbeddingModel.is_null())
            .add(memory::Column::EmbeddingModel.ne(self.embedder.model()))
    }

    /// Embed the next batch of the tenant's active memories after `after`
    /// (only stale ones with `only_stale`) and store the vectors of those
    /// whose text is unchanged; `None` when there is none left.
    async fn embed_batch(
        &self,
        scope: TenantScope,
        after: Option<Uuid>,
        only_stale: bool,
    ) -> Result<Option<Batch>> {
        let mut select = memory::Entity::find_in(scope)
            .filter(memory::Column::Status.eq(Status::Active.as_str()))
            .order_by_asc(memory::Column::Id)
            .limit(embedder::MAX_BATCH as u64);
        if let Some(a) = after {
            select = select.filter(memory::Column::Id.gt(a));
        }
        if only_stale {
            select = select.filter(self.stale());
        }
        let memories = select.all(&self.db).await?;
        let Some(last) = memories.last().map(|m| m.id) else {
            return Ok(None);
        };
        let texts: Vec<String> = memories.iter().map(|m| m.content.clone()).collect();
        let vectors = match self.embedder.embed(&texts).await {
            Ok(vectors) if vectors.len() == memories.len() => vectors,
            Ok(_) | Err(_) => {
                tracing::warn!("re-embedding: the embedder failed for a batch");
                return Ok(Some(Batch {
                    last,
                    embedded: 0,
                    failed: memories.len() as u64,
                }));
            }
        };
        let model = self.embedder.model();
        let txn = self.db.begin_write().await?;
        // One statement for the batch, changing only the memories whose
        // text is still the one embedded.
        let unchanged = memories.iter().fold(Condition::any(), |any, m| {
            any.add(
                Condition::all()
                    .add(memory::Column::Id.eq(m.id))
                    .add(memory::Column::Content.eq(m.content.as_str())),
            )
        });
        let claimed: HashSet<Uuid> = memory::Entity::update_many_in(scope)
            .col_expr(
                memory::Column::EmbeddingModel,
                sea_orm::sea_query::Expr::value(model),
            )
            .filter(unchanged)
            .exec_with_returning(&txn)
            .await?
            .into_iter()
            .map(|m| m.id)
            .collect();
        let rows: Vec<(MemoryId, &[f32])> = memories
            .iter()
            .zip(&vectors)
            .filter(|(m, _)| claimed.contains(&m.id))
            .map(|(m, v)| (MemoryId::from(m.id), v.as_slice()))
            .collect();
        let savepoint = txn.begin().await?;
        // A memory whose text changed meanwhile is neither: the write that
        // changed it embedded its new text.
        let (embedded, failed) = match self
            .index
            .upsert_many(&savepoint, scope, model, &rows)
            .await
        {
            Ok(()) => {
                savepoint.commit().await?;
                txn.commit().await?;
                (rows.len() as u64, 0)
            }
            Err(err) => {
                tracing::warn!(error = %err, "re-embedding: storing the vectors failed");
                savepoint.rollback().await?;
                txn.rollback().await?;
                (0, rows.len() as u64)
            }
        };
        Ok(Some(Batch {
            last,
            embedded,
            failed,
        }))
    }
}
