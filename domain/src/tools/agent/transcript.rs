//! What one iteration of an agent loop stores for the next: the
//! conversation with the model so far, the calls it made in this
//! iteration (and which step runs each), and the loop's running totals.
//!
//! It is the iteration step's output, so it lives in the task like any
//! step's output: a resumed loop reads it back from the task, never from a
//! worker's memory.

use std::collections::BTreeMap;

use brainstem_entity::MemoryId;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::{
    catalogue::{guardrails, ports::AttemptView},
    models::llm::{Message, Role, ToolCall},
};

/// How much of a tool's output the model is shown, in characters.
pub const RESULT_CHARS: usize = 8000;

/// One message, as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredMessage {
    pub role: String,
    pub content: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<StoredToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

impl From<&Message> for StoredMessage {
    fn from(m: &Message) -> Self {
        Self {
            role: m.role.as_str().to_owned(),
            content: m.content.clone(),
            tool_calls: m
                .tool_calls
                .iter()
                .map(|c| StoredToolCall {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    arguments: c.arguments.clone(),
                })
                .collect(),
            tool_call_id: m.tool_call_id.clone(),
        }
    }
}

impl StoredMessage {
    pub fn to_message(&self) -> Message {
        let role = match self.role.as_str() {
            "system" => Role::System,
            "assistant" => Role::Assistant,
            "tool" => Role::Tool,
            _ => Role::User,
        };
        Message {
            role,
            content: self.content.clone(),
            tool_calls: self
                .tool_calls
                .iter()
                .map(|c| ToolCall {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    arguments: c.arguments.clone(),
                })
                .collect(),
            tool_call_id: self.tool_call_id.clone(),
        }
    }
}

/// Why a call was answered with an error without running.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    /// `TOOL_NOT_FOUND`, `INVALID_ARGUMENTS` or `TOOL_LIMIT`.
    pub code: String,
    pub message: String,
}

/// One call the model made in an iteration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Call {
    /// The model's id for the call, which its result names.
    pub id: String,
    /// The tool's name as offered to the model.
    pub name: String,
    /// The tool's key, when the name is one offered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The step that runs the call; none when it was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// The arguments, parsed (the call step's template reads them here).
    #[serde(default)]
    pub args: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<Refusal>,
}

/// The limits of one loop: the policy's, tightened by the step's arguments.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    pub max_iterations: u32,
    pub max_tool_calls: u32,
    pub tool_call_timeout_secs: u64,
    pub loop_timeout_secs: u64,
    pub max_output_tokens: u32,
    pub temperature: f32,
}

/// Tokens over every iteration so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tokens {
    pub input: u64,
    pub output: u64,
}

/// The loop as one iteration leaves it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoopState {
    /// The id of the loop's first step; later steps' ids derive from it.
    pub root: String,
    /// The iteration that stored this (1 for the first).
    pub iteration: u32,
    /// When the first iteration began, in Unix milliseconds (for a loop
    /// a fork continues, when the fork's first iteration began).
    pub started_at_ms: i64,
    /// The task whose run the clock above belongs to: a fork copies the
    /// loop from its original, and its loop's clock starts again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// The model the loop calls (as the step named it, or the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub limits: Limits,
    /// The tools the step allows (keys); none: every tool of the tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed: Option<Vec<String>>,
    /// What the step says each tool is for (by key), in place of the
    /// tool's own description.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub descriptions: BTreeMap<String, String>,
    /// The step's own token budget for the task, if it set one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_task_tokens: Option<u64>,
    /// Calls that were run (not refused), over every iteration.
    pub tool_calls_made: u32,
    pub tokens: Tokens,
    /// The conversation, the model's turn of this iteration last.
    pub messages: Vec<StoredMessage>,
    /// The calls of this iteration's turn, in order.
    pub calls: Vec<Call>,
    /// The memories the prompt includes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recalled: Vec<MemoryId>,
    /// The model runs one hop (`LanguageModel::one_hop`): the step's output
    /// says so.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub one_hop: bool,
}

impl LoopState {
    /// The id of iteration `n`'s step.
    pub fn iteration_step(&self, n: u32) -> String {
        if n <= 1 {
            self.root.clone()
        } else {
            format!("{}:{n}", self.root)
        }
    }

    /// The id of the `k`-th (1-based) call step of iteration `n`.
    pub fn call_step(&self, n: u32, k: usize) -> String {
        format!("{}:{n}.{k}", self.root)
    }

    pub fn messages(&self) -> Vec<Message> {
        self.messages
            .iter()
            .map(StoredMessage::to_message)
            .collect()
    }

    /// Answer this iteration's calls: one tool message per call, in order,
    /// with the call step's output (from `outputs`, the task's
    /// `steps.<id>.output`) or its error (from `attempts`, the task's step
    /// rows), or the refusal.
    pub fn answer_calls(&mut self, outputs: &Value, attempts: &[AttemptView]) {
        let answers: Vec<StoredMessage> = self
            .calls
            .iter()
            .map(|call| {
                let content = match (&call.refused, &call.step) {
                    (Some(refusal), _) => error_content(&refusal.code, &refusal.message),
                    (None, Some(step)) => step_result(step, outputs, attempts),
                    (None, None) => error_content("EXECUTION_ERROR", "the call did not run"),
                };
                StoredMessage::from(&Message::tool(call.id.clone(), content))
            })
            .collect();
        self.messages.extend(answers);
        self.calls.clear();
    }
}

/// What a call step left: its output, or the error of its last attempt.
fn step_result(step: &str, outputs: &Value, attempts: &[AttemptView]) -> String {
    let output = outputs.get(step).and_then(|s| s.get("output"));
    if let Some(output) = output.filter(|o| !o.is_null()) {
        let text = output.to_string();
        if text.chars().count() > RESULT_CHARS {
            return format!("{}…", text.chars().take(RESULT_CHARS).collect::<String>());
        }
        return text;
    }
    let error = attempts
        .iter()
        .rev()
        .find(|a| a.step_id == step)
        .and_then(|a| a.error.clone());
    match error {
        Some(message) if message.starts_with("timed out") => error_content("TIMEOUT", &message),
        Some(message) if message.starts_with(guardrails::BLOCKED) => {
            error_content(guardrails::BLOCKED, &message)
        }
        Some(message) => error_content("EXECUTION_ERROR", &message),
        None => error_content("EXECUTION_ERROR", "the tool returned nothing"),
    }
}

/// A tool message that says a call failed.
pub fn error_content(code: &str, message: &str) -> String {
    json!({"error": {"code": code, "message": message}}).to_string()
}
