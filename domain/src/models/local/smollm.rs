//! SmolLM2-135M-Instruct, a 30-layer llama run from its Q8_0 GGUF
//! ([`load`]): the small local model that answers when the agent model is
//! not fetched. It is not offered tools (it does not call them).
//!
//! Prompts use the ChatML template the model was tuned on, with the
//! model's own default system prompt when the conversation has none.

use super::{
    causal::{Architecture, LocalLm, Template},
    files::{ModelFiles, SMOLLM_MODEL},
};
use crate::{
    Result,
    models::llm::{CompletionRequest, Role},
};

/// The conversation ends with this token.
const END: &str = "<|im_end|>";
/// What SmolLM2's own chat template says when there is no system message.
const DEFAULT_SYSTEM: &str = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";
/// The longest prompt and answer it reads (its training context).
const CONTEXT: usize = 2048;

/// Load the model from `files` (about 0.3 s, 300 MB of memory) and start
/// its thread. Blocking.
pub fn load(files: &ModelFiles) -> Result<LocalLm> {
    LocalLm::load(
        &files.smollm_gguf(),
        Architecture::Llama,
        Box::new(ChatMl),
        CONTEXT,
        "smollm",
    )
}

/// The model's name, the default of steps that name none.
pub fn model_name() -> &'static str {
    SMOLLM_MODEL
}

struct ChatMl;

impl Template for ChatMl {
    fn end(&self) -> &'static str {
        END
    }

    fn prompt(&self, request: &CompletionRequest) -> String {
        chat_prompt(request)
    }

    fn calls_tools(&self, _: &CompletionRequest) -> bool {
        false
    }

    /// SmolLM2 was tuned here with the prompt's last tokens counted too;
    /// without them its short answers wander off the question.
    fn penalise_prompt(&self) -> bool {
        true
    }
}

/// The conversation in ChatML, ending where the assistant's turn begins.
pub fn chat_prompt(request: &CompletionRequest) -> String {
    let mut prompt = String::new();
    if request
        .messages
        .first()
        .is_none_or(|m| m.role != Role::System)
    {
        prompt.push_str(&format!("<|im_start|>system\n{DEFAULT_SYSTEM}{END}\n"));
    }
    for message in &request.messages {
        prompt.push_str(&format!(
            "<|im_start|>{}\n{}{END}\n",
            message.role.as_str(),
            message.content
        ));
    }
    prompt.push_str("<|im_start|>assistant\n");
    prompt
}
