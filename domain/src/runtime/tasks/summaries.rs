//! A page of tasks with the steps and latest events of each, read in one
//! statement.
//!
//! A dashboard's page of tasks that shows each task's steps and a window of
//! its events would take three statements: the page, then one per relation
//! ([`Tasks::steps_of_many`], [`Tasks::events_of_many`]). When all three
//! are read as summaries ([`Detail::Summary`]) their rows are narrow enough
//! to share one shape, so they are read in one `UNION ALL`: a kind, the
//! columns steps and events have, then those only one of them has, then a
//! task's (NULL where a row has no such column). [`Tasks::page_with_summaries`]
//! reads the page as a common table expression and its relations through
//! it; [`Tasks::step_and_event_summaries`] reads the relations of a page
//! already read.
//!
//! Invariants:
//! - The answer is the one the separate reads give: the same rows, tasks
//!   and steps in id order, each window oldest first, overlapping windows
//!   each with their own copy (`tests/e2e/dataloader.rs` compares them).
//! - Every branch is read through the caller's tenant scope.
//! - PostgreSQL types the columns of a `UNION` pairwise, left to right, so
//!   the first branch's NULLs name their types (`RELATION_TYPES`).

use sea_orm::{
    QueryResult,
    sea_query::{
        Alias, CommonTableExpression, ExprTrait, JoinType, Query, SelectStatement, UnionType,
        WithClause,
    },
};

use super::reads::{TASK_SUMMARY, TaskSummaryRow, filtered, group, in_windows, spread};
use super::*;

// A row's columns, by position: 0 which relation it belongs to; both
// relations': 1 id, 2 tenant, 3 task, 4 step id, 5 tool, 6 status,
// 7 summary, 8 error; an event's: 9 seq, 10 kind; a step's: 11 attempt,
// 12 duration, 13 idempotency key; 14 when the step started or the event
// was written; a step's 15 finished; a task's 16 to 47 (`TASK_SUMMARY`).
const STEP: i32 = 0;
const EVENT: i32 = 1;
const TASK: i32 = 2;

/// The types of columns 1 to 15, for a task row's NULLs.
const RELATION_TYPES: [&str; 15] = [
    "uuid",
    "uuid",
    "uuid",
    "text",
    "text",
    "text",
    "text",
    "text",
    "bigint",
    "text",
    "integer",
    "bigint",
    "text",
    "timestamptz",
    "timestamptz",
];

/// The common table expression holding the page.
const PAGE: &str = "page";

/// Steps by task, and event windows by task and window.
pub type StepAndEventSummaries = (
    HashMap<TaskId, Vec<StepAttempt>>,
    HashMap<(TaskId, EventWindow), Vec<TaskEvent>>,
);

impl Tasks {
    /// A page of a scope's tasks that pass `filter`, as summaries, with
    /// every step attempt of each (if `steps`) and the events each of
    /// `spans` means for each, in one statement.
    pub async fn page_with_summaries(
        &self,
        scope: TenantScope,
        filter: TaskFilter,
        request: PageRequest,
        steps: bool,
        spans: &[EventSpan],
    ) -> Result<(Page<Task>, StepAndEventSummaries)> {
        let (page_select, size) = page::page_of(
            filtered(scope, filter).select_only().columns(TASK_SUMMARY),
            task::Column::Id,
            request,
        )?;
        let mut select = Query::select();
        select.expr(Expr::cust(TASK.to_string()));
        for ty in RELATION_TYPES {
            select.expr(Expr::cust(format!("CAST(NULL AS {ty})")));
        }
        for column in TASK_SUMMARY {
            select.column((Alias::new(PAGE), column));
        }
        select.from(Alias::new(PAGE));
        if steps {
            let in_page = task_step::Column::TaskId.in_subquery(
                Query::select()
                    .column(task::Column::Id)
                    .from(Alias::new(PAGE))
                    .to_owned(),
            );
            let mut branch = steps_branch(scope, in_page);
            pad(&mut branch);
            select.union(UnionType::All, branch);
        }
        if !spans.is_empty() {
            let mut branch = events_branch(scope, in_spans(spans));
            branch.join(
                JoinType::InnerJoin,
                Alias::new(PAGE),
                Expr::col((task_event::Entity, task_event::Column::TaskId))
                    .equals((Alias::new(PAGE), task::Column::Id)),
            );
            pad(&mut branch);
            select.union(UnionType::All, branch);
        }
        let query = select.with(
            WithClause::new()
                .cte(
                    CommonTableExpression::new()
                        .query(page_select.into_query())
                        .table_name(Alias::new(PAGE))
                        .to_owned(),
                )
                .to_owned(),
        );
        let backend = self.db.get_database_backend();
        let rows = self.db.query_all_raw(backend.build(&query)).await?;
        let (tasks, step_rows, event_rows) = decode(rows)?;
        let page = page::cut(tasks, size, request);
        let ids: Vec<TaskId> = page.items.iter().map(|t| t.id).collect();
        let steps = if steps {
            let mut by_task = group(&ids, step_rows, |(task, _)| *task, |(_, step)| step);
            by_task.retain(|id, _| ids.contains(id));
            by_task
        } else {
            HashMap::new()
        };
        let windows: Vec<(TaskId, EventWindow)> = page
            .items
            .iter()
            .flat_map(|task| spans.iter().map(|span| (task.id, span.window(task))))
            .collect();
        let mut events = windows.iter().map(|w| (*w, Vec::new())).collect();
        spread(&windows.iter().collect::<Vec<_>>(), event_rows, &mut events);
        Ok((page, (steps, events)))
    }

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
        let steps_select = (!step_tasks.is_empty()).then(|| {
            let ids = step_tasks.iter().map(|i| i.uuid());
            steps_branch(scope, task_step::Column::TaskId.is_in(ids))
        });
        let events_select =
            (!windows.is_empty()).then(|| events_branch(scope, in_windows(&windows)));
        let select = match (steps_select, events_select) {
            (Some(mut steps), Some(events)) => {
                steps.union(UnionType::All, events);
                steps
            }
            (Some(only), None) | (None, Some(only)) => only,
            (None, None) => return Ok((HashMap::new(), events)),
        };
        let backend = self.db.get_database_backend();
        let rows = self.db.query_all_raw(backend.build(&select)).await?;
        let (_, steps, read) = decode(rows)?;
        spread(&windows, read, &mut events);
        let steps = group(step_tasks, steps, |(task, _)| *task, |(_, step)| step);
        Ok((steps, events))
    }
}

/// A statement's rows by kind, in order: tasks by id, steps by task in
/// the order they ran, events by task oldest first. Sorting here rather
/// than in the statement keeps PostgreSQL from sorting wide padded rows (a
/// third of the statement's time).
type Decoded = (Vec<Task>, Vec<(TaskId, StepAttempt)>, Vec<TaskEvent>);

fn decode(rows: Vec<QueryResult>) -> Result<Decoded> {
    let (mut tasks, mut steps, mut events) = (Vec::new(), Vec::new(), Vec::new());
    for row in rows {
        match row.try_get_by_index::<i32>(0)? {
            TASK => tasks.push(Task::try_from(TaskSummaryRow::at(&row, 16)?)?),
            STEP => steps.push(step_of(&row)?),
            EVENT => events.push(event_of(&row)?),
            other => {
                return Err(Error::Internal(format!(
                    "a page's row of unknown kind {other}"
                )));
            }
        }
    }
    tasks.sort_unstable_by_key(|t: &Task| t.id);
    steps.sort_unstable_by_key(|(task, step): &(TaskId, StepAttempt)| (*task, step.id));
    events.sort_unstable_by_key(|e: &TaskEvent| (e.task_id, e.seq));
    Ok((tasks, steps, events))
}

/// Events of the page's tasks (joined as `page`) in any of `spans`.
fn in_spans(spans: &[EventSpan]) -> Condition {
    let seq = || Expr::col((task_event::Entity, task_event::Column::Seq));
    let last_seq = || Expr::col((Alias::new(PAGE), task::Column::LastSeq));
    let mut any = Condition::any();
    for span in spans {
        any = any.add(match *span {
            EventSpan::First { after, n } => {
                let window = EventWindow::first(after, n);
                Condition::all()
                    .add(seq().gt(window.after))
                    .add(seq().lte(window.until))
            }
            EventSpan::Last { after, n } => Condition::all()
                .add(seq().gt(after))
                .add(seq().gt(last_seq().sub(i64::try_from(n).unwrap_or(i64::MAX))))
                .add(seq().lte(last_seq())),
        });
    }
    any
}

/// NULLs for a task's columns, after a step's or an event's.
fn pad(branch: &mut SelectStatement) {
    for _ in TASK_SUMMARY {
        branch.expr(Expr::cust("NULL"));
    }
}

fn steps_branch(scope: TenantScope, which: SimpleExpr) -> SelectStatement {
    use task_step::Column as S;
    task_step::Entity::find_in(scope)
        .filter(which)
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

fn events_branch(scope: TenantScope, which: Condition) -> SelectStatement {
    use task_event::Column as E;
    task_event::Entity::find_in(scope)
        .filter(which)
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
