//! Tools the executor tests register: they record what they did, keyed by
//! the idempotency key the executor hands them.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use async_trait::async_trait;
use brainstem_domain::{
    plans::StepDef,
    tools::{Control, Tool, ToolContext, ToolError, ToolOutput},
};
use serde_json::{Value, json};

/// What the tools observed, shared with the test.
#[derive(Default)]
pub struct Journal {
    /// Side effects by idempotency key; a repeat finds the earlier one.
    pub effects: Mutex<HashMap<String, u32>>,
    /// Calls by idempotency key.
    pub calls: Mutex<HashMap<String, u32>>,
    /// Delegation tokens by task id.
    pub tokens: Mutex<HashMap<String, String>>,
}

impl Journal {
    pub fn calls(&self, key: &str) -> u32 {
        self.calls.lock().unwrap().get(key).copied().unwrap_or(0)
    }
    pub fn effects(&self, key: &str) -> u32 {
        self.effects.lock().unwrap().get(key).copied().unwrap_or(0)
    }
    pub fn token(&self, task_uuid: &str) -> String {
        self.tokens
            .lock()
            .unwrap()
            .get(task_uuid)
            .cloned()
            .expect("a delegation token")
    }
    fn call(&self, ctx: &ToolContext) {
        *self
            .calls
            .lock()
            .unwrap()
            .entry(ctx.idempotency_key.clone())
            .or_default() += 1;
    }
    /// Make the side effect once per key.
    fn effect(&self, ctx: &ToolContext) {
        self.effects
            .lock()
            .unwrap()
            .entry(ctx.idempotency_key.clone())
            .or_insert(1);
    }
}

/// `effect`: makes an idempotent side effect; with `crash_once` it fails
/// right after making it, the first time.
pub struct Effect(pub Arc<Journal>);

#[async_trait]
impl Tool for Effect {
    fn key(&self) -> &str {
        "test.effect"
    }
    fn description(&self) -> &str {
        "records a side effect keyed by the idempotency key"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"crash_once": {"type": "boolean"}, "value": {}}})
    }
    async fn call(&self, ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        self.0.call(&ctx);
        let first = self.0.effects(&ctx.idempotency_key) == 0;
        self.0.effect(&ctx);
        if first && args["crash_once"] == json!(true) {
            return Err(ToolError::fatal("crashed after the side effect"));
        }
        let mut out = ToolOutput::with_output(json!({"done": ctx.step_id}), "effect made");
        out.state
            .insert(format!("done_{}", ctx.step_id), json!(true));
        if let Some(v) = args.get("value") {
            out.state.insert("value".into(), v.clone());
        }
        Ok(out)
    }
}

/// `fail`: always fails, not retryably.
pub struct Fail(pub Arc<Journal>);

#[async_trait]
impl Tool for Fail {
    fn key(&self) -> &str {
        "test.fail"
    }
    fn description(&self) -> &str {
        "always fails"
    }
    async fn call(&self, ctx: ToolContext, _args: Value) -> Result<ToolOutput, ToolError> {
        self.0.call(&ctx);
        Err(ToolError::fatal("this tool always fails"))
    }
}

/// `flaky`: fails retryably until its attempt reaches `succeed_on`.
pub struct Flaky(pub Arc<Journal>);

#[async_trait]
impl Tool for Flaky {
    fn key(&self) -> &str {
        "test.flaky"
    }
    fn description(&self) -> &str {
        "fails retryably a few times"
    }
    async fn call(&self, ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        self.0.call(&ctx);
        let succeed_on = args["succeed_on"].as_u64().unwrap_or(1) as u32;
        if ctx.attempt < succeed_on {
            return Err(ToolError::retryable(format!(
                "attempt {} failed",
                ctx.attempt
            )));
        }
        Ok(ToolOutput::with_output(
            json!({"attempt": ctx.attempt}),
            "finally",
        ))
    }
}

/// `inject`: adds steps. `forever` adds itself again plus four no-ops.
pub struct Inject(pub Arc<Journal>);

#[async_trait]
impl Tool for Inject {
    fn key(&self) -> &str {
        "test.inject"
    }
    fn description(&self) -> &str {
        "injects steps"
    }
    async fn call(&self, ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        self.0.call(&ctx);
        let step = |id: String, tool: &str, args: Value| StepDef {
            id,
            tool: tool.into(),
            args,
            condition: None,
            stop_on_failure: true,
            retry: None,
            requires_review: false,
            timeout_secs: None,
        };
        let mut out = ToolOutput::with_output(json!({}), "decided on more steps");
        if args["forever"] == json!(true) {
            out.new_steps.push(step(
                format!("{}.again", ctx.step_id),
                "test.inject",
                json!({"forever": true}),
            ));
            for i in 0..4 {
                out.new_steps.push(step(
                    format!("{}.noop{i}", ctx.step_id),
                    "set_state",
                    json!({}),
                ));
            }
        } else if args["bad"] == json!(true) {
            out.new_steps
                .push(step("dup".into(), "no_such_tool", json!({})));
        } else {
            out.new_steps.push(step(
                "dyn_review_vins".into(),
                "test.effect",
                json!({"value": "{{ state.value }}"}),
            ));
            out.new_steps.push(step(
                "dyn_notify".into(),
                "set_state",
                json!({"notified": true}),
            ));
        }
        Ok(out)
    }
}

/// `delegate`: hands the step elsewhere and keeps the token for the test.
pub struct Delegate(pub Arc<Journal>);

#[async_trait]
impl Tool for Delegate {
    fn key(&self) -> &str {
        "test.delegate"
    }
    fn description(&self) -> &str {
        "delegates to a pretend external workflow"
    }
    async fn call(&self, ctx: ToolContext, _args: Value) -> Result<ToolOutput, ToolError> {
        self.0.call(&ctx);
        self.0
            .tokens
            .lock()
            .unwrap()
            .insert(ctx.task_id.to_string(), ctx.delegation_token.clone());
        Ok(ToolOutput {
            summary: "workflow started".into(),
            control: Control::Delegate {
                external_ref: format!("chase-{}", ctx.task_id),
            },
            ..ToolOutput::default()
        })
    }
}

/// All test tools sharing one journal.
pub fn all(journal: &Arc<Journal>) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(Effect(journal.clone())),
        Arc::new(Fail(journal.clone())),
        Arc::new(Flaky(journal.clone())),
        Arc::new(Inject(journal.clone())),
        Arc::new(Delegate(journal.clone())),
    ]
}
