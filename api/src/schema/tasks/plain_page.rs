//! A page of tasks answered in one pass, when its selection allows.
//!
//! A dashboard's page of 50 tasks with their steps and last events,
//! resolved the general way, is some 400 field futures for the connection,
//! its edges and each task (`PlainList` already spares the steps and
//! events theirs) and a statement that reads every summary column of every
//! row. When a page's selection is only fields that copy a value out of a
//! row (a task's scalars and `plan`, its `steps` and `events` with plain
//! fields, `cursor`, `pageInfo`, `__typename`), however the client wrote
//! it (named fragments and inline fragments spread in place, aliases, a
//! field repeated with its selections merged, `@skip`/`@include` already
//! applied by async-graphql, variables in the events' window), [`plan`]
//! says which columns it shows, one statement reads only those
//! (`Tasks::page_with_summaries` with their [`Fields`]) and [`answer`]
//! builds the page's value directly, in selection order. A nested page (a
//! conversation's turns, a task's children) is read through the loader
//! with its parent's siblings' pages, and [`answer_nested`] builds it the
//! same way. Any other selection takes the general path
//! (`super::listing`).
//!
//! Invariants:
//! - Both paths answer the same (`tests/e2e/dataloader.rs` asks for every
//!   plain field both ways, and for pages written with fragments, and
//!   compares): a task's, step's or event's value is what its resolver
//!   gives ([`task_value`], `steps::step_value`, `events::event_value`).
//! - A field is shown only if it names the fields it reads here; the
//!   records are read narrow ([`Fields`]), so a field without a mapping
//!   takes the general path rather than showing a blank.
//! - Nothing a top-level page reads here enters the operation's loader
//!   cache; a nested page's rows come from it, as summaries.
//! - Fields come in selection order as GraphQL collects them: a response
//!   key in the place of its first occurrence, fragments spread where they
//!   stand, the selections of a repeated key merged. A selection this
//!   module cannot collect exactly (a directive other than `@skip` and
//!   `@include`, a fragment whose type condition does not apply, one key
//!   naming two fields or two argument lists) takes the general path.

use std::{
    borrow::{Borrow, Cow},
    collections::HashMap,
    sync::{Arc, Mutex},
};

use super::{
    Channel, PlanRef, Task, TaskMode, TaskStatus, TaskStep, events::event_value,
    listing::event_span, steps::step_value,
};
use crate::cost::variable_value;
use crate::schema::ids::{self, NodeType};
use crate::schema::loaders::{BrainstemLoader, TaskEventsKey, TaskStepsKey};
use crate::schema::plain_list::Plain;
use async_graphql::{
    Context, ContextSelectionSet, Name, OutputType, Positioned, ScalarType, ServerError,
    ServerResult, Value, Variables,
    connection::{Connection, Edge, EmptyFields, PageInfo},
    parser::types::{Field, FragmentDefinition, Selection, SelectionSet, VariableDefinition},
    registry::Registry,
    resolver_utils::enum_value,
};
use brainstem_domain::{
    TaskId, TenantScope,
    page::{Page, PageRequest},
    tasks::{
        self, Detail, EventField, EventSpan, EventWindow, Fields, StepField, TaskField, TaskFilter,
    },
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

/// What a selection can refer to outside itself: the operation's
/// fragments and variables, and the schema's types (for fragments' type
/// conditions).
pub(super) struct Operation<'a> {
    fragments: &'a HashMap<Name, Positioned<FragmentDefinition>>,
    variables: &'a Variables,
    definitions: &'a [Positioned<VariableDefinition>],
    registry: &'a Registry,
}

impl<'a> Operation<'a> {
    /// The operation `ctx` runs in.
    pub(super) fn of(ctx: &Context<'a>) -> Self {
        let env = ctx.query_env;
        Operation {
            fragments: &env.fragments,
            variables: &env.variables,
            definitions: &env.operation.node.variable_definitions,
            registry: &ctx.schema_env.registry,
        }
    }

    /// The plan of a page whose selection (`field`'s, the `tasks` or
    /// `children` field) is all plain, else `None`.
    pub(super) fn plan(&self, field: &'a Field) -> Option<Plan<'a>> {
        let mut fields = Fields {
            task: Vec::new(),
            step: Vec::new(),
            event: Vec::new(),
        };
        let (mut steps, mut spans) = (false, Vec::new());
        let page_type = TaskPage::type_name();
        let page = self.each(
            &[&field.selection_set.node],
            &page_type,
            |field| match field.name() {
                "__typename" => Some(PageField::Typename),
                "pageInfo" => self
                    .leaves(field, &PageInfo::type_name(), |n| {
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
                "edges" => self
                    .each(&field.sets(), &TaskEdge::type_name(), |field| {
                        match field.name() {
                            "__typename" => Some(EdgeField::Typename),
                            "cursor" => Some(EdgeField::Cursor),
                            "node" => self
                                .each(&field.sets(), &Task::type_name(), |field| {
                                    self.node_field(field, &mut fields, &mut steps, &mut spans)
                                })
                                .map(EdgeField::Node),
                            _ => None,
                        }
                    })
                    .map(PageField::Edges),
                _ => None,
            },
        )?;
        Some(Plan {
            page,
            fields,
            steps,
            spans,
        })
    }

    /// What one field of a task shows, noting what it reads.
    fn node_field(
        &self,
        field: &Merged<'a>,
        fields: &mut Fields,
        steps: &mut bool,
        spans: &mut Vec<EventSpan>,
    ) -> Option<NodeField<'a>> {
        match field.name() {
            "__typename" => Some(NodeField::Typename),
            "plan" => {
                let shown = self.leaves(field, &PlanRef::type_name(), |n| {
                    ["key", "version", "__typename"].contains(&n)
                })?;
                fields
                    .task
                    .extend([TaskField::PlanKey, TaskField::PlanVersion]);
                Some(NodeField::Plan(shown))
            }
            "steps" if !field.has_arguments() => {
                let shown = self.leaves(field, &TaskStep::type_name(), |n| {
                    n == "__typename" || step_reads(n).is_some()
                })?;
                fields
                    .step
                    .extend(shown.iter().filter_map(|(_, n)| step_reads(n)));
                *steps = true;
                Some(NodeField::Steps(shown))
            }
            "events" => {
                let span = self.span(field)?;
                let shown = self.leaves(field, &super::TaskEvent::type_name(), |n| {
                    event_reads(n).is_some()
                })?;
                fields
                    .event
                    .extend(shown.iter().filter_map(|(_, n)| event_reads(n)));
                if !spans.contains(&span) {
                    spans.push(span);
                }
                Some(NodeField::Events(span, shown))
            }
            _ if !field.is_leaf() || field.has_arguments() => None,
            name => {
                fields.task.extend(task_reads(name)?);
                Some(NodeField::Scalar(name))
            }
        }
    }

    /// Each field that `sets` (the selections of one object of type `on`)
    /// collect, under its response key, as `f` plans it; `None` if they
    /// cannot be collected exactly ([`Operation::collect`]) or `f` declines
    /// a field.
    fn each<T>(
        &self,
        sets: &[&'a SelectionSet],
        on: &str,
        mut f: impl FnMut(&Merged<'a>) -> Option<T>,
    ) -> Option<Vec<(&'a Name, T)>> {
        let mut collected = Vec::new();
        for set in sets {
            self.collect(set, on, &mut collected)?;
        }
        collected
            .into_iter()
            .map(|(key, field)| Some((key, f(&field)?)))
            .collect()
    }

    /// Adds the fields of `set` (of an object of type `on`) to `out` by
    /// response key, in order of first occurrence, spreading fragments in
    /// place and merging the fields of a repeated key. `None` for what
    /// this module leaves to the general path: a directive (`@skip` and
    /// `@include` were applied and removed before execution; any other
    /// stays), a fragment whose type condition does not apply to `on`, or
    /// one key with two field names or two argument lists.
    fn collect(
        &self,
        set: &'a SelectionSet,
        on: &str,
        out: &mut Vec<(&'a Name, Merged<'a>)>,
    ) -> Option<()> {
        for selection in &set.items {
            match &selection.node {
                Selection::Field(field) => {
                    let field = &field.node;
                    if !field.directives.is_empty() {
                        return None;
                    }
                    let key = &field.response_key().node;
                    match out.iter_mut().find(|(k, _)| *k == key) {
                        Some((_, merged)) => merged.add(field)?,
                        None => out.push((key, Merged::new(field))),
                    }
                }
                Selection::FragmentSpread(spread) => {
                    let fragment = &self.fragments.get(&spread.node.fragment_name.node)?.node;
                    if !spread.node.directives.is_empty()
                        || !fragment.directives.is_empty()
                        || !self.applies(&fragment.type_condition.node.on.node, on)
                    {
                        return None;
                    }
                    self.collect(&fragment.selection_set.node, on, out)?;
                }
                Selection::InlineFragment(inline) => {
                    let inline = &inline.node;
                    let applies = inline
                        .type_condition
                        .as_ref()
                        .is_none_or(|condition| self.applies(&condition.node.on.node, on));
                    if !inline.directives.is_empty() || !applies {
                        return None;
                    }
                    self.collect(&inline.selection_set.node, on, out)?;
                }
            }
        }
        Some(())
    }

    /// Whether a fragment on type `condition` applies to an object of type
    /// `on`: the same type, or an interface or union it belongs to.
    fn applies(&self, condition: &str, on: &str) -> bool {
        condition == on
            || self
                .registry
                .types
                .get(condition)
                .is_some_and(|t| t.is_possible_type(on))
    }

    /// The leaf fields of `field`'s selection (of type `on`), if each
    /// passes `shown` and takes no argument.
    fn leaves(
        &self,
        field: &Merged<'a>,
        on: &str,
        shown: impl Fn(&str) -> bool,
    ) -> Option<Vec<(&'a Name, &'a str)>> {
        self.each(&field.sets(), on, |field| {
            (!field.has_arguments() && field.is_leaf() && shown(field.name()))
                .then_some(field.name())
        })
    }

    /// The span of an `events` field whose arguments (literals or
    /// variables) are numbers making a valid window.
    fn span(&self, field: &Merged<'a>) -> Option<EventSpan> {
        let mut args = (None, 100, None);
        for (name, value) in &field.first.arguments {
            let value = value
                .node
                .clone()
                .into_const_with(|name| {
                    variable_value(self.variables, self.definitions, &name).ok_or(())
                })
                .ok()?;
            let Value::Number(n) = value else {
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
}

/// The fields a selection names under one response key: one field, or
/// several with the same name and arguments whose selections merge.
struct Merged<'a> {
    first: &'a Field,
    more: Vec<&'a Field>,
}

impl<'a> Merged<'a> {
    fn new(field: &'a Field) -> Self {
        Merged {
            first: field,
            more: Vec::new(),
        }
    }

    /// Adds a field under the same key; `None` if it names another field
    /// or other arguments (validation refuses that; kept safe here).
    fn add(&mut self, field: &'a Field) -> Option<()> {
        let same =
            field.name.node == self.first.name.node && field.arguments == self.first.arguments;
        same.then(|| self.more.push(field))
    }

    fn name(&self) -> &'a str {
        self.first.name.node.as_str()
    }

    fn has_arguments(&self) -> bool {
        !self.first.arguments.is_empty()
    }

    /// Every selection set under this key, in order.
    fn sets(&self) -> Vec<&'a SelectionSet> {
        std::iter::once(self.first)
            .chain(self.more.iter().copied())
            .map(|field| &field.selection_set.node)
            .collect()
    }

    fn is_leaf(&self) -> bool {
        self.sets().iter().all(|set| set.items.is_empty())
    }
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

/// A nested page (a conversation's turns, a task's children) that `plan`
/// shows, read already through the loader with its parent's siblings'
/// pages, built with the steps and event windows it shows: those read
/// through the loader too, as summaries, so the pages of every parent of
/// a list share one statement per relation.
pub(super) async fn answer_nested(
    loader: &BrainstemLoader,
    page: &Page<tasks::Task>,
    plan: Plan<'_>,
) -> async_graphql::Result<TaskPage> {
    let steps = async {
        if !plan.steps {
            return Ok(HashMap::new());
        }
        let keys: Vec<TaskStepsKey> = page
            .items
            .iter()
            .map(|t| TaskStepsKey(t.scope(), t.id, Detail::Summary))
            .collect();
        let read = loader.load_many(keys).await?;
        Ok::<_, async_graphql::Error>(read.into_iter().map(|(k, rows)| (k.1, rows)).collect())
    };
    let events = async {
        let keys: Vec<TaskEventsKey> = page
            .items
            .iter()
            .flat_map(|t| {
                plan.spans
                    .iter()
                    .map(|span| TaskEventsKey(t.scope(), t.id, span.window(t), Detail::Summary))
            })
            .collect();
        let read = loader.load_many(keys).await?;
        Ok::<_, async_graphql::Error>(
            read.into_iter()
                .map(|(k, rows)| ((k.1, k.2), rows))
                .collect(),
        )
    };
    let (steps, events): (Steps<Arc<_>>, Events<Arc<_>>) = futures_util::try_join!(steps, events)?;
    let value = build(&plan, page, &steps, &events);
    Ok(TaskPage::Plain(Mutex::new(Some(value))))
}

/// The page's value: what `plan` shows of `page`, its tasks' steps and
/// event windows.
fn build<S, E>(
    plan: &Plan<'_>,
    page: &Page<tasks::Task>,
    steps: &Steps<S>,
    events: &Events<E>,
) -> Value
where
    S: Borrow<tasks::StepAttempt>,
    E: Borrow<tasks::TaskEvent>,
{
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

/// A page's steps by task, and its event windows (rows read for this
/// page, or shared through the loader).
type Steps<S = tasks::StepAttempt> = HashMap<TaskId, Vec<S>>;
type Events<E = tasks::TaskEvent> = HashMap<(TaskId, EventWindow), Vec<E>>;

/// One task's value.
fn node<S, E>(
    shown: &[(&Name, NodeField<'_>)],
    task: &tasks::Task,
    steps: &Steps<S>,
    events: &Events<E>,
) -> Value
where
    S: Borrow<tasks::StepAttempt>,
    E: Borrow<tasks::TaskEvent>,
{
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
                name => step_value(step.borrow(), name),
            })
        }),
        NodeField::Events(span, shown) => {
            list(events.get(&(task.id, span.window(task))), |event| {
                object(shown, |name| event_value(event.borrow(), name))
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

    /// The plan of the first field of `query`'s only operation, with
    /// `variables` and the types a page shows (and `Node`, which `Task`
    /// implements).
    fn planned_with(query: &str, variables: serde_json::Value) -> Option<(Fields, usize)> {
        let document = parse_query(query).unwrap();
        let operation = match &document.operations {
            DocumentOperations::Single(operation) => operation,
            DocumentOperations::Multiple(named) => named.values().next().unwrap(),
        };
        let Selection::Field(field) = &operation.node.selection_set.node.items[0].node else {
            panic!("a field");
        };
        let mut registry = Registry::default();
        TaskPage::create_type_info(&mut registry);
        <crate::schema::node::Node as OutputType>::create_type_info(&mut registry);
        let variables = Variables::from_json(variables);
        let operation = Operation {
            fragments: &document.fragments,
            variables: &variables,
            definitions: &operation.node.variable_definitions,
            registry: &registry,
        };
        operation
            .plan(&field.node)
            .map(|p| (p.fields, p.spans.len()))
    }

    fn planned(query: &str) -> Option<(Fields, usize)> {
        planned_with(query, serde_json::json!({}))
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
    fn fragments_variables_and_repeated_fields_plan_as_the_fields_they_collect() {
        let written_out = planned(
            "{ tasks { edges { node { id status steps { stepId status } \
             events(last: 5) { seq kind } } } } }",
        )
        .unwrap();
        for query in [
            // a named fragment, as Relay and Apollo clients write a page
            "query Page($n: Int = 5) { tasks { edges { node { ...Row } } } } \
             fragment Row on Task { id status steps { stepId status } events(last: $n) { seq kind } }",
            // inline fragments, one on an interface the task implements
            "{ tasks { edges { node { ... on Task { id } ... on Node { id } \
             ... { status steps { stepId } } steps { status } events(last: 5) { seq kind } } } } }",
            // nested spreads, and one key repeated with its selections merged
            "{ tasks { ...Edges } } fragment Edges on TaskConnection { edges { node { id ...More } } } \
             fragment More on Task { status steps { stepId } steps { status } \
             events(last: 5) { seq } events(last: 5) { kind } }",
        ] {
            let (fields, spans) = planned(query).unwrap_or_else(|| panic!("{query}"));
            assert_eq!(fields.task, written_out.0.task, "{query}");
            assert_eq!(fields.step, written_out.0.step, "{query}");
            assert_eq!(fields.event, written_out.0.event, "{query}");
            assert_eq!(spans, written_out.1, "{query}");
        }
        let from_variable = planned_with(
            "query($n: Int!) { tasks { edges { node { events(last: $n) { seq } } } } }",
            serde_json::json!({ "n": 3 }),
        );
        assert_eq!(from_variable.map(|(_, spans)| spans), Some(1));
    }

    #[test]
    fn anything_else_takes_the_general_path() {
        for query in [
            // a directive that stays, a fragment on another type
            "{ tasks { edges { node { id @deprecated } } } }",
            "{ tasks { edges { node { ... on Conversation { id } } } } }",
            // a window from a variable with no value, or not a number
            "query($n: Int) { tasks { edges { node { events(last: $n) { seq } } } } }",
            // JSON, a relation through a loader, an event's type name
            "{ tasks { edges { node { payload } } } }",
            "{ tasks { edges { node { reviews { id } } } } }",
            "{ tasks { edges { node { parent { id } } } } }",
            "{ tasks { edges { node { events(last: 5) { __typename } } } } }",
            "{ tasks { edges { node { steps { args } } } } }",
            "{ tasks { edges { node { ...F } } } } fragment F on Task { steps { args } }",
            // an invalid window (the general path reports it), `nodes`
            "{ tasks { edges { node { events(last: 0) { seq } } } } }",
            "{ tasks { nodes { id } } }",
            // one key naming two argument lists (validation refuses it)
            "{ tasks { edges { node { e: events(last: 5) { seq } e: events(last: 6) { seq } } } } }",
        ] {
            assert!(planned(query).is_none(), "{query}");
        }
    }
}
