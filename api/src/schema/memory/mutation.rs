//! Writing memories: remember a fact (merging near-duplicates), record how
//! using one turned out, update, archive, delete and restore, forget a
//! subject, and re-embed the tenant's memories. Every mutation takes one `input` object and returns a payload
//! object.

use async_graphql::{Context, ID, InputObject, MaybeUndefined, Object, SimpleObject};
use brainstem_domain::{
    EntityId, Error, TaskId,
    memory::{MemoryUpdate, NewMemory},
};
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{Memory, MemoryOutcome, MemoryTier, memory_id, write_scope};
use crate::{
    error::ResultExt,
    schema::{
        context::{domain, principal},
        graph::entity_id,
        ids::{self, NodeType},
    },
};

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
pub struct ForgetSubjectInput {
    /// The knowledge-graph entity to forget.
    pub entity_id: ID,
}

#[derive(SimpleObject)]
pub struct ForgetSubjectPayload {
    /// Memories whose subject it was, deleted for good.
    pub memories_removed: u64,
    /// Whether the entity itself was removed.
    pub entity_removed: bool,
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
pub struct AcceptMemorySuggestionInput {
    /// A task whose result suggests memories.
    pub task_id: ID,
    /// Which of `result.memorySuggestions`, from 0.
    pub index: i32,
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

    /// Keep one of the memories a task's answer suggests: it is stored as
    /// a memory (importance 0.5, about the task's subject, with the task as
    /// its source). Suggestions become memories only this way. Accepting
    /// the same one again merges into the memory it made.
    async fn accept_memory_suggestion(
        &self,
        ctx: &Context<'_>,
        input: AcceptMemorySuggestionInput,
    ) -> async_graphql::Result<RememberPayload> {
        let scope = write_scope(ctx)?;
        let task_id = ids::decode_as(&input.task_id, NodeType::Task)
            .map(TaskId::from)
            .gql()?;
        let domain = domain(ctx);
        let task = domain.tasks.get(scope, task_id).await.gql()?;
        let content = usize::try_from(input.index)
            .ok()
            .and_then(|i| task.memory_suggestion(i))
            .ok_or_else(|| {
                Error::not_found(format!("memory suggestion {} of the task", input.index))
            })
            .gql()?
            .to_owned();
        let new = NewMemory {
            content,
            importance: Some(0.5),
            subject: task.subject_id.map(EntityId::from),
            source_task: Some(task.id.uuid()),
            ..NewMemory::default()
        };
        let r = domain.memory.remember(scope, new).await.gql()?;
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

    /// Move a memory to the bin: out of search and lists at once,
    /// restorable with `restoreMemory` for `memory_purge_after_days` (30),
    /// then purged with its
    /// versions, events, mentions and vector.
    async fn delete_memory(
        &self,
        ctx: &Context<'_>,
        input: ArchiveMemoryInput,
    ) -> async_graphql::Result<MemoryPayload> {
        let scope = write_scope(ctx)?;
        let id = memory_id(&input.id)?;
        let m = domain(ctx)
            .memory
            .delete(scope, id, chrono::Utc::now())
            .await
            .gql()?;
        Ok(MemoryPayload { memory: Memory(m) })
    }

    /// Bring a deleted memory back (before it is purged).
    async fn restore_memory(
        &self,
        ctx: &Context<'_>,
        input: ArchiveMemoryInput,
    ) -> async_graphql::Result<MemoryPayload> {
        let scope = write_scope(ctx)?;
        let id = memory_id(&input.id)?;
        let m = domain(ctx)
            .memory
            .restore(scope, id, chrono::Utc::now())
            .await
            .gql()?;
        Ok(MemoryPayload { memory: Memory(m) })
    }

    /// Remove everything about a subject at once and for good (tenant
    /// admins; audited as `memory.forget_subject`): the memories whose
    /// subject it is, and the entity with its relations and the mentions
    /// of it.
    async fn forget_subject(
        &self,
        ctx: &Context<'_>,
        input: ForgetSubjectInput,
    ) -> async_graphql::Result<ForgetSubjectPayload> {
        let entity = entity_id(&input.entity_id)?;
        let forgotten = domain(ctx)
            .memory
            .forget_subject(principal(ctx)?, entity)
            .await
            .gql()?;
        Ok(ForgetSubjectPayload {
            memories_removed: forgotten.memories,
            entity_removed: forgotten.entity,
        })
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
}
