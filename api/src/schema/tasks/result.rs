//! `Task.result`: what an agent step concluded — its answer, the model,
//! the tokens of every iteration, why it finished, and the memories the
//! model suggests (they become memories only when a client accepts them).

use async_graphql::{Enum, SimpleObject};
use serde_json::Value;

/// Why an agent loop finished.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// The model answered.
    Complete,
    /// The model called tools and was not asked again.
    ToolUse,
    /// The answer reached the token limit.
    MaxTokens,
    /// The loop reached `maxIterations` (the answer says so).
    IterationLimit,
    Error,
}

impl FinishReason {
    fn parse(s: &str) -> Self {
        match s {
            "COMPLETE" => Self::Complete,
            "TOOL_USE" => Self::ToolUse,
            "MAX_TOKENS" => Self::MaxTokens,
            "ITERATION_LIMIT" => Self::IterationLimit,
            _ => Self::Error,
        }
    }
}

/// Tokens a result used, summed over every model call of the loop.
#[derive(SimpleObject, Clone, Copy)]
pub struct TokenUsage {
    pub input: u64,
    pub output: u64,
}

/// What a task concluded.
#[derive(SimpleObject, Clone)]
pub struct TaskResult {
    /// The answer, with memory-suggestion tags removed.
    pub content: String,
    pub model: String,
    pub token_usage: TokenUsage,
    pub finish_reason: FinishReason,
    /// At most 5, each at most 200 characters, nothing that looks secret.
    pub memory_suggestions: Vec<String>,
    /// Tool calls that ran.
    pub tool_calls: u32,
    /// Model calls made.
    pub iterations: u32,
    /// A newer turn of the conversation stopped this one mid-answer
    /// (`INTERRUPT` or `ROLLBACK`): `content` is the text so far.
    pub interrupted: bool,
    /// The newer turn rolled this one back: the conversation's history
    /// leaves it out.
    pub rolled_back: bool,
}

impl TaskResult {
    /// The result as the agent step stored it.
    pub fn from_stored(v: &Value) -> Self {
        let text = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or_default();
        let count = |v: Option<&Value>| v.and_then(Value::as_u64).unwrap_or(0);
        let flag = |k: &str| v.get(k).and_then(Value::as_bool).unwrap_or(false);
        Self {
            content: text("content").to_owned(),
            model: text("model").to_owned(),
            token_usage: TokenUsage {
                input: count(v.pointer("/token_usage/input")),
                output: count(v.pointer("/token_usage/output")),
            },
            finish_reason: FinishReason::parse(text("finish_reason")),
            memory_suggestions: v
                .get("memory_suggestions")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
            tool_calls: u32::try_from(count(v.get("tool_calls"))).unwrap_or(u32::MAX),
            iterations: u32::try_from(count(v.get("iterations"))).unwrap_or(u32::MAX),
            interrupted: flag("interrupted"),
            rolled_back: flag("rolled_back"),
        }
    }
}
