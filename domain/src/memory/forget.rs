//! Forgetting: deleting a memory (soft: restorable for the configured
//! window, [`MemoryConfig::purge_after_days`](super::MemoryConfig), then
//! purged by maintenance with its versions, events, mentions and vector)
//! and forgetting a subject (at once and for good: every memory about the
//! entity, then the entity with its relations and mentions).
//!
//! Invariants:
//! - A deleted memory is out of search, dossiers and default lists at
//!   once (only `ACTIVE` memories are searched); a list asked for
//!   `DELETED` shows the tenant's bin, and `restore` brings one back.
//! - Purging and forgetting delete rows; the database's cascades take the
//!   versions, events, mentions, relations and vectors with them (SQLite's
//!   full-text rows by trigger).
//! - Every deletion, restoration and forgetting is a memory event or an
//!   audit row (`memory.forget_subject`, with the counts).

use crate::kernel::db::BeginWrite;
use brainstem_entity::{EntityId, MemoryId, TenantOwned, TenantScope, kg_entity, memory};
use chrono::{DateTime, Utc};
use sea_orm::{ActiveModelTrait, ActiveValue::Set, ColumnTrait, IntoActiveModel, QueryFilter};
use serde_json::json;

use super::{
    Memories,
    record::{Memory, Status, event, record_event},
};
use crate::{
    Error, Principal, Result,
    kernel::audit::{self, AuditEntry},
};

/// How long, by default, a deleted memory or entity can be restored before
/// maintenance purges it.
pub const PURGE_AFTER_DAYS: u32 = 30;

/// What forgetting a subject removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Forgotten {
    pub memories: u64,
    pub entity: bool,
}

impl Memories {
    /// Move a memory to the bin (any status but deleted).
    pub async fn delete(
        &self,
        scope: TenantScope,
        id: MemoryId,
        now: DateTime<Utc>,
    ) -> Result<Memory> {
        self.set_deleted(scope, id, true, now).await
    }

    /// Bring a deleted memory back, as active.
    pub async fn restore(
        &self,
        scope: TenantScope,
        id: MemoryId,
        now: DateTime<Utc>,
    ) -> Result<Memory> {
        self.set_deleted(scope, id, false, now).await
    }

    async fn set_deleted(
        &self,
        scope: TenantScope,
        id: MemoryId,
        deleted: bool,
        now: DateTime<Utc>,
    ) -> Result<Memory> {
        let current = self.model(scope, id).await?;
        let is_deleted = current.status == Status::Deleted.as_str();
        if !deleted && !is_deleted {
            return Err(Error::validation("only a deleted memory can be restored"));
        }
        if is_deleted == deleted {
            // Deleting twice keeps the first time it went to the bin.
            return current.try_into();
        }
        let txn = self.db.begin_write().await?;
        let mut model = current.into_active_model();
        let status = if deleted {
            Status::Deleted
        } else {
            Status::Active
        };
        model.status = Set(status.as_str().into());
        // The time it went to the bin, which purging counts from.
        model.updated_at = Set(now);
        model.update(&txn).await?;
        let kind = if deleted { "DELETED" } else { "RESTORED" };
        record_event(&txn, scope, id, event(kind, now)).await?;
        txn.commit().await?;
        self.get(scope, id).await
    }

    /// Delete for good the tenant's memories deleted before `before`;
    /// returns how many (run by maintenance).
    pub(super) async fn purge_deleted<C: sea_orm::ConnectionTrait>(
        db: &C,
        scope: TenantScope,
        before: DateTime<Utc>,
    ) -> Result<u64> {
        Ok(memory::Entity::delete_many_in(scope)
            .filter(memory::Column::Status.eq(Status::Deleted.as_str()))
            .filter(memory::Column::UpdatedAt.lt(before))
            .exec(db)
            .await?
            .rows_affected)
    }

    /// Remove everything about a subject at once (tenant admins; audited):
    /// the memories whose subject it is, and the entity with its relations
    /// and the mentions of it.
    pub async fn forget_subject(
        &self,
        principal: &Principal,
        entity: EntityId,
    ) -> Result<Forgotten> {
        let scope = principal.require_scope("admin")?;
        let txn = self.db.begin_write().await?;
        let found = kg_entity::Entity::find_by_id_in(scope, entity.uuid())
            .one(&txn)
            .await?
            .ok_or_else(|| Error::not_found("entity"))?;
        let memories = memory::Entity::delete_many_in(scope)
            .filter(memory::Column::SubjectId.eq(entity.uuid()))
            .exec(&txn)
            .await?
            .rows_affected;
        let removed = kg_entity::Entity::delete_many_in(scope)
            .filter(kg_entity::Column::Id.eq(entity.uuid()))
            .exec(&txn)
            .await?
            .rows_affected
            > 0;
        audit::record(
            &txn,
            AuditEntry {
                tenant: Some(scope.tenant_id()),
                actor: principal.actor.to_string(),
                action: "memory.forget_subject".into(),
                target: entity.to_string(),
                data: json!({"memories": memories, "entity_type": found.entity_type}),
            },
        )
        .await?;
        txn.commit().await?;
        Ok(Forgotten {
            memories,
            entity: removed,
        })
    }
}
