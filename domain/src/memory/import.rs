//! Importing memories in batches: [`Memories::import`] takes up to
//! [`MAX_IMPORT_BATCH`] items, each what [`Memories::remember`] takes plus
//! an optional idempotency key, and answers one [`Imported`] per item, in
//! input order.
//!
//! Invariants:
//! - **An item never fails the batch.** A bad item (empty or oversized text,
//!   a value out of 0..1, an unknown entity or memory, a malformed id or
//!   key) is reported `FAILED` with its error; the others are stored. Only
//!   an oversized batch or a failure of the store itself fails the call.
//! - **Same outcome as `remember`, one item after another.** Each item is
//!   judged against the tenant's memories *and* the batch's earlier items:
//!   a near-duplicate (cosine ≥ `dedup_threshold`, same tier and subject,
//!   active and current; identical text when there is no vector) merges
//!   into the memory it duplicates, whose old text becomes a version;
//!   `supersedes` closes an older fact; mentions join the knowledge graph.
//!   A failing embedder leaves items without a vector (`embedded: false`).
//! - **Idempotent by key.** A key is unique per tenant
//!   (`memory_import_keys`) and names the memory its item created or merged
//!   into; an item whose key is known (from an earlier import or an earlier
//!   item of the same batch) stores nothing and is reported `SKIPPED` with
//!   that memory. Two imports racing with one key: one of them fails with
//!   `Conflict` and stores nothing; its retry reports the key `SKIPPED`.
//! - **Set-based.** Work per batch, not per item: one query for known keys,
//!   one for entities, one for superseded memories; embeddings in batches;
//!   one vector query per (tier, subject) group for near-duplicates
//!   ([`VectorIndex::nearest_each`](super::VectorIndex::nearest_each)), or
//!   an import job's copy of the tenant's vectors ([`DuplicateScan`]); the
//!   batch's items against each other by one matrix product
//!   ([`BatchSimilarity`]); one transaction with multi-row inserts of
//!   memories, vectors, mentions, versions, events and keys. Vectors are
//!   written under a savepoint: if they cannot be stored, the memories are
//!   kept without them, as in `remember`.

use std::collections::{HashMap, HashSet};

use brainstem_entity::{
    EntityId, MemoryId, TenantOwned, TenantScope, memory, memory_event, memory_import_key,
    memory_mention, memory_version,
};
use chrono::{DateTime, Utc};
use futures_util::{StreamExt, stream};
use ndarray::Array2;
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, EntityTrait, IntoActiveModel, QueryFilter,
    TransactionTrait,
};
use uuid::Uuid;

use super::{
    CandidateFilter, INITIAL_SCORE, Memories, NewMemory, Status, Tier,
    duplicate_scan::DuplicateScan,
    embedder,
    record::{category, content, unit},
    vector::unit_rows,
};
use crate::{Error, Result, kernel::db::BeginWrite};

/// Most items one [`Memories::import`] takes.
pub const MAX_IMPORT_BATCH: usize = 1000;
/// Longest import key, in characters.
pub const MAX_IMPORT_KEY_CHARS: usize = 200;

/// Rows per multi-row insert (under both backends' limits on bound
/// parameters, for the widest row).
const INSERT_CHUNK: usize = 500;

/// One item of an import.
#[derive(Debug)]
pub struct ImportItem {
    /// Idempotency key, unique per tenant: 1–200 characters.
    pub key: Option<String>,
    /// What `remember` takes; an error when the caller could not even read
    /// the item (a malformed id), reported as the item's failure.
    pub memory: Result<NewMemory>,
}

/// What became of an item.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ImportStatus {
    /// Stored as a new memory.
    Created,
    /// Merged into a near-duplicate (an existing memory or an earlier item).
    Merged,
    /// Its key was imported before: nothing stored.
    Skipped,
    /// Refused; see its error.
    Failed,
}

impl ImportStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "CREATED",
            Self::Merged => "MERGED",
            Self::Skipped => "SKIPPED",
            Self::Failed => "FAILED",
        }
    }
}

/// The outcome of one item.
#[derive(Debug)]
pub struct Imported {
    /// Its position in the input.
    pub index: usize,
    pub key: Option<String>,
    pub status: ImportStatus,
    /// The memory it created, merged into or was imported as before.
    pub memory: Option<MemoryId>,
    /// A vector was stored for it (created and merged items).
    pub embedded: bool,
    pub error: Option<Error>,
}

/// An item that passed its checks.
struct Valid {
    index: usize,
    key: Option<String>,
    text: String,
    tier: Tier,
    category: String,
    subject: Option<EntityId>,
    mentions: Vec<EntityId>,
    importance: f64,
    confidence: f64,
    source_task: Option<Uuid>,
    valid_from: Option<DateTime<Utc>>,
    supersedes: Option<MemoryId>,
}

/// A memory the batch creates or merges into, as it will be written.
struct Target {
    model: memory::Model,
    /// Created by this batch (an insert), else an existing row (an update).
    new: bool,
    vector: Option<Vec<f32>>,
    /// The batch item `vector` came from (its row of [`BatchSimilarity`]).
    item: Option<usize>,
    mentions: Vec<EntityId>,
}

/// The cosine of every two of a batch's vectors, from one matrix product:
/// judging items one after another against the batch's earlier ones then
/// looks scores up instead of computing a thousand cosines per item.
struct BatchSimilarity {
    scores: Array2<f32>,
}

impl BatchSimilarity {
    /// Scores for `vectors` (an item without a vector scores 0 with all).
    async fn of(vectors: &[Option<Vec<f32>>], dimension: usize) -> Result<Self> {
        let unit = unit_rows(
            vectors.iter().map(|v| v.iter().flatten().copied()),
            vectors.len(),
            dimension,
        );
        let scores = tokio::task::spawn_blocking(move || unit.rows.dot(&unit.rows.t()))
            .await
            .map_err(|e| Error::internal(format!("the batch's similarities: {e}")))?;
        Ok(Self { scores })
    }

    fn between(&self, a: usize, b: usize) -> f32 {
        self.scores[(a, b)]
    }
}

impl Memories {
    /// Import a batch of memories (see the module header).
    pub async fn import(
        &self,
        scope: TenantScope,
        items: Vec<ImportItem>,
    ) -> Result<Vec<Imported>> {
        self.import_scanned(scope, items, None).await
    }

    /// [`Memories::import`], looking near-duplicates up in `scan` (an
    /// import job's copy of the tenant's vectors) when it is available
    /// instead of in the store.
    pub(super) async fn import_scanned(
        &self,
        scope: TenantScope,
        items: Vec<ImportItem>,
        scan: Option<&DuplicateScan>,
    ) -> Result<Vec<Imported>> {
        if items.len() > MAX_IMPORT_BATCH {
            return Err(Error::validation(format!(
                "an import takes at most {MAX_IMPORT_BATCH} items, not {}",
                items.len()
            )));
        }
        let now = Utc::now();
        let mut results: Vec<Imported> = items
            .iter()
            .enumerate()
            .map(|(index, item)| Imported {
                index,
                key: item.key.clone(),
                status: ImportStatus::Failed,
                memory: None,
                embedded: false,
                error: None,
            })
            .collect();

        // Each item's own checks; a key seen earlier in the batch waits for
        // the outcome of its first item.
        let mut valid = Vec::with_capacity(items.len());
        let mut first_of_key: HashMap<String, usize> = HashMap::new();
        let mut repeats: Vec<(usize, usize)> = Vec::new();
        for (index, item) in items.into_iter().enumerate() {
            match check(index, item) {
                Ok(v) => {
                    if let Some(key) = &v.key {
                        if let Some(first) = first_of_key.get(key) {
                            repeats.push((index, *first));
                            continue;
                        }
                        first_of_key.insert(key.clone(), index);
                    }
                    valid.push(v);
                }
                Err(err) => results[index].error = Some(err),
            }
        }

        // Keys imported before.
        let known = self
            .known_keys(scope, first_of_key.keys().cloned().collect())
            .await?;
        valid.retain(|v| match v.key.as_ref().and_then(|k| known.get(k)) {
            Some(id) => {
                let r = &mut results[v.index];
                r.status = ImportStatus::Skipped;
                r.memory = Some(*id);
                false
            }
            None => true,
        });

        // Entities and superseded memories, one query each.
        let mut entity_ids: Vec<EntityId> = valid
            .iter()
            .flat_map(|v| v.subject.iter().chain(&v.mentions).copied())
            .collect();
        entity_ids.sort();
        entity_ids.dedup();
        let entities = self.graph.get_many(scope, &entity_ids).await?;
        let superseded_ids: Vec<Uuid> = valid
            .iter()
            .filter_map(|v| v.supersedes.map(|s| s.uuid()))
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        let mut superseded: HashMap<Uuid, memory::Model> = self
            .models(scope, &superseded_ids)
            .await?
            .into_iter()
            .map(|m| (m.id, m))
            .collect();
        valid.retain(|v| {
            let missing = if v
                .subject
                .iter()
                .chain(&v.mentions)
                .any(|e| !entities.contains_key(e))
            {
                Some(Error::not_found("entity"))
            } else if v
                .supersedes
                .is_some_and(|s| !superseded.contains_key(&s.uuid()))
            {
                Some(Error::not_found("memory"))
            } else {
                None
            };
            match missing {
                Some(err) => {
                    results[v.index].error = Some(err);
                    false
                }
                None => true,
            }
        });

        let vectors = self.embed_all(&valid).await;
        let matches = self
            .existing_duplicates(scope, &valid, &vectors, now, scan)
            .await?;

        // One item after another, as `remember` would.
        let similarity = BatchSimilarity::of(&vectors, self.config.embedding_dimension).await?;
        let mut targets: Vec<Target> = Vec::new();
        let mut target_of: HashMap<Uuid, usize> = HashMap::new();
        let mut versions: Vec<memory_version::ActiveModel> = Vec::new();
        let mut events: Vec<memory_event::ActiveModel> = Vec::new();
        let mut closed: Vec<(memory::Model, Uuid, DateTime<Utc>, Option<Uuid>)> = Vec::new();
        let mut keys: Vec<(String, Uuid)> = Vec::new();
        for (position, (v, (vector, existing))) in valid
            .into_iter()
            .zip(vectors.into_iter().zip(matches))
            .enumerate()
        {
            let item = vector.is_some().then_some(position);
            let duplicate = if v.supersedes.is_some() {
                None
            } else {
                self.duplicate_in(&targets, &target_of, &v, item, &similarity, existing)
            };
            let at = match duplicate {
                Some(Duplicate::Batch(at)) => Some(at),
                Some(Duplicate::Stored(model)) => {
                    targets.push(Target {
                        model: *model,
                        new: false,
                        vector: None,
                        item: None,
                        mentions: Vec::new(),
                    });
                    let at = targets.len() - 1;
                    target_of.insert(targets[at].model.id, at);
                    Some(at)
                }
                None => None,
            };
            let id = match at {
                Some(at) => {
                    let t = &mut targets[at];
                    versions.push(memory_version::ActiveModel {
                        id: Set(Uuid::now_v7()),
                        tenant_id: Set(scope.tenant_id().uuid()),
                        memory_id: Set(t.model.id),
                        version: Set(t.model.version),
                        content: Set(t.model.content.clone()),
                        reason: Set("MERGED".into()),
                        created_at: Set(now),
                    });
                    let m = &mut t.model;
                    m.content = v.text;
                    m.version += 1;
                    m.importance = m.importance.max(v.importance);
                    m.confidence = m.confidence.max(v.confidence);
                    if m.source_task_id.is_none() {
                        m.source_task_id = v.source_task;
                    }
                    m.updated_at = now;
                    m.embedding_model = vector.is_some().then(|| self.embedder.model().to_owned());
                    t.vector = vector;
                    t.item = item;
                    for e in v.mentions {
                        if !t.mentions.contains(&e) {
                            t.mentions.push(e);
                        }
                    }
                    events.push(event_row(scope, m.id, "MERGED", now, v.source_task));
                    results[v.index].status = ImportStatus::Merged;
                    m.id
                }
                None => {
                    let id = MemoryId::new().uuid();
                    let valid_from = v.valid_from.unwrap_or(now);
                    if let Some(old) = v.supersedes.and_then(|s| superseded.remove(&s.uuid())) {
                        closed.push((old, id, valid_from.min(now), v.source_task));
                    }
                    targets.push(Target {
                        model: memory::Model {
                            id,
                            tenant_id: scope.tenant_id().uuid(),
                            subject_id: v.subject.map(|s| s.uuid()),
                            tier: v.tier.as_str().into(),
                            category: v.category,
                            content: v.text,
                            score: INITIAL_SCORE,
                            uses: 0,
                            importance: v.importance,
                            confidence: v.confidence,
                            source_task_id: v.source_task,
                            valid_from,
                            valid_to: None,
                            superseded_by: None,
                            status: Status::Active.as_str().into(),
                            expires_at: v.tier.ttl().map(|ttl| now + ttl),
                            version: 1,
                            embedding_model: vector
                                .is_some()
                                .then(|| self.embedder.model().to_owned()),
                            last_used_at: None,
                            created_at: now,
                            updated_at: now,
                        },
                        new: true,
                        vector,
                        item,
                        mentions: v.mentions,
                    });
                    target_of.insert(id, targets.len() - 1);
                    results[v.index].status = ImportStatus::Created;
                    id
                }
            };
            results[v.index].memory = Some(MemoryId::from(id));
            if let Some(key) = v.key {
                keys.push((key, id));
            }
        }

        let embedded = self
            .write(scope, &targets, versions, events, closed, &keys, now)
            .await?;
        for r in &mut results {
            if matches!(r.status, ImportStatus::Created | ImportStatus::Merged) {
                r.embedded = r.memory.is_some_and(|id| {
                    embedded
                        && target_of
                            .get(&id.uuid())
                            .is_some_and(|at| targets[*at].vector.is_some())
                });
            }
        }
        for (index, first) in repeats {
            let (status, memory) = (results[first].status, results[first].memory);
            let r = &mut results[index];
            if status == ImportStatus::Failed {
                r.error = Some(Error::validation(format!(
                    "the same key as item {first}, which failed"
                )));
            } else {
                r.status = ImportStatus::Skipped;
                r.memory = memory;
            }
        }
        Ok(results)
    }

    /// The memories that `keys` were imported as.
    async fn known_keys(
        &self,
        scope: TenantScope,
        keys: Vec<String>,
    ) -> Result<HashMap<String, MemoryId>> {
        let mut known = HashMap::new();
        for chunk in keys.chunks(INSERT_CHUNK) {
            let rows = memory_import_key::Entity::find_in(scope)
                .filter(in_values(
                    self.db.get_database_backend(),
                    "memory_import_keys",
                    "import_key",
                    chunk.iter().cloned(),
                ))
                .all(&self.db)
                .await?;
            known.extend(
                rows.into_iter()
                    .map(|r| (r.import_key, MemoryId::from(r.memory_id))),
            );
        }
        Ok(known)
    }

    /// The scope's memories among `ids`.
    async fn models(&self, scope: TenantScope, ids: &[Uuid]) -> Result<Vec<memory::Model>> {
        let mut found = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(INSERT_CHUNK) {
            found.extend(
                memory::Entity::find_in(scope)
                    .filter(in_values(
                        self.db.get_database_backend(),
                        "memories",
                        "id",
                        chunk.iter().copied(),
                    ))
                    .all(&self.db)
                    .await?,
            );
        }
        Ok(found)
    }

    /// Every item's vector, embedded in batches (two at a time, so a
    /// remote embedder's round trip overlaps the next batch); `None` for
    /// the items of a batch the embedder failed.
    async fn embed_all(&self, items: &[Valid]) -> Vec<Option<Vec<f32>>> {
        let chunks: Vec<Vec<String>> = items
            .chunks(embedder::MAX_BATCH)
            .map(|chunk| chunk.iter().map(|v| v.text.clone()).collect())
            .collect();
        let batches: Vec<Vec<Option<Vec<f32>>>> = stream::iter(chunks)
            .map(|chunk| {
                let embedder = self.embedder.clone();
                async move {
                    match embedder.embed(&chunk).await {
                        Ok(vectors) if vectors.len() == chunk.len() => {
                            vectors.into_iter().map(Some).collect()
                        }
                        Ok(_) => {
                            tracing::warn!("import: the embedder returned too few vectors");
                            vec![None; chunk.len()]
                        }
                        Err(err) => {
                            tracing::warn!(error = %err, "import: embedding failed; storing without vectors");
                            vec![None; chunk.len()]
                        }
                    }
                }
            })
            .buffered(2)
            .collect()
            .await;
        batches.into_iter().flatten().collect()
    }

    /// For each item, the stored memory it duplicates, if any: by vector
    /// (one query per tier and subject), else by identical text.
    async fn existing_duplicates(
        &self,
        scope: TenantScope,
        items: &[Valid],
        vectors: &[Option<Vec<f32>>],
        now: DateTime<Utc>,
        scan: Option<&DuplicateScan>,
    ) -> Result<Vec<Option<memory::Model>>> {
        let mut found: Vec<Option<Uuid>> = vec![None; items.len()];
        let mut groups: HashMap<(Tier, Option<EntityId>), Vec<usize>> = HashMap::new();
        for (i, v) in items.iter().enumerate() {
            if v.supersedes.is_none() {
                groups.entry((v.tier, v.subject)).or_default().push(i);
            }
        }
        for ((tier, subject), members) in groups {
            let with_vector: Vec<usize> = members
                .iter()
                .copied()
                .filter(|i| vectors[*i].is_some())
                .collect();
            let queries: Vec<&[f32]> = with_vector
                .iter()
                .filter_map(|i| vectors[*i].as_deref())
                .collect();
            let filter = self.of_current_model(CandidateFilter {
                tiers: vec![tier.as_str().to_owned()],
                exact_subject: Some(subject.map(|s| s.uuid())),
                now: Some(now),
                ..CandidateFilter::default()
            });
            // Only matches at or over the threshold come back.
            let floor = self.config.dedup_threshold;
            let nearest = match scan.filter(|s| s.available()) {
                Some(scan) => {
                    scan.nearest_each(tier, subject.map(|s| s.uuid()), &queries, now, floor)
                        .await?
                }
                None => {
                    self.index
                        .nearest_each(scope, &queries, &filter, floor)
                        .await?
                }
            };
            for (i, hit) in with_vector.iter().zip(nearest) {
                if let Some((id, _)) = hit {
                    found[*i] = Some(id.uuid());
                }
            }
            // Without a vector, as `remember`: the same text.
            let texts: Vec<String> = members
                .iter()
                .filter(|i| vectors[**i].is_none())
                .map(|i| items[*i].text.clone())
                .collect();
            if texts.is_empty() {
                continue;
            }
            let mut select = memory::Entity::find_in(scope)
                .filter(memory::Column::Content.is_in(texts))
                .filter(memory::Column::Tier.eq(tier.as_str()))
                .filter(memory::Column::Status.eq(Status::Active.as_str()))
                .filter(memory::Column::ValidTo.is_null());
            select = match subject {
                Some(s) => select.filter(memory::Column::SubjectId.eq(s.uuid())),
                None => select.filter(memory::Column::SubjectId.is_null()),
            };
            let same_text: HashMap<String, Uuid> = select
                .all(&self.db)
                .await?
                .into_iter()
                .map(|m| (m.content, m.id))
                .collect();
            for i in members.iter().filter(|i| vectors[**i].is_none()) {
                found[*i] = same_text.get(&items[*i].text).copied();
            }
        }
        let ids: Vec<Uuid> = found
            .iter()
            .flatten()
            .copied()
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        let models: HashMap<Uuid, memory::Model> = self
            .models(scope, &ids)
            .await?
            .into_iter()
            .map(|m| (m.id, m))
            .collect();
        Ok(found
            .into_iter()
            .map(|id| id.and_then(|id| models.get(&id).cloned()))
            .collect())
    }

    /// The memory an item duplicates, among the batch's memories so far
    /// (compared with their vectors as the batch left them) and the stored
    /// one found for it before the batch began. `position` is the item's
    /// row of `similarity` when it has a vector.
    fn duplicate_in(
        &self,
        targets: &[Target],
        target_of: &HashMap<Uuid, usize>,
        item: &Valid,
        position: Option<usize>,
        similarity: &BatchSimilarity,
        stored: Option<memory::Model>,
    ) -> Option<Duplicate> {
        let subject = item.subject.map(|s| s.uuid());
        let same_group =
            |t: &Target| t.model.tier == item.tier.as_str() && t.model.subject_id == subject;
        let threshold = self.config.dedup_threshold;
        let mut best: Option<(f32, usize)> = None;
        for (at, t) in targets.iter().enumerate().filter(|(_, t)| same_group(t)) {
            let sim = match (position, t.item) {
                (Some(a), Some(b)) => similarity.between(a, b),
                (None, _) if t.model.content == item.text => 1.0,
                _ => continue,
            };
            if sim >= threshold && best.is_none_or(|(s, _)| sim > s) {
                best = Some((sim, at));
            }
        }
        if let Some((_, at)) = best {
            return Some(Duplicate::Batch(at));
        }
        match stored {
            // Already changed by this batch: judged above, on its new text.
            Some(m) if target_of.contains_key(&m.id) => None,
            Some(m) => Some(Duplicate::Stored(Box::new(m))),
            None => None,
        }
    }

    /// Write the batch in one transaction; whether the vectors were stored.
    #[allow(clippy::too_many_arguments)]
    async fn write(
        &self,
        scope: TenantScope,
        targets: &[Target],
        versions: Vec<memory_version::ActiveModel>,
        events: Vec<memory_event::ActiveModel>,
        closed: Vec<(memory::Model, Uuid, DateTime<Utc>, Option<Uuid>)>,
        keys: &[(String, Uuid)],
        now: DateTime<Utc>,
    ) -> Result<bool> {
        if targets.is_empty() {
            return Ok(true);
        }
        let tenant = scope.tenant_id().uuid();
        let txn = self.db.begin_write().await?;
        let created: Vec<memory::ActiveModel> = targets
            .iter()
            .filter(|t| t.new)
            .map(|t| t.model.clone().into_active_model())
            // `into_active_model` marks fields unchanged; an insert wants
            // them set.
            .map(|m| m.reset_all())
            .collect();
        for chunk in created.chunks(INSERT_CHUNK / 10) {
            memory::Entity::insert_many(chunk.to_vec())
                .exec_without_returning(&txn)
                .await?;
        }
        for t in targets.iter().filter(|t| !t.new) {
            t.model
                .clone()
                .into_active_model()
                .reset_all()
                .update(&txn)
                .await?;
        }
        let mut mentions: Vec<memory_mention::ActiveModel> = Vec::new();
        for t in targets {
            for e in &t.mentions {
                mentions.push(memory_mention::ActiveModel {
                    memory_id: Set(t.model.id),
                    entity_id: Set(e.uuid()),
                    tenant_id: Set(tenant),
                });
            }
        }
        for chunk in mentions.chunks(INSERT_CHUNK) {
            memory_mention::Entity::insert_many(chunk.to_vec())
                // A mention a merged memory had already.
                .on_conflict_do_nothing()
                .exec_without_returning(&txn)
                .await?;
        }
        let mut events = events;
        for (old, by, valid_to, source_task) in closed {
            let old_id = old.id;
            let mut m = old.into_active_model();
            m.valid_to = Set(Some(valid_to));
            m.superseded_by = Set(Some(by));
            m.updated_at = Set(now);
            m.update(&txn).await?;
            events.push(event_row(scope, old_id, "SUPERSEDED", now, source_task));
        }
        for chunk in versions.chunks(INSERT_CHUNK / 2) {
            memory_version::Entity::insert_many(chunk.to_vec())
                .exec_without_returning(&txn)
                .await?;
        }
        for chunk in events.chunks(INSERT_CHUNK / 2) {
            memory_event::Entity::insert_many(chunk.to_vec())
                .exec_without_returning(&txn)
                .await?;
        }
        let key_rows: Vec<memory_import_key::ActiveModel> = keys
            .iter()
            .map(|(key, id)| memory_import_key::ActiveModel {
                id: Set(Uuid::now_v7()),
                tenant_id: Set(tenant),
                import_key: Set(key.clone()),
                memory_id: Set(*id),
                created_at: Set(now),
            })
            .collect();
        for chunk in key_rows.chunks(INSERT_CHUNK) {
            memory_import_key::Entity::insert_many(chunk.to_vec())
                .exec_without_returning(&txn)
                .await
                .map_err(|err| match Error::from(err) {
                    Error::Conflict(_) => Error::Conflict(
                        "another import stored one of these keys meanwhile; retry to skip them"
                            .into(),
                    ),
                    other => other,
                })?;
        }

        // Vectors under a savepoint: if they cannot be stored, the
        // memories stay, without them.
        let rows: Vec<(MemoryId, &[f32])> = targets
            .iter()
            .filter_map(|t| t.vector.as_deref().map(|v| (MemoryId::from(t.model.id), v)))
            .collect();
        for t in targets.iter().filter(|t| !t.new && t.vector.is_none()) {
            self.index.remove(&txn, scope, t.model.id.into()).await?;
        }
        let savepoint = txn.begin().await?;
        let stored = match self
            .index
            .upsert_many(&savepoint, scope, self.embedder.model(), &rows)
            .await
        {
            Ok(()) => {
                savepoint.commit().await?;
                true
            }
            Err(err) => {
                tracing::warn!(error = %err, "import: storing the vectors failed; keeping the memories without them");
                savepoint.rollback().await?;
                let ids: Vec<Uuid> = rows.iter().map(|(id, _)| id.uuid()).collect();
                for (id, _) in &rows {
                    self.index.remove(&txn, scope, *id).await?;
                }
                for chunk in ids.chunks(INSERT_CHUNK) {
                    memory::Entity::update_many_in(scope)
                        .col_expr(
                            memory::Column::EmbeddingModel,
                            sea_orm::sea_query::Expr::value(Option::<String>::None),
                        )
                        .filter(memory::Column::Id.is_in(chunk.iter().copied()))
                        .exec(&txn)
                        .await?;
                }
                false
            }
        };
        txn.commit().await?;
        Ok(stored)
    }
}

/// `table.column IN (VALUES (?), (?), …)`: the rows whose column is one
/// of `values`, for a batch's hundreds of values. Written as an `IN` list,
/// PostgreSQL compares each row with every value once its plan for the
/// statement is generic (chosen while the tenant was small, then reused on
/// every batch): half a second per batch at 30,000 import keys. A list of
/// rows is joined instead, by hash or by index.
fn in_values<V: Into<sea_orm::Value>>(
    backend: sea_orm::DbBackend,
    table: &str,
    column: &str,
    values: impl ExactSizeIterator<Item = V>,
) -> sea_orm::sea_query::SimpleExpr {
    // Placeholders as SeaQuery reads a custom expression's for the backend.
    let rows = (1..=values.len())
        .map(|i| match backend {
            sea_orm::DbBackend::Postgres => format!("(${i})"),
            _ => "(?)".to_owned(),
        })
        .collect::<Vec<_>>()
        .join(", ");
    sea_orm::sea_query::Expr::cust_with_values(
        format!("\"{table}\".\"{column}\" IN (VALUES {rows})"),
        values,
    )
}

/// Where an item's near-duplicate is.
enum Duplicate {
    /// A memory the batch already created or merged into (its position).
    Batch(usize),
    /// A stored memory the batch has not touched yet.
    Stored(Box<memory::Model>),
}

/// An item's own checks, as `remember` makes them, and its key's.
fn check(index: usize, item: ImportItem) -> Result<Valid> {
    let input = item.memory?;
    let key = match item.key {
        Some(k) => {
            let k = k.trim();
            if k.is_empty() || k.chars().count() > MAX_IMPORT_KEY_CHARS {
                return Err(Error::validation(format!(
                    "key must have 1-{MAX_IMPORT_KEY_CHARS} characters"
                )));
            }
            Some(k.to_owned())
        }
        None => None,
    };
    let mut mentions = input.mentions;
    mentions.sort();
    mentions.dedup();
    Ok(Valid {
        index,
        key,
        text: content(&input.content)?,
        tier: input.tier.unwrap_or(Tier::Working),
        category: category(input.category.as_deref())?,
        subject: input.subject,
        mentions,
        importance: unit("importance", input.importance, 0.5)?,
        confidence: unit("confidence", input.confidence, 1.0)?,
        source_task: input.source_task,
        valid_from: input.valid_from,
        supersedes: input.supersedes,
    })
}

fn event_row(
    scope: TenantScope,
    memory: Uuid,
    kind: &str,
    now: DateTime<Utc>,
    source_task: Option<Uuid>,
) -> memory_event::ActiveModel {
    memory_event::ActiveModel {
        id: Set(Uuid::now_v7()),
        tenant_id: Set(scope.tenant_id().uuid()),
        memory_id: Set(memory),
        kind: Set(kind.into()),
        outcome: Set(None),
        score_before: Set(None),
        score_after: Set(None),
        tier_before: Set(None),
        tier_after: Set(None),
        source_task_id: Set(source_task),
        created_at: Set(now),
    }
}
