//! Writing memories: [`Memories::remember`] (with its merge into a
//! near-duplicate and its `supersedes`), [`Memories::update`],
//! and [`Memories::archive`].
//!
//! A memory and its vector are written in one transaction; a vector that
//! cannot be stored is rolled back to a savepoint and the memory is kept
//! without it (`embedded: false`). A changed text keeps the old one as a
//! [`MemoryVersion`](super::MemoryVersion) (reason `MERGED` or `UPDATED`).

use crate::kernel::db::BeginWrite;
use brainstem_entity::{
    EntityId, MemoryId, TenantOwned, TenantScope, memory, memory_mention, memory_version,
};
use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, DatabaseTransaction,
    IntoActiveModel, QueryFilter, TransactionTrait,
};
use uuid::Uuid;

use super::{
    CandidateFilter, INITIAL_SCORE, Memories, Memory, Status, Tier, event,
    record::{category, content, unit},
    record_event,
};
use crate::Result;

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

impl Memories {
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
            let txn = self.db.begin_write().await?;
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
        let txn = self.db.begin_write().await?;
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
            let filter = self.of_current_model(CandidateFilter {
                tiers: vec![tier.as_str().to_owned()],
                exact_subject: Some(subject.map(|s| s.uuid())),
                now: Some(now),
                ..CandidateFilter::default()
            });
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
        let txn = self.db.begin_write().await?;
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
        let txn = self.db.begin_write().await?;
        let mut model = current.into_active_model();
        model.status = Set(Status::Archived.as_str().into());
        model.updated_at = Set(now);
        model.update(&txn).await?;
        record_event(&txn, scope, id, event("ARCHIVED", now)).await?;
        txn.commit().await?;
        self.get(scope, id).await
    }
}
