//! Task events on the wire: one GraphQL type per kind of event, all behind
//! the `TaskEvent` interface, which carries `seq`.

use std::sync::Arc;

use async_graphql::{
    ID, Interface, Json, Object, ScalarType, Value as AnyValue, resolver_utils::enum_value,
};
use brainstem_domain::tasks;
use chrono::{DateTime, Utc};
use serde_json::Value;

use super::TaskEventKind;
use crate::schema::ids::{self, NodeType};
use crate::schema::plain_list::Plain;

macro_rules! event_types {
    ($($(#[$doc:meta])* $name:ident { $($extra:tt)* })*) => {
        $(
            $(#[$doc])*
            #[derive(Clone)]
            pub struct $name(pub Arc<tasks::TaskEvent>);

            #[Object]
            impl $name {
                /// Position in the task's log: 1, 2, 3, … with no gaps. A
                /// `TokenDelta` carries the seq of the last stored event.
                pub async fn seq(&self) -> i64 {
                    self.0.seq
                }
                pub async fn kind(&self) -> TaskEventKind {
                    self.0.kind.into()
                }
                pub async fn task_id(&self) -> ID {
                    ids::encode(NodeType::Task, self.0.task_id.uuid())
                }
                pub async fn step_id(&self) -> Option<String> {
                    self.0.step_id.clone()
                }
                pub async fn tool(&self) -> Option<String> {
                    self.0.tool.clone()
                }
                /// The new task status (`StatusChanged`) or the step outcome.
                pub async fn status(&self) -> Option<String> {
                    self.0.status.clone()
                }
                pub async fn summary(&self) -> &str {
                    &self.0.summary
                }
                pub async fn error(&self) -> Option<String> {
                    self.0.error.clone()
                }
                /// Keys of the data the step produced (values are not logged).
                pub async fn data_keys(&self) -> &[String] {
                    &self.0.data_keys
                }
                /// Details, PII redacted.
                pub async fn data(&self) -> Json<Value> {
                    Json(self.0.data.clone())
                }
                pub async fn created_at(&self) -> DateTime<Utc> {
                    self.0.created_at
                }
                $($extra)*
            }
        )*

        /// An entry of a task's event log (or a live token delta).
        #[derive(Interface, Clone)]
        #[graphql(
            field(name = "seq", ty = "i64"),
            field(name = "kind", ty = "TaskEventKind"),
            field(name = "task_id", ty = "ID"),
            field(name = "step_id", ty = "Option<String>"),
            field(name = "tool", ty = "Option<String>"),
            field(name = "status", ty = "Option<String>"),
            field(name = "summary", ty = "String"),
            field(name = "error", ty = "Option<String>"),
            field(name = "data_keys", ty = "Vec<String>"),
            field(name = "data", ty = "Json<Value>"),
            field(name = "created_at", ty = "DateTime<Utc>"),
        )]
        pub enum TaskEvent {
            $($name($name)),*
        }

        impl TaskEvent {
            fn record(&self) -> &tasks::TaskEvent {
                match self {
                    $(TaskEvent::$name(e) => &e.0),*
                }
            }
        }

        impl From<Arc<tasks::TaskEvent>> for TaskEvent {
            fn from(e: Arc<tasks::TaskEvent>) -> Self {
                match e.kind {
                    $(tasks::EventKind::$name => TaskEvent::$name($name(e))),*
                }
            }
        }

        impl From<tasks::TaskEvent> for TaskEvent {
            fn from(e: tasks::TaskEvent) -> Self {
                Arc::new(e).into()
            }
        }
    };
}

event_types! {
    /// The task's status changed (`status` is the new one).
    StatusChanged {}
    /// A step's tool started (an attempt).
    StepStarted {}
    /// A step finished; `dataKeys` names what it produced.
    StepCompleted {}
    /// A step failed; `data.will_retry` says whether it runs again.
    StepFailed {}
    /// A step's condition was false.
    StepSkipped {}
    /// A tool added steps to the task's plan (`data.injected_steps`).
    StepsInjected {}
    /// The task waits for a human (`data.review_id`).
    ReviewRequested {}
    /// The step was handed to an external system.
    Delegated {}
    /// Generated text, live (not stored): `text` continues the step's text
    /// at character `offset`.
    TokenDelta {
        pub async fn offset(&self) -> i64 {
            self.0.data["offset"].as_i64().unwrap_or(0)
        }
        pub async fn text(&self) -> String {
            self.0.data["text"].as_str().unwrap_or_default().to_owned()
        }
    }
    /// A step used memories (`data.memory_ids`).
    MemoryRecalled {
        /// The memories the step used, as global ids.
        pub async fn memory_ids(&self) -> Vec<ID> {
            self.0.data["memory_ids"]
                .as_array()
                .map(|ids| {
                    ids.iter()
                        .filter_map(|v| v.as_str().and_then(|s| s.parse().ok()))
                        .map(|u| ids::encode(NodeType::Memory, u))
                        .collect()
                })
                .unwrap_or_default()
        }
    }
    /// A turn of a conversation waits for earlier unfinished turns
    /// (`data.strategy`, `data.after`: their ids, `data.stops`: those it
    /// interrupts or rolls back).
    TurnQueued {}
    /// A newer turn stopped this one (`data.strategy`, `data.by`,
    /// `data.kept_chars`: the text kept, in characters).
    TurnInterrupted {}
    /// A fork (or rerun) of this task was started (`data.fork`,
    /// `data.from_step`, `data.rerun`).
    TaskForked {}
    /// This task was started as a fork (or rerun) of another (`data.task`,
    /// `data.from_step`, `data.copied_steps`; `dataKeys`: the state keys
    /// edited).
    ForkedFrom {}
    /// A `WARN` guardrail matched the step, which ran all the same
    /// (`data.guardrail`, `data.severity`).
    GuardrailMatched {
        /// The guardrail's name.
        pub async fn guardrail(&self) -> String {
            self.0.data["guardrail"].as_str().unwrap_or_default().to_owned()
        }
    }
}

impl Plain for TaskEvent {
    const PLAIN: &'static [&'static str] = &[
        "seq",
        "kind",
        "taskId",
        "stepId",
        "tool",
        "status",
        "summary",
        "error",
        "createdAt",
    ];

    fn plain(&self, name: &str) -> AnyValue {
        event_value(self.record(), name)
    }
}

/// Field `name` of `event`, one of [`TaskEvent::PLAIN`] (what its
/// resolver answers).
pub(super) fn event_value(event: &tasks::TaskEvent, name: &str) -> AnyValue {
    let text = |s: &Option<String>| s.clone().map_or(AnyValue::Null, AnyValue::String);
    match name {
        "seq" => AnyValue::from(event.seq),
        "kind" => enum_value(TaskEventKind::from(event.kind)),
        "taskId" => AnyValue::String(ids::encode(NodeType::Task, event.task_id.uuid()).0),
        "stepId" => text(&event.step_id),
        "tool" => text(&event.tool),
        "status" => text(&event.status),
        "summary" => AnyValue::String(event.summary.clone()),
        "error" => text(&event.error),
        "createdAt" => event.created_at.to_value(),
        _ => AnyValue::Null,
    }
}
