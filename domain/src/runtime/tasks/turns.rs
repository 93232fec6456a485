//! Double texting: what a turn of a conversation does when it is sent
//! while earlier turns are unfinished ([`Multitask`]; the request's, or
//! the conversation's setting).
//!
//! - `REJECT`: the new turn is refused with `CONFLICT`.
//! - `ENQUEUE`: it waits; turns run one at a time, in order.
//! - `INTERRUPT`: the unfinished turns are stopped (a waiting one at once,
//!   a running one mid-answer or at its next step boundary) and stay in the
//!   history the next turn sees, marked interrupted, with their text so
//!   far.
//! - `ROLLBACK`: the same, but the stopped turns are left out of the
//!   history, as if they had not been sent; their records stay for audit.
//!
//! Invariants:
//! - Every turn of a conversation runs under the conversation's
//!   concurrency key with a limit of one (the executor's claim), so a turn
//!   never starts before the turns it follows or interrupts have stopped
//!   running, and then reads their final text.
//! - Starts of turns of one conversation are serialised: the start moves
//!   the conversation's `updated_at` first, in its transaction, which
//!   holds the conversation's row until it commits (SQLite has one writer).
//! - A running turn's events are written only by its worker (see "Who may
//!   write" in [`super`]): an interruption is a `turn_interruptions` row
//!   and the task's cancel flag, and the worker writes the interrupted
//!   turn's `TurnInterrupted` event when it stops. A waiting turn is
//!   stopped, with its event, in the new turn's transaction.
//! - Each outcome is an event of a turn, so the conversation's stream
//!   carries it: the new turn's `TurnQueued` (strategy, the turns it
//!   follows, the turns it stops) and a stopped turn's `TurnInterrupted`.
//!   A rejected turn is never stored: its outcome is the `CONFLICT`.

use std::sync::Mutex;

use brainstem_entity::turn_interruption;
use tokio::sync::watch;

use super::*;

/// The concurrency key every turn of `conversation` runs under.
pub fn turn_key(conversation: ConversationId) -> String {
    format!("conversation:{conversation}")
}

/// Running tasks of this process that may be interrupted mid-step, and
/// the signal that stops their step. A turn stopped from another process
/// is signalled here when its `TurnQueued` event arrives
/// ([`Tasks::interrupt_on_events`]); if that event is missed, it stops
/// at its next step boundary (the cancel flag).
#[derive(Default)]
pub struct Interrupts(Mutex<HashMap<TaskId, watch::Sender<bool>>>);

/// A step listening for an interrupt of its task, until dropped.
pub struct Listening {
    interrupts: Arc<Interrupts>,
    task: TaskId,
    pub requested: watch::Receiver<bool>,
}

impl Drop for Listening {
    fn drop(&mut self) {
        if let Ok(mut map) = self.interrupts.0.lock() {
            map.remove(&self.task);
        }
    }
}

impl Interrupts {
    /// Listen for an interrupt of `task` while its step runs.
    pub fn listen(self: &Arc<Self>, task: TaskId) -> Listening {
        let (tx, rx) = watch::channel(false);
        if let Ok(mut map) = self.0.lock() {
            map.insert(task, tx);
        }
        Listening {
            interrupts: self.clone(),
            task,
            requested: rx,
        }
    }

    /// Stop `task`'s running step, if this process runs it.
    pub fn signal(&self, task: TaskId) {
        if let Ok(map) = self.0.lock()
            && let Some(tx) = map.get(&task)
        {
            tx.send_replace(true);
        }
    }
}

/// Why a turn was stopped: the turn that stopped it and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interruption {
    pub by: TaskId,
    pub strategy: Multitask,
}

impl Interruption {
    /// The stopped turn's result: its text so far, marked interrupted (and
    /// rolled back, which leaves it out of the history).
    pub fn result(&self, text: &str) -> Value {
        json!({
            "content": text,
            "interrupted": true,
            "rolled_back": self.strategy == Multitask::Rollback,
        })
    }

    /// The stopped turn's `TurnInterrupted` event.
    pub fn event(&self, kept_chars: usize) -> NewEvent {
        let how = match self.strategy {
            Multitask::Rollback => "rolled back",
            _ => "interrupted",
        };
        NewEvent::new(
            EventKind::TurnInterrupted,
            format!("{how} by a newer turn of the conversation"),
        )
        .data(json!({
            "strategy": self.strategy.as_str(),
            "by": self.by.to_string(),
            "kept_chars": kept_chars,
        }))
    }

    /// The stopped turn's error.
    pub fn error(&self) -> String {
        format!("{}: stopped by turn {}", self.strategy, self.by)
    }
}

/// What admitting a new turn did to the turns before it.
pub(super) struct Admitted {
    /// The new turn's events besides "task created".
    pub(super) events: Vec<NewEvent>,
    /// Events of waiting turns stopped in the transaction, to publish
    /// once it commits.
    pub(super) stopped: Vec<TaskEvent>,
    /// Running turns asked to stop, to signal once it commits.
    pub(super) running: Vec<TaskId>,
}

/// Admit turn `id` to `conversation` in `txn` by `asked` (or the
/// conversation's setting): refuse it, or note what it follows and stop
/// what it interrupts (its events announced as `announce` says).
pub(super) async fn admit(
    txn: &DatabaseTransaction,
    announce: Announce,
    scope: TenantScope,
    conversation: ConversationId,
    id: TaskId,
    asked: Option<Multitask>,
    now: DateTime<Utc>,
) -> Result<Admitted> {
    // First write of the transaction: holds the conversation's row, so
    // the turns read below cannot change under another start.
    conversation::Entity::update_many_in(scope)
        .col_expr(conversation::Column::UpdatedAt, Expr::value(now))
        .filter(conversation::Column::Id.eq(conversation.uuid()))
        .exec(txn)
        .await?;
    let strategy = match asked {
        Some(s) => s,
        None => conversation::Entity::find_by_id_in(scope, conversation.uuid())
            .one(txn)
            .await?
            .ok_or_else(|| Error::not_found(format!("conversation {conversation}")))?
            .multitask
            .parse()?,
    };
    let open: Vec<&str> = TaskStatus::ALL
        .iter()
        .filter(|s| !s.is_terminal())
        .map(|s| s.as_str())
        .collect();
    let unfinished: Vec<Task> = task::Entity::find_in(scope)
        .filter(task::Column::ConversationId.eq(conversation.uuid()))
        .filter(task::Column::Status.is_in(open))
        .order_by_asc(task::Column::Id)
        .all(txn)
        .await?
        .into_iter()
        .map(Task::try_from)
        .collect::<Result<_>>()?;
    let mut admitted = Admitted {
        events: Vec::new(),
        stopped: Vec::new(),
        running: Vec::new(),
    };
    if unfinished.is_empty() {
        return Ok(admitted);
    }
    let ids: Vec<String> = unfinished.iter().map(|t| t.id.to_string()).collect();
    match strategy {
        Multitask::Reject => {
            return Err(Error::Conflict(format!(
                "the conversation has {} unfinished turn(s); its strategy is REJECT",
                unfinished.len()
            )));
        }
        Multitask::Enqueue => {
            admitted.events.push(
                NewEvent::new(
                    EventKind::TurnQueued,
                    format!("waits for {} earlier turn(s)", unfinished.len()),
                )
                .data(json!({"strategy": strategy.as_str(), "after": ids, "stops": []})),
            );
            return Ok(admitted);
        }
        Multitask::Interrupt | Multitask::Rollback => {}
    }
    // Turns another turn has already stopped keep that record.
    let already: Vec<Uuid> = turn_interruption::Entity::find_in(scope)
        .filter(
            turn_interruption::Column::TaskId
                .is_in(unfinished.iter().map(|t| t.id.uuid()).collect::<Vec<_>>()),
        )
        .all(txn)
        .await?
        .into_iter()
        .map(|r| r.task_id)
        .collect();
    let interruption = Interruption { by: id, strategy };
    let mut stops = Vec::new();
    for turn in unfinished
        .iter()
        .filter(|t| !already.contains(&t.id.uuid()))
    {
        stops.push(turn.id.to_string());
        turn_interruption::ActiveModel {
            id: Set(Uuid::now_v7()),
            tenant_id: Set(scope.tenant_id().uuid()),
            conversation_id: Set(conversation.uuid()),
            task_id: Set(turn.id.uuid()),
            by_task_id: Set(id.uuid()),
            strategy: Set(strategy.as_str().to_owned()),
            created_at: Set(now),
        }
        .insert(txn)
        .await?;
        let idle = vec![
            TaskStatus::Pending,
            TaskStatus::NeedsReview,
            TaskStatus::AwaitingApproval,
            TaskStatus::Delegated,
        ];
        let stopped = mutate(
            txn,
            announce,
            scope,
            turn.id,
            &Guard::Unleased(idle),
            TaskChanges {
                status: Some(TaskStatus::Cancelled),
                completed_at: Some(now),
                error: Some(Some(interruption.error())),
                result: Some(interruption.result("")),
                ..TaskChanges::default()
            },
            vec![
                interruption.event(0),
                NewEvent::status(TaskStatus::Cancelled, interruption.error()),
            ],
        )
        .await?;
        match stopped {
            Some((_, events)) => admitted.stopped.extend(events),
            None => {
                // Running: its worker stops it and writes its event.
                task::Entity::update_many_in(scope)
                    .col_expr(task::Column::CancelRequested, Expr::value(true))
                    .filter(task::Column::Id.eq(turn.id.uuid()))
                    .exec(txn)
                    .await?;
                admitted.running.push(turn.id);
            }
        }
    }
    let verb = match strategy {
        Multitask::Rollback => "rolls back",
        _ => "interrupts",
    };
    admitted.events.push(
        NewEvent::new(
            EventKind::TurnQueued,
            format!("{verb} {} earlier turn(s)", unfinished.len()),
        )
        .data(json!({"strategy": strategy.as_str(), "after": ids, "stops": stops})),
    );
    Ok(admitted)
}

impl Tasks {
    /// Stop this process's running steps of the turns that newer turns
    /// stop, as their `TurnQueued` events arrive on `events` from any
    /// process (on PostgreSQL, the others' through the listener): a model
    /// call in flight here stops at once, not at its step's end. An event
    /// missed by a lagging receiver leaves the turn to its cancel flag, at
    /// its next step boundary. Runs until the bus closes.
    pub fn interrupt_on_events(
        &self,
        mut events: tokio::sync::broadcast::Receiver<Arc<TaskEvent>>,
    ) -> tokio::task::JoinHandle<()> {
        use tokio::sync::broadcast::error::RecvError;
        let interrupts = self.interrupts.clone();
        tokio::spawn(async move {
            loop {
                match events.recv().await {
                    Ok(event) if event.kind == EventKind::TurnQueued => {
                        for stopped in strings(&event.data["stops"]) {
                            if let Ok(id) = Uuid::parse_str(&stopped) {
                                interrupts.signal(TaskId::from(id));
                            }
                        }
                    }
                    Ok(_) | Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => break,
                }
            }
        })
    }

    /// Why the turn `id` was stopped by a newer turn, if it was.
    pub async fn interruption(
        &self,
        scope: TenantScope,
        id: TaskId,
    ) -> Result<Option<Interruption>> {
        let row = turn_interruption::Entity::find_in(scope)
            .filter(turn_interruption::Column::TaskId.eq(id.uuid()))
            .one(&self.db)
            .await?;
        row.map(|r| {
            Ok(Interruption {
                by: r.by_task_id.into(),
                strategy: r.strategy.parse()?,
            })
        })
        .transpose()
    }

    /// Listen for an interrupt of `task`'s running step.
    pub fn listen_for_interrupt(&self, task: TaskId) -> Listening {
        self.interrupts.listen(task)
    }
}
