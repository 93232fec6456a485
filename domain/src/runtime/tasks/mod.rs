//! Tasks: starting them, reading them and their events, and the lifecycle
//! operations a client can ask for (cancel, retry, resume, reject, complete a
//! delegation). The executor ([`crate::runtime::executor`]) moves them forward.
//!
//! **Events.** Every change of a task is recorded as a [`TaskEvent`] with a
//! per-task sequence number, inserted in the same transaction as the change
//! ([`mutate`] does both). The sequence comes from `tasks.last_seq`, bumped
//! by the same `UPDATE … RETURNING` that changes the task, so concurrent
//! writers are serialised by the row lock.
//!
//! **Who may write.** While a worker holds a task's lease, only that worker
//! changes it (every executor write is guarded by `lease_owner`); the API
//! changes a task only when no lease is held, except `cancelTask`, which
//! sets a flag the worker honours before its next step.
//!
//! **Files.** This file is the [`Tasks`] service and starting a task;
//! `record` holds the task record and its related rows, `event` the event
//! types and the sink, `log` the write side of the event log ([`mutate`]),
//! `reads` the reads (`filter` which tasks a list shows, `summaries` a
//! page's steps and events in one statement), `lifecycle` what a
//! client may do to a running task, `checkpoints` the state after each
//! settled step, `fork` forks and reruns, and `bulk_retry` and
//! `bulk_retry_run` retry many failed tasks as one resumable job.

use crate::kernel::db::BeginWrite;
use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use brainstem_entity::{
    ConversationId, PlanId, TaskId, TenantId, TenantOwned, TenantScope, artifact, conversation,
    delegation, review, task, task_event, task_step,
};
use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait,
    ActiveValue::Set,
    ColumnTrait, Condition, ConnectionTrait, DatabaseConnection, DatabaseTransaction, EntityTrait,
    PaginatorTrait, QueryFilter, QueryOrder, QuerySelect, QueryTrait, Statement,
    sea_query::{Expr, SimpleExpr},
};
use serde_json::{Map, Value, json};
use tokio::sync::Notify;
use uuid::Uuid;

use crate::{
    Error, Principal, Result,
    catalogue::plans::{Plans, StepDef},
    kernel::{
        audit::{self, AuditEntry, sha256_hex},
        metrics::{PlanLabels, TaskEndLabels, metrics, seconds_between},
        origin,
        page::{self, Page, PageRequest},
        redact::redact,
    },
    models::usage::Usage,
    runtime::events::Announce,
};

mod bulk_retry;
mod bulk_retry_run;
pub mod checkpoints;
mod event;
mod fields;
mod filter;
mod fork;
mod leased;
mod lifecycle;
mod log;
mod reads;
mod record;
mod summaries;
mod turns;

pub use bulk_retry::{
    DEFAULT_RETRY_TASKS, ItemOutcome, MAX_RETRY_TASKS, RetryFilter, RetryJob, RetryJobError,
    RetryJobStatus, RetryRequest,
};
pub use bulk_retry_run::RETRY_JOB_LEASE;
pub use checkpoints::Checkpoint;
pub use event::*;
pub use fields::{EventField, Fields, StepField, TaskField};
pub use filter::{TaskFilter, TimeRange};
pub use fork::{ForkLink, ForkRequest, merge_patch};
pub use leased::{LeasedWrite, OneStatement};
pub use log::*;
pub use reads::*;
pub use record::*;
pub use summaries::*;
pub use turns::{Interruption, Interrupts, Listening, turn_key};

#[derive(Clone)]
pub struct Tasks {
    db: DatabaseConnection,
    /// Set when `db` is a read replica: where a read that must see a
    /// given event goes when the replica has not replayed it yet.
    primary: Option<DatabaseConnection>,
    plans: Plans,
    wake: Arc<Notify>,
    sink: Arc<dyn EventSink>,
    /// The steps of this process's turns that a newer turn may stop.
    interrupts: Arc<Interrupts>,
    /// Whether stored events are announced apart from the statements that
    /// store them ([`Announce::Apart`]), shared by every clone.
    announce_apart: Arc<AtomicBool>,
}

fn forbid_unless_writable(principal: &Principal) -> Result<TenantScope> {
    principal.require_scope("tasks:write")
}

impl Tasks {
    pub fn new(db: DatabaseConnection, plans: Plans, sink: Arc<dyn EventSink>) -> Self {
        Self {
            db,
            primary: None,
            plans,
            wake: Arc::new(Notify::new()),
            sink,
            interrupts: Arc::default(),
            announce_apart: Arc::default(),
        }
    }

    /// Announce stored events as `announce` says, from now on, on this
    /// service and every clone of it ([`Announce::of`] the database, at
    /// start).
    pub fn announce(&self, announce: Announce) {
        self.announce_apart
            .store(announce == Announce::Apart, Ordering::Relaxed);
    }

    /// How stored events are announced.
    pub(crate) fn announcing(&self) -> Announce {
        if self.announce_apart.load(Ordering::Relaxed) {
            Announce::Apart
        } else {
            Announce::InStatement
        }
    }

    /// The same service reading from `replica` (a hot standby of `db`);
    /// its writes must not be called (the standby refuses them).
    pub fn reading_from(&self, replica: DatabaseConnection, plans: Plans) -> Self {
        Self {
            primary: Some(self.db.clone()),
            db: replica,
            plans,
            ..self.clone()
        }
    }

    /// Woken whenever a task becomes runnable in this process.
    pub fn wake_signal(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    pub fn sink(&self) -> Arc<dyn EventSink> {
        self.sink.clone()
    }

    /// One task became runnable: wake one idle worker (a permit is kept
    /// if none is idle), not the whole pool.
    fn runnable(&self) {
        self.wake.notify_one();
    }

    /// Start a task. A repeated idempotency key returns the existing task.
    pub async fn start(&self, principal: &Principal, new: NewTask) -> Result<Task> {
        let scope = forbid_unless_writable(principal)?;
        self.insert(scope, None, principal.actor.to_string(), new)
            .await
    }

    /// Start a task the platform itself starts (a schedule's run), as
    /// `created_by`.
    pub async fn start_system(
        &self,
        scope: TenantScope,
        created_by: String,
        new: NewTask,
    ) -> Result<Task> {
        self.insert(scope, None, created_by, new).await
    }

    /// Start a child task for a tool, keyed by the step's idempotency key.
    pub async fn start_child(&self, child: NewChildTask) -> Result<TaskId> {
        let scope = TenantScope::new(child.tenant);
        let task = self
            .insert(
                scope,
                Some(child.parent),
                format!("task:{}", child.parent),
                NewTask {
                    input: child.input,
                    payload: child.payload,
                    plan_key: child.plan_key,
                    intent: child.intent,
                    idempotency_key: Some(child.idempotency_key),
                    channel: Some(Channel::System),
                    ..NewTask::default()
                },
            )
            .await?;
        Ok(task.id)
    }

    async fn insert(
        &self,
        scope: TenantScope,
        parent: Option<TaskId>,
        created_by: String,
        new: NewTask,
    ) -> Result<Task> {
        if let Some(key) = &new.idempotency_key {
            if key.is_empty() || key.len() > 255 {
                return Err(Error::validation(
                    "idempotencyKey must have 1-255 characters",
                ));
            }
            if let Some(existing) = self.by_idempotency_key(scope, key).await? {
                return Ok(existing);
            }
        }
        let max_steps = new.max_steps.unwrap_or(DEFAULT_MAX_STEPS);
        if max_steps == 0 || max_steps > 10_000 {
            return Err(Error::validation("maxSteps must be between 1 and 10000"));
        }
        let threshold = new
            .confidence_threshold
            .unwrap_or(DEFAULT_CONFIDENCE_THRESHOLD);
        if !(0.0..=1.0).contains(&threshold) {
            return Err(Error::validation(
                "confidenceThreshold must be between 0 and 1",
            ));
        }
        let now = Utc::now();
        // A turn of a conversation: the caller's own, in this tenant.
        if let Some(id) = new.conversation {
            let owned = conversation::Entity::find_by_id_in(scope, id.uuid())
                .one(&self.db)
                .await?
                .is_some_and(|c| c.subject == created_by);
            if !owned {
                return Err(Error::not_found(format!("conversation {id}")));
            }
        }
        // A named plan must exist now, not fail later in a worker; one a
        // capability brings needs a subscription (FORBIDDEN, naming it).
        let plan = match &new.plan_key {
            Some(key) => Some(self.plans.for_start(scope, key, now).await.map_err(
                |e| match e {
                    Error::NotFound(_) => Error::validation(format!("unknown plan `{key}`")),
                    other => other,
                },
            )?),
            None => None,
        };
        let intent = plan
            .as_ref()
            .map(|p| p.intent.clone())
            .or(new.intent.clone());
        if let Some(i) = &intent
            && (i.is_empty() || i.len() > 100)
        {
            return Err(Error::validation("intent must have 1-100 characters"));
        }
        if plan.is_none()
            && let Some(i) = &intent
        {
            self.plans.check_intent(scope, i, now).await?;
        }
        if let Some(plan) = &plan {
            crate::catalogue::capabilities::check_quota(&self.db, scope, plan, now).await?;
        }
        if let Some(key) = &new.concurrency_key
            && (key.is_empty() || key.len() > 255)
        {
            return Err(Error::validation(
                "concurrencyKey must have 1-255 characters",
            ));
        }
        // The key's limit is the named plan's (a tenant's own plan); a key
        // without one limits nothing. A turn of a conversation runs under
        // the conversation's key, one at a time (see `turns`).
        let (concurrency_key, max_concurrent) = match (
            new.conversation,
            &new.concurrency_key,
            &plan,
        ) {
            (Some(c), None, _) => (Some(turn_key(c)), Some(1)),
            (Some(_), Some(_), _) => {
                return Err(Error::validation(
                    "a turn of a conversation runs under its conversation's key: give no concurrencyKey",
                ));
            }
            (None, Some(_), Some(p)) if p.capability.is_none() => (
                new.concurrency_key.clone(),
                crate::catalogue::plans::max_concurrent(&self.db, scope, p.id).await?,
            ),
            (None, key, _) => (key.clone(), None),
        };
        if new.multitask.is_some() && new.conversation.is_none() {
            return Err(Error::validation(
                "multitask applies to a turn of a conversation: give conversationId",
            ));
        }
        let id = TaskId::new();
        let given_intent = intent.is_some();
        let mut model = task::ActiveModel {
            id: Set(id.uuid()),
            tenant_id: Set(scope.tenant_id().uuid()),
            parent_task_id: Set(parent.map(TaskId::uuid)),
            conversation_id: Set(new.conversation.map(ConversationId::uuid)),
            channel: Set(new.channel.unwrap_or(Channel::Api).as_str().to_owned()),
            mode: Set(new.mode.as_str().to_owned()),
            status: Set(TaskStatus::Pending.as_str().to_owned()),
            idempotency_key: Set(new.idempotency_key.clone()),
            input_text: Set(new.input),
            payload: Set(if new.payload.is_null() {
                json!({})
            } else {
                new.payload
            }),
            subject_id: Set(new.subject_id),
            intent: Set(intent),
            // An intent the client named needs no detection.
            confidence: Set(if given_intent { 1.0 } else { 0.0 }),
            confidence_threshold: Set(threshold),
            intent_reviewed: Set(false),
            plan_id: Set(plan.as_ref().map(|p| p.id.uuid())),
            plan_key: Set(None),
            plan_version: Set(None),
            frozen_plan: Set(json!([])),
            settled_step_ids: Set(json!([])),
            reviewed_step_ids: Set(json!([])),
            attempts: Set(json!({})),
            current_step_id: Set(None),
            state: Set(json!({})),
            step_outputs: Set(json!({})),
            max_steps: Set(i32::try_from(max_steps).unwrap_or(i32::MAX)),
            error_message: Set(None),
            // The request's trace, when a request started it.
            trace_id: Set(origin::current().trace_id.unwrap_or_else(origin::new_id)),
            lease_owner: Set(None),
            lease_expires_at: Set(None),
            run_after: Set(now),
            cancel_requested: Set(false),
            last_seq: Set(1),
            usage: Set(Usage::default().to_json()),
            running_ms: Set(0),
            result: Set(None),
            priority: Set(new.priority),
            concurrency_key: Set(concurrency_key),
            max_concurrent: Set(max_concurrent),
            claimed_at: Set(None),
            created_by: Set(created_by),
            created_at: Set(now),
            updated_at: Set(now),
            started_at: Set(None),
            completed_at: Set(None),
        };
        let txn = self.db.begin_write().await?;
        let mut created = vec![NewEvent::status(TaskStatus::Pending, "task created")];
        let (stopped, running) = match new.conversation {
            Some(c) => {
                let admitted =
                    turns::admit(&txn, self.announcing(), scope, c, id, new.multitask, now).await?;
                created.extend(admitted.events);
                (admitted.stopped, admitted.running)
            }
            None => (Vec::new(), Vec::new()),
        };
        // Its first events are stored with it.
        model.last_seq = Set(created.len() as i64);
        let inserted = match model.insert(&txn).await {
            Ok(row) => row,
            Err(err) => {
                drop(txn);
                return match (Error::from(err), &new.idempotency_key) {
                    // Lost a race on the same idempotency key: return the winner.
                    (Error::Conflict(_), Some(key)) => self
                        .by_idempotency_key(scope, key)
                        .await?
                        .ok_or_else(|| Error::internal("idempotent task vanished")),
                    (other, _) => Err(other),
                };
            }
        };
        let task = Task::try_from(inserted)?;
        let events =
            insert_events(&txn, self.announcing(), &task, 1, created, now, Vec::new()).await?;
        txn.commit().await?;
        self.sink.publish(&stopped);
        self.sink.publish(&events);
        for turn in running {
            self.interrupts.signal(turn);
        }
        self.runnable();
        Ok(task)
    }

    async fn by_idempotency_key(&self, scope: TenantScope, key: &str) -> Result<Option<Task>> {
        task::Entity::find_in(scope)
            .filter(task::Column::IdempotencyKey.eq(key))
            .one(&self.db)
            .await?
            .map(Task::try_from)
            .transpose()
    }
}

/// Token deltas are published on the bus only: the step's final text is
/// stored as its output.
impl crate::catalogue::ports::LiveEvents for Tasks {
    fn token_delta(
        &self,
        tenant: TenantId,
        task: TaskId,
        step_id: &str,
        offset: usize,
        delta: &str,
    ) {
        let event = TaskEvent {
            id: Uuid::now_v7(),
            tenant,
            task_id: task,
            // Live-only events carry the sequence of the last stored
            // event: the bus stamps it (`events::EventBus::stamp`).
            seq: 0,
            kind: EventKind::TokenDelta,
            step_id: Some(step_id.to_owned()),
            tool: None,
            status: None,
            summary: String::new(),
            error: None,
            data_keys: Vec::new(),
            data: json!({"offset": offset, "text": delta}),
            created_at: Utc::now(),
        };
        self.sink.publish(&[event]);
    }
}
