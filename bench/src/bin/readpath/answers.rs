//! The answers of both servers, reduced to what they must agree on: task
//! ids as UUIDs, enum values in one spelling, numbers as numbers, events
//! oldest first (a task's detail: `detail.rs`).

use anyhow::{Context, bail};
use base64::Engine;
use serde_json::Value;

use super::{Shape, detail::TaskDetail};

/// What a server answered, reduced to the data both must agree on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskRow {
    pub id: String,
    pub status: String,
    pub plan: Option<(String, i64)>,
    pub steps: Vec<(String, String, i64, i64)>,
    pub events: Vec<(i64, String, String)>,
}

/// What a server answered for the shape measured.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    Page(Vec<TaskRow>),
    Detail(Box<TaskDetail>),
}

impl Answer {
    pub fn parse(shape: Shape, peer: Peer, body: &Value) -> anyhow::Result<Self> {
        Ok(match shape {
            Shape::Page => Self::Page(rows(peer, body)?),
            Shape::Detail => Self::Detail(Box::new(TaskDetail::from_answer(peer, body)?)),
        })
    }

    /// What the two servers agreed on, for the run's first lines.
    pub fn describe(&self) -> String {
        match self {
            Self::Page(rows) => format!(
                "{} tasks, {} steps, {} events",
                rows.len(),
                rows.iter().map(|t| t.steps.len()).sum::<usize>(),
                rows.iter().map(|t| t.events.len()).sum::<usize>()
            ),
            Self::Detail(task) => format!(
                "one task's detail: {} steps with args and output, {} events with data",
                task.steps.len(),
                task.events.len()
            ),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    Brainstem,
    PostGraphile,
}

impl Peer {
    pub fn name(self) -> &'static str {
        match self {
            Peer::Brainstem => "brainstem",
            Peer::PostGraphile => "postgraphile",
        }
    }
}

/// The task rows of an answer, in a form both servers share: ids as UUIDs
/// (Brainstem's global id decoded), enum values upper case without
/// separators (`STEP_STARTED` and the stored `StepStarted` agree),
/// numbers as numbers (PostGraphile sends `bigint` as a string), events
/// oldest first.
pub fn rows(peer: Peer, body: &Value) -> anyhow::Result<Vec<TaskRow>> {
    let (edges, id_key) = match peer {
        Peer::Brainstem => (&body["data"]["tasks"]["edges"], "id"),
        Peer::PostGraphile => (&body["data"]["allTasks"]["edges"], "rowId"),
    };
    let edges = edges.as_array().context("no edges in the answer")?;
    let mut out = Vec::with_capacity(edges.len());
    for edge in edges {
        let node = &edge["node"];
        let raw_id = text(&node[id_key])?;
        let (plan, steps, mut events, id) = match peer {
            Peer::Brainstem => (
                match &node["plan"] {
                    Value::Null => None,
                    plan => Some((text(&plan["key"])?, number(&plan["version"])?)),
                },
                &node["steps"],
                events_of(&node["events"])?,
                global_uuid(&raw_id)?,
            ),
            Peer::PostGraphile => (
                match &node["planKey"] {
                    Value::Null => None,
                    key => Some((text(key)?, number(&node["planVersion"])?)),
                },
                &node["taskStepsByTenantIdAndTaskId"]["nodes"],
                events_of(&node["taskEventsByTenantIdAndTaskId"]["nodes"])?,
                raw_id,
            ),
        };
        if peer == Peer::PostGraphile {
            events.reverse();
        }
        let steps = each(steps, "steps", |s| {
            Ok((
                text(&s["stepId"])?,
                enum_value(&s["status"])?,
                number(&s["attempt"])?,
                number(&s["durationMs"])?,
            ))
        })?;
        if steps.len() != 4 || events.len() > 5 {
            bail!(
                "task {id}: {} steps and {} events (expected 4 and at most 5)",
                steps.len(),
                events.len()
            );
        }
        out.push(TaskRow {
            id,
            status: enum_value(&node["status"])?,
            plan,
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

/// Each item of the list `what` of an answer, read by `item`.
pub fn each<T>(
    list: &Value,
    what: &str,
    item: impl Fn(&Value) -> anyhow::Result<T>,
) -> anyhow::Result<Vec<T>> {
    list.as_array()
        .with_context(|| format!("no {what} in the answer"))?
        .iter()
        .map(item)
        .collect()
}

pub fn text(value: &Value) -> anyhow::Result<String> {
    value
        .as_str()
        .map(str::to_owned)
        .with_context(|| format!("expected a string, got {value}"))
}

pub fn number(value: &Value) -> anyhow::Result<i64> {
    match value {
        Value::Number(n) => n.as_i64().with_context(|| format!("not an integer: {n}")),
        Value::String(s) => s.parse().with_context(|| format!("not an integer: {s}")),
        other => bail!("expected a number, got {other}"),
    }
}

pub fn enum_value(value: &Value) -> anyhow::Result<String> {
    Ok(text(value)?
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_uppercase())
        .collect())
}

pub fn global_uuid(id: &str) -> anyhow::Result<String> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(id.trim_end_matches('='))
        .with_context(|| format!("not a global id: {id}"))?;
    let decoded = String::from_utf8(bytes)?;
    let (kind, uuid) = decoded
        .split_once(':')
        .with_context(|| format!("not a global id: {decoded}"))?;
    if kind != "Task" {
        bail!("not a task id: {decoded}");
    }
    Ok(uuid.to_owned())
}
