//! The answers of both servers, reduced to what they must agree on: ids
//! as UUIDs (Brainstem's global ids decoded), enum values in one
//! spelling, numbers as numbers, instants as instants, lists in one
//! order. Each shape's own reading is in its file; the helpers here are
//! what they share.

use anyhow::{Context, bail};
use base64::Engine;
use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{
    Shape, conversations::ConversationRow, detail::TaskDetail, filtered::TaskCard, node::NodeTask,
    page::TaskRow,
};

/// What a server answered for the shape measured.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    /// `page` and `fragments`.
    Page(Vec<TaskRow>),
    Detail(Box<TaskDetail>),
    Node(Box<NodeTask>),
    Conversations(Vec<ConversationRow>),
    Filtered(Vec<TaskCard>),
}

impl Answer {
    pub fn parse(shape: Shape, peer: Peer, body: &Value) -> anyhow::Result<Self> {
        Ok(match shape {
            Shape::Page | Shape::Fragments => Self::Page(super::page::rows(peer, body)?),
            Shape::Detail => Self::Detail(Box::new(TaskDetail::from_answer(peer, body)?)),
            Shape::Node => Self::Node(Box::new(NodeTask::from_answer(peer, body)?)),
            Shape::Conversations => Self::Conversations(ConversationRow::page(peer, body)?),
            Shape::Filtered => Self::Filtered(TaskCard::page(peer, body)?),
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
            Self::Node(task) => format!("one task through node(id:): {} steps", task.steps.len()),
            Self::Conversations(rows) => format!(
                "{} conversations, {} turns",
                rows.len(),
                rows.iter().map(|c| c.turns.len()).sum::<usize>()
            ),
            Self::Filtered(cards) => format!("{} tasks, newest first", cards.len()),
        }
    }

    /// Where `other` first differs from this answer, for the error that
    /// says so (`None` when they agree).
    pub fn first_difference(&self, other: &Self) -> Option<String> {
        match (self, other) {
            _ if self == other => None,
            (Self::Page(a), Self::Page(b)) => first_item_difference("task", a, b),
            (Self::Detail(a), Self::Detail(b)) => a.first_difference(b),
            (Self::Node(a), Self::Node(b)) => Some(format!("{a:?} vs {b:?}")),
            (Self::Conversations(a), Self::Conversations(b)) => {
                first_item_difference("conversation", a, b)
            }
            (Self::Filtered(a), Self::Filtered(b)) => first_item_difference("task", a, b),
            _ => Some("answers of different shapes".to_owned()),
        }
    }
}

/// The first position at which two lists differ, or their lengths.
pub fn first_item_difference<T: PartialEq + std::fmt::Debug>(
    what: &str,
    a: &[T],
    b: &[T],
) -> Option<String> {
    match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(at) => Some(format!("{what} {at}: {:?} vs {:?}", a[at], b[at])),
        None if a.len() != b.len() => Some(format!("{} vs {} {what}s", a.len(), b.len())),
        None => None,
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

    /// A task's id as a UUID: Brainstem's global `id`, PostGraphile's `rowId`.
    pub fn task_id(self, node: &Value) -> anyhow::Result<String> {
        match self {
            Peer::Brainstem => global_uuid("Task", &text(&node["id"])?),
            Peer::PostGraphile => text(&node["rowId"]),
        }
    }

    /// A task's plan as (key, version): Brainstem's `plan { key version }`,
    /// PostGraphile's `planKey` and `planVersion`.
    pub fn plan(self, node: &Value) -> anyhow::Result<Option<(String, i64)>> {
        let (key, version) = match self {
            Peer::Brainstem => (&node["plan"]["key"], &node["plan"]["version"]),
            Peer::PostGraphile => (&node["planKey"], &node["planVersion"]),
        };
        match key {
            Value::Null => Ok(None),
            key => Ok(Some((text(key)?, number(version)?))),
        }
    }

    /// A task's input text: Brainstem's `input`, PostGraphile's `inputText`.
    pub fn input(self, node: &Value) -> anyhow::Result<String> {
        text(match self {
            Peer::Brainstem => &node["input"],
            Peer::PostGraphile => &node["inputText"],
        })
    }
}

/// A task's steps as (step id, status, attempt, duration in ms).
pub fn step_rows(list: &Value) -> anyhow::Result<Vec<(String, String, i64, i64)>> {
    each(list, "steps", |s| {
        Ok((
            text(&s["stepId"])?,
            enum_value(&s["status"])?,
            number(&s["attempt"])?,
            number(&s["durationMs"])?,
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

/// An instant, whatever offset and precision the server wrote it with.
pub fn instant(value: &Value) -> anyhow::Result<DateTime<Utc>> {
    let raw = text(value)?;
    Ok(DateTime::parse_from_rfc3339(&raw)
        .with_context(|| format!("not an RFC 3339 instant: {raw}"))?
        .with_timezone(&Utc))
}

/// An enum value upper case without separators (`STEP_STARTED` and the
/// stored `StepStarted` agree).
pub fn enum_value(value: &Value) -> anyhow::Result<String> {
    Ok(text(value)?
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_uppercase())
        .collect())
}

/// The UUID inside a Brainstem global id of type `kind`.
pub fn global_uuid(kind: &str, id: &str) -> anyhow::Result<String> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(id.trim_end_matches('='))
        .with_context(|| format!("not a global id: {id}"))?;
    let decoded = String::from_utf8(bytes)?;
    let (found, uuid) = decoded
        .split_once(':')
        .with_context(|| format!("not a global id: {decoded}"))?;
    if found != kind {
        bail!("not a {kind} id: {decoded}");
    }
    Ok(uuid.to_owned())
}
