//! The executor: one shared engine that moves tasks forward, durably,
//! fairly between tenants and many tasks at a time.
//!
//! **Who runs tasks.** Any number of processes (`brainstem serve` runs an
//! executor beside the API, `brainstem worker` runs only the executor)
//! share one database. Each has `slots` (`executor_slots`, default 512):
//! one claiming loop (`slots`) fills every free slot by *claiming* a
//! runnable task (status `PENDING`, no lease, `run_after` passed) with a
//! lease, and spawns its *drive*: planning, then one step after another,
//! on its own async task. A slot waiting on a tool holds no database
//! connection and no thread; the pool is taken only by the claim and by
//! each commit. While a drive runs, a heartbeat extends its lease; every
//! write is guarded by the lease owner, so a drive that lost its lease can
//! never commit. Housekeeping's reaper, beside the executor
//! ([`crate::runtime::housekeeping`]), returns tasks whose lease expired (a
//! crashed or frozen process) to the queue with an event; they resume at
//! the first step not settled. The executor itself only claims and drives.
//!
//! **Which task next** (`claim`). Among tenants with ready work under
//! their running limit (`tenant_max_running`, or the tenant's own), the one
//! with the fewest running tasks for its weight, then the one served least
//! recently; within it, the highest `priority`, then the longest wait; a
//! task whose concurrency key runs its plan's `max_concurrent` waits. The
//! rule reads only the database, so it holds across processes (`FOR
//! UPDATE SKIP LOCKED` and a per-tenant advisory lock on PostgreSQL,
//! SQLite's single writer elsewhere).
//!
//! **Check-execute-commit.** For each step: check (skip settled steps,
//! honour cancellation, the step cap, conditions and review gates), run the
//! tool with no transaction open, then commit the step's attempt, its events,
//! state, outputs, injected steps and artifacts in one short transaction.
//! The tool gets the idempotency key `<task id>:<step id>`, the same on every
//! attempt, so a step repeated after a crash does not repeat its effect.
//!
//! **What wakes the claiming loop.** A task becoming runnable in this
//! process (`Tasks::wake_signal`), a drive ending (a free slot, perhaps an
//! eased limit), or the poll interval for work from elsewhere.
//!
//! **Waiting is not running.** A tool's wait for admission (a local
//! model's bounded queue, a per-minute model budget; `kernel::waiting`)
//! extends its step's timeout and is not counted as running time.
//!
//! [`Executor::run_once`] is the step function: tests call it directly.

use crate::kernel::db::{BeginWrite, WriteTransaction};
use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::Duration,
};

use brainstem_entity::{
    PlanId, TaskId, TenantId, TenantScope, delegation, review, task, task_step,
};
use chrono::{DateTime, Utc};
use rand::{Rng, RngCore};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ConnectionTrait, DbBackend, EntityTrait, QueryTrait,
    Statement, sea_query::Expr,
};
use serde_json::{Map, Value, json};
use tokio::{sync::watch, task::JoinHandle};
use uuid::Uuid;

use crate::{
    Domain, Error, Result,
    catalogue::{
        capabilities,
        guardrails::{self, Severity, StepFacts},
        plans::{self, FALLBACK_INTENT, StepDef},
        tool::{
            ArtifactDef, Control, Interrupt, ToolContext, ToolError, ToolOutput, ToolPorts,
            ToolRegistry, ToolSettings,
        },
    },
    kernel::{
        audit::{self, sha256_hex},
        json_schema::{self, Mode},
        metrics::{StepLabels, TaskLabels, TenantLabels, ToolLabels, metrics, seconds_between},
        origin::{self, Origin},
        redact::redact,
        row_security::{self, Bypass, as_platform, as_tenant},
        template, waiting,
    },
    models::{
        llm::{Message, budget, prompt},
        usage::Usage,
    },
    runtime::{
        intent,
        tasks::{
            EventKind, Guard, INTENT_REVIEW_STEP, LeasedWrite, NewEvent, PLAN_REVIEW_STEP, Task,
            TaskChanges, TaskEvent, TaskMode, TaskStatus, mutate_with,
        },
    },
};

mod claim;
mod interrupt;
mod planning;
mod slots;
mod step;

use claim::{Claimed, Open};

use step::{fold_next, next_after};

/// How workers behave.
#[derive(Clone, Debug)]
pub struct ExecutorConfig {
    /// Identifies this process's executor in leases.
    pub worker_id: String,
    /// Tasks driven at once in this process (0: none; tests drive
    /// `run_once`).
    pub slots: usize,
    /// The last free slots kept for tenants with nothing in flight in this
    /// process (`claim`'s reserve); at most a quarter of `slots`
    /// ([`Self::reserve`]).
    pub reserved_slots: usize,
    /// Tasks of one tenant running at once across every process, unless
    /// the tenant has its own limit (0: no limit).
    pub tenant_max_running: u32,
    /// How long a claim lasts without a heartbeat.
    pub lease: Duration,
    /// How often an idle worker looks for work from other processes.
    pub poll: Duration,
    /// How intents are detected when a task names none.
    pub intent_detector: intent::Detector,
    /// The most running time (its steps' tool calls) a task may use; a
    /// step gets at most what is left.
    pub task_timeout: Duration,
    /// Write a `tool.call` audit row with each step attempt (off by
    /// default: it costs 7–12 % of step throughput on PostgreSQL; the step
    /// records hold the same facts, unhashed).
    pub audit_tool_calls: bool,
}

impl ExecutorConfig {
    /// The slots kept for newcomers: `reserved_slots`, at most a quarter
    /// of the slots (none with fewer than four).
    pub fn reserve(&self) -> usize {
        self.reserved_slots.min(self.slots / 4)
    }
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        Self {
            worker_id: format!("worker-{}", Uuid::now_v7().simple()),
            slots: 512,
            reserved_slots: 16,
            tenant_max_running: 0,
            lease: Duration::from_secs(30),
            poll: Duration::from_millis(500),
            intent_detector: intent::Detector::Rules,
            task_timeout: Duration::from_secs(120),
            audit_tool_calls: false,
        }
    }
}

/// What to do after one unit of work on a task.
enum Next {
    Continue(Box<Task>),
    Stop,
}

/// Rows written beside a task change in one commit.
#[derive(Default)]
struct Extra {
    step: Option<task_step::ActiveModel>,
    review: Option<review::ActiveModel>,
    delegation: Option<delegation::ActiveModel>,
    artifacts: Vec<ArtifactDef>,
    artifact_step: Option<(String, String)>,
}

#[derive(Clone)]
pub struct Executor {
    domain: Domain,
    registry: ToolRegistry,
    settings: Arc<ToolSettings>,
    /// What a step's tool may use of the platform, lent to every step.
    ports: Arc<ToolPorts>,
    config: ExecutorConfig,
    stopping: watch::Receiver<bool>,
    /// Tenant slugs (never change once created), so driving a task does
    /// not read its tenant again.
    slugs: Arc<Memo<TenantId, String>>,
    /// Tenants' own plan versions by id (a version never changes once
    /// published), so planning a task that named its plan reads nothing.
    /// Capability plans are not kept: they need the subscription checked.
    own_plans: Arc<Memo<(TenantId, PlanId), plans::Plan>>,
}

/// Values that never change once written, by key, kept in memory; the map
/// starts over when it holds [`Memo::LIMIT`] entries.
struct Memo<K, V>(std::sync::Mutex<HashMap<K, V>>);

impl<K, V> Default for Memo<K, V> {
    fn default() -> Self {
        Self(std::sync::Mutex::new(HashMap::new()))
    }
}

impl<K: std::hash::Hash + Eq, V: Clone> Memo<K, V> {
    const LIMIT: usize = 10_000;

    fn get(&self, key: &K) -> Option<V> {
        self.0.lock().ok().and_then(|m| m.get(key).cloned())
    }

    fn put(&self, key: K, value: V) {
        if let Ok(mut m) = self.0.lock() {
            if m.len() >= Self::LIMIT {
                m.clear();
            }
            m.insert(key, value);
        }
    }
}

impl Executor {
    pub fn new(
        domain: Domain,
        settings: ToolSettings,
        config: ExecutorConfig,
        stopping: watch::Receiver<bool>,
    ) -> Self {
        Self {
            registry: domain.plans.registry().clone(),
            ports: Arc::new(domain.tool_ports()),
            domain,
            settings: Arc::new(settings),
            config,
            stopping,
            slugs: Arc::default(),
            own_plans: Arc::default(),
        }
    }

    /// [`plans::Plans::for_task_in`], from the cache for the tenant's own
    /// plans.
    async fn plan_for_task<C: ConnectionTrait>(
        &self,
        db: &C,
        scope: TenantScope,
        id: PlanId,
        now: DateTime<Utc>,
    ) -> Result<plans::Plan> {
        let key = (scope.tenant_id(), id);
        if let Some(plan) = self.own_plans.get(&key) {
            return Ok(plan);
        }
        let plan = plans::Plans::for_task_in(db, scope, id, now).await?;
        if plan.capability.is_none() {
            self.own_plans.put(key, plan.clone());
        }
        Ok(plan)
    }

    async fn tenant_slug(&self, scope: TenantScope) -> Result<String> {
        let tenant = scope.tenant_id();
        if let Some(slug) = self.slugs.get(&tenant) {
            return Ok(slug);
        }
        let slug = self.domain.tenants.get(scope).await?.slug;
        self.slugs.put(tenant, slug.clone());
        Ok(slug)
    }

    pub fn config(&self) -> &ExecutorConfig {
        &self.config
    }

    fn is_stopping(&self) -> bool {
        *self.stopping.borrow()
    }

    fn lease_until(&self) -> DateTime<Utc> {
        Utc::now() + chrono::Duration::from_std(self.config.lease).unwrap_or_default()
    }

    /// Claim one runnable task and drive it until it finishes, pauses or
    /// backs off. Returns the task, or `None` when nothing was runnable.
    pub async fn run_once(&self) -> Result<Option<TaskId>> {
        let Some(claimed) = self.claim_one(Open::ToAll).await? else {
            return Ok(None);
        };
        let id = claimed.task.id;
        self.drive_claimed(claimed).await?;
        Ok(Some(id))
    }

    /// Drive a claimed task as its tenant, under its trace.
    async fn drive_claimed(&self, claimed: Claimed) -> Result<()> {
        let Claimed { task, held, at } = claimed;
        let tenant = task.scope().tenant_id();
        let waited = seconds_between(task.run_after, at);
        // Boxed: the driving future is large, and a debug build's stack is
        // not.
        let origin = Origin::of_trace(&task.trace_id);
        let driven = as_tenant(
            tenant,
            origin::within(origin, Box::pin(self.drive(task, held))),
        )
        .await;
        // By now the tenant's slug is known without a read.
        if let Some(slug) = self.slugs.get(&tenant) {
            metrics()
                .queue_wait
                .get_or_create(&TenantLabels::of(&slug))
                .observe(waited);
        }
        driven
    }

    /// Run until no task is runnable; returns how many were driven.
    pub async fn run_until_idle(&self) -> Result<usize> {
        let mut n = 0;
        while self.run_once().await?.is_some() {
            n += 1;
        }
        Ok(n)
    }

    /// Drive a claimed task until it stops.
    /// `held`: the claim's transaction, still open, for planning to commit
    /// in.
    async fn drive(&self, task: Task, held: Option<WriteTransaction>) -> Result<()> {
        let heartbeat = self.heartbeat(task.scope(), task.id);
        let result = self.drive_leased(task, held).await;
        heartbeat.abort();
        result
    }

    async fn drive_leased(&self, mut task: Task, held: Option<WriteTransaction>) -> Result<()> {
        if let Some(txn) = held {
            match self.plan(task, Some(txn)).await? {
                Next::Continue(next) => task = *next,
                Next::Stop => return Ok(()),
            }
        }
        // Read only now: while the claim's transaction was held, another
        // pooled connection was not to be asked for.
        let slug = self.tenant_slug(task.scope()).await?;
        loop {
            if task.cancel_requested {
                return self.cancel(&task).await.map(|_| ());
            }
            if self.is_stopping() {
                return self.release(&task).await;
            }
            match self.advance(task, &slug).await? {
                Next::Continue(next) => task = *next,
                Next::Stop => return Ok(()),
            }
        }
    }

    fn heartbeat(&self, scope: TenantScope, id: TaskId) -> JoinHandle<()> {
        let db = self.domain.db.clone();
        let owner = self.config.worker_id.clone();
        let lease = self.config.lease;
        row_security::spawn(async move {
            loop {
                tokio::time::sleep(lease / 3).await;
                let until = Utc::now() + chrono::Duration::from_std(lease).unwrap_or_default();
                use brainstem_entity::TenantOwned;
                use sea_orm::{ColumnTrait, QueryFilter};
                let extended = task::Entity::update_many_in(scope)
                    .col_expr(task::Column::LeaseExpiresAt, Expr::value(until))
                    .filter(task::Column::Id.eq(id.uuid()))
                    .filter(task::Column::LeaseOwner.eq(owner.as_str()))
                    .exec(&db)
                    .await;
                match extended {
                    Ok(r) if r.rows_affected == 1 => {}
                    Ok(_) => return, // the lease is gone; the driver will notice
                    Err(err) => tracing::warn!(%err, task = %id, "heartbeat failed"),
                }
            }
        })
    }

    /// Commit a change under our lease, with the rows that go with it.
    async fn commit(
        &self,
        task: &Task,
        changes: TaskChanges,
        events: Vec<NewEvent>,
        extra: Extra,
    ) -> Result<Option<Task>> {
        self.commit_in(None, task, changes, events, extra).await
    }

    /// [`Self::commit`], in `held` when given (a transaction already open).
    async fn commit_in(
        &self,
        held: Option<WriteTransaction>,
        task: &Task,
        changes: TaskChanges,
        events: Vec<NewEvent>,
        extra: Extra,
    ) -> Result<Option<Task>> {
        let owner = &self.config.worker_id;
        // An attempt's tool call adds to the task's running time.
        let mut changes = changes;
        if let Some(step) = &extra.step
            && let sea_orm::ActiveValue::Set(ms) = &step.duration_ms
            && changes.running_ms.is_none()
        {
            changes.running_ms = Some(task.running_ms.saturating_add((*ms).max(0)));
        }
        // The step's attempt row rides with the events, and so does its
        // audit row when tool calls are audited (a model call included,
        // with its usage): `tool.call`.
        let backend = self.domain.db.get_database_backend();
        let mut rows = Vec::new();
        if let Some(step) = extra.step {
            if self.config.audit_tool_calls {
                rows.push(tool_call_audit(owner, task, &step).insert(backend));
            }
            rows.insert(0, task_step::Entity::insert(step).build(backend));
        }
        // A change with no rows of its own kind is one statement on
        // PostgreSQL (`tasks::LeasedWrite`), in no transaction of its own.
        let (changes, events, rows) = if extra.review.is_none()
            && extra.delegation.is_none()
            && extra.artifacts.is_empty()
        {
            let announce = self.domain.tasks.announcing();
            match LeasedWrite::prepare(backend, announce, task, owner, changes, events, rows)? {
                LeasedWrite::One(one) => {
                    let written = match held {
                        Some(txn) => match one.run(&txn).await? {
                            Some(written) => {
                                txn.commit().await?;
                                Some(written)
                            }
                            None => None,
                        },
                        None => one.run(&self.domain.db).await?,
                    };
                    let Some((updated, stored)) = written else {
                        tracing::warn!(task = %task.id, "lost the lease; leaving the task to its new owner");
                        return Ok(None);
                    };
                    self.publish(&stored);
                    return Ok(Some(updated));
                }
                LeasedWrite::Many {
                    changes,
                    events,
                    also,
                } => (*changes, events, also),
            }
        } else {
            (changes, events, rows)
        };
        let txn = match held {
            Some(txn) => txn,
            None => self.domain.db.begin_write().await?,
        };
        let guard = Guard::Lease(owner.clone());
        let Some((updated, stored)) = mutate_with(
            &txn,
            self.domain.tasks.announcing(),
            task.scope(),
            task.id,
            &guard,
            changes,
            events,
            rows,
        )
        .await?
        else {
            tracing::warn!(task = %task.id, "lost the lease; leaving the task to its new owner");
            return Ok(None);
        };
        if let Some(review) = extra.review {
            review.insert(&txn).await?;
        }
        if let Some(delegation) = extra.delegation {
            delegation.insert(&txn).await?;
        }
        if let Some((step_id, tool)) = extra.artifact_step {
            for a in extra.artifacts {
                brainstem_entity::artifact::ActiveModel {
                    id: Set(Uuid::now_v7()),
                    tenant_id: Set(task.tenant.uuid()),
                    task_id: Set(task.id.uuid()),
                    step_id: Set(step_id.clone()),
                    tool: Set(tool.clone()),
                    kind: Set(a.kind),
                    role: Set(a.role),
                    reference: Set(a.reference),
                    metadata: Set(redact(&a.metadata)),
                    created_at: Set(Utc::now()),
                }
                .insert(&txn)
                .await?;
            }
        }
        txn.commit().await?;
        self.publish(&stored);
        Ok(Some(updated))
    }

    fn publish(&self, events: &[TaskEvent]) {
        self.domain.tasks.sink().publish(events);
    }

    async fn release(&self, task: &Task) -> Result<()> {
        self.commit(
            task,
            TaskChanges {
                status: Some(TaskStatus::Pending),
                lease: Some(None),
                current_step_id: Some(None),
                ..TaskChanges::default()
            },
            vec![NewEvent::status(
                TaskStatus::Pending,
                "worker stopping; back in the queue",
            )],
            Extra::default(),
        )
        .await
        .map(|_| ())
    }

    async fn fail(&self, task: &Task, message: String, step: Option<&StepDef>) -> Result<Next> {
        self.settle(None, task, failure(message, step)).await
    }

    /// Commit a decision (in `held` when given) and say what comes next.
    async fn settle(
        &self,
        held: Option<WriteTransaction>,
        task: &Task,
        decision: Decision,
    ) -> Result<Next> {
        let updated = self
            .commit_in(
                held,
                task,
                decision.changes,
                decision.events,
                decision.extra,
            )
            .await?;
        Ok(next_after(decision.stop, updated))
    }

    /// One unit of work: plan, run the next step, or finish.
    async fn advance(&self, task: Task, slug: &str) -> Result<Next> {
        if task.plan_key.is_none() {
            return self.plan(task, None).await;
        }
        let next = task
            .frozen_plan
            .iter()
            .enumerate()
            .find(|(_, s)| !task.settled_step_ids.contains(&s.id))
            .map(|(i, s)| (i, s.clone()));
        match next {
            None => {
                self.commit(
                    &task,
                    TaskChanges {
                        status: Some(TaskStatus::Completed),
                        lease: Some(None),
                        completed_at: Some(Utc::now()),
                        current_step_id: Some(None),
                        ..TaskChanges::default()
                    },
                    vec![NewEvent::status(TaskStatus::Completed, "all steps settled")],
                    Extra::default(),
                )
                .await?;
                Ok(Next::Stop)
            }
            Some((index, _)) if index >= task.max_steps as usize => {
                let message = format!(
                    "Max execution steps exceeded (max_steps = {}). Possible infinite loop in dynamic step injection.",
                    task.max_steps
                );
                self.fail(&task, message, None).await
            }
            Some((_, step)) => self.run_step(task, step, slug).await,
        }
    }
}

/// The audit row of one tool call (`tool.call`): who ran it, which step
/// and attempt, how it went, how long it took and what it used. Arguments
/// and outputs stay in the step's record (redacted), not in the audit log.
fn tool_call_audit(worker: &str, task: &Task, step: &task_step::ActiveModel) -> audit::AuditRow {
    fn value<T: Clone + Default + Into<sea_orm::Value>>(v: &sea_orm::ActiveValue<T>) -> T {
        match v {
            sea_orm::ActiveValue::Set(x) | sea_orm::ActiveValue::Unchanged(x) => x.clone(),
            sea_orm::ActiveValue::NotSet => T::default(),
        }
    }
    let step_id = value(&step.step_id);
    let (_, row) = audit::prepare(audit::AuditEntry {
        tenant: Some(task.tenant),
        actor: format!("executor:{worker}"),
        action: "tool.call".into(),
        target: format!("{}:{step_id}", task.id),
        data: json!({
            "tool": value(&step.tool),
            "attempt": value(&step.attempt),
            "status": value(&step.status),
            "duration_ms": value(&step.duration_ms),
            "usage": value(&step.usage),
            "error": value(&step.error),
        }),
    });
    row
}

/// A change to commit, with its events and rows, and whether the task's
/// driving stops after it.
struct Decision {
    changes: TaskChanges,
    events: Vec<NewEvent>,
    extra: Extra,
    stop: bool,
}

/// The task fails with `message` (at `step`, when one was running).
fn failure(message: String, step: Option<&StepDef>) -> Decision {
    Decision {
        changes: TaskChanges {
            status: Some(TaskStatus::Failed),
            lease: Some(None),
            error: Some(Some(message.clone())),
            completed_at: Some(Utc::now()),
            current_step_id: Some(step.map(|s| s.id.clone())),
            ..TaskChanges::default()
        },
        events: vec![NewEvent::status(TaskStatus::Failed, message.clone()).error(message)],
        extra: Extra::default(),
        stop: true,
    }
}

/// Pause for a human: the review row, the change and its events.
#[allow(clippy::too_many_arguments)]
fn review(
    task: &Task,
    step_id: &str,
    tool: Option<&str>,
    reason: String,
    confidence: Option<f64>,
    proposed: Value,
    mut changes: TaskChanges,
) -> Decision {
    let review_id = Uuid::now_v7();
    changes.status = Some(TaskStatus::NeedsReview);
    changes.lease = Some(None);
    changes.current_step_id = Some(Some(step_id.to_owned()));
    let mut requested = NewEvent::new(EventKind::ReviewRequested, reason.clone()).data(json!({
        "review_id": review_id.to_string(),
        "confidence": confidence,
        "proposed_keys": proposed.as_object().map(|m| m.keys().cloned().collect::<Vec<_>>()),
    }));
    requested.step_id = Some(step_id.to_owned());
    requested.tool = tool.map(str::to_owned);
    let review = review::ActiveModel {
        id: Set(review_id),
        tenant_id: Set(task.tenant.uuid()),
        task_id: Set(task.id.uuid()),
        step_id: Set(step_id.to_owned()),
        reason: Set(reason.clone()),
        confidence: Set(confidence),
        proposed: Set(redact(&proposed)),
        status: Set("PENDING".into()),
        corrections: Set(json!({})),
        resolved_by: Set(None),
        resolved_at: Set(None),
        created_at: Set(Utc::now()),
    };
    Decision {
        changes,
        events: vec![requested, NewEvent::status(TaskStatus::NeedsReview, reason)],
        extra: Extra {
            review: Some(review),
            ..Extra::default()
        },
        stop: true,
    }
}
