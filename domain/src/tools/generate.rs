//! `llm.generate`: one streamed completion from the configured model.
//!
//! Arguments (rendered from the plan's templates before the call):
//! `prompt` (required), `system`, `model`, `max_tokens`, `temperature`,
//! `max_task_tokens` (tightens the task's token budget) and `save_as` (a
//! state key for the text). The text streams to subscribers as `TokenDelta`
//! events, coalesced into frames at most every 50 ms; the step's output is
//! `{"text": …, "model": …}` and its usage the call's tokens and cost. A
//! call that fails once text has streamed (a timeout between chunks or of
//! the whole call) fails the step with the text so far as its output,
//! marked `"incomplete": true`; so does a call stopped because its task was
//! interrupted (a newer turn of its conversation), also marked
//! `"interrupted": true`.
//!
//! Budgets are checked first, from the call's most expensive case (see
//! [`crate::models::llm::budget`]); a refused call never reaches the provider.
//!
//! Not idempotent in the provider's sense (a repeat generates again, and is
//! billed again): a model call has no side effect to key, and the executor
//! never repeats a step that committed.

use std::time::Duration;

use async_trait::async_trait;
use brainstem_entity::TenantScope;
use serde_json::{Value, json};

use super::{Tool, ToolContext, ToolError, ToolOutput};
use crate::models::llm::{Message, frames};

/// How often, at most, text is published while it streams.
pub const FRAME_INTERVAL: Duration = Duration::from_millis(50);

pub struct Generate;

/// Refuse a call that could take the task or the tenant past its token
/// budget: `estimate` is the call's most expensive case, `max_task_tokens`
/// a step's own, tighter, budget for the task.
pub(super) async fn check_budget(
    ctx: &ToolContext,
    estimate: u64,
    max_task_tokens: Option<u64>,
) -> Result<(), ToolError> {
    let scope = TenantScope::new(ctx.tenant);
    let ports = &ctx.ports;
    let task_usage = async { Ok(ports.tasks.get(scope, ctx.task_id).await?.usage) };
    ports
        .ledger
        .check(
            ctx.settings.llm.settings().budgets,
            scope,
            task_usage,
            max_task_tokens,
            estimate,
        )
        .await
        .map_err(|e| ToolError::retryable(format!("cannot check the token budget: {e}")))?
        .map_err(ToolError::fatal)
}

/// Relay `generation`'s frames to subscribers until it ends, or `None`
/// when the task is interrupted first (the text so far stays in
/// `generation`).
pub(super) async fn relay_unless_interrupted(
    ctx: &ToolContext,
    generation: &mut crate::models::llm::Generation,
) -> Option<Result<(), crate::models::llm::LlmError>> {
    tokio::select! {
        relayed = frames::relay(generation, FRAME_INTERVAL, |frame| {
            ctx.token_delta(frame.offset, &frame.text)
        }) => Some(relayed),
        () = ctx.interrupt.requested() => None,
    }
}

/// A model call stopped because its task was interrupted: the step fails
/// (it is not retried) and keeps the text so far, marked interrupted.
pub(super) fn interrupted(text: &str, model: &str) -> ToolError {
    ToolError::fatal(format!(
        "{INTERRUPTED}: the task was interrupted mid-answer"
    ))
    .with_output(json!({"text": text, "model": model, "incomplete": true, "interrupted": true}))
}

/// How the error of an interrupted model call begins.
pub const INTERRUPTED: &str = "INTERRUPTED";

pub(super) fn arg_u64(args: &Value, key: &str) -> Option<u64> {
    args.get(key).and_then(Value::as_f64).map(|f| f as u64)
}

#[async_trait]
impl Tool for Generate {
    fn key(&self) -> &str {
        "llm.generate"
    }

    fn description(&self) -> &str {
        "Generate text with the configured language model, streaming it to subscribers."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "required": ["prompt"],
            "additionalProperties": false,
            "properties": {
                "prompt": {"type": "string", "minLength": 1},
                "system": {"type": "string"},
                "model": {"type": "string", "minLength": 1},
                "max_tokens": {"type": "integer", "minimum": 1, "maximum": 1000000},
                "temperature": {"type": "number", "minimum": 0, "maximum": 2},
                "max_task_tokens": {"type": "integer", "minimum": 1},
                "save_as": {"type": "string", "minLength": 1}
            }
        })
    }

    /// A backstop only: the model client enforces 60 s per call and 30 s
    /// between chunks itself, and retries within this time.
    fn timeout(&self) -> Duration {
        Duration::from_secs(300)
    }

    async fn call(&self, ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let client = &ctx.settings.llm;
        let mut messages = Vec::new();
        if let Some(system) = args.get("system").and_then(Value::as_str) {
            messages.push(Message::system(system));
        }
        messages.push(Message::user(
            args.get("prompt")
                .and_then(Value::as_str)
                .unwrap_or_default(),
        ));
        let request = client.request(
            messages,
            args.get("model").and_then(Value::as_str),
            arg_u64(&args, "max_tokens").map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
            args.get("temperature")
                .and_then(Value::as_f64)
                .map(|t| t as f32),
        );

        check_budget(
            &ctx,
            request.estimated_max_tokens(),
            arg_u64(&args, "max_task_tokens"),
        )
        .await?;

        let mut generation = client.start(request).await?;
        let relayed = relay_unless_interrupted(&ctx, &mut generation).await;
        let Some(relayed) = relayed else {
            return Err(interrupted(generation.text(), generation.model()));
        };
        if let Err(err) = relayed {
            // A call cut short (a timeout, a dropped stream) keeps the text
            // it streamed: subscribers saw it, and the step shows it.
            let model = generation.model().to_owned();
            return Err(ToolError::from(err).with_output(json!({
                "text": generation.text(),
                "model": model,
                "incomplete": true,
            })));
        }
        let done = generation.finish();

        let usage = done.step_usage();
        let mut output = ToolOutput::with_output(
            json!({"text": done.text, "model": done.model}),
            format!(
                "`{}` generated {} token(s) from {} prompt token(s){}",
                done.model,
                usage.output_tokens,
                usage.input_tokens,
                if done.usage_estimated {
                    " (estimated)"
                } else {
                    ""
                }
            ),
        );
        output.usage = usage;
        if let Some(key) = args.get("save_as").and_then(Value::as_str) {
            output
                .state
                .insert(key.to_owned(), Value::String(done.text));
        }
        Ok(output)
    }
}
