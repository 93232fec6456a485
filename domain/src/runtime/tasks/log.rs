//! The event log's write side: a change of a task and its events in one
//! statement sequence ([`mutate`]), with the sequence numbers taken from
//! the task row the change updates.

use super::*;

/// Columns to change in one task update; `None` leaves a column alone.
#[derive(Clone, Debug, Default)]
pub struct TaskChanges {
    pub status: Option<TaskStatus>,
    pub intent: Option<Option<String>>,
    pub confidence: Option<f64>,
    pub intent_reviewed: Option<bool>,
    pub plan: Option<(PlanId, String, i32)>,
    pub frozen_plan: Option<Vec<StepDef>>,
    pub settled_step_ids: Option<Vec<String>>,
    pub reviewed_step_ids: Option<Vec<String>>,
    pub attempts: Option<Map<String, Value>>,
    pub current_step_id: Option<Option<String>>,
    pub state: Option<Value>,
    pub step_outputs: Option<Map<String, Value>>,
    pub error: Option<Option<String>>,
    pub lease: Option<Option<(String, DateTime<Utc>)>>,
    pub run_after: Option<DateTime<Utc>>,
    pub cancel_requested: Option<bool>,
    pub usage: Option<Usage>,
    /// Set the task's result.
    pub result: Option<Value>,
    /// Set its running time (milliseconds of tool calls).
    pub running_ms: Option<i64>,
    pub started_at: Option<DateTime<Utc>>,
    pub completed_at: Option<DateTime<Utc>>,
}

impl TaskChanges {
    /// `task` as this change leaves it (what the update's row will read,
    /// but for `updated_at` and `last_seq`). Every field is named, so a
    /// new one cannot be forgotten here.
    pub fn apply_to(self, task: &mut Task) {
        let TaskChanges {
            status,
            intent,
            confidence,
            intent_reviewed,
            plan,
            frozen_plan,
            settled_step_ids,
            reviewed_step_ids,
            attempts,
            current_step_id,
            state,
            step_outputs,
            error,
            lease,
            run_after,
            cancel_requested,
            usage,
            result,
            running_ms,
            started_at,
            completed_at,
        } = self;
        fn put<T>(field: &mut T, value: Option<T>) {
            if let Some(value) = value {
                *field = value;
            }
        }
        put(&mut task.status, status);
        put(&mut task.intent, intent);
        put(&mut task.confidence, confidence);
        put(&mut task.intent_reviewed, intent_reviewed);
        if let Some((id, key, version)) = plan {
            task.plan_id = Some(id);
            task.plan_key = Some(key);
            task.plan_version = Some(version);
        }
        put(&mut task.frozen_plan, frozen_plan);
        put(&mut task.settled_step_ids, settled_step_ids);
        put(&mut task.reviewed_step_ids, reviewed_step_ids);
        put(&mut task.attempts, attempts);
        put(&mut task.current_step_id, current_step_id);
        put(&mut task.state, state);
        put(&mut task.step_outputs, step_outputs);
        put(&mut task.error, error);
        if let Some(lease) = lease {
            task.lease_owner = lease.as_ref().map(|(owner, _)| owner.clone());
            task.lease_expires_at = lease.map(|(_, until)| until);
        }
        put(&mut task.run_after, run_after);
        put(&mut task.cancel_requested, cancel_requested);
        put(&mut task.usage, usage);
        put(&mut task.result, result.map(Some));
        put(&mut task.running_ms, running_ms);
        put(&mut task.started_at, started_at.map(Some));
        put(&mut task.completed_at, completed_at.map(Some));
    }
}

/// Which writer may apply a change.
#[derive(Clone, Debug)]
pub enum Guard {
    /// The worker holding the lease.
    Lease(String),
    /// Nobody holds a lease and the task is in one of these statuses.
    Unleased(Vec<TaskStatus>),
    /// This owner's lease has expired before the given instant (the reaper).
    Expired(String, DateTime<Utc>),
    /// Nobody holds a lease, the task is in this status and its latest
    /// event is still this sequence: nothing happened to it since it was
    /// read (a bulk retry).
    Unchanged(TaskStatus, i64),
}

pub(super) fn json_of<T: serde::Serialize>(v: &T) -> Result<Value> {
    serde_json::to_value(v).map_err(Error::internal)
}

/// Apply `changes` to a task if `guard` holds, and append `events` in the
/// same statement's transaction, announced as `announce` says. Returns
/// `None` when the guard failed.
pub async fn mutate<C: ConnectionTrait>(
    db: &C,
    announce: Announce,
    scope: TenantScope,
    id: TaskId,
    guard: &Guard,
    changes: TaskChanges,
    events: Vec<NewEvent>,
) -> Result<Option<(Task, Vec<TaskEvent>)>> {
    mutate_with(db, announce, scope, id, guard, changes, events, Vec::new()).await
}

/// [`mutate`], also running `also` (inserts of rows that go with the
/// change, built for `db`'s backend) when the guard holds: on PostgreSQL
/// in the same statement as the events, elsewhere right after them.
#[allow(clippy::too_many_arguments)]
pub async fn mutate_with<C: ConnectionTrait>(
    db: &C,
    announce: Announce,
    scope: TenantScope,
    id: TaskId,
    guard: &Guard,
    changes: TaskChanges,
    events: Vec<NewEvent>,
    also: Vec<Statement>,
) -> Result<Option<(Task, Vec<TaskEvent>)>> {
    let now = Utc::now();
    let n = events.len() as i64;
    let status = changes.status;
    let mut rows = task_update(scope, id, guard, changes, now, n)?
        .exec_with_returning(db)
        .await?;
    let Some(row) = rows.pop() else {
        return Ok(None);
    };
    let task = Task::try_from(row)?;
    if let Some(status) = status {
        count_status(&task, status, now);
    }
    let first = task.last_seq - n + 1;
    let stored = insert_events(db, announce, &task, first, events, now, also).await?;
    Ok(Some((task, stored)))
}

/// The task `UPDATE` of a change: the columns `changes` sets, with
/// `updated_at`, and `last_seq` moved past `n` new events, if `guard` holds.
pub(super) fn task_update(
    scope: TenantScope,
    id: TaskId,
    guard: &Guard,
    changes: TaskChanges,
    now: DateTime<Utc>,
    n: i64,
) -> Result<sea_orm::UpdateMany<task::Entity>> {
    use sea_orm::sea_query::ExprTrait;
    use task::Column as C;
    let mut update = task::Entity::update_many_in(scope)
        .filter(C::Id.eq(id.uuid()))
        .col_expr(C::UpdatedAt, Expr::value(now))
        .col_expr(C::LastSeq, Expr::col(C::LastSeq).add(n));
    update = match guard {
        Guard::Lease(owner) => update.filter(C::LeaseOwner.eq(owner.as_str())),
        Guard::Unleased(statuses) => update
            .filter(C::LeaseOwner.is_null())
            .filter(C::Status.is_in(statuses.iter().map(|s| s.as_str()).collect::<Vec<_>>())),
        Guard::Expired(owner, now) => update
            .filter(C::LeaseOwner.eq(owner.as_str()))
            .filter(C::LeaseExpiresAt.lt(*now)),
        Guard::Unchanged(status, seq) => update
            .filter(C::LeaseOwner.is_null())
            .filter(C::Status.eq(status.as_str()))
            .filter(C::LastSeq.eq(*seq)),
    };
    let mut cols: Vec<(C, SimpleExpr)> = Vec::new();
    let mut set = |col: C, value: SimpleExpr| cols.push((col, value));
    if let Some(s) = changes.status {
        set(C::Status, Expr::value(s.as_str()));
    }
    if let Some(v) = changes.intent {
        set(C::Intent, Expr::value(v));
    }
    if let Some(v) = changes.confidence {
        set(C::Confidence, Expr::value(v));
    }
    if let Some(v) = changes.intent_reviewed {
        set(C::IntentReviewed, Expr::value(v));
    }
    if let Some((plan_id, key, version)) = changes.plan {
        set(C::PlanId, Expr::value(plan_id.uuid()));
        set(C::PlanKey, Expr::value(key));
        set(C::PlanVersion, Expr::value(version));
    }
    if let Some(v) = changes.frozen_plan {
        set(C::FrozenPlan, Expr::value(json_of(&v)?));
    }
    if let Some(v) = changes.settled_step_ids {
        set(C::SettledStepIds, Expr::value(json!(v)));
    }
    if let Some(v) = changes.reviewed_step_ids {
        set(C::ReviewedStepIds, Expr::value(json!(v)));
    }
    if let Some(v) = changes.attempts {
        set(C::Attempts, Expr::value(Value::Object(v)));
    }
    if let Some(v) = changes.current_step_id {
        set(C::CurrentStepId, Expr::value(v));
    }
    if let Some(v) = changes.state {
        set(C::State, Expr::value(v));
    }
    if let Some(v) = changes.step_outputs {
        set(C::StepOutputs, Expr::value(Value::Object(v)));
    }
    if let Some(v) = changes.error {
        set(C::ErrorMessage, Expr::value(v));
    }
    if let Some(lease) = changes.lease {
        let (owner, until) = match lease {
            Some((o, u)) => (Some(o), Some(u)),
            None => (None, None),
        };
        set(C::LeaseOwner, Expr::value(owner));
        set(C::LeaseExpiresAt, Expr::value(until));
    }
    if let Some(v) = changes.run_after {
        set(C::RunAfter, Expr::value(v));
    }
    if let Some(v) = changes.cancel_requested {
        set(C::CancelRequested, Expr::value(v));
    }
    if let Some(v) = changes.usage {
        set(C::Usage, Expr::value(v.to_json()));
    }
    if let Some(v) = changes.result {
        set(C::Result, Expr::value(v));
    }
    if let Some(v) = changes.running_ms {
        set(C::RunningMs, Expr::value(v));
    }
    if let Some(v) = changes.started_at {
        set(C::StartedAt, Expr::value(v));
    }
    if let Some(v) = changes.completed_at {
        set(C::CompletedAt, Expr::value(v));
    }
    for (col, value) in cols {
        update = update.col_expr(col, value);
    }
    Ok(update)
}

/// Count a task's move to `status` in the task metrics.
pub(super) fn count_status(task: &Task, status: TaskStatus, now: DateTime<Utc>) {
    let m = metrics();
    let plan = task.plan_key.clone().unwrap_or_default();
    if status == TaskStatus::NeedsReview {
        m.reviews_opened
            .get_or_create(&PlanLabels { plan: plan.clone() })
            .inc();
    }
    if status.is_terminal() {
        m.tasks_finished
            .get_or_create(&TaskEndLabels {
                plan: plan.clone(),
                channel: task.channel.as_str().to_owned(),
                status: status.as_str().to_owned(),
            })
            .inc();
        m.task_duration
            .get_or_create(&PlanLabels { plan })
            .observe(seconds_between(task.created_at, now));
    }
}

/// Store `events` as the task's events `first`, `first + 1`, … in one
/// statement (with their notification, unless `announce` is
/// [`Announce::Apart`]), and return them as committed.
pub(super) async fn insert_events<C: ConnectionTrait>(
    db: &C,
    announce: Announce,
    task: &Task,
    first: i64,
    events: Vec<NewEvent>,
    now: DateTime<Utc>,
    rows: Vec<Statement>,
) -> Result<Vec<TaskEvent>> {
    if events.is_empty() {
        for row in rows {
            db.execute_raw(row).await?;
        }
        return Ok(Vec::new());
    }
    let (models, stored) = event_rows(task, first, events, now)?;
    let insert = task_event::Entity::insert_many(
        models
            .into_iter()
            .map(task_event::ActiveModel::from)
            .collect::<Vec<_>>(),
    );
    let backend = db.get_database_backend();
    // Deliveries to the tenant's webhooks go with the events they report.
    let mut rows = rows;
    rows.extend(crate::runtime::webhooks::outbox(
        backend, task, &stored, now,
    ));
    // So do the checkpoints of the steps they settle.
    rows.extend(checkpoints::outbox(backend, task, &stored, now));
    let mut payloads = crate::runtime::events::notification_payloads(backend, &stored);
    if payloads.len() == 1 && announce == Announce::InStatement {
        // One round trip for all: the inserts as data-modifying CTEs (each
        // runs to completion whatever the outer query reads) and the
        // notification.
        let mut sql = String::from("WITH ");
        let mut values: Vec<sea_orm::Value> = Vec::new();
        for (i, statement) in std::iter::once(insert.build(backend))
            .chain(rows)
            .enumerate()
        {
            if i > 0 {
                sql.push_str(", ");
            }
            let shifted = shift_placeholders(&statement.sql, values.len());
            sql.push_str(&format!("w{i} AS ({shifted})"));
            values.extend(statement.values.map(|v| v.0).unwrap_or_default());
        }
        let n = values.len();
        sql.push_str(&format!(" SELECT pg_notify(${}, ${})", n + 1, n + 2));
        values.push(crate::runtime::events::CHANNEL.into());
        values.extend(payloads.pop().map(Into::into));
        db.execute_raw(Statement::from_sql_and_values(backend, sql, values))
            .await?;
    } else {
        insert.exec_without_returning(db).await?;
        for row in rows {
            db.execute_raw(row).await?;
        }
        crate::runtime::events::notify(db, payloads).await?;
    }
    Ok(stored)
}

/// `events` as the task's rows `first`, `first + 1`, …, and as they read
/// once committed.
pub(super) fn event_rows(
    task: &Task,
    first: i64,
    events: Vec<NewEvent>,
    now: DateTime<Utc>,
) -> Result<(Vec<task_event::Model>, Vec<TaskEvent>)> {
    let models: Vec<task_event::Model> = events
        .into_iter()
        .enumerate()
        .map(|(i, event)| task_event::Model {
            id: Uuid::now_v7(),
            tenant_id: task.tenant.uuid(),
            task_id: task.id.uuid(),
            seq: first + i as i64,
            kind: event
                .kind
                .unwrap_or(EventKind::StatusChanged)
                .as_str()
                .to_owned(),
            step_id: event.step_id,
            tool: event.tool,
            status: event.status,
            summary: event.summary,
            error: event.error,
            data_keys: json!(event.data_keys),
            data: redact(&event.data),
            created_at: now,
        })
        .collect();
    let stored = models
        .iter()
        .cloned()
        .map(TaskEvent::try_from)
        .collect::<Result<Vec<_>>>()?;
    Ok((models, stored))
}

/// `sql` (PostgreSQL syntax) with every `$N` placeholder renumbered
/// `$(N + by)`, so statements can be joined into one; quoted identifiers
/// and string literals are left alone.
pub(super) fn shift_placeholders(sql: &str, by: usize) -> String {
    if by == 0 {
        return sql.to_owned();
    }
    let mut out = String::with_capacity(sql.len() + 16);
    let mut quote: Option<char> = None;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match quote {
            Some(q) => {
                out.push(c);
                if c == q {
                    quote = None;
                }
            }
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                out.push(c);
            }
            None if c == '$' && chars.peek().is_some_and(char::is_ascii_digit) => {
                let mut digits = String::new();
                while let Some(d) = chars.peek().copied().filter(char::is_ascii_digit) {
                    digits.push(d);
                    chars.next();
                }
                let n: usize = digits.parse().unwrap_or(0);
                out.push_str(&format!("${}", n + by));
            }
            None => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::shift_placeholders;

    #[test]
    fn placeholders_are_renumbered_outside_quotes_only() {
        assert_eq!(
            shift_placeholders(
                r#"INSERT INTO "t$1" ("a", "b") VALUES ($1, $12) -- '$2'"#,
                3
            ),
            r#"INSERT INTO "t$1" ("a", "b") VALUES ($4, $15) -- '$2'"#
        );
        assert_eq!(shift_placeholders("SELECT $1", 0), "SELECT $1");
        assert_eq!(shift_placeholders("SELECT $x, $", 2), "SELECT $x, $");
    }
}
