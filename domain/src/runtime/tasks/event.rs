//! What the event log holds and hands out: a stored [`TaskEvent`], the
//! window of a read ([`EventWindow`]), an event about to be written
//! ([`NewEvent`]), and the [`EventSink`] committed events are published to.
//!
//! Every event has a per-task sequence number without gaps, so a window is
//! a range of sequence numbers. Events are published only after the
//! transaction that stored them has committed.

use brainstem_entity::{TaskId, TenantId, task_event};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{EventKind, Task, TaskStatus, record::strings};
use crate::{Error, Result};

/// A stored task event.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskEvent {
    pub id: Uuid,
    pub tenant: TenantId,
    pub task_id: TaskId,
    pub seq: i64,
    pub kind: EventKind,
    pub step_id: Option<String>,
    pub tool: Option<String>,
    pub status: Option<String>,
    pub summary: String,
    pub error: Option<String>,
    pub data_keys: Vec<String>,
    pub data: Value,
    pub created_at: DateTime<Utc>,
}

impl TryFrom<task_event::Model> for TaskEvent {
    type Error = Error;

    fn try_from(m: task_event::Model) -> Result<Self> {
        Ok(Self {
            id: m.id,
            tenant: m.tenant_id.into(),
            task_id: m.task_id.into(),
            seq: m.seq,
            kind: m.kind.parse()?,
            step_id: m.step_id,
            tool: m.tool,
            status: m.status,
            summary: m.summary,
            error: m.error,
            data_keys: strings(&m.data_keys),
            data: m.data,
            created_at: m.created_at,
        })
    }
}

/// Which events of a task to read: sequence numbers in `(after, until]`.
/// Sequence numbers have no gaps, so "the first N after X" is
/// `(X, X + N]` and "the last N" of a task whose latest is L is
/// `(L - N, L]`; windows of many tasks are read in one statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EventWindow {
    pub after: i64,
    pub until: i64,
}

impl EventWindow {
    /// Up to `n` events after `after`.
    pub fn first(after: i64, n: u64) -> Self {
        Self {
            after,
            until: after.saturating_add(i64::try_from(n).unwrap_or(i64::MAX)),
        }
    }

    /// The last `n` events of `task` (as of its snapshot) after `after`.
    pub fn last(task: &Task, after: i64, n: u64) -> Self {
        let from = task
            .last_seq
            .saturating_sub(i64::try_from(n).unwrap_or(i64::MAX));
        Self {
            after: after.max(from),
            until: task.last_seq,
        }
    }
}

/// Which events of each task of a page to read, named before the page is
/// read: the first or the last `n` with `seq > after`. For one task it is
/// the [`EventWindow`] [`EventSpan::window`] gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventSpan {
    First { after: i64, n: u64 },
    Last { after: i64, n: u64 },
}

impl EventSpan {
    pub fn window(self, task: &Task) -> EventWindow {
        match self {
            Self::First { after, n } => EventWindow::first(after, n),
            Self::Last { after, n } => EventWindow::last(task, after, n),
        }
    }
}

/// An event about to be written.
#[derive(Clone, Debug, Default)]
pub struct NewEvent {
    pub kind: Option<EventKind>,
    pub step_id: Option<String>,
    pub tool: Option<String>,
    pub status: Option<String>,
    pub summary: String,
    pub error: Option<String>,
    pub data_keys: Vec<String>,
    pub data: Value,
}

impl NewEvent {
    pub fn new(kind: EventKind, summary: impl Into<String>) -> Self {
        Self {
            kind: Some(kind),
            summary: summary.into(),
            data: json!({}),
            ..Self::default()
        }
    }

    pub fn status(to: TaskStatus, summary: impl Into<String>) -> Self {
        let mut e = Self::new(EventKind::StatusChanged, summary);
        e.status = Some(to.as_str().to_owned());
        e
    }

    pub fn step(mut self, step_id: &str, tool: &str) -> Self {
        self.step_id = Some(step_id.to_owned());
        self.tool = Some(tool.to_owned());
        self
    }

    pub fn data(mut self, data: Value) -> Self {
        self.data = data;
        self
    }

    pub fn error(mut self, error: impl Into<String>) -> Self {
        self.error = Some(error.into());
        self
    }
}

/// Publishes committed events to whoever listens (live subscriptions).
pub trait EventSink: Send + Sync + 'static {
    fn publish(&self, events: &[TaskEvent]);

    /// Resolves once the live-only events published so far are on their
    /// way to every listener. The executor awaits it before committing a
    /// step, so the step's token deltas arrive before its completion.
    fn flush(&self) -> futures_util::future::BoxFuture<'static, ()> {
        Box::pin(async {})
    }
}

/// Drops events; the default until a bus is attached.
pub struct NoSink;

impl EventSink for NoSink {
    fn publish(&self, _events: &[TaskEvent]) {}
}
