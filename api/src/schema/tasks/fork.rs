//! Checkpoints and forks on the wire: `Task.checkpoints` (the state after
//! each settled step), `Task.stateAt`, `Task.forkedFrom` and `Task.forks`,
//! and the `forkTask` and `rerunTask` mutations. The relations batch
//! through the operation's loader like every relation a list fans out to.

use std::collections::HashMap;

use async_graphql::{Context, ID, InputObject, Json, Object, dataloader::Loader};
use brainstem_domain::{
    TaskId, TenantScope,
    tasks::{self, Checkpoint, ForkLink, ForkRequest, checkpoints::resolve_step},
};
use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{Task, mutation::TaskPayload, task_id};
use crate::{
    error::ResultExt,
    schema::{
        context::{domain, principal},
        ids::{self, NodeType},
        loaders::{Loaders, TaskKey, by_scope, loader},
    },
};

#[derive(InputObject)]
pub struct ForkTaskInput {
    pub task_id: ID,
    /// The first step the fork runs; the steps before it are copied,
    /// settled, and do not run again. With `iteration`: the first step of
    /// an agent loop.
    pub from_step_id: String,
    /// Fork an agent loop at this iteration (from 1): the model's earlier
    /// turns and tool calls are kept and the loop calls it again from
    /// there.
    pub iteration: Option<u32>,
    /// A JSON merge patch (RFC 7386) of the state as it stood before the
    /// step: objects merge key by key at every depth, `null` removes a
    /// key, any other value replaces.
    pub state_edits: Option<Json<Value>>,
    /// A JSON merge patch of the input, `{"text": …, "payload": …}`.
    pub input_edits: Option<Json<Value>>,
    /// Run on this version of the task's plan instead of the plan the task
    /// froze (say, after a fix). The version must have the fork step, and
    /// its steps before it must be the ones the task ran (same ids and
    /// tools, in order); otherwise `BAD_USER_INPUT` says what differs.
    pub plan_version: Option<i32>,
}

#[derive(InputObject)]
pub struct RerunTaskInput {
    pub task_id: ID,
    /// The first step to run again (default: the failed step of a FAILED
    /// task, the first step otherwise).
    pub from_step_id: Option<String>,
}

#[derive(Default)]
pub struct ForkMutation;

#[Object]
impl ForkMutation {
    /// Start a new task from where a task stood before one of its steps,
    /// with edits, on the task's frozen plan (or another version of it).
    /// Needs `tasks:read` and `tasks:write`; a task running a step now is
    /// `CONFLICT`.
    async fn fork_task(
        &self,
        ctx: &Context<'_>,
        input: ForkTaskInput,
    ) -> async_graphql::Result<TaskPayload> {
        let principal = principal(ctx)?;
        let request = ForkRequest {
            task: task_id(&input.task_id)?,
            from_step: input.from_step_id,
            iteration: input.iteration,
            state_edits: input.state_edits.map_or(Value::Null, |j| j.0),
            input_edits: input.input_edits.map_or(Value::Null, |j| j.0),
            plan_version: input.plan_version,
        };
        let task = domain(ctx).tasks.fork(principal, request).await.gql()?;
        Ok(TaskPayload { task: Task(task) })
    }

    /// Run a finished task again from a step, as a fork without edits (the
    /// task itself is left as it is). An unfinished task is `CONFLICT`.
    async fn rerun_task(
        &self,
        ctx: &Context<'_>,
        input: RerunTaskInput,
    ) -> async_graphql::Result<TaskPayload> {
        let principal = principal(ctx)?;
        let id = task_id(&input.task_id)?;
        let task = domain(ctx)
            .tasks
            .rerun(principal, id, input.from_step_id)
            .await
            .gql()?;
        Ok(TaskPayload { task: Task(task) })
    }
}

/// The task's state right after one of its steps settled.
pub struct TaskCheckpoint {
    checkpoint: Checkpoint,
    tool: Option<String>,
}

#[Object]
impl TaskCheckpoint {
    /// Its place among the task's settled steps, from 0.
    async fn position(&self) -> i32 {
        self.checkpoint.position
    }
    async fn step_id(&self) -> &str {
        &self.checkpoint.step_id
    }
    async fn tool(&self) -> Option<&str> {
        self.tool.as_deref()
    }
    /// For an agent loop's step: which iteration (from 1).
    async fn iteration(&self) -> Option<u32> {
        self.checkpoint.iteration
    }
    /// SHA-256 (hex) of the state's canonical JSON (keys sorted at every
    /// depth): equal digests, equal states.
    async fn state_digest(&self) -> &str {
        &self.checkpoint.state_digest
    }
    /// The state as the step's settle left it.
    async fn state(&self) -> Json<Value> {
        Json(self.checkpoint.state.clone())
    }
    /// The sequence of the event that settled the step, in `sourceTaskId`.
    async fn seq(&self) -> i64 {
        self.checkpoint.seq
    }
    /// The task whose run settled the step: this one, or the task a fork
    /// copied it from.
    async fn source_task_id(&self) -> ID {
        ids::encode(NodeType::Task, self.checkpoint.source_task.uuid())
    }
    async fn created_at(&self) -> DateTime<Utc> {
        self.checkpoint.created_at
    }
}

/// Where a fork came from.
pub struct TaskForkLink(ForkLink);

#[Object]
impl TaskForkLink {
    /// The task it was forked from (`null` if that is gone).
    async fn task(&self, ctx: &Context<'_>) -> async_graphql::Result<Option<Task>> {
        let scope = super::task_scope(ctx)?;
        Ok(loader(ctx)
            .load_one(TaskKey(scope, self.0.source))
            .await?
            .map(Task))
    }
    /// The first step the fork ran (the ones before it were copied).
    async fn step_id(&self) -> &str {
        &self.0.from_step
    }
    /// Started by `rerunTask`.
    async fn rerun(&self) -> bool {
        self.0.rerun
    }
    async fn created_by(&self) -> &str {
        &self.0.created_by
    }
    async fn created_at(&self) -> DateTime<Utc> {
        self.0.created_at
    }
}

/// `task`'s checkpoints, in the order its steps settled.
pub(super) async fn checkpoints(
    ctx: &Context<'_>,
    task: &tasks::Task,
) -> async_graphql::Result<Vec<TaskCheckpoint>> {
    let found = loader(ctx)
        .load_one(TaskCheckpointsKey(task.scope(), task.id))
        .await?
        .unwrap_or_default();
    Ok(found
        .into_iter()
        .map(|checkpoint| TaskCheckpoint {
            tool: task
                .frozen_plan
                .iter()
                .find(|s| s.id == checkpoint.step_id)
                .map(|s| s.tool.clone()),
            checkpoint,
        })
        .collect())
}

/// `task`'s state right after `step_id` (or that agent loop's
/// `iteration`) settled; `null` while it has not.
pub(super) async fn state_at(
    ctx: &Context<'_>,
    task: &tasks::Task,
    step_id: &str,
    iteration: Option<u32>,
) -> async_graphql::Result<Option<Json<Value>>> {
    let step = resolve_step(&task.frozen_plan, step_id, iteration).gql()?;
    let found = loader(ctx)
        .load_one(TaskCheckpointsKey(task.scope(), task.id))
        .await?
        .unwrap_or_default();
    Ok(found
        .into_iter()
        .rev()
        .find(|c| c.step_id == step)
        .map(|c| Json(c.state)))
}

pub(super) async fn forked_from(
    ctx: &Context<'_>,
    task: &tasks::Task,
) -> async_graphql::Result<Option<TaskForkLink>> {
    Ok(loader(ctx)
        .load_one(TaskForkedFromKey(task.scope(), task.id))
        .await?
        .map(TaskForkLink))
}

pub(super) async fn forks(
    ctx: &Context<'_>,
    task: &tasks::Task,
) -> async_graphql::Result<Vec<Task>> {
    let links = loader(ctx)
        .load_one(TaskForksKey(task.scope(), task.id))
        .await?
        .unwrap_or_default();
    let found = loader(ctx)
        .load_many(links.iter().map(|l| TaskKey(task.scope(), l.fork)))
        .await?;
    Ok(links
        .iter()
        .filter_map(|l| found.get(&TaskKey(task.scope(), l.fork)).cloned())
        .map(Task)
        .collect())
}

/// A task's checkpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TaskCheckpointsKey(pub TenantScope, pub TaskId);

impl Loader<TaskCheckpointsKey> for Loaders {
    type Value = Vec<Checkpoint>;
    type Error = async_graphql::Error;

    async fn load(
        &self,
        keys: &[TaskCheckpointsKey],
    ) -> Result<HashMap<TaskCheckpointsKey, Vec<Checkpoint>>, Self::Error> {
        let mut out = HashMap::new();
        for (scope, ids) in by_scope(keys.iter().map(|k| (k.0, k.1))) {
            let mut found = self
                .domain
                .tasks
                .checkpoints_of_many(scope, &ids)
                .await
                .gql()?;
            for id in ids {
                let list = found.remove(&id).unwrap_or_default();
                out.insert(TaskCheckpointsKey(scope, id), list);
            }
        }
        Ok(out)
    }
}

/// Where a task was forked from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TaskForkedFromKey(pub TenantScope, pub TaskId);

impl Loader<TaskForkedFromKey> for Loaders {
    type Value = ForkLink;
    type Error = async_graphql::Error;

    async fn load(
        &self,
        keys: &[TaskForkedFromKey],
    ) -> Result<HashMap<TaskForkedFromKey, ForkLink>, Self::Error> {
        let mut out = HashMap::new();
        for (scope, ids) in by_scope(keys.iter().map(|k| (k.0, k.1))) {
            for (id, link) in self
                .domain
                .tasks
                .forked_from_many(scope, &ids)
                .await
                .gql()?
            {
                out.insert(TaskForkedFromKey(scope, id), link);
            }
        }
        Ok(out)
    }
}

/// The forks of a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TaskForksKey(pub TenantScope, pub TaskId);

impl Loader<TaskForksKey> for Loaders {
    type Value = Vec<ForkLink>;
    type Error = async_graphql::Error;

    async fn load(
        &self,
        keys: &[TaskForksKey],
    ) -> Result<HashMap<TaskForksKey, Vec<ForkLink>>, Self::Error> {
        let mut out = HashMap::new();
        for (scope, ids) in by_scope(keys.iter().map(|k| (k.0, k.1))) {
            let mut found = self.domain.tasks.forks_of_many(scope, &ids).await.gql()?;
            for id in ids {
                let list = found.remove(&id).unwrap_or_default();
                out.insert(TaskForksKey(scope, id), list);
            }
        }
        Ok(out)
    }
}
