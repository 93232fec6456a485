//! The dossier: everything current known about a knowledge-graph entity
//! ([`Memories::dossier`]): the active, unexpired facts about it or
//! mentioning it, strongest first, its insights and recent events, and its
//! neighbours one hop away. [`Memories::dossier_at`] answers the same as
//! of an earlier time: the facts created by then and not yet superseded,
//! expired or deleted then, and the relations that held then
//! ([`Moment::AsOf`]).

use brainstem_entity::{EntityId, TenantOwned, TenantScope, memory, memory_mention};
use chrono::{DateTime, Utc};
use sea_orm::{ColumnTrait, Condition, QueryFilter, QueryOrder, QuerySelect};
use uuid::Uuid;

use super::{Memories, Memory, Status, rank};
use crate::{
    Result,
    memory::graph::{Entity, Moment, Neighborhood},
};

/// What is known about a subject.
#[derive(Clone, Debug)]
pub struct Dossier {
    pub subject: Entity,
    /// Every current fact about the subject or mentioning it, strongest first.
    pub facts: Vec<Memory>,
    /// Facts that are not events (insights, preferences, warnings…), top 10.
    pub insights: Vec<Memory>,
    /// Facts of category `event`, newest first, top 10.
    pub recent_events: Vec<Memory>,
    /// Entities one hop away.
    pub neighborhood: Neighborhood,
    // The subject's recent tasks and pending work come from the tasks
    // table (`Tasks::recent_of_subject`); the `memory.dossier` tool adds them.
}

impl Memories {
    /// Everything current known about `subject`.
    pub async fn dossier(
        &self,
        scope: TenantScope,
        subject: EntityId,
        now: DateTime<Utc>,
    ) -> Result<Dossier> {
        self.dossier_at(scope, subject, Moment::Now(now)).await
    }

    /// What was known about `subject` at a moment.
    pub async fn dossier_at(
        &self,
        scope: TenantScope,
        subject: EntityId,
        at: Moment,
    ) -> Result<Dossier> {
        let entity = self.graph.get(scope, subject).await?;
        let mentioned: Vec<Uuid> = memory_mention::Entity::find_in(scope)
            .filter(memory_mention::Column::EntityId.eq(subject.uuid()))
            .all(&self.db)
            .await?
            .into_iter()
            .map(|m| m.memory_id)
            .collect();
        let mut about = Condition::any().add(memory::Column::SubjectId.eq(subject.uuid()));
        if !mentioned.is_empty() {
            about = about.add(memory::Column::Id.is_in(mentioned));
        }
        let rows = memory::Entity::find_in(scope)
            .filter(about)
            .filter(standing(at))
            .order_by_desc(memory::Column::Id)
            .limit(500)
            .all(&self.db)
            .await?;
        let mut facts = rows
            .into_iter()
            .map(Memory::try_from)
            .collect::<Result<Vec<_>>>()?;
        let strength = |m: &Memory| {
            rank::score_boost(m.tier, m.score, m.importance, m.confidence)
                * rank::tier_boost(m.tier)
        };
        facts.sort_by(|a, b| {
            strength(b)
                .total_cmp(&strength(a))
                .then(b.created_at.cmp(&a.created_at))
                .then(b.id.cmp(&a.id))
        });
        let insights: Vec<Memory> = facts
            .iter()
            .filter(|m| m.category != "event")
            .take(10)
            .cloned()
            .collect();
        let mut recent_events: Vec<Memory> = facts
            .iter()
            .filter(|m| m.category == "event")
            .cloned()
            .collect();
        recent_events.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
        recent_events.truncate(10);
        let neighborhood = self
            .graph
            .neighborhood_at(scope, subject, 1, &[], at)
            .await?;
        Ok(Dossier {
            subject: entity,
            facts,
            insights,
            recent_events,
            neighborhood,
        })
    }
}

/// The memories that stood at `at`: active, unexpired and current now; as
/// of an earlier time, created by then and not yet superseded, expired or
/// deleted then (a deleted memory's `updated_at` is when it went to the
/// bin).
fn standing(at: Moment) -> Condition {
    let (status, t) = match at {
        Moment::Now(now) => (
            Condition::all().add(memory::Column::Status.eq(Status::Active.as_str())),
            now,
        ),
        Moment::AsOf(t) => (
            Condition::all().add(memory::Column::CreatedAt.lte(t)).add(
                Condition::any()
                    .add(
                        memory::Column::Status
                            .is_in([Status::Active.as_str(), Status::Expired.as_str()]),
                    )
                    .add(
                        Condition::all()
                            .add(memory::Column::Status.eq(Status::Deleted.as_str()))
                            .add(memory::Column::UpdatedAt.gt(t)),
                    ),
            ),
            t,
        ),
    };
    status
        .add(
            Condition::any()
                .add(memory::Column::ValidTo.is_null())
                .add(memory::Column::ValidTo.gt(t)),
        )
        .add(
            Condition::any()
                .add(memory::Column::ExpiresAt.is_null())
                .add(memory::Column::ExpiresAt.gt(t)),
        )
}
