//! Built-in tools: `set_state`, `http_request` and `delegate`
//! ([`super::http`]), `request_review`, `spawn_task`, `llm.generate` ([`super::generate`]), `agent`
//! ([`super::agent`]), `plan.run` ([`super::plan_run`]) and the memory
//! tools ([`super::memory`]).

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value, json};

use super::{Control, NewChildTask, Tool, ToolContext, ToolError, ToolOutput};

pub fn all() -> Vec<Arc<dyn Tool>> {
    let tools: Vec<Arc<dyn Tool>> = vec![
        Arc::new(SetState),
        Arc::new(super::http::HttpRequest),
        Arc::new(RequestReview),
        Arc::new(super::http::Delegate),
        Arc::new(SpawnTask),
        Arc::new(super::generate::Generate),
        Arc::new(super::agent::Agent),
        Arc::new(super::plan_run::PlanRun),
    ];
    tools.into_iter().chain(super::memory::all()).collect()
}

fn without_comments(args: &Value) -> Map<String, Value> {
    args.as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| !k.starts_with('_'))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// `set_state`: merge its arguments into the task's state.
pub struct SetState;

#[async_trait]
impl Tool for SetState {
    fn key(&self) -> &str {
        "set_state"
    }
    fn description(&self) -> &str {
        "Merge the arguments into the task's state."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    async fn call(&self, _ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let state = without_comments(&args);
        let keys: Vec<&String> = state.keys().collect();
        let summary = format!("set {} state key(s)", keys.len());
        Ok(ToolOutput {
            output: Value::Object(state.clone()),
            state,
            summary,
            ..ToolOutput::default()
        })
    }
}

/// `request_review`: pause the task for a human decision.
pub struct RequestReview;

#[async_trait]
impl Tool for RequestReview {
    fn key(&self) -> &str {
        "request_review"
    }
    fn description(&self) -> &str {
        "Pause the task until a human approves (with corrections) or rejects it."
    }
    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "required": ["reason"],
            "properties": {"reason": {"type": "string", "minLength": 1}, "proposed": {}}
        })
    }
    async fn call(&self, _ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let reason = args["reason"]
            .as_str()
            .unwrap_or("review requested")
            .to_owned();
        let proposed = args.get("proposed").cloned().unwrap_or(Value::Null);
        Ok(ToolOutput {
            summary: format!("review requested: {reason}"),
            control: Control::Review { reason, proposed },
            ..ToolOutput::default()
        })
    }
}

/// The child task a step starts: its `input` and `payload` arguments,
/// keyed by the step's idempotency key (a repeated step finds the child it
/// started).
pub(super) fn child_task(
    ctx: &ToolContext,
    args: &Value,
    plan_key: Option<String>,
    intent: Option<String>,
) -> NewChildTask {
    NewChildTask {
        tenant: ctx.tenant,
        parent: ctx.task_id,
        idempotency_key: ctx.idempotency_key.clone(),
        input: args
            .get("input")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        payload: args.get("payload").cloned().unwrap_or(Value::Null),
        plan_key,
        intent,
    }
}

/// `spawn_task`: start a child task. Keyed by the step's idempotency key, so
/// a repeated step finds the child it already started.
pub struct SpawnTask;

#[async_trait]
impl Tool for SpawnTask {
    fn key(&self) -> &str {
        "spawn_task"
    }
    fn description(&self) -> &str {
        "Start a child task (channel SYSTEM) with its own plan, logs and usage."
    }
    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "input": {"type": "string"},
                "payload": {},
                "plan_key": {"type": "string"},
                "intent": {"type": "string"}
            }
        })
    }
    async fn call(&self, ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let text = |key: &str| args.get(key).and_then(Value::as_str).map(str::to_owned);
        let child = ctx
            .ports
            .tasks
            .start_child(child_task(&ctx, &args, text("plan_key"), text("intent")))
            .await
            .map_err(|e| ToolError::fatal(format!("cannot start the child task: {e}")))?;
        Ok(ToolOutput::with_output(
            json!({"task_id": child.to_string()}),
            "started a child task",
        ))
    }
}
