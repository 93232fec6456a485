//! The steps and latest events of a page of tasks, read in one statement.
//!
//! A dashboard's page of tasks that shows each task's steps and a window of
//! its events would read them in two statements, one per relation
//! ([`Tasks::steps_of_many`], [`Tasks::events_of_many`]). When both are read
//! as summaries ([`Detail::Summary`]) their rows are narrow enough to share
//! one shape, so [`Tasks::step_and_event_summaries`] reads them in one
//! `UNION ALL`: the columns both kinds have, then those only one kind has
//! (NULL in the other's rows), decoded by position.
//!
//! Invariants:
//! - The answer is the one the two reads give: the same rows, steps in the
//!   order they ran and each window oldest first, overlapping windows each
//!   with their own copy (`tests/e2e/dataloader.rs` compares them).
//! - Both branches are read through the caller's tenant scope.

use sea_orm::{
    QueryResult,
    sea_query::{Order, SelectStatement, UnionType},
};

use super::reads::{group, in_windows, spread};
use super::*;

// A row's columns, by position: 0 which relation it belongs to; both
// relations': 1 id, 2 tenant, 3 task, 4 step id, 5 tool, 6 status,
// 7 summary, 8 error; an event's: 9 seq, 10 kind; a step's: 11 attempt,
// 12 duration, 13 idempotency key; 14 when the step started or the event
// was written; a step's 15 finished.
const STEP: i32 = 0;
const EVENT: i32 = 1;

/// Steps by task, and event windows by task and window.
pub type StepAndEventSummaries = (
    HashMap<TaskId, Vec<StepAttempt>>,
    HashMap<(TaskId, EventWindow), Vec<TaskEvent>>,
);

impl Tasks {
    /// Every step attempt of the tasks `step_tasks` and the events in
    /// `windows`, as summaries, in one statement.
    pub async fn step_and_event_summaries(
        &self,
        scope: TenantScope,
        step_tasks: &[TaskId],
        windows: &[(TaskId, EventWindow)],
    ) -> Result<StepAndEventSummaries> {
        let mut events: HashMap<(TaskId, EventWindow), Vec<TaskEvent>> =
            windows.iter().map(|w| (*w, Vec::new())).collect();
        let windows: Vec<&(TaskId, EventWindow)> =
            windows.iter().filter(|(_, w)| w.until > w.after).collect();
        let steps_select = (!step_tasks.is_empty()).then(|| steps_branch(scope, step_tasks));
        let events_select = (!windows.is_empty()).then(|| events_branch(scope, &windows));
        let mut select = match (steps_select, events_select) {
            (Some(mut steps), Some(events)) => {
                steps.union(UnionType::All, events);
                steps
            }
            (Some(only), None) | (None, Some(only)) => only,
            (None, None) => return Ok((HashMap::new(), events)),
        };
        // Kind, task, sequence (NULL for every step), row id.
        for column in ["1", "4", "10", "2"] {
            select.order_by_expr(Expr::cust(column), Order::Asc);
        }
        let backend = self.db.get_database_backend();
        let rows = self.db.query_all_raw(backend.build(&select)).await?;
        let mut steps = Vec::new();
        let mut read = Vec::new();
        for row in rows {
            match row.try_get_by_index::<i32>(0)? {
                STEP => steps.push(step_of(&row)?),
                _ => read.push(event_of(&row)?),
            }
        }
        spread(&windows, read, &mut events);
        let steps = group(step_tasks, steps, |(task, _)| *task, |(_, step)| step);
        Ok((steps, events))
    }
}

fn steps_branch(scope: TenantScope, tasks: &[TaskId]) -> SelectStatement {
    use task_step::Column as S;
    task_step::Entity::find_in(scope)
        .filter(S::TaskId.is_in(tasks.iter().map(|i| i.uuid())))
        .select_only()
        .expr(Expr::cust(STEP.to_string()))
        .columns([
            S::Id,
            S::TenantId,
            S::TaskId,
            S::StepId,
            S::Tool,
            S::Status,
            S::Summary,
            S::Error,
        ])
        .expr(Expr::cust("NULL"))
        .expr(Expr::cust("NULL"))
        .columns([
            S::Attempt,
            S::DurationMs,
            S::IdempotencyKey,
            S::StartedAt,
            S::FinishedAt,
        ])
        .into_query()
}

fn events_branch(scope: TenantScope, windows: &[&(TaskId, EventWindow)]) -> SelectStatement {
    use task_event::Column as E;
    task_event::Entity::find_in(scope)
        .filter(in_windows(windows))
        .select_only()
        .expr(Expr::cust(EVENT.to_string()))
        .columns([
            E::Id,
            E::TenantId,
            E::TaskId,
            E::StepId,
            E::Tool,
            E::Status,
            E::Summary,
            E::Error,
        ])
        .columns([E::Seq, E::Kind])
        .expr(Expr::cust("NULL"))
        .expr(Expr::cust("NULL"))
        .expr(Expr::cust("NULL"))
        .column(E::CreatedAt)
        .expr(Expr::cust("NULL"))
        .into_query()
}

/// A step row: its task and the attempt.
fn step_of(row: &QueryResult) -> Result<(TaskId, StepAttempt)> {
    let task: Uuid = row.try_get_by_index(3)?;
    Ok((
        task.into(),
        StepAttempt {
            id: row.try_get_by_index(1)?,
            step_id: row.try_get_by_index(4)?,
            tool: row.try_get_by_index(5)?,
            status: row.try_get_by_index(6)?,
            summary: row.try_get_by_index(7)?,
            error: row.try_get_by_index(8)?,
            attempt: row.try_get_by_index(11)?,
            duration_ms: row.try_get_by_index(12)?,
            idempotency_key: row.try_get_by_index(13)?,
            started_at: row.try_get_by_index(14)?,
            finished_at: row.try_get_by_index(15)?,
            args: Value::Null,
            output: Value::Null,
            usage: Usage::default(),
        },
    ))
}

fn event_of(row: &QueryResult) -> Result<TaskEvent> {
    let tenant: Uuid = row.try_get_by_index(2)?;
    let task: Uuid = row.try_get_by_index(3)?;
    let kind: String = row.try_get_by_index(10)?;
    Ok(TaskEvent {
        id: row.try_get_by_index(1)?,
        tenant: tenant.into(),
        task_id: task.into(),
        step_id: row.try_get_by_index(4)?,
        tool: row.try_get_by_index(5)?,
        status: row.try_get_by_index(6)?,
        summary: row.try_get_by_index(7)?,
        error: row.try_get_by_index(8)?,
        seq: row.try_get_by_index(9)?,
        kind: kind.parse()?,
        created_at: row.try_get_by_index(14)?,
        data_keys: Vec::new(),
        data: Value::Null,
    })
}
