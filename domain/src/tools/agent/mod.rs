//! `agent`: a step in which the model chooses the tools, in a bounded loop.
//!
//! Each iteration is one step of the task. It calls the model with the
//! conversation so far and the tools the tenant may use (built-in ones,
//! the partner tools of the capabilities it subscribes to, the tools of
//! its MCP servers (connections of kind `mcp`), and its plans as
//! `plan_<key>`; the step's `tools` narrows them). If the model calls tools, the step adds one step
//! per call, then one step for the next iteration, to the task's plan; the
//! executor runs them like any other step (idempotency key, audit,
//! redaction, events, timeouts, crash recovery). The next iteration answers
//! the model with each call's output or error and calls it again. When the
//! model answers without calling a tool, that answer is the task's result.
//!
//! Invariants:
//! - A tool call is a step: a worker killed mid-loop resumes at the first
//!   step not committed, so a completed call never runs twice, and the
//!   loop's conversation is read back from the task (the iteration step's
//!   output), never from a worker's memory.
//! - Nothing the model writes is rendered as a template (see [`calls`]).
//! - Every call is answered: with its step's output, with its error (a
//!   failure or a timeout does not stop the task), or, for a call refused
//!   before running (unknown or unoffered tool, arguments that fail the
//!   tool's schema, past `max_tool_calls`), with a typed error and no step.
//! - At most `max_iterations` model calls. The iteration after the last
//!   ends the loop without calling the model, with the specification's
//!   message and `ITERATION_LIMIT`. Once `max_tool_calls` calls have run,
//!   further calls are refused and no tools are offered, so the model must
//!   answer (a graceful end rather than the specification's hard error).
//! - Every model call passes the token budget check first; the result's
//!   token usage sums every iteration.
//! - A model call stops when the task is interrupted (a newer turn of its
//!   conversation): the iteration fails, keeping the text so far.
//!
//! The first iteration assembles the prompt's layers ([`context`]): the
//! tenant's active system prompt, the step's instructions, the task
//! starter's preferences, the memories most relevant to the prompt, and,
//! for a turn of a conversation, its earlier turns.
//!
//! Step ids: the first iteration is the plan's step (say `answer`);
//! iteration n is `answer:n`, and the k-th call of iteration n `answer:n.k`.
//!
//! Arguments: `prompt` (default: the task's input text), `system` (the
//! step's instructions), `tools` (tool keys to offer instead of all),
//! `tool_descriptions` (tool key → what the tool is for in this step, in
//! place of its generic description; a key the step does not offer fails
//! the step),
//! `model`, and limits that can only tighten the [`ExecutorPolicy`]:
//! `max_iterations`, `max_tool_calls`, `max_tokens` (per model call),
//! `temperature`, `max_task_tokens`. `continues` is the loop's own (the
//! previous iteration's step).
//!
//! [`ExecutorPolicy`]: crate::catalogue::policy::ExecutorPolicy

pub mod answer;
pub mod calls;
pub mod context;
pub mod transcript;

use std::time::Duration;

use async_trait::async_trait;
use brainstem_entity::TenantScope;
use chrono::Utc;
use serde_json::{Value, json};

use super::{
    Tool, ToolContext, ToolError, ToolOutput,
    generate::{arg_u64, check_budget, interrupted, relay_unless_interrupted},
};
use crate::{
    catalogue::{mcp, plans::StepDef, policy::ExecutorPolicy},
    models::llm::{FinishReason, Message, prompt},
};
use answer::Finish;
use transcript::{Limits, LoopState, StoredMessage, Tokens};

/// The tool's key.
pub const KEY: &str = "agent";

pub struct Agent;

#[async_trait]
impl Tool for Agent {
    fn key(&self) -> &str {
        KEY
    }

    fn description(&self) -> &str {
        "Let the model answer, calling the tenant's tools in a bounded loop."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "prompt": {"type": "string", "minLength": 1},
                "system": {"type": "string"},
                "tools": {"type": "array", "items": {"type": "string", "minLength": 1}},
                "tool_descriptions": {
                    "type": "object",
                    "additionalProperties": {"type": "string", "minLength": 1, "maxLength": 1000}
                },
                "model": {"type": "string", "minLength": 1},
                "max_iterations": {"type": "integer", "minimum": 1},
                "max_tool_calls": {"type": "integer", "minimum": 0},
                "max_tokens": {"type": "integer", "minimum": 1},
                "temperature": {"type": "number", "minimum": 0, "maximum": 2},
                "max_task_tokens": {"type": "integer", "minimum": 1},
                "continues": {"type": "string", "minLength": 1}
            }
        })
    }

    /// A backstop only: the model client bounds each call itself.
    fn timeout(&self) -> Duration {
        Duration::from_secs(300)
    }

    async fn call(&self, ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let mut state = match args.get("continues").and_then(Value::as_str) {
            Some(previous) => resume(&ctx, previous).await?,
            None => {
                // The platform's policy for this process, tightened by the
                // tenant's overrides.
                let overrides = ctx
                    .ports
                    .policies
                    .overrides(TenantScope::new(ctx.tenant))
                    .await
                    .map_err(|e| ToolError::retryable(format!("cannot read the policy: {e}")))?;
                let policy = overrides.apply(ctx.settings.policy);
                start(&ctx, &args, &policy).await?
            }
        };
        if state.iteration > state.limits.max_iterations {
            return Ok(finished(
                &state,
                answer::ITERATION_LIMIT_MESSAGE,
                Vec::new(),
                "",
                Finish::IterationLimit,
                Default::default(),
            ));
        }
        let elapsed_ms = Utc::now().timestamp_millis() - state.started_at_ms;
        if elapsed_ms > (state.limits.loop_timeout_secs * 1000) as i64 {
            return Err(ToolError::fatal(format!(
                "TIMEOUT: the agent loop ran longer than {} s",
                state.limits.loop_timeout_secs
            )));
        }

        let ports = &ctx.ports;
        let scope = TenantScope::new(ctx.tenant);
        let menu = if state.tool_calls_made >= state.limits.max_tool_calls {
            calls::Menu::new(Vec::new(), None)
        } else {
            let now = Utc::now();
            let listing =
                |e: crate::Error| ToolError::retryable(format!("cannot list the tools: {e}"));
            let mut tools = ports
                .plans
                .tools_of_tenant(scope, now)
                .await
                .map_err(listing)?;
            let allowed = state.allowed.as_deref();
            // A step that names an MCP tool is offered it without asking
            // the server for a list; one that names none is offered every
            // tool of the tenant's MCP servers, as their servers list them.
            let mcp = match allowed {
                Some(keys) => ports.plans.mcp_tools(scope, keys).await,
                None => {
                    let outbound = &ctx.settings.outbound;
                    mcp::offered(&ports.connections, outbound, &ports.mcp, scope).await
                }
            };
            tools.extend(mcp.map_err(listing)?);
            let menu = calls::Menu::new(tools, allowed);
            let menu = match ports.plans.registry().get(crate::tools::plan_run::KEY) {
                Some(runner) => {
                    let plans = ports.plans.available(scope, now).await.map_err(listing)?;
                    menu.with_plans(&plans, runner, allowed)
                }
                None => menu,
            };
            menu.described(&state.descriptions).map_err(|key| {
                ToolError::fatal(format!(
                    "tool_descriptions names `{key}`, which this step does not offer"
                ))
            })?
        };
        let client = &ctx.settings.llm;
        let mut request = client.request(
            prompt::for_call(state.messages(), !menu.is_empty()),
            state.model.as_deref(),
            Some(state.limits.max_output_tokens),
            Some(state.limits.temperature),
        );
        request.tools = menu.specs();
        check_budget(&ctx, request.estimated_max_tokens(), state.max_task_tokens).await?;

        let mut generation = client.start(request).await?;
        match relay_unless_interrupted(&ctx, &mut generation).await {
            Some(relayed) => relayed?,
            None => return Err(interrupted(generation.text(), generation.model())),
        }
        let done = generation.finish();
        state.tokens.input += done.usage.input_tokens;
        state.tokens.output += done.usage.output_tokens;
        let usage = done.step_usage();

        if done.tool_calls.is_empty() {
            let (content, suggestions) = answer::split_suggestions(&done.text);
            let finish = match done.finish {
                FinishReason::MaxTokens => Finish::MaxTokens,
                FinishReason::Complete | FinishReason::ToolUse => Finish::Complete,
            };
            return Ok(finished(
                &state,
                &content,
                suggestions,
                &done.model,
                finish,
                usage,
            ));
        }

        let (root, iteration) = (state.root.clone(), state.iteration);
        let resolved = calls::resolve(
            &menu,
            &done.tool_calls,
            &ctx.step_id,
            |k| format!("{root}:{iteration}.{k}"),
            &mut state.tool_calls_made,
            &state.limits,
        );
        state.messages.push(StoredMessage::from(&Message::assistant(
            done.text,
            done.tool_calls,
        )));
        state.calls = resolved.calls;
        let refused = state.calls.iter().filter(|c| c.refused.is_some()).count();
        let mut new_steps = resolved.steps;
        new_steps.push(StepDef {
            id: state.iteration_step(iteration + 1),
            tool: KEY.to_owned(),
            args: json!({"continues": ctx.step_id}),
            condition: None,
            stop_on_failure: true,
            retry: None,
            requires_review: false,
            timeout_secs: None,
        });
        let output = serde_json::to_value(&state)
            .map_err(|e| ToolError::fatal(format!("cannot store the agent loop: {e}")))?;
        let recalled = recalled_now(&state);
        Ok(ToolOutput {
            output,
            recalled,
            summary: format!(
                "iteration {iteration}: the model called {} tool(s), {refused} refused",
                state.calls.len()
            ),
            new_steps,
            usage,
            ..ToolOutput::default()
        })
    }
}

/// The first iteration's loop: the prompt's layers and the limits.
async fn start(
    ctx: &ToolContext,
    args: &Value,
    policy: &ExecutorPolicy,
) -> Result<LoopState, ToolError> {
    let prompt = args
        .get("prompt")
        .and_then(Value::as_str)
        .or_else(|| ctx.input.get("text").and_then(Value::as_str))
        .filter(|p| !p.trim().is_empty())
        .ok_or_else(|| {
            ToolError::fatal("the agent has no prompt: give `prompt`, or start the task with text")
        })?;
    let tighten = |key: &str, most: u64| arg_u64(args, key).map_or(most, |n| n.min(most));
    let limits = Limits {
        max_iterations: tighten("max_iterations", policy.max_iterations.into()) as u32,
        max_tool_calls: tighten("max_tool_calls", policy.max_tool_calls.into()) as u32,
        tool_call_timeout_secs: policy.tool_call_timeout.as_secs(),
        loop_timeout_secs: policy.loop_timeout.as_secs(),
        max_output_tokens: tighten("max_tokens", policy.max_output_tokens.into()) as u32,
        temperature: args
            .get("temperature")
            .and_then(Value::as_f64)
            .map_or(policy.temperature, |t| t as f32),
    };
    let allowed = args
        .get("tools")
        .is_some()
        .then(|| super::string_list(args, "tools"));
    let layers = context::gather(ctx, args.get("system").and_then(Value::as_str), prompt).await?;
    let budget = prompt::TokenBudget::for_window(
        ctx.settings.llm.settings().context_window,
        limits.max_output_tokens.into(),
    );
    let messages = prompt::assemble(&layers.layers, &budget);
    Ok(LoopState {
        root: ctx.step_id.clone(),
        iteration: 1,
        started_at_ms: Utc::now().timestamp_millis(),
        task: Some(ctx.task_id.to_string()),
        model: args.get("model").and_then(Value::as_str).map(str::to_owned),
        limits,
        allowed,
        descriptions: args
            .get("tool_descriptions")
            .and_then(Value::as_object)
            .map(|d| {
                d.iter()
                    .filter_map(|(key, text)| Some((key.clone(), text.as_str()?.to_owned())))
                    .collect()
            })
            .unwrap_or_default(),
        max_task_tokens: arg_u64(args, "max_task_tokens"),
        tool_calls_made: 0,
        tokens: Tokens::default(),
        messages: messages.iter().map(StoredMessage::from).collect(),
        calls: Vec::new(),
        recalled: layers.recalled,
        one_hop: ctx.settings.llm.one_hop(),
    })
}

/// The memories the first iteration put in the prompt (reported once).
fn recalled_now(state: &LoopState) -> Vec<brainstem_entity::MemoryId> {
    if state.iteration == 1 {
        state.recalled.clone()
    } else {
        Vec::new()
    }
}

/// The loop as the previous iteration left it, its calls answered.
async fn resume(ctx: &ToolContext, previous: &str) -> Result<LoopState, ToolError> {
    let stored = ctx
        .steps
        .get(previous)
        .and_then(|s| s.get("output"))
        .filter(|o| !o.is_null())
        .cloned()
        .ok_or_else(|| ToolError::fatal(format!("the agent step `{previous}` left no output")))?;
    let mut state: LoopState = serde_json::from_value(stored)
        .map_err(|e| ToolError::fatal(format!("the agent step `{previous}` left no loop: {e}")))?;
    let unanswered = state.calls.iter().any(|c| {
        c.step.as_ref().is_some_and(|step| {
            ctx.steps
                .get(step)
                .and_then(|s| s.get("output"))
                .is_none_or(Value::is_null)
        })
    });
    let attempts = if unanswered {
        ctx.ports
            .tasks
            .attempts(TenantScope::new(ctx.tenant), ctx.task_id)
            .await
            .map_err(|e| ToolError::retryable(format!("cannot read the calls' errors: {e}")))?
    } else {
        Vec::new()
    };
    state.answer_calls(&ctx.steps, &attempts);
    state.iteration += 1;
    // A fork continues a loop its original began: the loop's time limit
    // counts from the fork's first iteration, not the original's.
    let task = ctx.task_id.to_string();
    if state.task.as_ref() != Some(&task) {
        state.started_at_ms = Utc::now().timestamp_millis();
        state.task = Some(task);
    }
    Ok(state)
}

/// The loop's end: the task's result, as the step's output too.
fn finished(
    state: &LoopState,
    content: &str,
    suggestions: Vec<String>,
    model: &str,
    finish: Finish,
    usage: crate::models::usage::Usage,
) -> ToolOutput {
    let model = if model.is_empty() {
        state.model.as_deref().unwrap_or_default()
    } else {
        model
    };
    let iterations = state.iteration.min(state.limits.max_iterations);
    let result = answer::result(
        content,
        model,
        state.tokens,
        finish,
        &suggestions,
        state.tool_calls_made,
        iterations,
    );
    // The step's output is the result and the prompt the last model call
    // was sent (for admins to inspect; the task's result leaves it out).
    let mut output = result.clone();
    if let (Value::Object(fields), Ok(messages)) =
        (&mut output, serde_json::to_value(&state.messages))
    {
        fields.insert("messages".into(), messages);
        if state.one_hop {
            // A model weak at chaining calls answered from the first
            // tools' results, with no tools offered.
            fields.insert("one_hop".into(), Value::Bool(true));
        }
    }
    ToolOutput {
        output,
        recalled: recalled_now(state),
        summary: format!(
            "{} after {iterations} iteration(s) and {} tool call(s)",
            finish.as_str(),
            state.tool_calls_made
        ),
        usage,
        result: Some(result),
        ..ToolOutput::default()
    }
}

#[cfg(test)]
mod tests {
    use super::Tool;
    use crate::runtime::tasks::checkpoints::{AGENT_TOOL, LOOP_CONTINUES};

    /// The runtime finds a loop's iterations by this key and argument
    /// (checkpoints, forks at an iteration).
    #[test]
    fn the_runtime_knows_how_iterations_chain() {
        assert_eq!(super::KEY, AGENT_TOOL);
        assert_eq!(LOOP_CONTINUES, "continues");
        assert!(super::Agent.input_schema()["properties"][LOOP_CONTINUES].is_object());
    }
}
