//! Built-in tools: `set_state`, `http_request`, `request_review`,
//! `delegate`, `spawn_task`, `llm.generate` ([`super::generate`]), `agent`
//! ([`super::agent`]), `plan.run` ([`super::plan_run`]) and the memory
//! tools ([`super::memory`]).

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use serde_json::{Map, Value, json};

use super::{Control, Tool, ToolContext, ToolError, ToolOutput, platform};
use crate::{kernel::origin, runtime::tasks::NewChildTask};

pub fn all() -> Vec<Arc<dyn Tool>> {
    let tools: Vec<Arc<dyn Tool>> = vec![
        Arc::new(SetState),
        Arc::new(HttpRequest),
        Arc::new(RequestReview),
        Arc::new(Delegate),
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

/// Is `url` on an allowed host? Returns the parsed URL.
fn allowed_url(ctx: &ToolContext, raw: &str) -> Result<reqwest::Url, ToolError> {
    let url = reqwest::Url::parse(raw)
        .map_err(|e| ToolError::fatal(format!("invalid url `{raw}`: {e}")))?;
    let host = url.host_str().unwrap_or_default();
    if crate::kernel::http_client::host_allowed(&ctx.settings.http_allowed_hosts, host) {
        Ok(url)
    } else {
        Err(ToolError::fatal(format!(
            "host `{host}` is not in http_allowed_hosts"
        )))
    }
}

/// Send a request; 5xx, timeouts and connection errors are retryable, other
/// non-2xx answers are not.
async fn send(
    ctx: &ToolContext,
    method: reqwest::Method,
    url: reqwest::Url,
    body: Option<&Value>,
    headers: &Map<String, Value>,
) -> Result<(u16, Value), ToolError> {
    let mut request = ctx
        .settings
        .http
        .request(method, url)
        .header("Idempotency-Key", &ctx.idempotency_key)
        .header("X-Brainstem-Trace-Id", &ctx.trace_id);
    if let Some(parent) = origin::traceparent(&ctx.trace_id) {
        request = request.header("traceparent", parent);
    }
    for (name, value) in headers {
        if let Some(v) = value.as_str() {
            request = request.header(name.as_str(), v);
        }
    }
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request
        .send()
        .await
        .map_err(|e| ToolError::retryable(format!("request failed: {e}")))?;
    let status = response.status().as_u16();
    let text = response
        .text()
        .await
        .map_err(|e| ToolError::retryable(format!("reading the response failed: {e}")))?;
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    match status {
        200..=299 => Ok((status, body)),
        500..=599 | 429 => Err(ToolError::retryable(format!(
            "the server answered {status}"
        ))),
        _ => Err(ToolError::fatal(format!("the server answered {status}"))),
    }
}

/// `http_request`: call an allow-listed HTTP endpoint. Sends the step's
/// idempotency key as `Idempotency-Key`, so the endpoint can ignore repeats.
pub struct HttpRequest;

#[async_trait]
impl Tool for HttpRequest {
    fn key(&self) -> &str {
        "http_request"
    }
    fn description(&self) -> &str {
        "Call an HTTP endpoint on an allow-listed host; the response body is the output."
    }
    fn retry(&self) -> Option<crate::catalogue::plans::RetryPolicy> {
        Some(crate::catalogue::plans::RetryPolicy::OUTGOING_CALLS)
    }
    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "required": ["url"],
            "additionalProperties": false,
            "properties": {
                "url": {"type": "string", "minLength": 1},
                "method": {"enum": ["GET", "POST", "PUT", "PATCH", "DELETE"]},
                "headers": {"type": "object"},
                "body": {},
                "save_as": {"type": "string", "minLength": 1}
            }
        })
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(30)
    }
    async fn call(&self, ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let url = allowed_url(&ctx, args["url"].as_str().unwrap_or_default())?;
        let method = match args.get("method").and_then(Value::as_str).unwrap_or("GET") {
            "POST" => reqwest::Method::POST,
            "PUT" => reqwest::Method::PUT,
            "PATCH" => reqwest::Method::PATCH,
            "DELETE" => reqwest::Method::DELETE,
            _ => reqwest::Method::GET,
        };
        let headers = args
            .get("headers")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let (status, body) = send(
            &ctx,
            method.clone(),
            url.clone(),
            args.get("body"),
            &headers,
        )
        .await?;
        let mut output = ToolOutput::with_output(
            json!({"status": status, "body": body}),
            format!("{method} {} answered {status}", url.path()),
        );
        if let Some(key) = args.get("save_as").and_then(Value::as_str) {
            output.state.insert(key.to_owned(), body);
        }
        Ok(output)
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

/// `delegate`: hand the step to an external system. POSTs
/// `{task_id, step_id, callback_url, token, payload}` to an allow-listed URL;
/// the system later completes or fails the step through the callback.
pub struct Delegate;

#[async_trait]
impl Tool for Delegate {
    fn key(&self) -> &str {
        "delegate"
    }
    fn description(&self) -> &str {
        "Hand the step to an external system, which calls back to complete or fail it."
    }
    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "required": ["url"],
            "properties": {"url": {"type": "string", "minLength": 1}, "payload": {}}
        })
    }
    async fn call(&self, ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let url = allowed_url(&ctx, args["url"].as_str().unwrap_or_default())?;
        let body = json!({
            "task_id": ctx.task_id.to_string(),
            "step_id": ctx.step_id,
            "callback_url": format!("{}{}", ctx.settings.public_url, ctx.callback_path),
            "token": ctx.delegation_token,
            "payload": args.get("payload").cloned().unwrap_or(Value::Null),
        });
        let (_, answer) = send(
            &ctx,
            reqwest::Method::POST,
            url.clone(),
            Some(&body),
            &Map::new(),
        )
        .await?;
        let external_ref = answer
            .get("id")
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| v.to_string())
            })
            .unwrap_or_else(|| url.to_string());
        Ok(ToolOutput {
            output: json!({"external_ref": external_ref}),
            summary: format!("delegated to {}", url.host_str().unwrap_or_default()),
            control: Control::Delegate { external_ref },
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
        let child = platform(&ctx)?
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
