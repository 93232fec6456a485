//! Stopping a task: a plain cancel before its next step, or a turn of a
//! conversation that a newer turn interrupted or rolled back
//! ([`crate::runtime::tasks::Interruption`]).
//!
//! A turn's step listens for an interrupt while its tool runs (in this
//! process: `Tasks::listen_for_interrupt`); a model call stops at once and
//! the step's attempt keeps the text so far, marked interrupted. A turn
//! driven by another process, or a tool that does not stream, stops at the
//! next step boundary through the cancel flag. Either way the turn ends
//! `CANCELLED` with its `TurnInterrupted` event, and its result holds the
//! text it had (empty at a step boundary), which the next turn's history
//! shows unless the turn was rolled back.

use super::*;
use crate::runtime::tasks::{Interruption, Listening};

impl Executor {
    /// Listen for an interrupt while `task`'s step runs: only a turn of a
    /// conversation is interrupted mid-step.
    pub(super) fn listen(&self, task: &Task) -> Option<Listening> {
        task.conversation
            .map(|_| self.domain.tasks.listen_for_interrupt(task.id))
    }

    /// Why a cancelled turn stopped, if a newer turn stopped it.
    async fn interruption(&self, task: &Task) -> Result<Option<Interruption>> {
        match task.conversation {
            Some(_) => self.domain.tasks.interruption(task.scope(), task.id).await,
            None => Ok(None),
        }
    }

    /// Honour the cancel flag before the next step.
    pub(super) async fn cancel(&self, task: &Task) -> Result<Option<Task>> {
        let Some(interruption) = self.interruption(task).await? else {
            return self
                .commit(
                    task,
                    TaskChanges {
                        status: Some(TaskStatus::Cancelled),
                        lease: Some(None),
                        completed_at: Some(Utc::now()),
                        current_step_id: Some(None),
                        error: Some(Some("cancelled".into())),
                        ..TaskChanges::default()
                    },
                    vec![NewEvent::status(
                        TaskStatus::Cancelled,
                        "cancelled before the next step",
                    )],
                    Extra::default(),
                )
                .await;
        };
        self.commit(
            task,
            stopped(&interruption, "", None),
            vec![
                interruption.event(0),
                NewEvent::status(TaskStatus::Cancelled, interruption.error()),
            ],
            Extra::default(),
        )
        .await
    }

    /// A turn's step stopped mid-answer by an interrupt: its attempt is
    /// recorded with the text so far (`record`), and the turn stops.
    pub(super) async fn interrupted(
        &self,
        task: Task,
        step: &StepDef,
        attempt: u32,
        error: &ToolError,
        record: task_step::ActiveModel,
    ) -> Result<Next> {
        let Some(interruption) = self.interruption(&task).await? else {
            // Signalled, but nothing says by whom (not expected): a plain
            // failure of the step.
            return self
                .step_failed_with_row(task, step, attempt, error.clone(), record)
                .await;
        };
        let text = error
            .output
            .as_ref()
            .and_then(|o| o.get("text"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mut failed = NewEvent::new(
            EventKind::StepFailed,
            format!("`{}` interrupted", step.tool),
        )
        .step(&step.id, &step.tool)
        .error(error.message.clone())
        .data(json!({"attempt": attempt, "will_retry": false, "interrupted": true}));
        failed.status = Some("FAILED".into());
        let mut attempts = task.attempts.clone();
        attempts.insert(step.id.clone(), json!(attempt));
        let mut changes = stopped(&interruption, text, Some(&step.id));
        changes.attempts = Some(attempts);
        self.commit(
            &task,
            changes,
            vec![
                failed,
                interruption.event(text.chars().count()),
                NewEvent::status(TaskStatus::Cancelled, interruption.error()),
            ],
            Extra {
                step: Some(record),
                ..Extra::default()
            },
        )
        .await?;
        Ok(Next::Stop)
    }
}

/// The change that ends a turn stopped by a newer one, keeping `text`.
fn stopped(interruption: &Interruption, text: &str, step: Option<&str>) -> TaskChanges {
    TaskChanges {
        status: Some(TaskStatus::Cancelled),
        lease: Some(None),
        completed_at: Some(Utc::now()),
        current_step_id: Some(step.map(str::to_owned)),
        error: Some(Some(interruption.error())),
        result: Some(interruption.result(text)),
        ..TaskChanges::default()
    }
}
