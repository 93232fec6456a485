//! The event bus: how committed task events reach live subscribers.
//!
//! The bus is injected into [`crate::Domain`] and bounded: a tokio
//! broadcast channel of [`CAPACITY`] events per process. Publishing never
//! waits for subscribers; a subscriber that falls behind loses its place in
//! the channel and catches up from the event store by sequence number, so it
//! still receives every stored event, in order.
//!
//! Two transports feed it:
//! - **in-process** (SQLite, or a single server): events are delivered to
//!   the local channel right after their transaction commits;
//! - **PostgreSQL `LISTEN/NOTIFY`**: stored events are sent with `pg_notify`
//!   on the `brainstem_events` channel inside the transaction that stores
//!   them (so they leave exactly when, and only if, it commits, at no extra
//!   commit); live-only token deltas go through one ordered sender per
//!   process, which the executor flushes before committing a step. Every
//!   process's listener delivers what arrives to its local channel, so a
//!   subscriber on one replica sees a task run by a worker on another.
//!   The same listener hears revoked credentials (`identity::revocations`)
//!   and hands them to the process's [`Revocations`]; each time it
//!   (re)starts listening it announces [`Revoked::Unknown`], since what was
//!   sent while it was away is lost.
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

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex},
};

use brainstem_entity::{TaskId, TenantScope};
use chrono::{DateTime, Utc};
use futures_util::Stream;
use futures_util::future::BoxFuture;
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc, oneshot};
use uuid::Uuid;

use crate::{
    Result,
    identity::revocations::{self, Revocations, Revoked},
    kernel::row_security,
    runtime::tasks::{EventKind, EventSink, TaskEvent, Tasks},
};

/// Events buffered per process before a slow subscriber must catch up from
/// the store.
pub const CAPACITY: usize = 4096;
/// The PostgreSQL notification channel.
pub const CHANNEL: &str = "brainstem_events";
/// Notification payloads above this size carry only a reference; listeners
/// read the event from the store (PostgreSQL's limit is 8000 bytes).
const MAX_PAYLOAD: usize = 7000;

pub struct EventBus {
    /// Every event (for `taskUpdates`).
    tx: broadcast::Sender<Arc<TaskEvent>>,
    /// Per-task channels, so an event reaches only its task's subscribers;
    /// created on first subscription, dropped when nobody listens.
    per_task: Mutex<HashMap<TaskId, broadcast::Sender<Arc<TaskEvent>>>>,
    capacity: usize,
    /// The text so far of each step that is streaming tokens.
    live_text: Mutex<HashMap<TaskId, (String, String)>>,
    /// When set, events go out through PostgreSQL instead of straight to
    /// the local channel.
    notifier: Mutex<Option<mpsc::Sender<Outgoing>>>,
}

/// What the ordered sender sends.
enum Outgoing {
    /// An encoded live-only event.
    Event(String),
    /// Answered once everything queued before it has been sent.
    Flush(oneshot::Sender<()>),
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
            notifier: Mutex::new(None),
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

    /// Hand events to this process's subscribers.
    pub fn deliver(&self, events: &[TaskEvent]) {
        for event in events {
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

    /// Send events through PostgreSQL from now on, and deliver what the
    /// `LISTEN` side receives: task events to this bus, revoked
    /// credentials to `revocations`. Runs until the process ends.
    pub fn connect_postgres(
        self: &Arc<Self>,
        db: DatabaseConnection,
        url: String,
        revocations: Revocations,
    ) {
        let (tx, mut rx) = mpsc::channel::<Outgoing>(CAPACITY);
        if let Ok(mut notifier) = self.notifier.lock() {
            *notifier = Some(tx);
        }
        // One sender, so a task's events leave in commit order. It sends
        // what queued up meanwhile together: events packed into as few
        // payloads as fit, all in one transaction (each `pg_notify`
        // transaction is a commit of its own).
        let sender_db = db.clone();
        tokio::spawn(async move {
            let mut queued = Vec::new();
            while rx.recv_many(&mut queued, MAX_BATCH).await > 0 {
                let mut encoded = Vec::new();
                let mut flushes = Vec::new();
                for item in queued.drain(..) {
                    match item {
                        Outgoing::Event(e) => encoded.push(e),
                        Outgoing::Flush(ack) => flushes.push(ack),
                    }
                }
                if !encoded.is_empty()
                    && let Err(err) = notify_all(&sender_db, pack(encoded.into_iter())).await
                {
                    tracing::warn!(%err, "could not publish live events");
                }
                for ack in flushes {
                    let _ = ack.send(());
                }
            }
        });
        let bus = self.clone();
        tokio::spawn(async move { bus.listen(db, url, revocations).await });
    }

    async fn listen(
        self: Arc<Self>,
        db: DatabaseConnection,
        url: String,
        revocations: Revocations,
    ) {
        use sea_orm::sqlx::postgres::PgListener;
        loop {
            let mut listener = match PgListener::connect(&url).await {
                Ok(l) => l,
                Err(err) => {
                    tracing::error!(%err, "event listener cannot connect; retrying");
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    continue;
                }
            };
            if let Err(err) = listener.listen_all([CHANNEL, revocations::CHANNEL]).await {
                tracing::error!(%err, "event listener cannot LISTEN; retrying");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                continue;
            }
            // Revocations sent before now were not heard here.
            revocations.deliver(Revoked::Unknown);
            loop {
                match listener.recv().await {
                    Ok(note) if note.channel() == revocations::CHANNEL => {
                        revocations.deliver(Revoked::decode(note.payload()));
                    }
                    Ok(note) => {
                        let events = decode_all(note.payload(), &db).await;
                        if !events.is_empty() {
                            self.deliver(&events);
                        }
                    }
                    Err(err) => {
                        tracing::warn!(%err, "event listener lost its connection; reconnecting");
                        break;
                    }
                }
            }
        }
    }
}

impl EventSink for EventBus {
    fn publish(&self, events: &[TaskEvent]) {
        let notifier = self.notifier.lock().ok().and_then(|n| n.clone());
        match notifier {
            Some(tx) => {
                // Stored events went out with their transaction.
                for event in events.iter().filter(|e| e.kind == EventKind::TokenDelta) {
                    // A full queue drops the delta: the executor never waits
                    // on subscribers, and the step's output keeps the text.
                    let _ = tx.try_send(Outgoing::Event(encode(event)));
                }
            }
            None => self.deliver(events),
        }
    }

    fn flush(&self) -> BoxFuture<'static, ()> {
        let notifier = self.notifier.lock().ok().and_then(|n| n.clone());
        Box::pin(async move {
            let Some(tx) = notifier else { return };
            let (ack, acked) = oneshot::channel();
            let flushed = async move {
                if tx.send(Outgoing::Flush(ack)).await.is_ok() {
                    let _ = acked.await;
                }
            };
            // A stuck sender must not stall the executor: after this long
            // the deltas are late, never the step.
            let _ = tokio::time::timeout(FLUSH_TIMEOUT, flushed).await;
        })
    }
}

/// How long [`EventSink::flush`] waits for the sender at most.
const FLUSH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// The `pg_notify` payloads announcing stored `events` to listeners: none
/// except on PostgreSQL. Sent inside the transaction that stores the
/// events, they are delivered at its commit, in commit order, and not at
/// all on rollback; elsewhere the bus delivers in-process after commit.
pub(crate) fn notification_payloads(backend: DbBackend, events: &[TaskEvent]) -> Vec<String> {
    if backend != DbBackend::Postgres || events.is_empty() {
        return Vec::new();
    }
    pack(events.iter().map(encode))
}

/// Send `payloads` through `db` (a transaction, usually).
pub(crate) async fn notify<C: ConnectionTrait>(db: &C, payloads: Vec<String>) -> Result<()> {
    for payload in payloads {
        db.execute_raw(notify_statement(payload)).await?;
    }
    Ok(())
}

fn notify_statement(payload: String) -> Statement {
    Statement::from_sql_and_values(
        DbBackend::Postgres,
        "SELECT pg_notify($1, $2)",
        [CHANNEL.into(), payload.into()],
    )
}

fn encode(event: &TaskEvent) -> String {
    let full = json!({
        "id": event.id,
        "tenant": event.tenant.to_string(),
        "task": event.task_id.to_string(),
        "seq": event.seq,
        "kind": event.kind.as_str(),
        "step_id": event.step_id,
        "tool": event.tool,
        "status": event.status,
        "summary": event.summary,
        "error": event.error,
        "data_keys": event.data_keys,
        "data": event.data,
        "created_at": event.created_at,
    })
    .to_string();
    if full.len() <= MAX_PAYLOAD || event.kind == EventKind::TokenDelta {
        full
    } else {
        json!({"ref": true, "tenant": event.tenant.to_string(), "task": event.task_id.to_string(), "seq": event.seq})
            .to_string()
    }
}

/// Events sent by one `pg_notify` round at most.
const MAX_BATCH: usize = 512;

/// Join encoded events into JSON arrays of at most [`MAX_PAYLOAD`] bytes
/// (an event longer than that travels alone), keeping their order.
fn pack(encoded: impl Iterator<Item = String>) -> Vec<String> {
    let mut payloads = Vec::new();
    let mut current = String::new();
    for event in encoded {
        if !current.is_empty() && current.len() + event.len() + 2 > MAX_PAYLOAD {
            current.push(']');
            payloads.push(std::mem::take(&mut current));
        }
        current.push(if current.is_empty() { '[' } else { ',' });
        current.push_str(&event);
    }
    if !current.is_empty() {
        current.push(']');
        payloads.push(current);
    }
    payloads
}

/// Send `payloads` in order, in one transaction: one commit for the lot.
async fn notify_all(db: &DatabaseConnection, payloads: Vec<String>) -> Result<()> {
    use sea_orm::TransactionTrait;
    if payloads.len() == 1 {
        return notify(db, payloads).await;
    }
    let txn = db.begin().await?;
    notify(&txn, payloads).await?;
    txn.commit().await?;
    Ok(())
}

/// The events of one notification: a JSON array of encoded events (a
/// single encoded event is accepted too).
async fn decode_all(payload: &str, db: &DatabaseConnection) -> Vec<TaskEvent> {
    let values = match serde_json::from_str::<Value>(payload) {
        Ok(Value::Array(values)) => values,
        Ok(value) => vec![value],
        Err(err) => {
            tracing::warn!(%err, "undecodable event notification");
            return Vec::new();
        }
    };
    let mut events = Vec::with_capacity(values.len());
    for v in values {
        if let Some(event) = decode(v, db).await {
            events.push(event);
        }
    }
    events
}

async fn decode(v: Value, db: &DatabaseConnection) -> Option<TaskEvent> {
    let tenant = v["tenant"].as_str()?.parse().ok()?;
    let task_id: TaskId = v["task"].as_str()?.parse().ok()?;
    if v["ref"] == json!(true) {
        let seq = v["seq"].as_i64()?;
        let stored =
            crate::runtime::tasks::events_after(db, TenantScope::new(tenant), task_id, seq - 1, 1);
        return row_security::as_tenant(tenant, stored)
            .await
            .ok()?
            .into_iter()
            .next();
    }
    let strings = |k: &str| -> Vec<String> {
        v[k].as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let opt = |k: &str| v[k].as_str().map(str::to_owned);
    Some(TaskEvent {
        id: v["id"]
            .as_str()
            .and_then(|s| Uuid::parse_str(s).ok())
            .unwrap_or_else(Uuid::now_v7),
        tenant,
        task_id,
        seq: v["seq"].as_i64()?,
        kind: v["kind"].as_str()?.parse().ok()?,
        step_id: opt("step_id"),
        tool: opt("tool"),
        status: opt("status"),
        summary: v["summary"].as_str().unwrap_or_default().to_owned(),
        error: opt("error"),
        data_keys: strings("data_keys"),
        data: v["data"].clone(),
        created_at: serde_json::from_value::<DateTime<Utc>>(v["created_at"].clone())
            .unwrap_or_else(|_| Utc::now()),
    })
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
    /// carries the seq of the last stored event before it), so a task that
    /// finishes while this subscriber replays still streams its text.
    early_deltas: VecDeque<Arc<TaskEvent>>,
    phase: Phase,
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
                        .events(self.scope, self.task, self.last, PAGE)
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
                    // A gap (a lost notification) or a lag: read the store.
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {
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

#[cfg(test)]
mod tests {
    use super::{MAX_PAYLOAD, pack};

    #[test]
    fn packing_keeps_order_and_stays_under_the_payload_limit() {
        let events: Vec<String> = (0..2000).map(|i| format!("{{\"seq\":{i}}}")).collect();
        let payloads = pack(events.clone().into_iter());
        assert!(payloads.len() > 1);
        assert!(payloads.iter().all(|p| p.len() <= MAX_PAYLOAD));
        let back: Vec<String> = payloads
            .iter()
            .flat_map(|p| serde_json::from_str::<Vec<serde_json::Value>>(p).unwrap())
            .map(|v| v.to_string())
            .collect();
        assert_eq!(back, events);
        // An event longer than the limit travels alone.
        let big = format!("\"{}\"", "x".repeat(MAX_PAYLOAD + 10));
        let payloads = pack(vec!["1".to_owned(), big.clone(), "2".to_owned()].into_iter());
        assert_eq!(
            payloads,
            vec!["[1]".to_owned(), format!("[{big}]"), "[2]".to_owned()]
        );
    }
}
