//! Outcomes: how using a memory turned out, and the score change it makes
//! ([`Memories::record_outcome`]).
//!
//! Worked +0.2, failed −0.3, partial +0.05, unknown ±0, clamped to 0..1;
//! every outcome adds one use. `MEMORY_BANK` and `DOCUMENTS` are
//! authoritative: their score never changes, only their uses. Only an
//! active memory takes an outcome. `uses` doubles as the version of an
//! optimistic update, so concurrent outcomes retry instead of losing one.

use crate::kernel::db::BeginWrite;
use brainstem_entity::{MemoryId, TenantOwned, TenantScope, memory};
use chrono::Utc;
use sea_orm::{ColumnTrait, QueryFilter};
use uuid::Uuid;

use super::{Memories, Memory, Status, Tier, event, record_event, round_score};
use crate::{Error, Result};

/// How using a memory turned out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Worked,
    Failed,
    Partial,
    Unknown,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Worked => "WORKED",
            Outcome::Failed => "FAILED",
            Outcome::Partial => "PARTIAL",
            Outcome::Unknown => "UNKNOWN",
        }
    }

    /// The score change.
    pub fn delta(self) -> f64 {
        match self {
            Outcome::Worked => 0.2,
            Outcome::Failed => -0.3,
            Outcome::Partial => 0.05,
            Outcome::Unknown => 0.0,
        }
    }
}

#[derive(Clone, Debug)]
pub struct OutcomeRecorded {
    pub memory: Memory,
    pub score_before: f64,
    pub score_after: f64,
}

impl Memories {
    /// Apply an outcome (see the module header for the rule).
    pub async fn record_outcome(
        &self,
        scope: TenantScope,
        id: MemoryId,
        outcome: Outcome,
        source_task: Option<Uuid>,
    ) -> Result<OutcomeRecorded> {
        // `uses` grows with every outcome, so it doubles as a version for an
        // optimistic update: a concurrent outcome makes this one retry.
        for _ in 0..5 {
            let current = self.model(scope, id).await?;
            if current.status != Status::Active.as_str() {
                return Err(Error::InvalidTransition(format!(
                    "memory is {}; outcomes apply to active memories",
                    current.status.to_lowercase()
                )));
            }
            let tier = Tier::parse(&current.tier)?;
            let before = current.score;
            let after = if tier.is_outcome_scored() {
                round_score(before + outcome.delta())
            } else {
                before
            };
            let now = Utc::now();
            let txn = self.db.begin_write().await?;
            let updated = memory::Entity::update_many_in(scope)
                .col_expr(
                    memory::Column::Score,
                    sea_orm::sea_query::Expr::value(after),
                )
                .col_expr(
                    memory::Column::Uses,
                    sea_orm::sea_query::Expr::value(current.uses + 1),
                )
                .col_expr(
                    memory::Column::LastUsedAt,
                    sea_orm::sea_query::Expr::value(Some(now)),
                )
                .col_expr(
                    memory::Column::UpdatedAt,
                    sea_orm::sea_query::Expr::value(now),
                )
                .filter(memory::Column::Id.eq(id.uuid()))
                .filter(memory::Column::Uses.eq(current.uses))
                .exec(&txn)
                .await?;
            if updated.rows_affected == 0 {
                txn.rollback().await?;
                continue;
            }
            let mut e = event("OUTCOME", now);
            e.outcome = Some(outcome.as_str().into());
            e.score_before = Some(before);
            e.score_after = Some(after);
            e.source_task = source_task;
            record_event(&txn, scope, id, e).await?;
            txn.commit().await?;
            return Ok(OutcomeRecorded {
                memory: self.get(scope, id).await?,
                score_before: before,
                score_after: after,
            });
        }
        Err(Error::Conflict(
            "the memory changed concurrently; retry".into(),
        ))
    }
}
