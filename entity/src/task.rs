//! `tasks`: A unit of work and the executor's durable view of it.

use sea_orm::entity::prelude::*;

use crate::TenantOwned;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "tasks")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub parent_task_id: Option<Uuid>,
    /// The conversation the task is a turn of.
    pub conversation_id: Option<Uuid>,
    pub channel: String,
    /// How the client asked it to run: `ENQUEUE`, `ENQUEUE_AND_WAIT`,
    /// `PLAN` or `ANSWER`.
    pub mode: String,
    pub status: String,
    pub idempotency_key: Option<String>,
    pub input_text: String,
    pub payload: Json,
    pub subject_id: Option<Uuid>,
    pub intent: Option<String>,
    pub confidence: f64,
    pub confidence_threshold: f64,
    /// A human confirmed the intent; the confidence gate no longer applies.
    pub intent_reviewed: bool,
    pub plan_id: Option<Uuid>,
    pub plan_key: Option<String>,
    pub plan_version: Option<i32>,
    /// The plan's steps as frozen at planning time, plus injected steps.
    pub frozen_plan: Json,
    /// Ids of steps that will not run again: completed, skipped, or failed
    /// without stopping the task.
    pub settled_step_ids: Json,
    /// Ids of `requires_review` steps a human has approved.
    pub reviewed_step_ids: Json,
    /// Attempts so far, by step id.
    pub attempts: Json,
    pub current_step_id: Option<String>,
    pub state: Json,
    /// Outputs of settled steps, by step id.
    pub step_outputs: Json,
    pub max_steps: i32,
    pub error_message: Option<String>,
    pub trace_id: String,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<DateTimeUtc>,
    /// Not claimable before this instant (retry backoff).
    pub run_after: DateTimeUtc,
    pub cancel_requested: bool,
    /// Sequence number of the task's latest event.
    pub last_seq: i64,
    pub usage: Json,
    /// Milliseconds its steps' tool calls took so far.
    pub running_ms: i64,
    /// What an agent step concluded (see the runtime's `TaskResult`).
    pub result: Option<Json>,
    /// Higher runs first among the tenant's runnable tasks.
    pub priority: i32,
    /// Tasks with the same key share `max_concurrent` running places.
    pub concurrency_key: Option<String>,
    /// Running tasks of `concurrency_key` at most (from the plan).
    pub max_concurrent: Option<i32>,
    /// When a slot last claimed the task.
    pub claimed_at: Option<DateTimeUtc>,
    pub created_by: String,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
    pub started_at: Option<DateTimeUtc>,
    pub completed_at: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

impl TenantOwned for Entity {
    fn tenant_column() -> Column {
        Column::TenantId
    }
    fn id_column() -> Column {
        Column::Id
    }
}
