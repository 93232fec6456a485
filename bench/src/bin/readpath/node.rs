//! `readpath --shape node`: one task read again through the `Node`
//! interface, as Relay refetches a component (a task's card, after a
//! subscription said it changed): an operation with a variable and a
//! named fragment on the type, `node(id: $id)` on both servers.
//!
//! The task is one more task of the page's plan, started with an input
//! text and run to completion by the executor.
//!
//! Brainstem's query (`$id` the task's global id):
//!
//! ```graphql
//! query TaskRefetch($id: ID!) { node(id: $id) { id ...TaskCard } }
//! fragment TaskCard on Task { status input createdAt plan { key version }
//!     steps { stepId status attempt durationMs } }
//! ```
//!
//! PostGraphile's is the same operation over its fields (`rowId`,
//! `inputText`, `planKey`, `planVersion`, `taskStepsByTenantIdAndTaskId`),
//! `$id` its own node id of the same row, asked of it once by primary key
//! (`taskByTenantIdAndRowId { id }`) before the run.

use anyhow::{Context, bail};
use serde_json::{Value, json};

use super::{
    answers::{Peer, step_rows},
    filtered::TaskCard,
    seed::SeededTask,
};

/// Steps of the task (the plan `four`).
const STEPS: usize = 4;

pub fn brainstem_body(task: &SeededTask) -> Value {
    json!({
        "query": "query TaskRefetch($id: ID!) { node(id: $id) { id ...TaskCard } } \
                  fragment TaskCard on Task { status input createdAt plan { key version } \
                  steps { stepId status attempt durationMs } }",
        "variables": { "id": task.global_id },
    })
}

/// PostGraphile's node id of `task`, as PostGraphile answers it.
pub fn postgraphile_lookup(task: &SeededTask, tenant: &str) -> Value {
    json!({
        "query": format!(
            "{{ taskByTenantIdAndRowId(tenantId: \"{tenant}\", rowId: \"{}\") {{ id }} }}",
            task.uuid
        ),
    })
}

/// The node id in PostGraphile's answer to [`postgraphile_lookup`].
pub fn postgraphile_node_id(answer: &Value) -> anyhow::Result<String> {
    answer["data"]["taskByTenantIdAndRowId"]["id"]
        .as_str()
        .map(str::to_owned)
        .with_context(|| format!("PostGraphile has no node id for the task: {answer}"))
}

pub fn postgraphile_body(node_id: &str) -> Value {
    json!({
        "query": "query TaskRefetch($id: ID!) { node(id: $id) { id ...TaskCard } } \
                  fragment TaskCard on Task { rowId status inputText createdAt planKey planVersion \
                  taskStepsByTenantIdAndTaskId(orderBy: PRIMARY_KEY_ASC) { nodes { \
                  stepId status attempt durationMs } } }",
        "variables": { "id": node_id },
    })
}

/// The task's card and steps, as both servers must give them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeTask {
    pub card: TaskCard,
    pub steps: Vec<(String, String, i64, i64)>,
}

impl NodeTask {
    pub fn from_answer(peer: Peer, body: &Value) -> anyhow::Result<Self> {
        let node = &body["data"]["node"];
        let steps = match peer {
            Peer::Brainstem => &node["steps"],
            Peer::PostGraphile => &node["taskStepsByTenantIdAndTaskId"]["nodes"],
        };
        let steps = step_rows(steps)?;
        if steps.len() != STEPS {
            bail!("{} steps (expected {STEPS}): {body}", steps.len());
        }
        Ok(Self {
            card: TaskCard::of(peer, node)?,
            steps,
        })
    }
}
