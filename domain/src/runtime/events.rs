//! The event bus: how committed task events and live token deltas reach
//! subscribers.
//!
//! The bus is injected into [`crate::Domain`] and bounded: a tokio
//! broadcast channel of [`CAPACITY`] events per process (and one per
//! watched task). Publishing never waits for subscribers; a subscriber
//! that falls behind loses its place in the channel and catches up from
//! the event store by sequence number, so it still receives every stored
//! event, in order.
//!
//! What a process publishes reaches its own subscribers from memory, on
//! every backend, with no database round trip: stored events right after
//! their transaction commits, token deltas as the tool produces them. So a
//! task's events reach this process's subscribers in the order the
//! process produced them. On PostgreSQL the other processes sharing the
//! database hear them through `LISTEN/NOTIFY` ([`postgres`]): stored
//! events are notified inside the transaction that stores them, token
//! deltas travel batched, several per notification, and never on a commit
//! path. A stored event can then reach a process twice (its own publish
//! and its own listener): [`EventBus::deliver`] hands each stored event to
//! subscribers once, whichever path brings it first. The same listener
//! hears revoked credentials (`identity::revocations`) and hands them to
//! the process's [`Revocations`]; each time it (re)starts listening it
//! announces [`Revoked::Unknown`], since what was sent while it was away
//! is lost.
//!
//! Token deltas are not stored one by one. The bus keeps each running
//! step's text so far (from the deltas it has seen), so a subscriber joining
//! mid-step first receives that text as one delta, then the live ones; one
//! that joined before the step streamed gets every delta as the bus shared
//! it, even if it was still replaying when they came.
//!
//! [`task_events`] is the resumable stream: it subscribes first, replays
//! stored events after `after`, then goes live, dropping what it already
//! sent, so there is no gap and no duplicate at the seam.
//! [`task_event_deliveries`] is the same stream telling apart what every
//! live subscriber receives alike ([`Delivery::Shared`]), so a transport can
//! render each event once.

mod postgres;

use std::{
    collections::{HashMap, HashSet, VecDeque},
    sync::{Arc, Mutex, OnceLock},
    time::Duration,
};

use brainstem_entity::{TaskId, TenantScope};
use chrono::Utc;
use futures_util::Stream;
use futures_util::future::BoxFuture;
use sea_orm::DatabaseConnection;
use serde_json::json;
use tokio::sync::{broadcast, mpsc};
use uuid::Uuid;

pub use postgres::{Announce, CHANNEL};
pub(crate) use postgres::{notification_payloads, notify};

use crate::{
    Result,
    identity::revocations::Revocations,
    kernel::row_security,
    runtime::tasks::{EventKind, EventSink, TaskEvent, Tasks},
};

/// Events buffered per process before a slow subscriber must catch up from
/// the store.
pub const CAPACITY: usize = 4096;
/// How long, by default, a token delta waits for others to share its
/// notification to the other processes.
pub const NOTIFY_LINGER: Duration = Duration::from_millis(5);
/// Stored events remembered as delivered, so a second arrival is dropped.
/// The two arrivals of an event are milliseconds apart; this is many
/// seconds of events at any rate a process can commit.
const REMEMBERED: usize = 16_384;

pub struct EventBus {
    /// Every event (for `taskUpdates`).
    tx: broadcast::Sender<Arc<TaskEvent>>,
    /// Per-task channels, so an event reaches only its task's subscribers;
    /// created on first subscription, dropped when nobody listens.
    per_task: Mutex<HashMap<TaskId, broadcast::Sender<Arc<TaskEvent>>>>,
    capacity: usize,
    /// The text so far of each step that is streaming tokens.
    live_text: Mutex<HashMap<TaskId, (String, String)>>,
    /// Ids of the stored events delivered lately, oldest first.
    delivered: Mutex<(HashSet<Uuid>, VecDeque<Uuid>)>,
    /// For each task with a step running on this process, the seq of the
    /// last stored event this process published for it: the step's token
    /// deltas carry it ([`EventBus::stamp`]).
    stamps: Mutex<HashMap<TaskId, i64>>,
    /// This bus among the processes sharing a database: its own deltas
    /// coming back from PostgreSQL are recognised by it.
    origin: Uuid,
    /// Set when connected to PostgreSQL: carries this process's token
    /// deltas to the other processes.
    outbox: OnceLock<postgres::Outbox>,
}

impl EventBus {
    pub fn new() -> Arc<Self> {
        Self::with_capacity(CAPACITY)
    }

    /// A bus buffering `capacity` events for slow subscribers.
    pub fn with_capacity(capacity: usize) -> Arc<Self> {
        let (tx, _) = broadcast::channel(capacity.max(1));
        Arc::new(Self {
            tx,
            per_task: Mutex::new(HashMap::new()),
            capacity: capacity.max(1),
            live_text: Mutex::new(HashMap::new()),
            delivered: Mutex::new((HashSet::new(), VecDeque::new())),
            stamps: Mutex::new(HashMap::new()),
            origin: Uuid::now_v7(),
            outbox: OnceLock::new(),
        })
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<TaskEvent>> {
        self.tx.subscribe()
    }

    /// Events of one task only.
    pub fn subscribe_task(&self, task: TaskId) -> broadcast::Receiver<Arc<TaskEvent>> {
        match self.per_task.lock() {
            Ok(mut map) => map
                .entry(task)
                .or_insert_with(|| broadcast::channel(self.capacity).0)
                .subscribe(),
            // A poisoned map: fall back to a channel that never delivers;
            // the subscriber still gets the stored events.
            Err(_) => broadcast::channel(1).0.subscribe(),
        }
    }

    /// Hand events to this process's subscribers. A stored event already
    /// delivered (it came by the other path) is skipped.
    ///
    /// One delivery at a time: the executor (right after its commit) and
    /// the listener (hearing the same commit) may deliver one stored event
    /// at once. Were the check and the hand-over apart, the executor could
    /// find the event already claimed by the listener, return, and publish
    /// the step's first token delta before the listener has handed over the
    /// step's start, so a subscriber would see the delta first.
    pub fn deliver(&self, events: &[TaskEvent]) {
        let mut delivered = self
            .delivered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for event in events {
            if event.kind != EventKind::TokenDelta && !first_delivery(&mut delivered, event.id) {
                continue;
            }
            self.track_text(event);
            let event = Arc::new(event.clone());
            if let Ok(mut map) = self.per_task.lock()
                && let Some(tx) = map.get(&event.task_id)
                && tx.send(event.clone()).is_err()
            {
                // Nobody listens to this task any more.
                map.remove(&event.task_id);
            }
            // No receivers is fine: nobody is watching.
            let _ = self.tx.send(event);
        }
    }

    fn track_text(&self, event: &TaskEvent) {
        let Ok(mut live) = self.live_text.lock() else {
            return;
        };
        match event.kind {
            EventKind::TokenDelta => {
                let step = event.step_id.clone().unwrap_or_default();
                let offset = event.data["offset"].as_u64().unwrap_or(0) as usize;
                let text = event.data["text"].as_str().unwrap_or_default();
                let entry = live
                    .entry(event.task_id)
                    .or_insert_with(|| (step.clone(), String::new()));
                if entry.0 != step {
                    *entry = (step, String::new());
                }
                if offset == entry.1.chars().count() {
                    entry.1.push_str(text);
                }
            }
            EventKind::StepCompleted | EventKind::StepFailed | EventKind::StatusChanged => {
                live.remove(&event.task_id);
            }
            _ => {}
        }
    }

    /// The step streaming tokens for `task` and its text so far.
    pub fn text_so_far(&self, task: TaskId) -> Option<(String, String)> {
        self.live_text
            .lock()
            .ok()
            .and_then(|l| l.get(&task).cloned())
    }

    /// Share events with the other processes on the PostgreSQL database at
    /// `url` from now on, and deliver theirs here; token deltas wait up to
    /// `linger` for others to share their notification; revoked
    /// credentials go to `revocations`. Runs until the process ends; a
    /// second call does nothing.
    pub fn connect_postgres(
        self: &Arc<Self>,
        db: DatabaseConnection,
        url: String,
        linger: Duration,
        revocations: Revocations,
    ) {
        if self.outbox.get().is_none() {
            let _ = self
                .outbox
                .set(postgres::connect(self, db, url, linger, revocations));
        }
    }

    /// `events` with each token delta carrying the seq of the last stored
    /// event of its task published before it, so a subscriber that takes
    /// the delta while it replays the store sends it after its step's
    /// start (see [`Follow::next`]); `None` when no delta needs a change.
    ///
    /// A task's seq is kept from its step's start to the step's end (or
    /// the task leaving `EXECUTING`), so the map holds the steps running
    /// here. A step whose end this process never publishes (its lease
    /// lost) leaves its entry; past [`REMEMBERED`] entries the map starts
    /// afresh, and deltas of the steps running then carry no seq (0) until
    /// their next stored event: sent as they come, as before a start.
    fn stamp(&self, events: &[TaskEvent]) -> Option<Vec<TaskEvent>> {
        let mut stamps = self
            .stamps
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut stamped: Option<Vec<TaskEvent>> = None;
        for (i, event) in events.iter().enumerate() {
            let task = event.task_id;
            match event.kind {
                EventKind::TokenDelta => {
                    if let Some(&seq) = stamps.get(&task)
                        && event.seq != seq
                    {
                        stamped.get_or_insert_with(|| events.to_vec())[i].seq = seq;
                    }
                }
                EventKind::StepStarted => {
                    if stamps.len() >= REMEMBERED && !stamps.contains_key(&task) {
                        stamps.clear();
                    }
                    stamps.insert(task, event.seq);
                }
                EventKind::StepCompleted | EventKind::StepFailed => {
                    stamps.remove(&task);
                }
                EventKind::StatusChanged if event.status.as_deref() != Some("EXECUTING") => {
                    stamps.remove(&task);
                }
                _ => {
                    if let Some(seq) = stamps.get_mut(&task) {
                        *seq = (*seq).max(event.seq);
                    }
                }
            }
        }
        stamped
    }
}

impl EventSink for EventBus {
    fn publish(&self, events: &[TaskEvent]) {
        let stamped = self.stamp(events);
        let events = stamped.as_deref().unwrap_or(events);
        // This process's subscribers, from memory.
        self.deliver(events);
        // The other processes: stored events went with their transaction.
        if let Some(outbox) = self.outbox.get() {
            for delta in events.iter().filter(|e| e.kind == EventKind::TokenDelta) {
                outbox.push(delta);
            }
        }
    }

    fn flush(&self) -> BoxFuture<'static, ()> {
        match self.outbox.get() {
            Some(outbox) => outbox.flush(),
            None => Box::pin(async {}),
        }
    }
}

/// Remember the stored event `id` as delivered; false if it already was.
fn first_delivery(delivered: &mut (HashSet<Uuid>, VecDeque<Uuid>), id: Uuid) -> bool {
    let (seen, order) = delivered;
    if !seen.insert(id) {
        return false;
    }
    order.push_back(id);
    if order.len() > REMEMBERED
        && let Some(old) = order.pop_front()
    {
        seen.remove(&old);
    }
    true
}

fn is_terminal(event: &TaskEvent) -> bool {
    event.kind == EventKind::StatusChanged
        && matches!(
            event.status.as_deref(),
            Some("COMPLETED" | "FAILED" | "CANCELLED")
        )
}

/// How many stored events a catch-up reads at once.
const PAGE: u64 = 500;

/// One item of [`task_event_deliveries`].
#[derive(Clone, Debug)]
pub enum Delivery {
    /// The bus's own event, the same value for every live subscriber of the
    /// task, to be sent with `seq`: its own, or for a token delta the seq
    /// of the last stored event the subscriber has. Subscribers at the same
    /// `seq` receive the same event, so a transport may render it once.
    Shared { event: Arc<TaskEvent>, seq: i64 },
    /// A stored event read from the store during replay or catch-up: the
    /// same row for every subscriber that reads it.
    Stored(Box<TaskEvent>),
    /// An event for this subscriber only: a token delta adjusted to what it
    /// has already seen, or the text so far of a step.
    Own(Box<TaskEvent>),
}

impl Delivery {
    pub fn into_event(self) -> TaskEvent {
        match self {
            Delivery::Shared { event, seq } => {
                let mut event = Arc::unwrap_or_clone(event);
                event.seq = seq;
                event
            }
            Delivery::Stored(e) | Delivery::Own(e) => *e,
        }
    }
}

/// The events of one task with `seq > after`, then live ones, each exactly
/// once and in order; token deltas as they come. Ends after the event that
/// makes the task COMPLETED, FAILED or CANCELLED. The caller checks that
/// the task belongs to `scope` before calling.
pub fn task_events(
    tasks: Tasks,
    bus: Arc<EventBus>,
    scope: TenantScope,
    task: TaskId,
    after: i64,
) -> impl Stream<Item = TaskEvent> + Send + 'static {
    use futures_util::StreamExt;
    task_event_deliveries(tasks, bus, scope, task, after).map(Delivery::into_event)
}

/// [`task_events`], telling apart the bus's shared events from this
/// subscriber's own. The stream does its work when polled (no task of its
/// own): a subscriber that is not polled keeps its place in the bus until
/// it lags, then catches up from the store.
pub fn task_event_deliveries(
    tasks: Tasks,
    bus: Arc<EventBus>,
    scope: TenantScope,
    task: TaskId,
    after: i64,
) -> impl Stream<Item = Delivery> + Send + 'static {
    // Subscribe before reading the store, so nothing falls between them.
    let live = bus.subscribe_task(task);
    // Text a step streamed before now is not in `live`; anything after is.
    let joined_mid_step = bus.text_so_far(task).is_some();
    let follow = Follow {
        tasks,
        bus,
        scope,
        task,
        last: after,
        live,
        pending: VecDeque::new(),
        early_deltas: VecDeque::new(),
        phase: Phase::Replay,
        through: after,
        streamed: 0,
        streaming_step: None,
        joined_mid_step,
        done: false,
    };
    futures_util::stream::unfold(follow, |mut follow| async move {
        let next = follow.next().await;
        next.map(|d| (d, follow))
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Reading stored events after `last` for the first time.
    Replay,
    /// Replay done: the text so far of a step streaming tokens, if any.
    TextSoFar,
    /// Following the bus.
    Live,
    /// Reading stored events after a lag or a gap.
    CatchUp,
}

/// The state of one `task_events` subscriber.
struct Follow {
    tasks: Tasks,
    bus: Arc<EventBus>,
    scope: TenantScope,
    task: TaskId,
    /// The last stored event sent.
    last: i64,
    live: broadcast::Receiver<Arc<TaskEvent>>,
    /// Stored events read and not yet sent.
    pending: VecDeque<TaskEvent>,
    /// Token deltas taken from the live queue while replaying: each goes
    /// out before the first stored event with a higher seq (a delta
    /// carries the seq of the last stored event before it, stamped by the
    /// bus of the process that produced it: [`EventBus::stamp`]), so a
    /// task that finishes while this subscriber replays still streams its
    /// text, after its step's start and before its step's end.
    early_deltas: VecDeque<Arc<TaskEvent>>,
    phase: Phase,
    /// A catch-up reads at least this far (from the primary, if a read
    /// replica has not replayed it yet): the event whose gap started it.
    through: i64,
    /// Characters of `streaming_step`'s text already sent.
    streamed: usize,
    streaming_step: Option<String>,
    /// A step had streamed text before this subscriber joined the bus, so
    /// it starts with the text so far; otherwise every delta is in `live`,
    /// and goes out as the bus shared it.
    joined_mid_step: bool,
    done: bool,
}

impl Follow {
    async fn next(&mut self) -> Option<Delivery> {
        loop {
            if self.done {
                return None;
            }
            if let Some(next_seq) = self.pending.front().map(|e| e.seq) {
                self.take_queued_deltas();
                if self.early_deltas.front().is_some_and(|d| d.seq < next_seq) {
                    if let Some(delta) = self.early_deltas.pop_front()
                        && let Some(out) = self.delta(delta)
                    {
                        return Some(out);
                    }
                    continue;
                }
                if let Some(event) = self.pending.pop_front() {
                    self.last = event.seq;
                    self.done = is_terminal(&event);
                    return Some(Delivery::Stored(Box::new(event)));
                }
            }
            if self.phase == Phase::Live
                && let Some(delta) = self.early_deltas.pop_front()
            {
                if let Some(out) = self.delta(delta) {
                    return Some(out);
                }
                continue;
            }
            match self.phase {
                Phase::Replay | Phase::CatchUp => {
                    if self.phase == Phase::CatchUp {
                        crate::kernel::metrics::metrics()
                            .subscription_catch_up_reads
                            .inc();
                    }
                    let batch = match self
                        .tasks
                        .events_through(self.scope, self.task, self.last, PAGE, self.through)
                        .await
                    {
                        Ok(b) => b,
                        Err(err) => {
                            tracing::warn!(%err, "event replay failed");
                            return None;
                        }
                    };
                    if batch.is_empty() {
                        self.phase = match self.phase {
                            Phase::Replay => Phase::TextSoFar,
                            _ => Phase::Live,
                        };
                    }
                    self.pending.extend(batch);
                }
                Phase::TextSoFar => {
                    self.phase = Phase::Live;
                    // Joining mid-step: the text so far, as one delta.
                    if self.joined_mid_step
                        && let Some((step, text)) = self.bus.text_so_far(self.task)
                    {
                        self.streamed = text.chars().count();
                        let event = token_delta(self.scope, self.task, self.last, &step, 0, &text);
                        self.streaming_step = Some(step);
                        return Some(Delivery::Own(Box::new(event)));
                    }
                }
                Phase::Live => match self.live.recv().await {
                    Ok(event) if event.task_id != self.task => {}
                    Ok(event) if event.kind == EventKind::TokenDelta => {
                        if let Some(out) = self.delta(event) {
                            return Some(out);
                        }
                    }
                    Ok(event) if event.seq <= self.last => {}
                    Ok(event) if event.seq == self.last + 1 => {
                        self.last = event.seq;
                        // A new attempt streams its text from offset 0 again.
                        if matches!(
                            event.kind,
                            EventKind::StepStarted
                                | EventKind::StepCompleted
                                | EventKind::StepFailed
                        ) {
                            self.streamed = 0;
                            self.streaming_step = None;
                        }
                        self.done = is_terminal(&event);
                        let seq = event.seq;
                        return Some(Delivery::Shared { event, seq });
                    }
                    // A gap (a lost notification) or a lag: read the store,
                    // at least as far as the event seen (everything, after
                    // a lag).
                    Ok(event) => {
                        self.through = event.seq;
                        self.phase = Phase::CatchUp;
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        self.through = i64::MAX;
                        self.phase = Phase::CatchUp;
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
            }
        }
    }

    /// Move this task's token deltas waiting in the live queue to
    /// `early_deltas`; the queue's stored events are dropped (the replay
    /// reads them from the store).
    fn take_queued_deltas(&mut self) {
        loop {
            match self.live.try_recv() {
                Ok(event) if event.task_id == self.task && event.kind == EventKind::TokenDelta => {
                    self.early_deltas.push_back(event);
                }
                // Deltas may be lost: start from the text so far.
                Err(broadcast::error::TryRecvError::Lagged(_)) => self.joined_mid_step = true,
                Ok(_) => {}
                Err(_) => return,
            }
        }
    }

    /// A live token delta, less what this subscriber has already received;
    /// `None` when nothing of it is new.
    fn delta(&mut self, event: Arc<TaskEvent>) -> Option<Delivery> {
        if event.step_id != self.streaming_step {
            self.streaming_step = event.step_id.clone();
            self.streamed = 0;
        }
        let offset = event.data["offset"].as_u64().unwrap_or(0) as usize;
        let text = event.data["text"].as_str().unwrap_or_default();
        let len = text.chars().count();
        if offset + len <= self.streamed {
            return None; // already part of the text sent
        }
        let skip = self.streamed.saturating_sub(offset);
        self.streamed = offset + len;
        // None of the text was sent before: the bus's event as it is, at
        // this subscriber's seq.
        let plain = event.data.as_object().is_some_and(|o| o.len() == 2);
        if skip == 0 && plain {
            return Some(Delivery::Shared {
                event,
                seq: self.last,
            });
        }
        let rest: String = text.chars().skip(skip).collect();
        let mut out = (*event).clone();
        out.seq = self.last;
        out.data = json!({"offset": offset + skip, "text": rest});
        Some(Delivery::Own(Box::new(out)))
    }
}

fn token_delta(
    scope: TenantScope,
    task: TaskId,
    seq: i64,
    step: &str,
    offset: usize,
    text: &str,
) -> TaskEvent {
    TaskEvent {
        id: Uuid::now_v7(),
        tenant: scope.tenant_id(),
        task_id: task,
        seq,
        kind: EventKind::TokenDelta,
        step_id: Some(step.to_owned()),
        tool: None,
        status: None,
        summary: String::new(),
        error: None,
        data_keys: Vec::new(),
        data: json!({"offset": offset, "text": text}),
        created_at: Utc::now(),
    }
}

/// Live task changes of one tenant, for lists and dashboards: the task
/// after each status change or settled step. Best effort: a subscriber that
/// falls behind skips ahead (and should refetch its list).
pub fn task_updates(
    tasks: Tasks,
    bus: Arc<EventBus>,
    scope: TenantScope,
) -> impl Stream<Item = Result<crate::runtime::tasks::Task>> + Send + 'static {
    let mut live = bus.subscribe();
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            match live.recv().await {
                Ok(event)
                    if event.tenant == scope.tenant_id()
                        && matches!(
                            event.kind,
                            EventKind::StatusChanged
                                | EventKind::StepCompleted
                                | EventKind::StepFailed
                        ) =>
                {
                    let task = tasks.get(scope, event.task_id);
                    let task = row_security::as_tenant(scope.tenant_id(), task).await;
                    if tx.send(task).await.is_err() {
                        return;
                    }
                }
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    });
    futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (e, rx)) })
}
