//! The executor policy: the limits an agent step runs under.
//!
//! The defaults are the specification's (D.6): 5 iterations, 10 tool calls
//! over the whole loop, 30 s per tool call, 120 s for the loop, 4,000
//! output tokens per model call, temperature 0.7. A plan's agent step may
//! tighten them for itself (never loosen: a step's value above the policy's
//! is capped at the policy's).

use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ExecutorPolicy {
    /// Model calls one agent loop may make; past them it ends with
    /// `ITERATION_LIMIT`.
    pub max_iterations: u32,
    /// Tool calls one agent loop may make, over all its iterations.
    pub max_tool_calls: u32,
    /// How long one tool call may run.
    pub tool_call_timeout: Duration,
    /// How long one agent loop may run, from its first model call.
    pub loop_timeout: Duration,
    /// The most output tokens one model call may produce.
    pub max_output_tokens: u32,
    pub temperature: f32,
}

impl Default for ExecutorPolicy {
    fn default() -> Self {
        Self {
            max_iterations: 5,
            max_tool_calls: 10,
            tool_call_timeout: Duration::from_secs(30),
            loop_timeout: Duration::from_secs(120),
            max_output_tokens: 4000,
            temperature: 0.7,
        }
    }
}
