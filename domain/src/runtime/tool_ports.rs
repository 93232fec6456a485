//! The runtime's side of the tool contract's ports
//! ([`crate::catalogue::ports`]): [`TaskAccess`] implements [`TaskPort`]
//! over the task record and the event bus, and [`Domain::tool_ports`]
//! lends a tool the services it may use, once per executor.
//!
//! Invariants:
//! - A tool sees a task only as a [`TaskView`] (and a step attempt as an
//!   [`AttemptView`]): the runtime's records never cross the port.
//! - Waiting for a child follows its events, subscribed before the first
//!   read, so no change falls in between.

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use brainstem_entity::{ConversationId, TaskId, TenantScope};
use tokio::sync::broadcast::error::RecvError;
use uuid::Uuid;

use crate::{
    Domain, Result,
    catalogue::ports::{AttemptView, NewChildTask, TaskPort, TaskView, ToolPorts},
    models::llm::budget::Ledger,
    runtime::{
        events::EventBus,
        tasks::{EventKind, StepAttempt, Task, Tasks},
    },
};

/// What a tool may do with tasks: start children, wait for them, read.
#[derive(Clone)]
pub struct TaskAccess {
    tasks: Tasks,
    events: Arc<EventBus>,
}

impl TaskAccess {
    pub fn new(tasks: Tasks, events: Arc<EventBus>) -> Self {
        Self { tasks, events }
    }

    /// Wait until the task settles (see `TaskStatus::is_settled`) or
    /// `limit` passes; the task as it is then.
    pub async fn wait_until_settled(
        &self,
        scope: TenantScope,
        id: TaskId,
        limit: Duration,
    ) -> Result<Task> {
        let mut events = self.events.subscribe_task(id);
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let task = self.tasks.get(scope, id).await?;
            if task.status.is_settled() {
                return Ok(task);
            }
            loop {
                match tokio::time::timeout_at(deadline, events.recv()).await {
                    Err(_) | Ok(Err(RecvError::Closed)) => return Ok(task),
                    Ok(Ok(e)) if e.kind != EventKind::StatusChanged => continue,
                    // A status change, or missed events: read the task again.
                    Ok(Ok(_)) | Ok(Err(RecvError::Lagged(_))) => break,
                }
            }
        }
    }
}

#[async_trait]
impl TaskPort for TaskAccess {
    async fn start_child(&self, child: NewChildTask) -> Result<TaskId> {
        self.tasks.start_child(child).await
    }

    async fn wait_until_settled(
        &self,
        scope: TenantScope,
        id: TaskId,
        limit: Duration,
    ) -> Result<TaskView> {
        Ok(view(
            TaskAccess::wait_until_settled(self, scope, id, limit).await?,
        ))
    }

    async fn get(&self, scope: TenantScope, id: TaskId) -> Result<TaskView> {
        Ok(view(self.tasks.get(scope, id).await?))
    }

    async fn earlier_turns(
        &self,
        scope: TenantScope,
        conversation: ConversationId,
        before: TaskId,
        limit: u64,
    ) -> Result<Vec<TaskView>> {
        let turns = self
            .tasks
            .earlier_turns(scope, conversation, before, limit)
            .await?;
        Ok(turns.into_iter().map(view).collect())
    }

    async fn attempts(&self, scope: TenantScope, task: TaskId) -> Result<Vec<AttemptView>> {
        let attempts = self.tasks.steps(scope, task).await?;
        Ok(attempts
            .into_iter()
            .map(|a: StepAttempt| AttemptView {
                step_id: a.step_id,
                error: a.error,
            })
            .collect())
    }

    async fn recent_of_subject(
        &self,
        scope: TenantScope,
        subject: Uuid,
        except: Option<TaskId>,
        limit: u64,
    ) -> Result<Vec<TaskView>> {
        let recent = self
            .tasks
            .recent_of_subject(scope, subject, except, limit)
            .await?;
        Ok(recent.into_iter().map(view).collect())
    }

    async fn open_of_subject(
        &self,
        scope: TenantScope,
        subject: Uuid,
        except: Option<TaskId>,
    ) -> Result<u64> {
        self.tasks.open_of_subject(scope, subject, except).await
    }
}

/// A task as a tool reads it.
fn view(task: Task) -> TaskView {
    TaskView {
        id: task.id,
        status: task.status.as_str(),
        settled: task.status.is_settled(),
        input: task.input,
        subject_id: task.subject_id,
        conversation: task.conversation,
        intent: task.intent,
        plan_key: task.plan_key,
        state: task.state,
        result: task.result,
        error: task.error,
        usage: task.usage,
        created_by: task.created_by,
        created_at: task.created_at,
    }
}

impl Domain {
    /// The services a tool may use, as its ports (see
    /// [`crate::catalogue::ports`]). Built after the domain is configured
    /// (keys, outbound client), once per executor.
    pub fn tool_ports(&self) -> ToolPorts {
        ToolPorts {
            memory: self.memory.clone(),
            graph: self.graph.clone(),
            connections: self.connections.clone(),
            mcp: self.mcp.clone(),
            plans: self.plans.clone(),
            prompts: self.prompts.clone(),
            policies: self.policies.clone(),
            capabilities: self.capabilities.clone(),
            ledger: Ledger::new(self.db.clone()),
            tasks: Arc::new(TaskAccess::new(self.tasks.clone(), self.events.clone())),
            live: Arc::new(self.tasks.clone()),
        }
    }
}
