//! `plan.run`: run one of the tenant's plans as a child task and wait for
//! its outcome. It is how an agent step calls a plan as a tool (each plan
//! with no agent step of its own is offered to the model as
//! `plan_<key>`), and any plan may use it directly.
//!
//! The child is keyed by the step's idempotency key, so a repeated step
//! finds the child it started rather than starting another. The step waits
//! for the child to settle (finished, or waiting for a person or an
//! external system) until shortly before its own timeout; if it has not,
//! the output says so (`settled: false`) and the child goes on.

use std::time::Duration;

use async_trait::async_trait;
use brainstem_entity::TenantScope;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::{Tool, ToolContext, ToolError, ToolOutput, builtin::child_task};

pub const KEY: &str = "plan.run";

/// How long before its own timeout the step stops waiting.
const MARGIN: Duration = Duration::from_secs(2);

pub struct PlanRun;

#[async_trait]
impl Tool for PlanRun {
    fn key(&self) -> &str {
        KEY
    }

    fn description(&self) -> &str {
        "Run one of the tenant's plans as a child task and return its outcome."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "required": ["plan"],
            "additionalProperties": false,
            "properties": {
                "plan": {"type": "string", "minLength": 1},
                "input": {"type": "string"},
                "payload": {"type": "object"}
            }
        })
    }

    async fn call(&self, ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let started = Instant::now();
        let tasks = &ctx.ports.tasks;
        let scope = TenantScope::new(ctx.tenant);
        let plan = args
            .get("plan")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let child = tasks
            .start_child(child_task(&ctx, &args, Some(plan.clone()), None))
            .await
            .map_err(|e| ToolError::fatal(format!("cannot run the plan `{plan}`: {e}")))?;
        let limit = self
            .timeout()
            .saturating_sub(MARGIN)
            .saturating_sub(started.elapsed());
        let task = tasks
            .wait_until_settled(scope, child, limit)
            .await
            .map_err(|e| ToolError::retryable(format!("cannot read the child task: {e}")))?;
        let settled = task.settled;
        let output = json!({
            "task_id": child.to_string(),
            "plan": plan,
            "status": task.status,
            "settled": settled,
            "state": task.state,
            "result": task.result,
            "error": task.error,
        });
        Ok(ToolOutput::with_output(
            output,
            format!("plan `{plan}`: the child task is {}", task.status),
        ))
    }
}
