//! Language models: the [`LanguageModel`] trait (streaming completion with
//! usage), its providers, and [`ModelClient`], the one handle tools and the
//! intent detector use.
//!
//! - this file: the trait and what crosses it ([`Message`],
//!   [`CompletionRequest`], [`Chunk`], [`LlmError`]), and the token
//!   estimate ([`estimate_tokens`]).
//! - `client`: [`ModelClient`], a provider with its timeouts, retries and
//!   breaker, and the [`Generation`] a call streams; the failure policy is
//!   written down there.
//! - `pricing`: [`Prices`], what a call costs.
//! - [`openai`]: any OpenAI-compatible `/chat/completions` endpoint (OpenAI,
//!   vLLM, Ollama, llama.cpp server), streamed as server-sent events
//!   ([`sse`]).
//! - [`offline`]: a built-in provider that needs no network and answers
//!   deterministically; the default, so a bare install runs LLM steps.
//! - [`breaker`]: the circuit breaker each client keeps for its provider.
//! - [`frames`]: coalescing of token deltas into frames for subscribers.
//! - [`prompt`]: the layers of a prompt, in the specification's order.
//! - [`budget`]: per-task token budgets and per-tenant daily quotas,
//!   checked *before* a call, from an estimate (prompt + `max_tokens`).
//! - [`pace`]: requests- and tokens-per-minute budgets (the process's and
//!   each tenant's) a call *waits* for before it is sent.
//!
//! **Usage.** Providers report input and output tokens; when one does not
//! (an OpenAI-compatible server that ignores `include_usage`),
//! [`estimate_tokens`] stands in.
//!
//! **One provider per process**, from configuration. Per-tenant providers (a
//! tenant's own key or endpoint) would be a tenant connection of kind `llm`,
//! resolved per call into a `ModelClient` kept per tenant (each with its own
//! breaker); not built yet.

pub mod breaker;
pub mod budget;
mod client;
pub mod frames;
pub mod offline;
pub mod openai;
pub mod pace;
mod pricing;
pub mod prompt;
pub mod sse;

use std::pin::Pin;

use async_trait::async_trait;
use futures_util::Stream;

pub use breaker::{Breaker, BreakerConfig, BreakerState};
pub use budget::Budgets;
pub use client::{CallRetry, Completion, Generation, LlmSettings, ModelClient};
pub use pace::{Pace, PerMinute};
pub use pricing::{Price, Prices};

/// Who said a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    System,
    User,
    Assistant,
    /// The result of a tool call the model made.
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub role: Role,
    pub content: String,
    /// The tools an assistant message calls (empty for any other message).
    pub tool_calls: Vec<ToolCall>,
    /// The call a tool message answers.
    pub tool_call_id: Option<String>,
}

impl Message {
    fn new(role: Role, content: String) -> Self {
        Self {
            role,
            content,
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }

    pub fn system(content: impl Into<String>) -> Self {
        Self::new(Role::System, content.into())
    }

    pub fn user(content: impl Into<String>) -> Self {
        Self::new(Role::User, content.into())
    }

    /// The model's turn: its text and the tools it called.
    pub fn assistant(content: impl Into<String>, tool_calls: Vec<ToolCall>) -> Self {
        Self {
            tool_calls,
            ..Self::new(Role::Assistant, content.into())
        }
    }

    /// The result (or error) of the call `call_id`.
    pub fn tool(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            tool_call_id: Some(call_id.into()),
            ..Self::new(Role::Tool, content.into())
        }
    }

    /// Estimated tokens of the message (see [`estimate_tokens`]), with 4
    /// for the chat template's framing.
    fn estimated_tokens(&self) -> u64 {
        estimate_tokens(&self.content)
            + self
                .tool_calls
                .iter()
                .map(|c| estimate_tokens(&c.name) + estimate_tokens(&c.arguments))
                .sum::<u64>()
            + 4
    }
}

/// A tool offered to the model: a name of letters, digits, `_` and `-`
/// (at most 64, as OpenAI-compatible servers require), what it does, and
/// the JSON Schema of its arguments.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: serde_json::Value,
}

/// A call the model made: its id (for the result's message), the tool's
/// name, and the arguments as the JSON text the model wrote (not yet
/// parsed: a model may write invalid JSON, which is fed back to it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// A piece of a streamed tool call: the call at `index` of the turn, with
/// its id and name on the first piece and its arguments spread over any
/// number of pieces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCallDelta {
    pub index: usize,
    pub id: Option<String>,
    pub name: Option<String>,
    pub arguments: String,
}

/// Why the model stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// It finished its answer.
    Complete,
    /// It called tools and waits for their results.
    ToolUse,
    /// It reached `max_tokens`.
    MaxTokens,
}

/// One streaming completion to run.
#[derive(Clone, Debug, PartialEq)]
pub struct CompletionRequest {
    /// The conversation, system prompt first if there is one.
    pub messages: Vec<Message>,
    pub model: String,
    /// The most output tokens the model may produce.
    pub max_tokens: u32,
    pub temperature: f32,
    /// The tools the model may call (none: it can only answer).
    pub tools: Vec<ToolSpec>,
}

impl CompletionRequest {
    /// Estimated prompt tokens (see [`estimate_tokens`]): the messages with
    /// 4 each for the chat template's framing, and the tools offered.
    pub fn estimated_prompt_tokens(&self) -> u64 {
        let tools: u64 = self
            .tools
            .iter()
            .map(|t| {
                estimate_tokens(&t.name)
                    + estimate_tokens(&t.description)
                    + estimate_tokens(&t.parameters.to_string())
            })
            .sum();
        self.messages
            .iter()
            .map(Message::estimated_tokens)
            .sum::<u64>()
            + tools
    }

    /// The most this call can use, for budgets checked before it runs
    /// (A.6: estimate before executing): prompt estimate + `max_tokens`.
    pub fn estimated_max_tokens(&self) -> u64 {
        self.estimated_prompt_tokens() + u64::from(self.max_tokens)
    }
}

/// A rough token count: one token per four characters, rounded up — the
/// usual rule of thumb for English under BPE tokenizers. Used for budgets
/// before a call, by the offline provider, and when a provider reports no
/// usage; never for billing a provider that reports its own counts.
pub fn estimate_tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4)
}

/// Token counts of one call, as the provider reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TokenUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Of `input_tokens`, those the provider did not read again: the
    /// beginning shared with an earlier prompt, kept in its cache.
    pub cached_input_tokens: u64,
}

/// What a provider's stream yields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Chunk {
    /// More generated text (never empty).
    Delta(String),
    /// A piece of a tool call.
    ToolCall(ToolCallDelta),
    /// Why the model stopped, when the provider says.
    Finish(FinishReason),
    /// The call's token counts, usually last.
    Usage(TokenUsage),
}

pub type ChunkStream = Pin<Box<dyn Stream<Item = Result<Chunk, LlmError>> + Send>>;

/// The bounded queue in front of a model that works through one request
/// at a time on threads of its own (the local models): at most `bound`
/// calls are handed to it at once, and the others wait their turn here,
/// as admission (`kernel::waiting`), so a step's timeout does not run out
/// while it waits.
#[derive(Clone, Debug)]
pub struct ModelQueue(std::sync::Arc<tokio::sync::Semaphore>);

/// A place in a [`ModelQueue`], held until the call's stream is dropped.
pub type QueuePlace = tokio::sync::OwnedSemaphorePermit;

impl ModelQueue {
    pub fn new(bound: usize) -> Self {
        Self(std::sync::Arc::new(tokio::sync::Semaphore::new(
            bound.max(1),
        )))
    }

    /// Wait for a place (`None` only if the queue was closed).
    pub async fn enter(&self) -> Option<QueuePlace> {
        crate::kernel::waiting::admission(self.0.clone().acquire_owned())
            .await
            .ok()
    }

    /// Places free now.
    pub fn free(&self) -> usize {
        self.0.available_permits()
    }
}

/// Which language model answers by default in this process, as a
/// client may be told (the console says it beside each answer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnsweringModel {
    /// `offline`, `local` or `openai`.
    pub provider: String,
    /// The model's name (for an OpenAI-compatible endpoint, the one asked for).
    pub model: String,
}

impl Default for AnsweringModel {
    fn default() -> Self {
        Self {
            provider: "offline".into(),
            model: offline::MODEL.into(),
        }
    }
}

/// A streaming language model.
#[async_trait]
pub trait LanguageModel: Send + Sync + 'static {
    /// The provider's name, for logs and error messages.
    fn provider(&self) -> &str;
    /// The queue calls wait in before they are sent, for a model that
    /// runs one request at a time in this process; `None` for the rest.
    fn queue(&self) -> Option<&ModelQueue> {
        None
    }
    /// Whether the model is weak at chaining tool calls, and so answers
    /// from the first tools' results with no tools offered: an agent loop
    /// on it runs one hop (pick a tool → run it → answer) and says so.
    fn one_hop(&self) -> bool {
        false
    }
    /// Send `request`; resolves once the provider accepted it, then the
    /// stream yields text deltas and (at most once) the usage. A stream
    /// error ends the stream.
    async fn stream(&self, request: &CompletionRequest) -> Result<ChunkStream, LlmError>;
}

/// What went wrong with a model call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// No answer, or no chunk, in time.
    Timeout,
    /// The connection failed or broke.
    Connection,
    /// The provider said 429.
    RateLimited,
    /// The provider failed (5xx, or an error inside the stream).
    Unavailable,
    /// The provider's answer could not be understood.
    InvalidResponse,
    /// The breaker is open after repeated failures.
    CircuitOpen,
    /// The provider refused the request (4xx other than 408/429): retrying
    /// the same request will not help.
    Rejected,
}

impl ErrorKind {
    /// The error code, in the seed's vocabulary (A.10, A.23).
    pub fn code(self) -> &'static str {
        match self {
            ErrorKind::Timeout => "TIMEOUT",
            ErrorKind::Connection => "CONNECTION_ERROR",
            ErrorKind::RateLimited => "RATE_LIMITED",
            ErrorKind::CircuitOpen => "CIRCUIT_OPEN",
            ErrorKind::Unavailable | ErrorKind::InvalidResponse | ErrorKind::Rejected => {
                "MODEL_ERROR"
            }
        }
    }

    /// Whether running the step again later may succeed.
    pub fn retryable(self) -> bool {
        !matches!(self, ErrorKind::Rejected)
    }

    /// Whether the client retries the call itself (before any delta).
    fn retried_in_client(self) -> bool {
        matches!(
            self,
            ErrorKind::Timeout
                | ErrorKind::Connection
                | ErrorKind::RateLimited
                | ErrorKind::Unavailable
        )
    }

    /// Whether this says the provider is unhealthy (counts for the breaker).
    fn is_provider_failure(self) -> bool {
        !matches!(self, ErrorKind::Rejected | ErrorKind::CircuitOpen)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", kind.code())]
pub struct LlmError {
    pub kind: ErrorKind,
    pub message: String,
}

impl LlmError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    pub fn retryable(&self) -> bool {
        self.kind.retryable()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_estimate_is_a_quarter_of_the_characters_rounded_up() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("abc"), 1);
        assert_eq!(estimate_tokens("abcd"), 1);
        assert_eq!(estimate_tokens("abcde"), 2);
        assert_eq!(estimate_tokens("ééééé"), 2, "characters, not bytes");
        let request = CompletionRequest {
            messages: vec![Message::system("abcd"), Message::user("abcdefgh")],
            model: "m".into(),
            max_tokens: 100,
            temperature: 0.0,
            tools: Vec::new(),
        };
        assert_eq!(request.estimated_prompt_tokens(), (1 + 4) + (2 + 4));
        assert_eq!(request.estimated_max_tokens(), 111);
    }
}
