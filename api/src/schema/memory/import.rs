//! `importMemories`: up to 1,000 memories in one call, each as `remember`
//! takes it plus an optional idempotency key, with one result per item in
//! input order. A bad item is reported in its result and never fails the
//! call; a batch over the limit is refused (`BAD_USER_INPUT`) before any
//! work. The call is admitted like any operation (the caller's rate
//! limits) and needs `memory:write`, as `remember` does.

use async_graphql::{Context, Enum, ID, InputObject, Object, SimpleObject};
use brainstem_domain::{
    EntityId, Error, MemoryId,
    memory::{ImportItem, ImportStatus, Imported, MAX_IMPORT_BATCH, NewMemory},
};
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{MemoryTier, write_scope};
use crate::{
    error::{ResultExt, code_and_message},
    schema::{
        context::domain,
        ids::{self, NodeType},
    },
};

/// One memory to import: what `remember` takes, and a key.
#[derive(InputObject)]
pub struct ImportMemoryItem {
    /// Idempotency key, unique in the tenant (1–200 characters): an item
    /// whose key was imported before stores nothing and is `SKIPPED`.
    pub key: Option<String>,
    /// The fact, 1–20,000 characters.
    pub content: String,
    /// Defaults to `WORKING`.
    pub tier: Option<MemoryTier>,
    /// Free-form, e.g. `insight`, `event`, `preference`; defaults to `insight`.
    pub category: Option<String>,
    /// The entity the fact is about.
    pub subject_id: Option<ID>,
    /// Other entities the fact mentions.
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

#[derive(InputObject)]
pub struct ImportMemoriesInput {
    /// At most 1,000.
    pub items: Vec<ImportMemoryItem>,
}

/// What became of an imported item.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryImportStatus {
    /// Stored as a new memory.
    Created,
    /// Merged into a near-duplicate: an existing memory or an earlier item
    /// of the batch, as `remember` merges.
    Merged,
    /// Its key was imported before; nothing was stored.
    Skipped,
    /// Refused; `error` says why. The other items are not affected.
    Failed,
}

impl From<ImportStatus> for MemoryImportStatus {
    fn from(s: ImportStatus) -> Self {
        match s {
            ImportStatus::Created => Self::Created,
            ImportStatus::Merged => Self::Merged,
            ImportStatus::Skipped => Self::Skipped,
            ImportStatus::Failed => Self::Failed,
        }
    }
}

/// Why an item failed: the code and message the same input would get
/// from `remember`.
#[derive(SimpleObject)]
pub struct MemoryImportError {
    /// `BAD_USER_INPUT`, `NOT_FOUND`, …
    pub code: String,
    pub message: String,
}

#[derive(SimpleObject)]
pub struct MemoryImportResult {
    /// The item's position in `items`, from 0.
    pub index: i32,
    pub key: Option<String>,
    pub status: MemoryImportStatus,
    /// The memory the item created, merged into, or was imported as
    /// before; none when it failed.
    pub memory_id: Option<ID>,
    /// A vector was stored for it (false when the embedder failed, and for
    /// skipped and failed items).
    pub embedded: bool,
    pub error: Option<MemoryImportError>,
}

#[derive(SimpleObject)]
pub struct ImportMemoriesPayload {
    /// One per item, in input order.
    pub results: Vec<MemoryImportResult>,
    pub created: i32,
    pub merged: i32,
    pub skipped: i32,
    pub failed: i32,
}

#[derive(Default)]
pub struct MemoryImportMutation;

#[Object]
impl MemoryImportMutation {
    /// Import up to 1,000 memories at once (see README, *Importing
    /// memories*). Each item is judged as `remember` would, in order:
    /// near-duplicates (of stored memories or of earlier items) merge,
    /// `supersedesId` closes the older fact, mentions join the knowledge
    /// graph. An item with a known `key` is `SKIPPED`; a bad item is
    /// `FAILED` with its error and the others are stored.
    async fn import_memories(
        &self,
        ctx: &Context<'_>,
        input: ImportMemoriesInput,
    ) -> async_graphql::Result<ImportMemoriesPayload> {
        let scope = write_scope(ctx)?;
        if input.items.len() > MAX_IMPORT_BATCH {
            return Err(Error::validation(format!(
                "importMemories takes at most {MAX_IMPORT_BATCH} items, not {}",
                input.items.len()
            )))
            .gql();
        }
        let items = input.items.into_iter().map(item).collect();
        let imported = domain(ctx).memory.import(scope, items).await.gql()?;
        let count = |s: ImportStatus| imported.iter().filter(|r| r.status == s).count() as i32;
        Ok(ImportMemoriesPayload {
            created: count(ImportStatus::Created),
            merged: count(ImportStatus::Merged),
            skipped: count(ImportStatus::Skipped),
            failed: count(ImportStatus::Failed),
            results: imported.into_iter().map(result).collect(),
        })
    }
}

/// An item as the domain takes it; a malformed id fails only its item.
fn item(input: ImportMemoryItem) -> ImportItem {
    let entity = |id: &ID| ids::decode_as(id, NodeType::KgEntity).map(EntityId::from);
    let memory = (|| {
        Ok(NewMemory {
            subject: input.subject_id.as_ref().map(entity).transpose()?,
            mentions: input
                .mention_ids
                .unwrap_or_default()
                .iter()
                .map(entity)
                .collect::<Result<Vec<_>, Error>>()?,
            supersedes: input
                .supersedes_id
                .as_ref()
                .map(|id| ids::decode_as(id, NodeType::Memory).map(MemoryId::from))
                .transpose()?,
            content: input.content,
            tier: input.tier.map(Into::into),
            category: input.category,
            importance: input.importance,
            confidence: input.confidence,
            source_task: input.source_task_id,
            valid_from: input.valid_from,
        })
    })();
    ImportItem {
        key: input.key,
        memory,
    }
}

fn result(r: Imported) -> MemoryImportResult {
    MemoryImportResult {
        index: i32::try_from(r.index).unwrap_or(i32::MAX),
        key: r.key,
        status: r.status.into(),
        memory_id: r.memory.map(|id| ids::encode(NodeType::Memory, id.uuid())),
        embedded: r.embedded,
        error: r.error.map(|e| {
            let (code, message) = code_and_message(&e);
            MemoryImportError {
                code: code.to_owned(),
                message,
            }
        }),
    }
}
