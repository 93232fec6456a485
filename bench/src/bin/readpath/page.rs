//! `readpath --shape page` and `--shape fragments`: the nested page of a
//! web UI's task list, `first` tasks oldest first with their plan, steps
//! and last five events; with `fragments`, the same fields written as
//! client libraries (Relay, Apollo, graphql-codegen) write every query:
//! each component's fields in a named fragment, spread into the page.
//!
//! Brainstem's query:
//!
//! ```graphql
//! { tasks(first: 50) { edges { node {
//!     id status plan { key version }
//!     steps { stepId status attempt durationMs }
//!     events(last: 5) { seq kind summary } } } } }
//! ```
//!
//! PostGraphile's (Amber preset): `allTasks(condition: {tenantId: …},
//! orderBy: PRIMARY_KEY_ASC, first: 50)` with
//! `taskStepsByTenantIdAndTaskId(orderBy: PRIMARY_KEY_ASC)` and
//! `taskEventsByTenantIdAndTaskId(orderBy: SEQ_DESC, first: 5)`.

use anyhow::{Context, bail};
use serde_json::Value;

use super::answers::{Peer, each, enum_value, number, step_rows, text};

/// Steps of each task of the page (the plan `four`).
const STEPS: usize = 4;

/// One task of the page, as both servers must give it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskRow {
    pub id: String,
    pub status: String,
    pub plan: Option<(String, i64)>,
    pub steps: Vec<(String, String, i64, i64)>,
    pub events: Vec<(i64, String, String)>,
}

pub fn brainstem_query(first: usize, fragments: bool) -> String {
    if fragments {
        return format!(
            "query Page {{ tasks(first: {first}) {{ edges {{ node {{ ...TaskRow }} }} }} }} \
             fragment TaskRow on Task {{ id status plan {{ key version }} \
             steps {{ ...StepRow }} events(last: 5) {{ ...EventRow }} }} \
             fragment StepRow on TaskStep {{ stepId status attempt durationMs }} \
             fragment EventRow on TaskEvent {{ seq kind summary }}"
        );
    }
    format!(
        "{{ tasks(first: {first}) {{ edges {{ node {{ \
         id status plan {{ key version }} \
         steps {{ stepId status attempt durationMs }} \
         events(last: 5) {{ seq kind summary }} }} }} }} }}"
    )
}

pub fn postgraphile_query(first: usize, tenant: &str, fragments: bool) -> String {
    let page = format!(
        "allTasks(condition: {{tenantId: \"{tenant}\"}}, orderBy: PRIMARY_KEY_ASC, first: {first})"
    );
    if fragments {
        return format!(
            "query Page {{ {page} {{ edges {{ node {{ ...TaskRow }} }} }} }} \
             fragment TaskRow on Task {{ rowId status planKey planVersion \
             taskStepsByTenantIdAndTaskId(orderBy: PRIMARY_KEY_ASC) {{ nodes {{ ...StepRow }} }} \
             taskEventsByTenantIdAndTaskId(orderBy: SEQ_DESC, first: 5) {{ nodes {{ ...EventRow }} }} }} \
             fragment StepRow on TaskStep {{ stepId status attempt durationMs }} \
             fragment EventRow on TaskEvent {{ seq kind summary }}"
        );
    }
    format!(
        "{{ {page} \
         {{ edges {{ node {{ rowId status planKey planVersion \
         taskStepsByTenantIdAndTaskId(orderBy: PRIMARY_KEY_ASC) {{ nodes {{ stepId status attempt durationMs }} }} \
         taskEventsByTenantIdAndTaskId(orderBy: SEQ_DESC, first: 5) {{ nodes {{ seq kind summary }} }} }} }} }} }}"
    )
}

/// The task rows of an answer, events oldest first (PostGraphile's are
/// read newest first).
pub fn rows(peer: Peer, body: &Value) -> anyhow::Result<Vec<TaskRow>> {
    let edges = match peer {
        Peer::Brainstem => &body["data"]["tasks"]["edges"],
        Peer::PostGraphile => &body["data"]["allTasks"]["edges"],
    };
    let edges = edges.as_array().context("no edges in the answer")?;
    let mut out = Vec::with_capacity(edges.len());
    for edge in edges {
        let node = &edge["node"];
        let id = peer.task_id(node)?;
        let (steps, mut events) = match peer {
            Peer::Brainstem => (&node["steps"], events_of(&node["events"])?),
            Peer::PostGraphile => (
                &node["taskStepsByTenantIdAndTaskId"]["nodes"],
                events_of(&node["taskEventsByTenantIdAndTaskId"]["nodes"])?,
            ),
        };
        if peer == Peer::PostGraphile {
            events.reverse();
        }
        let steps = step_rows(steps)?;
        if steps.len() != STEPS || events.len() > 5 {
            bail!(
                "task {id}: {} steps and {} events (expected {STEPS} and at most 5)",
                steps.len(),
                events.len()
            );
        }
        out.push(TaskRow {
            status: enum_value(&node["status"])?,
            plan: peer.plan(node)?,
            id,
            steps,
            events,
        });
    }
    Ok(out)
}

fn events_of(events: &Value) -> anyhow::Result<Vec<(i64, String, String)>> {
    each(events, "events", |e| {
        Ok((
            number(&e["seq"])?,
            enum_value(&e["kind"])?,
            text(&e["summary"])?,
        ))
    })
}
