//! Near-duplicate lookups for a long import, answered in the process: a
//! copy of the tenant's current vectors, read once when the import starts
//! and kept up to date between batches, scored against each batch by
//! matrix products on every core.
//!
//! Why: a batch's lookup through the store reads every candidate vector
//! again (no per-tenant HNSW index yet) or walks the tenant's HNSW index
//! once per item, and every vector the import then stores is added to that
//! index one by one. An import job keeps this scan instead, and the tenant's
//! index is built once, after the job ([`VectorIndex::maintain`] skips a
//! tenant while it has a running job), so a 100,000-memory import pays one
//! bulk build instead of 100,000 insertions into a growing graph.
//!
//! Invariants:
//! - **The same answer as the store's lookup** ([`VectorIndex::nearest_each`]
//!   with the import's filter): the most similar memory of the same tier and
//!   subject that is active, current (`valid_to`, `expires_at` after now)
//!   and embedded by the current model; ties go to the smaller id.
//! - **Up to date between batches.** [`DuplicateScan::refresh`] reads the
//!   memories changed since the last refresh (by `updated_at`, with
//!   [`REFRESH_SLACK`] of overlap for writes that committed late), which
//!   include the import's own last batch and memories other writers stored
//!   or retired meanwhile. A memory deleted outright is dropped by the
//!   import when its row is not found (it is then no duplicate).
//! - **Bounded memory.** A tenant whose vectors would take more than
//!   [`SCAN_BUDGET_BYTES`] is not copied: the scan reports itself
//!   unavailable and the import asks the store, as `importMemories` does.

use std::{collections::HashMap, sync::Arc, time::Duration};

use brainstem_entity::{MemoryId, TenantScope};
use chrono::{DateTime, Utc};
use ndarray::{ArrayView2, Axis, Slice};
use uuid::Uuid;

use super::{
    Status, Tier,
    vector::{Scored, UnitRows, VectorIndex, best_in, better, unit_rows},
};
use crate::{Error, Result};

/// Most bytes of vectors a scan keeps (256-d vectors: 262,144 memories).
pub const SCAN_BUDGET_BYTES: usize = 256 * 1024 * 1024;

/// How far before the last refresh the next one reads again: a write whose
/// `updated_at` was taken up to this long before it committed is still seen.
pub const REFRESH_SLACK: Duration = Duration::from_secs(2);

/// A memory as the scan reads it ([`VectorIndex::scan_rows`]).
#[derive(Debug)]
pub struct ScanRow {
    pub id: MemoryId,
    pub tier: String,
    pub subject: Option<Uuid>,
    pub status: String,
    pub valid_to: Option<DateTime<Utc>>,
    pub expires_at: Option<DateTime<Utc>>,
    /// Its vector, when it has one of the model the scan asked for.
    pub vector: Option<Vec<f32>>,
}

/// The candidates of one tier and subject.
#[derive(Clone, Default)]
struct Group {
    ids: Vec<MemoryId>,
    /// When each stops being a candidate (`valid_to` or `expires_at`).
    until: Vec<Option<DateTime<Utc>>>,
    /// Their vectors scaled to length 1, one after another.
    rows: Vec<f32>,
}

type GroupKey = (String, Option<Uuid>);

/// A tenant's candidate vectors for one embedder model (see the module
/// header).
pub struct DuplicateScan {
    scope: TenantScope,
    model: String,
    dimension: usize,
    groups: HashMap<GroupKey, Arc<Group>>,
    /// Where each kept memory is: its group and position.
    at: HashMap<MemoryId, (GroupKey, usize)>,
    /// When the last refresh began.
    seen_until: Option<DateTime<Utc>>,
    /// Over [`SCAN_BUDGET_BYTES`]: nothing kept, the store answers.
    unavailable: bool,
}

impl DuplicateScan {
    /// An empty scan of `scope`'s vectors of `model`, of which the tenant
    /// has about `stored` now; the first [`DuplicateScan::refresh`] reads
    /// them all, unless they would not fit [`SCAN_BUDGET_BYTES`].
    pub fn new(scope: TenantScope, model: &str, dimension: usize, stored: u64) -> Self {
        let bytes = usize::try_from(stored)
            .unwrap_or(usize::MAX)
            .saturating_mul(dimension * 4);
        Self {
            scope,
            model: model.to_owned(),
            dimension,
            groups: HashMap::new(),
            at: HashMap::new(),
            seen_until: None,
            unavailable: bytes > SCAN_BUDGET_BYTES,
        }
    }

    /// Whether lookups can be answered here (the tenant fits the budget).
    pub fn available(&self) -> bool {
        !self.unavailable
    }

    /// How many memories are kept.
    pub fn len(&self) -> usize {
        self.at.len()
    }

    pub fn is_empty(&self) -> bool {
        self.at.is_empty()
    }

    /// Read what changed since the last refresh (everything, the first
    /// time) and bring the copy up to date.
    pub async fn refresh(&mut self, index: &dyn VectorIndex) -> Result<()> {
        if self.unavailable {
            return Ok(());
        }
        let started = Utc::now();
        let since = self
            .seen_until
            .map(|t| t - chrono::Duration::from_std(REFRESH_SLACK).unwrap_or_default());
        let rows = index.scan_rows(self.scope, &self.model, since).await?;
        for row in rows {
            self.forget(row.id);
            let Some(vector) = row.vector else { continue };
            if row.status != Status::Active.as_str() || vector.len() != self.dimension {
                continue;
            }
            let until = match (row.valid_to, row.expires_at) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            if until.is_some_and(|u| u <= started) {
                continue;
            }
            let unit = unit_rows(std::iter::once(vector.into_iter()), 1, self.dimension);
            if unit.zero[0] {
                continue; // a zero vector is never a match
            }
            let key = (row.tier, row.subject);
            let group = Arc::make_mut(self.groups.entry(key.clone()).or_default());
            group.ids.push(row.id);
            group.until.push(until);
            group.rows.extend(unit.rows.iter());
            self.at.insert(row.id, (key, group.ids.len() - 1));
        }
        if self.at.len().saturating_mul(self.dimension * 4) > SCAN_BUDGET_BYTES {
            tracing::info!(
                memories = self.at.len(),
                "import: the tenant's vectors exceed the scan's budget; near-duplicates are looked up in the store"
            );
            self.unavailable = true;
            self.groups.clear();
            self.at.clear();
        }
        self.seen_until = Some(started);
        Ok(())
    }

    /// Drop a memory from the copy, if kept.
    fn forget(&mut self, id: MemoryId) {
        let Some((key, at)) = self.at.remove(&id) else {
            return;
        };
        let Some(group) = self.groups.get_mut(&key) else {
            return;
        };
        let group = Arc::make_mut(group);
        let last = group.ids.len() - 1;
        group.ids.swap_remove(at);
        group.until.swap_remove(at);
        let d = self.dimension;
        if at != last {
            group.rows.copy_within(last * d..(last + 1) * d, at * d);
            if let Some(entry) = self.at.get_mut(&group.ids[at]) {
                entry.1 = at;
            }
        }
        group.rows.truncate(last * d);
    }

    /// For each query, the most similar candidate of `tier` and `subject`
    /// current at `now` (see the module header) with a similarity of at
    /// least `floor` (the import's near-duplicate threshold: every other
    /// score is dropped at once).
    pub async fn nearest_each(
        &self,
        tier: Tier,
        subject: Option<Uuid>,
        queries: &[&[f32]],
        now: DateTime<Utc>,
        floor: f32,
    ) -> Result<Vec<Option<Scored>>> {
        let Some(group) = self
            .groups
            .get(&(tier.as_str().to_owned(), subject))
            .cloned()
        else {
            return Ok(vec![None; queries.len()]);
        };
        if queries.is_empty() || group.ids.is_empty() {
            return Ok(vec![None; queries.len()]);
        }
        let dimension = self.dimension;
        let queries = unit_rows(
            queries.iter().map(|q| q.iter().copied()),
            queries.len(),
            dimension,
        );
        tokio::task::spawn_blocking(move || scan(&queries, &group, dimension, now, floor))
            .await
            .map_err(|e| Error::internal(format!("the near-duplicate scan stopped: {e}")))?
    }
}

/// Score `queries` against a group on every core: each thread takes a
/// share of the candidates, and the shares' bests are merged (ties to the
/// smaller id, as within a share).
fn scan(
    queries: &UnitRows,
    group: &Group,
    dimension: usize,
    now: DateTime<Utc>,
    floor: f32,
) -> Result<Vec<Option<Scored>>> {
    let rows = ArrayView2::from_shape((group.ids.len(), dimension), &group.rows)
        .map_err(|e| Error::internal(format!("near-duplicate scan: {e}")))?;
    let skip: Vec<bool> = group
        .until
        .iter()
        .map(|u| u.is_some_and(|u| u <= now))
        .collect();
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 8);
    let share = group.ids.len().div_ceil(threads).max(1);
    let parts: Vec<std::thread::Result<Vec<Option<Scored>>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..group.ids.len())
            .step_by(share)
            .map(|from| {
                let to = (from + share).min(group.ids.len());
                let (ids, rows, skip) = (
                    &group.ids[from..to],
                    rows.slice_axis(Axis(0), Slice::from(from..to)),
                    &skip[from..to],
                );
                s.spawn(move || best_in(queries, ids, rows, skip, floor))
            })
            .collect();
        handles.into_iter().map(|h| h.join()).collect()
    });
    let mut found: Vec<Option<Scored>> = vec![None; queries.zero.len()];
    for part in parts {
        let part = part.map_err(|_| Error::internal("a near-duplicate scan thread panicked"))?;
        for (slot, hit) in found.iter_mut().zip(part) {
            *slot = better(*slot, hit);
        }
    }
    Ok(found)
}
