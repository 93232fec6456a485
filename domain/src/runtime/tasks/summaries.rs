//! A page of tasks with the steps and latest events of each, read in one
//! statement.
//!
//! A dashboard's page of tasks that shows each task's steps and a window of
//! its events would take three statements: the page, then one per relation
//! ([`Tasks::steps_of_many`], [`Tasks::events_of_many`]). When all three
//! are read as summaries ([`Detail::Summary`]) their rows are narrow enough
//! to share one shape, so they are read in one `UNION ALL`: a kind, then
//! the columns of each kind at the positions [`Layout`] gives them (NULL
//! where a row has no such column). [`Tasks::page_with_summaries`] reads
//! the page as a common table expression and its relations through it,
//! only the [`Fields`] its caller shows; [`Tasks::step_and_event_summaries`]
//! reads every summary column of the relations of a page already read.
//!
//! Invariants:
//! - The answer is the one the separate reads give: the same rows, tasks
//!   in the page's order and steps in id order, each window oldest first, overlapping windows
//!   each with their own copy (`tests/e2e/dataloader.rs` compares them).
//! - Every branch is read through the caller's tenant scope.
//! - PostgreSQL types the columns of a `UNION` pairwise, left to right: a
//!   step's or an event's column shares a position only with columns of
//!   its own SQL type ([`Layout`]), and the page's branch comes first, with
//!   every NULL it holds cast to its position's type.

use sea_orm::{
    DbBackend, QueryResult,
    sea_query::{
        Alias, CommonTableExpression, DynIden, ExprTrait, IntoIden, JoinType, Query,
        SelectStatement, UnionType, WithClause,
    },
};

use super::fields::{Fields, Layout, blank_event, blank_step, blank_task};
use super::filter::filtered;
use super::reads::{group, in_windows, spread};
use super::*;
use crate::kernel::columns::column;

// A row's kind, at position 0.
const STEP: i32 = 0;
const EVENT: i32 = 1;
const TASK: i32 = 2;

/// The common table expression holding the page.
const PAGE: &str = "page";

/// Steps by task, and event windows by task and window.
pub type StepAndEventSummaries = (
    HashMap<TaskId, Vec<StepAttempt>>,
    HashMap<(TaskId, EventWindow), Vec<TaskEvent>>,
);

impl Tasks {
    /// A page of a scope's tasks that pass `filter`, with every step
    /// attempt of each (if `steps`) and the events each of `spans` means
    /// for each, in one statement, reading of each only `fields` (the
    /// others stay blank, see [`Fields`]).
    pub async fn page_with_summaries(
        &self,
        scope: TenantScope,
        filter: TaskFilter,
        request: PageRequest,
        fields: &Fields,
        steps: bool,
        spans: &[EventSpan],
    ) -> Result<(Page<Task>, StepAndEventSummaries)> {
        let layout = Layout::of(fields, steps, !spans.is_empty());
        let task_columns = layout.task.iter().map(|(_, f)| f.column());
        let backend = self.db.get_database_backend();
        let (page_select, size) = page::page_of(
            filtered(backend, scope, filter)?
                .select_only()
                .columns(task_columns),
            task::Column::Id,
            request,
        )?;
        let mut select = Query::select();
        select.expr(Expr::cust(TASK.to_string()));
        for (index, sql) in layout.types.iter().enumerate() {
            match layout.task.iter().find(|(at, _)| *at == index + 1) {
                Some((_, field)) => select.column((Alias::new(PAGE), field.column())),
                None => select.expr(Expr::cust(sql.null())),
            };
        }
        select.from(Alias::new(PAGE));
        if steps {
            let rows = task_step::Entity::find_in(scope).select_only().into_query();
            let placed = layout.step_columns();
            let branch = of_page(
                backend,
                rows,
                task_step::Column::TaskId,
                STEP,
                &placed,
                &layout,
            );
            select.union(UnionType::All, branch);
        }
        if !spans.is_empty() {
            let rows = task_event::Entity::find_in(scope)
                .filter(in_spans(spans))
                .select_only()
                .into_query();
            let placed = layout.event_columns();
            let branch = of_page(
                backend,
                rows,
                task_event::Column::TaskId,
                EVENT,
                &placed,
                &layout,
            );
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
        let rows = self.db.query_all_raw(backend.build(&query)).await?;
        let (mut tasks, step_rows, event_rows) = decode(rows, scope.tenant_id(), &layout)?;
        // `decode` sorts by id; `cut` takes the rows in the order they
        // were read.
        if request.scan() == page::Order::NewestFirst {
            tasks.reverse();
        }
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
        // No task rows: steps and events share positions among themselves.
        let relations = Fields {
            task: Vec::new(),
            ..Fields::summaries()
        };
        let layout = Layout::of(&relations, !step_tasks.is_empty(), !windows.is_empty());
        let steps_select = (!step_tasks.is_empty()).then(|| {
            let ids = step_tasks.iter().map(|i| i.uuid());
            let mut rows = task_step::Entity::find_in(scope)
                .filter(task_step::Column::TaskId.is_in(ids))
                .select_only()
                .into_query();
            let placed = layout.step_columns();
            shape(
                &mut rows,
                STEP,
                task_step::Entity.into_iden(),
                &placed,
                &layout,
            );
            rows
        });
        let events_select = (!windows.is_empty()).then(|| {
            let mut rows = task_event::Entity::find_in(scope)
                .filter(in_windows(&windows))
                .select_only()
                .into_query();
            let placed = layout.event_columns();
            shape(
                &mut rows,
                EVENT,
                task_event::Entity.into_iden(),
                &placed,
                &layout,
            );
            rows
        });
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
        let (_, steps, read) = decode(rows, scope.tenant_id(), &layout)?;
        spread(&windows, read, &mut events);
        let steps = group(step_tasks, steps, |(task, _)| *task, |(_, step)| step);
        Ok((steps, events))
    }
}

/// A statement's rows by kind, in order: tasks by id, steps by task in
/// the order they ran, events by task oldest first. Sorting here rather
/// than in the statement keeps PostgreSQL from sorting the rows of a
/// `UNION ALL` (a third of the statement's time when measured).
type Decoded = (Vec<Task>, Vec<(TaskId, StepAttempt)>, Vec<TaskEvent>);

fn decode(rows: Vec<QueryResult>, tenant: TenantId, layout: &Layout) -> Result<Decoded> {
    let (mut tasks, mut steps, mut events) = (Vec::new(), Vec::new(), Vec::new());
    for row in rows {
        match column::<i32>(&row, 0)? {
            TASK => {
                let mut task = blank_task(tenant);
                for (at, field) in &layout.task {
                    field.fill(&mut task, &row, *at)?;
                }
                tasks.push(task);
            }
            STEP => {
                let mut step = blank_step();
                for (at, field) in &layout.step {
                    field.fill(&mut step, &row, *at)?;
                }
                steps.push(step);
            }
            EVENT => {
                let mut event = blank_event(tenant);
                for (at, field) in &layout.event {
                    field.fill(&mut event, &row, *at)?;
                }
                events.push(event);
            }
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

/// `rows` (a scope's steps or events, `task` naming their task) of the
/// page's tasks, as `kind` rows with `placed`'s columns. PostgreSQL reads
/// each task's through its index, in a lateral subquery that `OFFSET 0`
/// keeps the planner from flattening: at 200 tasks it hashed the page
/// against every step and event of the tenant instead, which cost more
/// (BENCHMARKS.md, read path run 8); at 3,000 it chose the index reads
/// itself. SQLite joins.
fn of_page<C: ColumnTrait + Copy>(
    backend: DbBackend,
    mut rows: SelectStatement,
    task: C,
    kind: i32,
    placed: &[(usize, C)],
    layout: &Layout,
) -> SelectStatement {
    let table = task.entity_name();
    let of_page_task =
        Expr::col((table.clone(), task)).equals((Alias::new(PAGE), task::Column::Id));
    match backend {
        DbBackend::Postgres => {
            rows.and_where(of_page_task);
            for (_, column) in placed {
                rows.column((table.clone(), *column));
            }
            rows.offset(0);
            let mut branch = Query::select();
            shape(
                &mut branch,
                kind,
                Alias::new("r").into_iden(),
                placed,
                layout,
            );
            branch.from(Alias::new(PAGE)).join_lateral(
                JoinType::InnerJoin,
                rows,
                Alias::new("r"),
                Expr::cust("TRUE"),
            );
            branch
        }
        _ => {
            rows.join(JoinType::InnerJoin, Alias::new(PAGE), of_page_task);
            shape(&mut rows, kind, table, placed, layout);
            rows
        }
    }
}

/// Adds a row's `kind` and its columns of `table` at their positions
/// (`placed`), NULL at the others.
fn shape<C: ColumnTrait + Copy>(
    select: &mut SelectStatement,
    kind: i32,
    table: DynIden,
    placed: &[(usize, C)],
    layout: &Layout,
) {
    select.expr(Expr::cust(kind.to_string()));
    for position in 1..layout.width() {
        match placed.iter().find(|(at, _)| *at == position) {
            Some((_, column)) => select.column((table.clone(), *column)),
            None => select.expr(Expr::cust("NULL")),
        };
    }
}
