//! Tools: the units of work a plan's steps run.
//!
//! A [`Tool`] declares a key, a description and the JSON Schema of its input,
//! and is called with a [`ToolContext`] (tenant, task, step, idempotency key
//! `<task id>:<step id>`, trace id, state and earlier outputs, and the typed
//! [`ToolPorts`] through which it reaches the platform) and the step's
//! rendered arguments. It returns a [`ToolOutput`] (output, state changes,
//! summary, new steps, artifacts, usage, the memories it used, and
//! optionally a request to pause for review or to delegate), or a
//! [`ToolError`] saying whether a retry may help.
//!
//! **Idempotency contract.** A step may run more than once (a crash after the
//! tool's side effect but before the commit, a retry after an error). A tool
//! with side effects must key them by `ctx.idempotency_key`, so that a repeat
//! finds the earlier effect instead of making a second one.
//!
//! The [`ToolRegistry`] is built once at startup: built-in tools
//! ([`builtin`]) plus any the embedding program (or a test) registers. A
//! duplicate key is an error, not an overwrite. Partner tools (`partner.…`)
//! live in the capability catalogue instead and are looked up when a plan
//! is checked or a step runs (see [`crate::catalogue::capabilities::partner`]).

use std::{collections::BTreeMap, fmt, sync::Arc, time::Duration};

use async_trait::async_trait;
use brainstem_entity::{MemoryId, TaskId, TenantId};
use serde_json::{Map, Value, json};
use uuid::Uuid;

pub use crate::catalogue::ports::{
    AttemptView, LiveEvents, NewChildTask, TaskPort, TaskView, ToolPorts,
};
use crate::{
    Error, Result,
    catalogue::plans::{RetryPolicy, StepDef},
    models::{llm::LlmError, usage::Usage},
};

/// Everything a tool may know about the step it runs for.
#[derive(Clone)]
pub struct ToolContext {
    pub tenant: TenantId,
    pub tenant_slug: String,
    pub task_id: TaskId,
    pub step_id: String,
    /// 1 for the first attempt of this step.
    pub attempt: u32,
    /// `<task id>:<step id>`: the same on every attempt of this step.
    pub idempotency_key: String,
    pub trace_id: String,
    pub subject_id: Option<Uuid>,
    /// `{"text": …, "payload": …}` as the task was started.
    pub input: Value,
    pub state: Value,
    /// Outputs of earlier steps: `steps.<id>.output`.
    pub steps: Value,
    /// A single-use token for handing this step to an external system: if
    /// the tool returns [`Control::Delegate`], the callback must present it.
    pub delegation_token: String,
    /// The path the external system calls back, relative to the public URL.
    pub callback_path: String,
    /// What of the platform the tool may use (see [`ToolPorts`]).
    pub ports: Arc<ToolPorts>,
    pub settings: Arc<ToolSettings>,
    /// Set when the task is asked to stop now (a newer turn of its
    /// conversation interrupts it). A tool that streams a model's answer
    /// stops at once and returns its text so far, marked interrupted; any
    /// other tool may ignore it (the executor stops at the step boundary).
    pub interrupt: Interrupt,
}

/// Whether the running task has been asked to stop mid-step. Never
/// requested when the step runs without one (`Interrupt::default()`).
#[derive(Clone, Debug, Default)]
pub struct Interrupt(Option<tokio::sync::watch::Receiver<bool>>);

impl Interrupt {
    pub fn new(requested: tokio::sync::watch::Receiver<bool>) -> Self {
        Self(Some(requested))
    }

    pub fn is_requested(&self) -> bool {
        self.0.as_ref().is_some_and(|r| *r.borrow())
    }

    /// Resolves once a stop is requested; never when none can be.
    pub async fn requested(&self) {
        match self.0.clone() {
            Some(mut r) => {
                if r.wait_for(|stop| *stop).await.is_err() {
                    // The sender is gone: no stop will come.
                    std::future::pending::<()>().await;
                }
            }
            None => std::future::pending::<()>().await,
        }
    }
}

impl ToolContext {
    /// Publish a live `TokenDelta` event: `text` generated so far is
    /// extended by `delta`, which starts at character `offset` of the
    /// step's text. Token deltas are not stored one by one (the step's
    /// final output is); subscribers receive them live, and one joining
    /// mid-step first gets the text so far as one delta.
    pub fn token_delta(&self, offset: usize, delta: &str) {
        self.ports
            .live
            .token_delta(self.tenant, self.task_id, &self.step_id, offset, delta);
    }
}

impl fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolContext")
            .field("tenant", &self.tenant)
            .field("task_id", &self.task_id)
            .field("step_id", &self.step_id)
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

/// Settings that built-in tools need.
#[derive(Clone, Debug)]
pub struct ToolSettings {
    /// The client for every call `http_request`, `delegate` and partner
    /// tools make: the allow-list, the address rules, redirects and the
    /// answer's size cap are its business.
    pub outbound: crate::kernel::outbound::Outbound,
    /// The server's public base URL, for callback links.
    pub public_url: String,
    /// The language model `llm.generate`, agent steps (and LLM intent
    /// detection) call.
    pub llm: crate::models::llm::ModelClient,
    /// The limits agent steps run under.
    pub policy: crate::catalogue::policy::ExecutorPolicy,
}

impl Default for ToolSettings {
    /// No hosts allowed, the offline model.
    fn default() -> Self {
        Self {
            outbound: crate::kernel::outbound::Outbound::default(),
            public_url: String::new(),
            llm: crate::models::llm::ModelClient::default(),
            policy: Default::default(),
        }
    }
}

/// What a step did.
#[derive(Clone, Debug, Default)]
pub struct ToolOutput {
    /// The step's output, readable by later steps as `steps.<id>.output`.
    pub output: Value,
    /// Merged into the task's state (top-level keys replace).
    pub state: Map<String, Value>,
    /// A human-readable summary for the event log (no PII).
    pub summary: String,
    /// Steps to append to the task's plan, validated like a published plan.
    pub new_steps: Vec<StepDef>,
    pub artifacts: Vec<ArtifactDef>,
    pub usage: Usage,
    pub control: Control,
    /// Memories the step used; the executor records them as one
    /// `MemoryRecalled` event (`data.memory_ids`) in the step's commit.
    pub recalled: Vec<MemoryId>,
    /// The task's result, set in the step's commit (an agent step's
    /// conclusion).
    pub result: Option<Value>,
}

impl ToolOutput {
    pub fn with_output(output: Value, summary: impl Into<String>) -> Self {
        Self {
            output,
            summary: summary.into(),
            ..Self::default()
        }
    }
}

/// What happens after the step.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Control {
    #[default]
    Continue,
    /// Pause the task until a human approves or rejects.
    Review { reason: String, proposed: Value },
    /// The step's work continues elsewhere; the external system completes
    /// or fails the step through the delegation callback.
    Delegate { external_ref: String },
}

/// A link from the task to something a step created or changed.
#[derive(Clone, Debug, PartialEq)]
pub struct ArtifactDef {
    /// What it is, e.g. `memory`, `deal`, `document`.
    pub kind: String,
    /// `created`, `updated`, `resolved` or `input`.
    pub role: String,
    /// Its id or URI.
    pub reference: String,
    pub metadata: Value,
}

/// A failed call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolError {
    pub message: String,
    /// Whether running the step again may succeed (timeouts, 5xx, …).
    pub retryable: bool,
    /// What the call produced before it failed (a model's text cut by a
    /// timeout), kept as the failed step's output.
    pub output: Option<Value>,
}

impl From<crate::kernel::outbound::CallFailure> for ToolError {
    fn from(f: crate::kernel::outbound::CallFailure) -> Self {
        Self {
            message: f.message,
            retryable: f.retryable,
            output: None,
        }
    }
}

impl From<LlmError> for ToolError {
    fn from(e: LlmError) -> Self {
        Self {
            retryable: e.retryable(),
            message: e.to_string(),
            output: None,
        }
    }
}

impl ToolError {
    pub fn fatal(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retryable: false,
            output: None,
        }
    }

    pub fn retryable(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retryable: true,
            output: None,
        }
    }

    /// This error, keeping `output` as what the call produced.
    pub fn with_output(mut self, output: Value) -> Self {
        self.output = Some(output);
        self
    }
}

#[async_trait]
pub trait Tool: Send + Sync + 'static {
    fn key(&self) -> &str;
    fn description(&self) -> &str;
    /// JSON Schema of the arguments (see [`crate::kernel::json_schema`] for the
    /// supported subset).
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    /// How long one call may take before it counts as a retryable failure.
    fn timeout(&self) -> Duration {
        Duration::from_secs(30)
    }
    /// How a step of this tool is retried when the step sets no `retry` of
    /// its own (none: one attempt). Tools that call other systems use
    /// [`RetryPolicy::OUTGOING_CALLS`].
    fn retry(&self) -> Option<RetryPolicy> {
        None
    }
    async fn call(&self, ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError>;
}

/// The tools this process can run, by key.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: Arc<BTreeMap<String, Arc<dyn Tool>>>,
}

impl ToolRegistry {
    pub fn builder() -> ToolRegistryBuilder {
        ToolRegistryBuilder::default()
    }

    pub fn get(&self, key: &str) -> Option<Arc<dyn Tool>> {
        self.tools.get(key).cloned()
    }

    pub fn contains(&self, key: &str) -> bool {
        self.tools.contains_key(key)
    }

    pub fn list(&self) -> impl Iterator<Item = &Arc<dyn Tool>> {
        self.tools.values()
    }

    /// This registry plus `extra` tools (partner tools resolved from the
    /// catalogue for one check or call). An extra tool never replaces a
    /// registered one.
    pub fn with_extra(&self, extra: impl IntoIterator<Item = Arc<dyn Tool>>) -> ToolRegistry {
        let mut extra = extra.into_iter().peekable();
        if extra.peek().is_none() {
            return self.clone();
        }
        let mut tools = (*self.tools).clone();
        for tool in extra {
            tools.entry(tool.key().to_owned()).or_insert(tool);
        }
        ToolRegistry {
            tools: Arc::new(tools),
        }
    }
}

#[derive(Default)]
pub struct ToolRegistryBuilder {
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl ToolRegistryBuilder {
    /// Add a tool; a key registered twice is an error.
    pub fn register(mut self, tool: Arc<dyn Tool>) -> Result<Self> {
        let key = tool.key().to_owned();
        if self.tools.contains_key(&key) {
            return Err(Error::validation(format!(
                "tool `{key}` is registered twice"
            )));
        }
        self.tools.insert(key, tool);
        Ok(self)
    }

    /// Add every tool of `tools`.
    pub fn register_all(self, tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> Result<Self> {
        tools
            .into_iter()
            .try_fold(self, |builder, tool| builder.register(tool))
    }

    pub fn build(self) -> ToolRegistry {
        ToolRegistry {
            tools: Arc::new(self.tools),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::llm::ErrorKind;

    #[test]
    fn a_model_error_keeps_whether_a_retry_may_help() {
        let rejected = ToolError::from(LlmError::new(ErrorKind::Rejected, "bad request"));
        assert!(!rejected.retryable);
        assert!(rejected.message.contains("bad request"));
        let timeout = ToolError::from(LlmError::new(ErrorKind::Timeout, "slow"));
        assert!(timeout.retryable);
    }
}
