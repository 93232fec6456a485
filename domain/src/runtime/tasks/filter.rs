//! Which of a tenant's tasks a list shows: [`TaskFilter`] and the condition
//! it adds to a scoped select.
//!
//! Every condition is added to `task::Entity::find_in(scope)`, so a filter
//! narrows one tenant's tasks and never widens them. Ranges are half-open,
//! `[after, before)`, so adjacent windows neither overlap nor leave a gap;
//! a range whose `after` is later than its `before` is refused rather than
//! answered with an empty list. Each filter has an index that leads with
//! the tenant (migration `m20261128_110000_task_list_indexes`); the text
//! match is `kernel::text_match`.

use chrono::{DateTime, Utc};
use sea_orm::{ColumnTrait, DbBackend, QueryFilter, Select};

use super::{Channel, TaskStatus};
use crate::{
    Error, Result,
    kernel::text_match::{self, MAX_MATCH_CHARS},
};
use brainstem_entity::{ConversationId, TaskId, TenantOwned, TenantScope, task};

/// Filter for listing tasks; every field given must hold.
#[derive(Clone, Debug, Default)]
pub struct TaskFilter {
    /// Any of these statuses (all when empty).
    pub statuses: Vec<TaskStatus>,
    pub intent: Option<String>,
    pub channel: Option<Channel>,
    pub parent: Option<TaskId>,
    /// The turns of this conversation only.
    pub conversation: Option<ConversationId>,
    /// Tasks that ran (or run) this plan.
    pub plan_key: Option<String>,
    pub created: TimeRange,
    pub updated: TimeRange,
    /// The task's input contains this text, ignoring case.
    pub input_contains: Option<String>,
}

/// Instants at or after `after` and before `before`; either end open.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeRange {
    pub after: Option<DateTime<Utc>>,
    pub before: Option<DateTime<Utc>>,
}

impl TimeRange {
    fn check(&self, name: &str) -> Result<()> {
        match (self.after, self.before) {
            (Some(after), Some(before)) if after > before => Err(Error::validation(format!(
                "`{name}After` ({after}) is later than `{name}Before` ({before})"
            ))),
            _ => Ok(()),
        }
    }

    fn apply(
        &self,
        mut select: Select<task::Entity>,
        column: task::Column,
    ) -> Select<task::Entity> {
        if let Some(after) = self.after {
            select = select.filter(column.gte(after));
        }
        if let Some(before) = self.before {
            select = select.filter(column.lt(before));
        }
        select
    }
}

impl TaskFilter {
    /// Refuses what cannot be meant: an inverted range, a text match past
    /// [`MAX_MATCH_CHARS`].
    pub fn check(&self) -> Result<()> {
        self.created.check("created")?;
        self.updated.check("updated")?;
        if let Some(text) = &self.input_contains
            && text.chars().count() > MAX_MATCH_CHARS
        {
            return Err(Error::validation(format!(
                "`inputContains` is at most {MAX_MATCH_CHARS} characters"
            )));
        }
        Ok(())
    }
}

/// A scope's tasks that pass `filter` (checked first).
pub(super) fn filtered(
    backend: DbBackend,
    scope: TenantScope,
    filter: TaskFilter,
) -> Result<Select<task::Entity>> {
    filter.check()?;
    let mut select = task::Entity::find_in(scope);
    if !filter.statuses.is_empty() {
        let statuses: Vec<&str> = filter.statuses.iter().map(|s| s.as_str()).collect();
        select = select.filter(task::Column::Status.is_in(statuses));
    }
    if let Some(intent) = filter.intent {
        select = select.filter(task::Column::Intent.eq(intent));
    }
    if let Some(channel) = filter.channel {
        select = select.filter(task::Column::Channel.eq(channel.as_str()));
    }
    if let Some(parent) = filter.parent {
        select = select.filter(task::Column::ParentTaskId.eq(parent.uuid()));
    }
    if let Some(conversation) = filter.conversation {
        select = select.filter(task::Column::ConversationId.eq(conversation.uuid()));
    }
    if let Some(plan_key) = filter.plan_key {
        select = select.filter(task::Column::PlanKey.eq(plan_key));
    }
    select = filter.created.apply(select, task::Column::CreatedAt);
    select = filter.updated.apply(select, task::Column::UpdatedAt);
    if let Some(text) = filter.input_contains.filter(|t| !t.trim().is_empty()) {
        select = select.filter(text_match::contains(
            backend,
            (task::Entity, task::Column::InputText),
            &text,
        ));
    }
    Ok(select)
}
