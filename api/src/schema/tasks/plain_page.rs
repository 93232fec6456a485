//! A page of tasks answered in one pass, when its selection allows.
//!
//! A dashboard's page of 50 tasks with their steps and last events,
//! resolved the general way, is some 400 field futures for the connection,
//! its edges and each task (`PlainList` already spares the steps and
//! events theirs) and a statement that reads every summary column of every
//! row. When a page's selection is only fields that copy a value out of a
//! row (a task's scalars and `plan`, its `steps` and `events` with plain
//! fields, `cursor`, `pageInfo`, `__typename`), with no directive or
//! fragment and no variable inside it (the page's own `first` and `after`
//! may be variables), [`plan`] says which columns it shows, one
//! statement reads only those (`Tasks::page_with_summaries` with their
//! [`Fields`]) and [`answer`] builds the page's value directly, in
//! selection order. Any other selection takes the general path
//! (`super::listing`).
//!
//! Invariants:
//! - Both paths answer the same (`tests/e2e/dataloader.rs` asks for every
//!   plain field both ways and compares): a task's, step's or event's
//!   value is what its resolver gives ([`task_value`],
//!   `steps::step_value`, `events::event_value`).
//! - A field is shown only if it names the fields it reads here; the
//!   records are read narrow ([`Fields`]), so a field without a mapping
//!   takes the general path rather than showing a blank.
//! - Nothing read here enters the operation's loader cache.
//! - Fields come in selection order, a repeated leaf once in the place of
//!   its first occurrence; a repeated field with a selection of its own
//!   takes the general path (its selections would merge).

use std::{borrow::Cow, collections::HashMap, sync::Mutex};

use super::{
    Channel, PlanRef, Task, TaskMode, TaskStatus, TaskStep, events::event_value,
    listing::event_span, steps::step_value,
};
use crate::schema::ids::{self, NodeType};
use crate::schema::plain_list::Plain;
use async_graphql::{
    ContextSelectionSet, Name, OutputType, Positioned, ScalarType, ServerError, ServerResult,
    Value,
    connection::{Connection, Edge, EmptyFields, PageInfo},
    parser::types::{Field, Selection, SelectionSet},
    registry::Registry,
    resolver_utils::enum_value,
};
use brainstem_domain::{
    TaskId, TenantScope,
    page::{Page, PageRequest},
    tasks::{self, EventField, EventSpan, EventWindow, Fields, StepField, TaskField, TaskFilter},
};

/// A page of tasks: a connection resolved the general way, or the value
/// built in one pass. The same GraphQL type as `Connection<String, Task>`.
pub enum TaskPage {
    General(Connection<String, Task>),
    Plain(Mutex<Option<Value>>),
}

impl OutputType for TaskPage {
    fn type_name() -> Cow<'static, str> {
        <Connection<String, Task> as OutputType>::type_name()
    }

    fn qualified_type_name() -> String {
        <Connection<String, Task> as OutputType>::qualified_type_name()
    }

    fn create_type_info(registry: &mut Registry) -> String {
        <Connection<String, Task> as OutputType>::create_type_info(registry)
    }

    async fn resolve(
        &self,
        ctx: &ContextSelectionSet<'_>,
        field: &Positioned<Field>,
    ) -> ServerResult<Value> {
        match self {
            TaskPage::General(connection) => connection.resolve(ctx, field).await,
            TaskPage::Plain(value) => value
                .lock()
                .ok()
                .and_then(|mut v| v.take())
                .ok_or_else(|| ServerError::new("a page's value was taken twice", None)),
        }
    }
}

/// What a page's selection shows, field by field, under response keys.
pub(super) struct Plan<'a> {
    page: Vec<(&'a Name, PageField<'a>)>,
    fields: Fields,
    steps: bool,
    spans: Vec<EventSpan>,
}

enum PageField<'a> {
    Typename,
    PageInfo(Vec<(&'a Name, &'a str)>),
    Edges(Vec<(&'a Name, EdgeField<'a>)>),
}

enum EdgeField<'a> {
    Typename,
    Cursor,
    Node(Vec<(&'a Name, NodeField<'a>)>),
}

enum NodeField<'a> {
    Typename,
    Scalar(&'a str),
    Plan(Vec<(&'a Name, &'a str)>),
    Steps(Vec<(&'a Name, &'a str)>),
    Events(EventSpan, Vec<(&'a Name, &'a str)>),
}

/// The plan of a page whose selection (`field`'s, the `tasks` or
/// `children` field) is all plain, else `None`.
pub(super) fn plan(field: &Field) -> Option<Plan<'_>> {
    let mut fields = Fields {
        task: Vec::new(),
        step: Vec::new(),
        event: Vec::new(),
    };
    let (mut steps, mut spans) = (false, Vec::new());
    let page = each(&field.selection_set.node, |field, name| match name {
        "__typename" => Some(PageField::Typename),
        "pageInfo" => leaves(field, |n| {
            [
                "hasPreviousPage",
                "hasNextPage",
                "startCursor",
                "endCursor",
                "__typename",
            ]
            .contains(&n)
        })
        .map(PageField::PageInfo),
        "edges" => each(&field.selection_set.node, |field, name| match name {
            "__typename" => Some(EdgeField::Typename),
            "cursor" => Some(EdgeField::Cursor),
            "node" => each(&field.selection_set.node, |field, name| {
                node_field(field, name, &mut fields, &mut steps, &mut spans)
            })
            .map(EdgeField::Node),
            _ => None,
        })
        .map(PageField::Edges),
        _ => None,
    })?;
    Some(Plan {
        page,
        fields,
        steps,
        spans,
    })
}

/// What one field of a task shows, noting what it reads.
fn node_field<'a>(
    field: &'a Field,
    name: &'a str,
    fields: &mut Fields,
    steps: &mut bool,
    spans: &mut Vec<EventSpan>,
) -> Option<NodeField<'a>> {
    let has_selection = !field.selection_set.node.items.is_empty();
    match name {
        "__typename" => Some(NodeField::Typename),
        "plan" => {
            let shown = leaves(field, |n| ["key", "version", "__typename"].contains(&n))?;
            fields
                .task
                .extend([TaskField::PlanKey, TaskField::PlanVersion]);
            Some(NodeField::Plan(shown))
        }
        "steps" if field.arguments.is_empty() => {
            let shown = leaves(field, |n| n == "__typename" || step_reads(n).is_some())?;
            fields
                .step
                .extend(shown.iter().filter_map(|(_, n)| step_reads(n)));
            *steps = true;
            Some(NodeField::Steps(shown))
        }
        "events" => {
            let span = literal_span(field)?;
            let shown = leaves(field, |n| event_reads(n).is_some())?;
            fields
                .event
                .extend(shown.iter().filter_map(|(_, n)| event_reads(n)));
            if !spans.contains(&span) {
                spans.push(span);
            }
            Some(NodeField::Events(span, shown))
        }
        _ if has_selection || !field.arguments.is_empty() => None,
        _ => {
            fields.task.extend(task_reads(name)?);
            Some(NodeField::Scalar(name))
        }
    }
}

/// Each field of `set` under its response key, as `f` plans it; `None`
/// if any selection is a fragment, carries a directive, or `f` declines
/// it, or a response key with a selection of its own repeats.
fn each<'a, T>(
    set: &'a SelectionSet,
    mut f: impl FnMut(&'a Field, &'a str) -> Option<T>,
) -> Option<Vec<(&'a Name, T)>> {
    let mut out: Vec<(&'a Name, T)> = Vec::new();
    for selection in &set.items {
        let Selection::Field(field) = &selection.node else {
            return None;
        };
        let field = &field.node;
        if !field.directives.is_empty() {
            return None;
        }
        let key = &field.response_key().node;
        let planned = f(field, field.name.node.as_str())?;
        if out.iter().any(|(k, _)| *k == key) {
            if !field.selection_set.node.items.is_empty() {
                return None;
            }
            continue;
        }
        out.push((key, planned));
    }
    Some(out)
}

/// The leaf fields of `field`'s selection, if each passes `shown` and
/// takes no argument.
fn leaves(field: &Field, shown: impl Fn(&str) -> bool) -> Option<Vec<(&Name, &str)>> {
    each(&field.selection_set.node, |field, name| {
        (field.arguments.is_empty() && field.selection_set.node.items.is_empty() && shown(name))
            .then_some(name)
    })
}

/// The span of an `events` field whose arguments are literal and valid.
fn literal_span(field: &Field) -> Option<EventSpan> {
    let mut args = (None, 100, None);
    for (name, value) in &field.arguments {
        let Value::Number(n) = value.node.clone().into_const()? else {
            return None;
        };
        let n = n.as_i64()?;
        match name.node.as_str() {
            "after" => args.0 = Some(n),
            "first" => args.1 = i32::try_from(n).ok()?,
            "last" => args.2 = Some(i32::try_from(n).ok()?),
            _ => return None,
        }
    }
    event_span(args.0, args.1, args.2).ok()
}

/// The page of `scope`'s tasks that `plan` shows, read and built.
pub(super) async fn answer(
    tasks: &tasks::Tasks,
    scope: TenantScope,
    filter: TaskFilter,
    request: PageRequest,
    plan: Plan<'_>,
) -> brainstem_domain::Result<TaskPage> {
    let (page, (steps, events)) = tasks
        .page_with_summaries(
            scope,
            filter,
            request,
            &plan.fields,
            plan.steps,
            &plan.spans,
        )
        .await?;
    let value = build(&plan, &page, &steps, &events);
    Ok(TaskPage::Plain(Mutex::new(Some(value))))
}

/// The page's value: what `plan` shows of `page`, its tasks' steps and
/// event windows.
fn build(plan: &Plan<'_>, page: &Page<tasks::Task>, steps: &Steps, events: &Events) -> Value {
    let cursor = |t: &tasks::Task| Value::String(ids::encode_cursor(t.id.uuid()));
    object(&plan.page, |field| match field {
        PageField::Typename => Value::String(TaskPage::type_name().into_owned()),
        PageField::PageInfo(shown) => object(shown, |name| match *name {
            "hasPreviousPage" => Value::Boolean(page.has_previous_page),
            "hasNextPage" => Value::Boolean(page.has_next_page),
            "startCursor" => page.items.first().map_or(Value::Null, cursor),
            "endCursor" => page.items.last().map_or(Value::Null, cursor),
            _ => Value::String(PageInfo::type_name().into_owned()),
        }),
        PageField::Edges(shown) => Value::List(
            page.items
                .iter()
                .map(|task| {
                    object(shown, |field| match field {
                        EdgeField::Typename => Value::String(TaskEdge::type_name().into_owned()),
                        EdgeField::Cursor => cursor(task),
                        EdgeField::Node(shown) => node(shown, task, steps, events),
                    })
                })
                .collect(),
        ),
    })
}

/// The GraphQL type of a page's edges.
type TaskEdge = Edge<String, Task, EmptyFields>;

/// A page's steps by task, and its event windows.
type Steps = HashMap<TaskId, Vec<tasks::StepAttempt>>;
type Events = HashMap<(TaskId, EventWindow), Vec<tasks::TaskEvent>>;

/// One task's value.
fn node(
    shown: &[(&Name, NodeField<'_>)],
    task: &tasks::Task,
    steps: &Steps,
    events: &Events,
) -> Value {
    object(shown, |field| match field {
        NodeField::Typename => Value::String(Task::type_name().into_owned()),
        NodeField::Scalar(name) => task_value(task, name),
        NodeField::Plan(shown) => match (&task.plan_key, task.plan_version) {
            (Some(plan_key), Some(version)) => object(shown, |name| match *name {
                "key" => Value::String(plan_key.clone()),
                "version" => Value::from(version),
                _ => Value::String(PlanRef::type_name().into_owned()),
            }),
            _ => Value::Null,
        },
        NodeField::Steps(shown) => list(steps.get(&task.id), |step| {
            object(shown, |name| match *name {
                "__typename" => Value::String(TaskStep::type_name().into_owned()),
                name => step_value(step, name),
            })
        }),
        NodeField::Events(span, shown) => {
            list(events.get(&(task.id, span.window(task))), |event| {
                object(shown, |name| event_value(event, name))
            })
        }
    })
}

/// An object of `shown`'s fields under their response keys, in order.
fn object<T>(shown: &[(&Name, T)], value: impl Fn(&T) -> Value) -> Value {
    Value::Object(
        shown
            .iter()
            .map(|(key, field)| ((*key).clone(), value(field)))
            .collect(),
    )
}

fn list<T>(items: Option<&Vec<T>>, value: impl Fn(&T) -> Value) -> Value {
    Value::List(items.map_or_else(Vec::new, |items| items.iter().map(value).collect()))
}

/// What a task's field reads, if it is plain.
fn task_reads(name: &str) -> Option<&'static [TaskField]> {
    Some(match name {
        "id" => &[TaskField::Id],
        "status" => &[TaskField::Status],
        "mode" => &[TaskField::Mode],
        "conversationId" => &[TaskField::Conversation],
        "channel" => &[TaskField::Channel],
        "input" => &[TaskField::Input],
        "subjectId" => &[TaskField::SubjectId],
        "intent" => &[TaskField::Intent],
        "confidence" => &[TaskField::Confidence],
        "confidenceThreshold" => &[TaskField::ConfidenceThreshold],
        "currentStepId" => &[TaskField::CurrentStepId],
        "maxSteps" => &[TaskField::MaxSteps],
        "error" => &[TaskField::Error],
        "traceId" => &[TaskField::TraceId],
        "idempotencyKey" => &[TaskField::IdempotencyKey],
        "createdBy" => &[TaskField::CreatedBy],
        "createdAt" => &[TaskField::CreatedAt],
        "updatedAt" => &[TaskField::UpdatedAt],
        "startedAt" => &[TaskField::StartedAt],
        "completedAt" => &[TaskField::CompletedAt],
        _ => return None,
    })
}

/// Field `name` of `task`, one that [`task_reads`] names (what its
/// resolver answers).
pub(super) fn task_value(task: &tasks::Task, name: &str) -> Value {
    let text = |s: &Option<String>| s.clone().map_or(Value::Null, Value::String);
    let time = |t: &Option<chrono::DateTime<chrono::Utc>>| {
        t.as_ref().map_or(Value::Null, ScalarType::to_value)
    };
    match name {
        "id" => Value::String(ids::encode(NodeType::Task, task.id.uuid()).0),
        "status" => enum_value(TaskStatus::from(task.status)),
        "mode" => enum_value(TaskMode::from(task.mode)),
        "conversationId" => task.conversation.map_or(Value::Null, |c| {
            Value::String(ids::encode(NodeType::Conversation, c.uuid()).0)
        }),
        "channel" => enum_value(Channel::from(task.channel)),
        "input" => Value::String(task.input.clone()),
        "subjectId" => task
            .subject_id
            .map_or(Value::Null, |s| Value::String(s.to_string())),
        "intent" => text(&task.intent),
        "confidence" => task.confidence.to_value(),
        "confidenceThreshold" => task.confidence_threshold.to_value(),
        "currentStepId" => text(&task.current_step_id),
        "maxSteps" => task.max_steps.to_value(),
        "error" => text(&task.error),
        "traceId" => Value::String(task.trace_id.clone()),
        "idempotencyKey" => text(&task.idempotency_key),
        "createdBy" => Value::String(task.created_by.clone()),
        "createdAt" => task.created_at.to_value(),
        "updatedAt" => task.updated_at.to_value(),
        "startedAt" => time(&task.started_at),
        "completedAt" => time(&task.completed_at),
        _ => Value::Null,
    }
}

/// What a step's field reads, if it is plain.
fn step_reads(name: &str) -> Option<StepField> {
    if !TaskStep::PLAIN.contains(&name) {
        return None;
    }
    Some(match name {
        "stepId" => StepField::StepId,
        "tool" => StepField::Tool,
        "attempt" => StepField::Attempt,
        "status" => StepField::Status,
        "summary" => StepField::Summary,
        "error" => StepField::Error,
        "idempotencyKey" => StepField::IdempotencyKey,
        "startedAt" => StepField::StartedAt,
        "finishedAt" => StepField::FinishedAt,
        "durationMs" => StepField::DurationMs,
        _ => return None,
    })
}

/// What an event's field reads, if it is plain.
fn event_reads(name: &str) -> Option<EventField> {
    if !super::TaskEvent::PLAIN.contains(&name) {
        return None;
    }
    Some(match name {
        "seq" => EventField::Seq,
        "kind" => EventField::Kind,
        "taskId" => EventField::Task,
        "stepId" => EventField::StepId,
        "tool" => EventField::Tool,
        "status" => EventField::Status,
        "summary" => EventField::Summary,
        "error" => EventField::Error,
        "createdAt" => EventField::CreatedAt,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use async_graphql::parser::{parse_query, types::DocumentOperations};

    use super::*;

    /// The plan of the first field of `query`'s only operation.
    fn planned(query: &str) -> Option<(Fields, usize)> {
        let document = parse_query(query).unwrap();
        let DocumentOperations::Single(operation) = &document.operations else {
            panic!("one operation");
        };
        let Selection::Field(field) = &operation.node.selection_set.node.items[0].node else {
            panic!("a field");
        };
        plan(&field.node).map(|p| (p.fields, p.spans.len()))
    }

    #[test]
    fn a_plain_selection_reads_only_the_columns_it_shows() {
        let (Fields { task, step, event }, spans) = planned(
            "{ tasks(first: 50) { __typename pageInfo { hasNextPage endCursor __typename } \
             edges { cursor node { __typename id status plan { key version } \
             steps { stepId status attempt durationMs } \
             events(last: 5) { seq kind summary } e: events(last: 5) { seq } \
             f: events(after: 2, first: 3) { createdAt } } } } }",
        )
        .unwrap();
        assert_eq!(
            task,
            [
                TaskField::Id,
                TaskField::Status,
                TaskField::PlanKey,
                TaskField::PlanVersion
            ]
        );
        assert_eq!(
            step,
            [
                StepField::StepId,
                StepField::Status,
                StepField::Attempt,
                StepField::DurationMs
            ]
        );
        assert_eq!(
            event,
            [
                EventField::Seq,
                EventField::Kind,
                EventField::Summary,
                EventField::Seq,
                EventField::CreatedAt
            ]
        );
        assert_eq!(spans, 2, "two distinct windows");
    }

    #[test]
    fn anything_else_takes_the_general_path() {
        for query in [
            // a fragment, a directive, a variable
            "{ tasks { edges { node { ... on Task { id } } } } }",
            "{ tasks { edges { node { id @include(if: true) } } } }",
            "query($n: Int!) { tasks { edges { node { events(last: $n) { seq } } } } }",
            // JSON, a relation through a loader, an event's type name
            "{ tasks { edges { node { payload } } } }",
            "{ tasks { edges { node { reviews { id } } } } }",
            "{ tasks { edges { node { parent { id } } } } }",
            "{ tasks { edges { node { events(last: 5) { __typename } } } } }",
            "{ tasks { edges { node { steps { args } } } } }",
            // an invalid window (the general path reports it), `nodes`
            "{ tasks { edges { node { events(last: 0) { seq } } } } }",
            "{ tasks { nodes { id } } }",
            // a repeated field with a selection of its own (they merge)
            "{ tasks { edges { node { steps { tool } steps { status } } } } }",
        ] {
            assert!(planned(query).is_none(), "{query}");
        }
    }
}
