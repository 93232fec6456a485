//! Which fields of a task, a step and an event a page statement reads,
//! and where each sits in its rows.
//!
//! A page of tasks with their steps and events is read in one `UNION ALL`
//! ([`super::summaries`]): every row is a kind, then columns by position.
//! [`Fields`] names what a reader shows; [`Layout`] places each kind's
//! columns, a step's or an event's at a position a task's column of the
//! same SQL type already holds where one is free, so a row is as wide as
//! the widest kind rather than the three side by side. A reader that shows
//! only a task's status and its steps' outcomes reads those columns, not
//! every summary column: what PostgreSQL sends and what is decoded is what
//! the page shows.
//!
//! Invariants:
//! - A field not named keeps a blank value (empty text, zero, `None`, the
//!   epoch): a narrow read is for showing the fields it names, never for a
//!   decision and never cached where a reader of other fields finds it.
//! - Each kind always reads what placing its rows needs: a task's id and
//!   last sequence number (the page's order and event windows), a step's
//!   id and task, an event's task and sequence number; a relation the
//!   statement does not read takes no position.
//! - PostgreSQL types a `UNION`'s columns pairwise, left to right: the
//!   tasks' branch comes first and casts every NULL it holds to its
//!   position's type.

use sea_orm::{DbErr, FromQueryResult, QueryResult};

use super::*;
use crate::kernel::columns::column;

/// The SQL type of a position, as far as sharing it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Sql {
    Uuid,
    Text,
    Integer,
    BigInt,
    Double,
    Bool,
    Time,
}

impl Sql {
    /// A NULL of this type.
    pub(super) fn null(self) -> &'static str {
        match self {
            Sql::Uuid => "CAST(NULL AS uuid)",
            Sql::Text => "CAST(NULL AS text)",
            Sql::Integer => "CAST(NULL AS integer)",
            Sql::BigInt => "CAST(NULL AS bigint)",
            Sql::Double => "CAST(NULL AS double precision)",
            Sql::Bool => "CAST(NULL AS boolean)",
            Sql::Time => "CAST(NULL AS timestamptz)",
        }
    }
}

/// A field enum: its column, the column's SQL type, and how a value read
/// at a position fills the record.
macro_rules! fields {
    (
        $(#[$doc:meta])* $name:ident of $record:ty, $entity:ident {
            $($variant:ident: $column:ident $sql:ident |$r:ident, $v:ident: $t:ty| $fill:expr;)*
        }
    ) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name { $($variant),* }

        impl $name {
            /// Every field.
            pub const ALL: &[$name] = &[$($name::$variant),*];

            pub(super) fn column(self) -> $entity::Column {
                match self { $($name::$variant => $entity::Column::$column),* }
            }

            pub(super) fn sql(self) -> Sql {
                match self { $($name::$variant => Sql::$sql),* }
            }

            /// Fill this field of `record` from column `at` of `row`.
            pub(super) fn fill(self, record: &mut $record, row: &QueryResult, at: usize) -> Result<()> {
                match self {
                    $($name::$variant => {
                        let $v: $t = column(row, at)?;
                        let $r = record;
                        $fill;
                    })*
                }
                Ok(())
            }
        }
    };
}

fields! {
    /// A task's fields a page statement can read.
    TaskField of Task, task {
        Id: Id Uuid |t, v: Uuid| t.id = v.into();
        Parent: ParentTaskId Uuid |t, v: Option<Uuid>| t.parent = v.map(TaskId::from);
        Conversation: ConversationId Uuid
            |t, v: Option<Uuid>| t.conversation = v.map(ConversationId::from);
        Channel: Channel Text |t, v: String| t.channel = v.parse()?;
        Mode: Mode Text |t, v: String| t.mode = v.parse()?;
        Status: Status Text |t, v: String| t.status = v.parse()?;
        IdempotencyKey: IdempotencyKey Text |t, v: Option<String>| t.idempotency_key = v;
        Input: InputText Text |t, v: String| t.input = v;
        SubjectId: SubjectId Uuid |t, v: Option<Uuid>| t.subject_id = v;
        Intent: Intent Text |t, v: Option<String>| t.intent = v;
        Confidence: Confidence Double |t, v: f64| t.confidence = v;
        ConfidenceThreshold: ConfidenceThreshold Double |t, v: f64| t.confidence_threshold = v;
        IntentReviewed: IntentReviewed Bool |t, v: bool| t.intent_reviewed = v;
        PlanId: PlanId Uuid |t, v: Option<Uuid>| t.plan_id = v.map(PlanId::from);
        PlanKey: PlanKey Text |t, v: Option<String>| t.plan_key = v;
        PlanVersion: PlanVersion Integer |t, v: Option<i32>| t.plan_version = v;
        CurrentStepId: CurrentStepId Text |t, v: Option<String>| t.current_step_id = v;
        MaxSteps: MaxSteps Integer
            |t, v: i32| t.max_steps = u32::try_from(v).unwrap_or(DEFAULT_MAX_STEPS);
        Error: ErrorMessage Text |t, v: Option<String>| t.error = v;
        TraceId: TraceId Text |t, v: String| t.trace_id = v;
        LeaseOwner: LeaseOwner Text |t, v: Option<String>| t.lease_owner = v;
        LeaseExpiresAt: LeaseExpiresAt Time
            |t, v: Option<DateTime<Utc>>| t.lease_expires_at = v;
        RunAfter: RunAfter Time |t, v: DateTime<Utc>| t.run_after = v;
        CancelRequested: CancelRequested Bool |t, v: bool| t.cancel_requested = v;
        LastSeq: LastSeq BigInt |t, v: i64| t.last_seq = v;
        RunningMs: RunningMs BigInt |t, v: i64| t.running_ms = v;
        CreatedBy: CreatedBy Text |t, v: String| t.created_by = v;
        CreatedAt: CreatedAt Time |t, v: DateTime<Utc>| t.created_at = v;
        UpdatedAt: UpdatedAt Time |t, v: DateTime<Utc>| t.updated_at = v;
        StartedAt: StartedAt Time |t, v: Option<DateTime<Utc>>| t.started_at = v;
        CompletedAt: CompletedAt Time |t, v: Option<DateTime<Utc>>| t.completed_at = v;
    }
}

fields! {
    /// A step attempt's fields (with its task's id) a page statement can
    /// read.
    StepField of (TaskId, StepAttempt), task_step {
        Task: TaskId Uuid |s, v: Uuid| s.0 = v.into();
        Id: Id Uuid |s, v: Uuid| s.1.id = v;
        StepId: StepId Text |s, v: String| s.1.step_id = v;
        Tool: Tool Text |s, v: String| s.1.tool = v;
        Attempt: Attempt Integer |s, v: i32| s.1.attempt = v;
        Status: Status Text |s, v: String| s.1.status = v;
        Summary: Summary Text |s, v: String| s.1.summary = v;
        Error: Error Text |s, v: Option<String>| s.1.error = v;
        IdempotencyKey: IdempotencyKey Text |s, v: String| s.1.idempotency_key = v;
        StartedAt: StartedAt Time |s, v: DateTime<Utc>| s.1.started_at = v;
        FinishedAt: FinishedAt Time |s, v: DateTime<Utc>| s.1.finished_at = v;
        DurationMs: DurationMs BigInt |s, v: i64| s.1.duration_ms = v;
    }
}

fields! {
    /// An event's fields a page statement can read.
    EventField of TaskEvent, task_event {
        Task: TaskId Uuid |e, v: Uuid| e.task_id = v.into();
        Id: Id Uuid |e, v: Uuid| e.id = v;
        Seq: Seq BigInt |e, v: i64| e.seq = v;
        Kind: Kind Text |e, v: String| e.kind = v.parse()?;
        StepId: StepId Text |e, v: Option<String>| e.step_id = v;
        Tool: Tool Text |e, v: Option<String>| e.tool = v;
        Status: Status Text |e, v: Option<String>| e.status = v;
        Summary: Summary Text |e, v: String| e.summary = v;
        Error: Error Text |e, v: Option<String>| e.error = v;
        CreatedAt: CreatedAt Time |e, v: DateTime<Utc>| e.created_at = v;
    }
}

/// A row read as every summary field of its kind ([`Detail::Summary`]),
/// by position: the statement selects [`Summary::columns`] first, in that
/// order (a grouped read's own columns come after). The field enums are
/// the one list of a kind's summary columns; nothing is looked up by name.
pub(super) struct Summary<T>(pub(super) T);

/// A field's error as the row decoder's.
fn db_err(err: Error) -> DbErr {
    DbErr::Type(err.to_string())
}

impl Summary<Task> {
    /// Every [`TaskField`], then the tenant.
    pub(super) fn columns() -> impl Iterator<Item = task::Column> {
        TaskField::ALL
            .iter()
            .map(|f| f.column())
            .chain([task::Column::TenantId])
    }
}

impl FromQueryResult for Summary<Task> {
    fn from_query_result(row: &QueryResult, _: &str) -> std::result::Result<Self, DbErr> {
        let tenant: Uuid = column(row, TaskField::ALL.len()).map_err(db_err)?;
        let mut task = blank_task(tenant.into());
        for (at, field) in TaskField::ALL.iter().enumerate() {
            field.fill(&mut task, row, at).map_err(db_err)?;
        }
        Ok(Self(task))
    }
}

impl Summary<(TaskId, StepAttempt)> {
    /// Every [`StepField`].
    pub(super) fn columns() -> impl Iterator<Item = task_step::Column> {
        StepField::ALL.iter().map(|f| f.column())
    }
}

impl FromQueryResult for Summary<(TaskId, StepAttempt)> {
    fn from_query_result(row: &QueryResult, _: &str) -> std::result::Result<Self, DbErr> {
        let mut step = blank_step();
        for (at, field) in StepField::ALL.iter().enumerate() {
            field.fill(&mut step, row, at).map_err(db_err)?;
        }
        Ok(Self(step))
    }
}

impl Summary<TaskEvent> {
    /// Every [`EventField`], then the tenant.
    pub(super) fn columns() -> impl Iterator<Item = task_event::Column> {
        EventField::ALL
            .iter()
            .map(|f| f.column())
            .chain([task_event::Column::TenantId])
    }
}

impl FromQueryResult for Summary<TaskEvent> {
    fn from_query_result(row: &QueryResult, _: &str) -> std::result::Result<Self, DbErr> {
        let tenant: Uuid = column(row, EventField::ALL.len()).map_err(db_err)?;
        let mut event = blank_event(tenant.into());
        for (at, field) in EventField::ALL.iter().enumerate() {
            field.fill(&mut event, row, at).map_err(db_err)?;
        }
        Ok(Self(event))
    }
}

/// What a page statement reads of its tasks, their steps and their events.
#[derive(Clone, Debug)]
pub struct Fields {
    pub task: Vec<TaskField>,
    pub step: Vec<StepField>,
    pub event: Vec<EventField>,
}

impl Fields {
    /// Every summary column: what [`Detail::Summary`] reads.
    pub fn summaries() -> Self {
        Self {
            task: TaskField::ALL.to_vec(),
            step: StepField::ALL.to_vec(),
            event: EventField::ALL.to_vec(),
        }
    }
}

/// Where each kind's columns sit in a page statement's rows: position 0
/// is the kind, then [`Layout::types`] from 1.
#[derive(Debug)]
pub(super) struct Layout {
    /// The SQL type of each position from 1.
    pub(super) types: Vec<Sql>,
    pub(super) task: Vec<(usize, TaskField)>,
    pub(super) step: Vec<(usize, StepField)>,
    pub(super) event: Vec<(usize, EventField)>,
}

impl Layout {
    /// The layout of `fields`, placing steps' columns only if the
    /// statement reads `steps`, and events' only if it reads `events`.
    pub(super) fn of(fields: &Fields, steps: bool, events: bool) -> Self {
        let mut types = Vec::new();
        let task = place(
            &mut types,
            [TaskField::Id, TaskField::LastSeq]
                .iter()
                .chain(&fields.task)
                .map(|f| (*f, f.sql())),
        );
        let step = if steps {
            place(
                &mut types,
                [StepField::Task, StepField::Id]
                    .iter()
                    .chain(&fields.step)
                    .map(|f| (*f, f.sql())),
            )
        } else {
            Vec::new()
        };
        let event = if events {
            place(
                &mut types,
                [EventField::Task, EventField::Seq]
                    .iter()
                    .chain(&fields.event)
                    .map(|f| (*f, f.sql())),
            )
        } else {
            Vec::new()
        };
        Self {
            types,
            task,
            step,
            event,
        }
    }

    /// How many columns a row has, its kind included.
    pub(super) fn width(&self) -> usize {
        1 + self.types.len()
    }

    /// A step row's columns at their positions.
    pub(super) fn step_columns(&self) -> Vec<(usize, task_step::Column)> {
        self.step.iter().map(|(at, f)| (*at, f.column())).collect()
    }

    /// An event row's columns at their positions.
    pub(super) fn event_columns(&self) -> Vec<(usize, task_event::Column)> {
        self.event.iter().map(|(at, f)| (*at, f.column())).collect()
    }
}

/// Each of one kind's fields (once) at a position of its type that no
/// other field of that kind holds, adding positions as needed.
fn place<F: Copy + PartialEq>(
    types: &mut Vec<Sql>,
    fields: impl Iterator<Item = (F, Sql)>,
) -> Vec<(usize, F)> {
    let mut placed: Vec<(usize, F)> = Vec::new();
    for (field, sql) in fields {
        if placed.iter().any(|(_, f)| *f == field) {
            continue;
        }
        let free = (0..types.len())
            .find(|&i| types[i] == sql && placed.iter().all(|(at, _)| *at != i + 1));
        let index = free.unwrap_or_else(|| {
            types.push(sql);
            types.len() - 1
        });
        placed.push((index + 1, field));
    }
    placed
}

/// A task with every field blank, of `tenant`.
pub(super) fn blank_task(tenant: TenantId) -> Task {
    Task {
        id: Uuid::nil().into(),
        tenant,
        parent: None,
        channel: Channel::Api,
        mode: TaskMode::default(),
        conversation: None,
        status: TaskStatus::Pending,
        idempotency_key: None,
        input: String::new(),
        payload: Value::Null,
        subject_id: None,
        intent: None,
        confidence: 0.0,
        confidence_threshold: 0.0,
        intent_reviewed: false,
        plan_id: None,
        plan_key: None,
        plan_version: None,
        frozen_plan: Vec::new(),
        settled_step_ids: Vec::new(),
        reviewed_step_ids: Vec::new(),
        attempts: Map::new(),
        current_step_id: None,
        state: Value::Null,
        step_outputs: Map::new(),
        max_steps: DEFAULT_MAX_STEPS,
        error: None,
        trace_id: String::new(),
        lease_owner: None,
        lease_expires_at: None,
        run_after: DateTime::default(),
        cancel_requested: false,
        last_seq: 0,
        usage: Usage::default(),
        running_ms: 0,
        result: None,
        created_by: String::new(),
        created_at: DateTime::default(),
        updated_at: DateTime::default(),
        started_at: None,
        completed_at: None,
    }
}

/// A step attempt with every field blank, of no task.
pub(super) fn blank_step() -> (TaskId, StepAttempt) {
    (
        Uuid::nil().into(),
        StepAttempt {
            id: Uuid::nil(),
            step_id: String::new(),
            tool: String::new(),
            attempt: 0,
            status: String::new(),
            args: Value::Null,
            output: Value::Null,
            summary: String::new(),
            error: None,
            idempotency_key: String::new(),
            usage: Usage::default(),
            started_at: DateTime::default(),
            finished_at: DateTime::default(),
            duration_ms: 0,
        },
    )
}

/// An event of `tenant` with every field blank.
pub(super) fn blank_event(tenant: TenantId) -> TaskEvent {
    TaskEvent {
        id: Uuid::nil(),
        tenant,
        task_id: Uuid::nil().into(),
        seq: 0,
        kind: EventKind::StatusChanged,
        step_id: None,
        tool: None,
        status: None,
        summary: String::new(),
        error: None,
        data_keys: Vec::new(),
        data: Value::Null,
        created_at: DateTime::default(),
    }
}
