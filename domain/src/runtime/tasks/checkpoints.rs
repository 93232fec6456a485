//! A task's checkpoints: its state as each settled step left it.
//!
//! The event log says *that* a step settled; a checkpoint keeps *what the
//! state was* right after, which nothing else stores (a step's attempt row
//! has its output, redacted, and the task row only the latest state). One
//! checkpoint per settled step — completed, skipped, or failed without
//! stopping the task — and so one per iteration of an agent loop, whose
//! iterations are steps (`answer`, `answer:2`, …, each continuing the
//! previous one).
//!
//! Invariants:
//! - A checkpoint is written by the same statement (or transaction) as the
//!   event that settles its step ([`outbox`], called where events are
//!   stored: `log::insert_events` and `LeasedWrite::prepare`), so a
//!   committed settle always has its checkpoint and a rolled-back one
//!   never does. Rows are never updated.
//! - Its `state` is the task's state as that commit left it; a review's
//!   corrections approved later are not part of it (they show in the next
//!   step's checkpoint).
//! - `seq` is the settling event's sequence in `source_task`: the task
//!   itself, or for a step a fork copied, the task that first settled it.
//!
//! Entry points: [`Tasks::checkpoints`], [`Tasks::checkpoints_of_many`],
//! [`resolve_step`] (a step id, or an agent loop's step and iteration).

use brainstem_entity::task_checkpoint;
use sea_orm::DbBackend;

use super::*;

/// The tool key of an agent loop's steps and the argument that chains an
/// iteration to the previous one. They mirror `tools::agent` (the runtime
/// cannot import tools; a test there checks they agree).
pub const AGENT_TOOL: &str = "agent";
pub const LOOP_CONTINUES: &str = "continues";

/// The state after one settled step.
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    pub task: TaskId,
    /// Its place among the task's settled steps, from 0.
    pub position: i32,
    pub step_id: String,
    /// For an agent loop's step: its iteration (from 1).
    pub iteration: Option<u32>,
    /// The sequence of the settling event in `source_task`.
    pub seq: i64,
    pub source_task: TaskId,
    pub state: Value,
    /// SHA-256 (hex) of the state's canonical JSON.
    pub state_digest: String,
    pub created_at: DateTime<Utc>,
}

impl From<task_checkpoint::Model> for Checkpoint {
    fn from(m: task_checkpoint::Model) -> Self {
        Self {
            task: m.task_id.into(),
            position: m.position,
            step_id: m.step_id,
            iteration: m.iteration.and_then(|n| u32::try_from(n).ok()),
            seq: m.seq,
            source_task: m.source_task_id.into(),
            state: m.state,
            state_digest: m.state_digest,
            created_at: m.created_at,
        }
    }
}

/// The digest a checkpoint keeps of `state`.
pub fn state_digest(state: &Value) -> String {
    sha256_hex(audit::canonical_json(state).as_bytes())
}

/// Whether `event` settles its step in `task` (as the event's commit leaves
/// it): a completion, a skip, or a failure the task goes on after.
fn settles(task: &Task, event: &TaskEvent) -> bool {
    matches!(
        event.kind,
        EventKind::StepCompleted | EventKind::StepSkipped | EventKind::StepFailed
    ) && event
        .step_id
        .as_ref()
        .is_some_and(|s| task.settled_step_ids.contains(s))
}

/// The checkpoint rows of the steps `events` settle in `task` (as their
/// commit leaves it), as inserts for `backend`, to go with the events.
pub(super) fn outbox(
    backend: DbBackend,
    task: &Task,
    events: &[TaskEvent],
    now: DateTime<Utc>,
) -> Vec<Statement> {
    events
        .iter()
        .filter(|e| settles(task, e))
        .filter_map(|e| {
            let step = e.step_id.as_deref()?;
            let position = task.settled_step_ids.iter().position(|s| s == step)?;
            let row = task_checkpoint::ActiveModel {
                id: Set(Uuid::now_v7()),
                tenant_id: Set(task.tenant.uuid()),
                task_id: Set(task.id.uuid()),
                position: Set(i32::try_from(position).unwrap_or(i32::MAX)),
                step_id: Set(step.to_owned()),
                iteration: Set(iteration_of(&task.frozen_plan, step)
                    .map(|n| i32::try_from(n).unwrap_or(i32::MAX))),
                seq: Set(e.seq),
                source_task_id: Set(task.id.uuid()),
                state: Set(task.state.clone()),
                state_digest: Set(state_digest(&task.state)),
                created_at: Set(now),
            };
            Some(task_checkpoint::Entity::insert(row).build(backend))
        })
        .collect()
}

fn step_def<'p>(plan: &'p [StepDef], id: &str) -> Option<&'p StepDef> {
    plan.iter().find(|s| s.id == id)
}

/// The step an agent loop's step continues (its previous iteration).
fn continues(step: &StepDef) -> Option<&str> {
    (step.tool == AGENT_TOOL)
        .then(|| step.args.get(LOOP_CONTINUES).and_then(Value::as_str))
        .flatten()
}

/// Which iteration of its agent loop `step_id` is (1 for the loop's first
/// step), or `None` for a step that is not an agent loop's.
pub fn iteration_of(plan: &[StepDef], step_id: &str) -> Option<u32> {
    let mut step = step_def(plan, step_id).filter(|s| s.tool == AGENT_TOOL)?;
    let mut n = 1u32;
    // Each hop goes to an earlier step; the bound only guards a bad plan.
    while let Some(previous) = continues(step) {
        if n as usize > plan.len() {
            return None;
        }
        step = step_def(plan, previous)?;
        n += 1;
    }
    Some(n)
}

/// The step id `step_id` names, or with `iteration`, the step of that
/// iteration of the agent loop whose first step is `step_id`.
pub fn resolve_step(plan: &[StepDef], step_id: &str, iteration: Option<u32>) -> Result<String> {
    let step = step_def(plan, step_id)
        .ok_or_else(|| Error::validation(format!("the task's plan has no step `{step_id}`")))?;
    let Some(n) = iteration else {
        return Ok(step.id.clone());
    };
    if iteration_of(plan, step_id) != Some(1) {
        return Err(Error::validation(format!(
            "step `{step_id}` does not start an agent loop: give its step id without an iteration"
        )));
    }
    if n == 0 {
        return Err(Error::validation("iterations count from 1"));
    }
    let mut current = step;
    for _ in 1..n {
        current = plan
            .iter()
            .find(|s| continues(s) == Some(current.id.as_str()))
            .ok_or_else(|| {
                Error::validation(format!(
                    "the agent loop `{step_id}` has no iteration {n} in the task's plan"
                ))
            })?;
    }
    Ok(current.id.clone())
}

impl Tasks {
    /// A task's checkpoints, in the order its steps settled.
    pub async fn checkpoints(&self, scope: TenantScope, task: TaskId) -> Result<Vec<Checkpoint>> {
        Ok(self
            .checkpoints_of_many(scope, &[task])
            .await?
            .remove(&task)
            .unwrap_or_default())
    }

    /// The checkpoints of each of `tasks`, in the order their steps settled.
    pub async fn checkpoints_of_many(
        &self,
        scope: TenantScope,
        tasks: &[TaskId],
    ) -> Result<HashMap<TaskId, Vec<Checkpoint>>> {
        let rows = task_checkpoint::Entity::find_in(scope)
            .filter(task_checkpoint::Column::TaskId.is_in(tasks.iter().map(|t| t.uuid())))
            .order_by_asc(task_checkpoint::Column::Position)
            .order_by_asc(task_checkpoint::Column::Id)
            .all(&self.db)
            .await?;
        let mut by_task: HashMap<TaskId, Vec<Checkpoint>> = HashMap::new();
        for row in rows {
            let checkpoint = Checkpoint::from(row);
            by_task.entry(checkpoint.task).or_default().push(checkpoint);
        }
        Ok(by_task)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(id: &str, tool: &str, args: Value) -> StepDef {
        serde_json::from_value(json!({"id": id, "tool": tool, "args": args})).unwrap()
    }

    fn agent_plan() -> Vec<StepDef> {
        vec![
            step("answer", "agent", json!({})),
            step("answer:1.1", "test.lookup", json!({})),
            step("answer:2", "agent", json!({"continues": "answer"})),
            step("answer:2.1", "test.lookup", json!({})),
            step("answer:3", "agent", json!({"continues": "answer:2"})),
            step("after", "set_state", json!({})),
        ]
    }

    #[test]
    fn iterations_follow_the_loop_chain() {
        let plan = agent_plan();
        assert_eq!(iteration_of(&plan, "answer"), Some(1));
        assert_eq!(iteration_of(&plan, "answer:3"), Some(3));
        assert_eq!(iteration_of(&plan, "answer:1.1"), None);
        assert_eq!(iteration_of(&plan, "after"), None);
        assert_eq!(iteration_of(&plan, "missing"), None);
    }

    #[test]
    fn a_loop_and_an_iteration_name_that_iterations_step() {
        let plan = agent_plan();
        assert_eq!(resolve_step(&plan, "answer", Some(2)).unwrap(), "answer:2");
        assert_eq!(resolve_step(&plan, "answer", Some(1)).unwrap(), "answer");
        assert_eq!(
            resolve_step(&plan, "answer:2.1", None).unwrap(),
            "answer:2.1"
        );
        assert!(resolve_step(&plan, "answer", Some(4)).is_err());
        assert!(resolve_step(&plan, "answer:2", Some(1)).is_err());
        assert!(resolve_step(&plan, "after", Some(1)).is_err());
        assert!(resolve_step(&plan, "nope", None).is_err());
    }

    #[test]
    fn the_digest_ignores_key_order() {
        assert_eq!(
            state_digest(&json!({"a": 1, "b": {"c": 2, "d": 3}})),
            state_digest(&json!({"b": {"d": 3, "c": 2}, "a": 1}))
        );
        assert_ne!(
            state_digest(&json!({"a": 1})),
            state_digest(&json!({"a": 2}))
        );
    }
}
