//! Qwen2.5-Coder-1.5B-Instruct ([`load`]), the local model that can act:
//! offered tools, it answers with calls in its own `<tool_call>` format
//! (or the fenced and bare JSON it also writes; see [`super::tool_text`]).
//!
//! Prompts follow the model's chat template: the tools as function
//! signatures inside `<tools>` in the system turn, its earlier calls as
//! `<tool_call>` blocks in its own turns, and each tool's result as a
//! `<tool_response>` in a user turn.
//!
//! One hop at a time: the model tends to call a tool again rather than
//! answer from a result, so once the conversation ends with tool results
//! it is asked to answer from them, with no tools offered. An agent loop
//! therefore runs pick a tool → run it → answer.

use serde_json::{Value, json};

use super::{
    causal::{Architecture, LocalLm, Template},
    files::{AGENT_MODEL, ModelFiles},
};
use crate::{
    Result,
    models::llm::{CompletionRequest, Role},
};

const END: &str = "<|im_end|>";
const DEFAULT_SYSTEM: &str = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
/// The longest prompt and answer it reads here: the model takes 32,768
/// tokens, but its key/value cache costs about 28 KB a token.
const CONTEXT: usize = 8192;

/// Load the model from `files` (a few seconds; its memory: BENCHMARKS.md,
/// "Compact weights for decode") and start its thread. Blocking.
pub fn load(files: &ModelFiles) -> Result<LocalLm> {
    LocalLm::load(
        &files.agent_gguf(),
        Architecture::Qwen2,
        Box::new(QwenChat),
        CONTEXT,
        "qwen",
    )
}

/// The model's name, the default of steps that name none.
pub fn model_name() -> &'static str {
    AGENT_MODEL
}

/// The text the model reads for `request`, tools included: what another
/// engine running the same GGUF must be given to be compared with this one.
pub fn prompt(request: &CompletionRequest) -> String {
    QwenChat.prompt(request)
}

struct QwenChat;

/// Whether the conversation ends with tool results (then the model
/// answers from them, with no tools). System messages do not count: the
/// agent loop adds its rules after the turns.
fn answering(request: &CompletionRequest) -> bool {
    request
        .messages
        .iter()
        .rev()
        .find(|m| m.role != Role::System)
        .is_some_and(|m| m.role == Role::Tool)
}

impl Template for QwenChat {
    fn end(&self) -> &'static str {
        END
    }

    fn calls_tools(&self, request: &CompletionRequest) -> bool {
        !request.tools.is_empty() && !answering(request)
    }

    fn one_hop(&self) -> bool {
        true
    }

    fn prompt(&self, request: &CompletionRequest) -> String {
        // One system turn, as the model was tuned: every system message,
        // in order (the agent loop's rules and recalled memories too).
        let systems: Vec<&str> = request
            .messages
            .iter()
            .filter(|m| m.role == Role::System)
            .map(|m| m.content.as_str())
            .collect();
        let mut system = match systems.is_empty() {
            true => DEFAULT_SYSTEM.to_owned(),
            false => systems.join("\n\n"),
        };
        if self.calls_tools(request) {
            system.push_str(
                "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\
                 \n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>",
            );
            for tool in &request.tools {
                let signature = json!({"type": "function", "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                }});
                system.push('\n');
                system.push_str(&signature.to_string());
            }
            system.push_str(
                "\n</tools>\n\nFor each function call, return a json object with function name and \
                 arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": \
                 <function-name>, \"arguments\": <args-json-object>}\n</tool_call>",
            );
        }
        let mut prompt = format!("<|im_start|>system\n{system}{END}\n");
        let question = request
            .messages
            .iter()
            .rev()
            .find(|m| m.role == Role::User)
            .map(|m| m.content.as_str());
        let mut messages = request
            .messages
            .iter()
            .filter(|m| m.role != Role::System)
            .peekable();
        while let Some(message) = messages.next() {
            match message.role {
                Role::Tool => {
                    prompt.push_str(&format!(
                        "<|im_start|>user\n<tool_response>\n{}\n</tool_response>",
                        message.content
                    ));
                    // The last results: ask for the answer right after them.
                    if messages.peek().is_none()
                        && let Some(question) = question
                    {
                        prompt.push_str(&format!(
                            "\nAnswer from these results, in plain words, without calling a \
                             tool: {question}"
                        ));
                    }
                    prompt.push_str(&format!("{END}\n"));
                }
                Role::Assistant => {
                    let mut turn = message.content.clone();
                    for call in &message.tool_calls {
                        let arguments = serde_json::from_str::<Value>(&call.arguments)
                            .unwrap_or_else(|_| Value::String(call.arguments.clone()));
                        let call = json!({"name": call.name, "arguments": arguments});
                        turn.push_str(&format!("\n<tool_call>\n{call}\n</tool_call>"));
                    }
                    prompt.push_str(&format!(
                        "<|im_start|>assistant\n{}{END}\n",
                        turn.trim_start()
                    ));
                }
                role => prompt.push_str(&format!(
                    "<|im_start|>{}\n{}{END}\n",
                    role.as_str(),
                    message.content
                )),
            }
        }
        prompt.push_str("<|im_start|>assistant\n");
        prompt
    }
}
