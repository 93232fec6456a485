//! What `startTask` answers, by mode: the task, whether it finished
//! (`ok`), and the decision (the mode used, why, and how sure the intent
//! detection was). `ENQUEUE_AND_WAIT` and `ANSWER` wait for the task to
//! settle (`Domain::wait_until_settled`): finished, or waiting for a person
//! (a review, an approval) or an external system. The wait ends at
//! `waitTimeoutMs`, capped just below the request timeout, and the task goes
//! on regardless.

use std::time::Duration;

use async_graphql::{Enum, SimpleObject};
use brainstem_domain::{
    intent,
    tasks::{self, TaskMode as DomainMode, TaskStatus as DomainStatus},
};

use super::{Task, TaskMode};

/// The longest a request may wait, before the request timeout cuts it off.
const MARGIN: Duration = Duration::from_millis(500);

/// How sure the intent detection was (B.7): `HIGH` an exact match (or an
/// intent or plan the client named), `MEDIUM` a match among others, `LOW`
/// no rule matched (the fallback), `NONE` nothing to go on (an answer with
/// help text).
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanConfidence {
    High,
    Medium,
    Low,
    None,
}

impl PlanConfidence {
    fn of(confidence: f64) -> Self {
        if confidence >= intent::HIGH {
            Self::High
        } else if confidence >= intent::MEDIUM {
            Self::Medium
        } else if confidence > intent::NONE {
            Self::Low
        } else {
            Self::None
        }
    }
}

/// What was decided for a task.
#[derive(SimpleObject)]
pub struct TaskDecision {
    /// The mode applied: the one asked for, or `ANSWER` when there was
    /// nothing to go on (confidence `NONE`).
    pub mode_used: TaskMode,
    pub reason: String,
    /// Unknown (`null`) while the intent is still to be detected.
    pub confidence: Option<PlanConfidence>,
}

#[derive(SimpleObject)]
pub struct StartTaskPayload {
    /// True when the task completed before the response (in the waiting
    /// modes); false when it failed, waits for someone, or is still running.
    pub ok: bool,
    pub task: Task,
    pub decision: TaskDecision,
}

/// The longest a request may wait for `requested`, under `request_timeout`.
pub fn wait_limit(requested_ms: u32, request_timeout: Duration) -> Duration {
    Duration::from_millis(requested_ms.into()).min(request_timeout.saturating_sub(MARGIN))
}

/// The payload for `task`, started in `asked` mode.
pub fn payload(task: tasks::Task, asked: DomainMode) -> StartTaskPayload {
    let detected = task.intent.is_some() && task.status != DomainStatus::Pending;
    let answered_for_none = detected && task.confidence <= intent::NONE;
    let mode_used = if answered_for_none {
        DomainMode::Answer
    } else {
        asked
    };
    let reason = match (&task.intent, task.plan_key.as_deref()) {
        _ if answered_for_none => "nothing to detect an intent from: answered with help".into(),
        (Some(intent), Some(plan)) => format!("intent `{intent}`, plan `{plan}`"),
        (Some(intent), None) if task.status == DomainStatus::Pending => {
            format!("intent `{intent}` given; the plan is chosen when a worker takes the task")
        }
        (Some(intent), None) => format!("intent `{intent}`"),
        (None, _) => "queued; the intent is detected when a worker takes the task".into(),
    };
    let confidence = detected.then(|| PlanConfidence::of(task.confidence));
    StartTaskPayload {
        ok: task.status == DomainStatus::Completed,
        decision: TaskDecision {
            mode_used: mode_used.into(),
            reason,
            confidence,
        },
        task: Task(task),
    }
}
