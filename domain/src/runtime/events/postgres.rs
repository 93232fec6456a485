//! The bus's PostgreSQL transport: how events cross from one process to
//! the others that share the database (`LISTEN/NOTIFY` on [`CHANNEL`]).
//!
//! - **Stored events** are sent with `pg_notify` inside the transaction
//!   that stores them ([`notification_payloads`], [`notify`]), so they
//!   leave exactly when, and only if, it commits, at no extra commit.
//! - **Token deltas** are never on a commit path of their own: the
//!   [`Outbox`] gathers a process's deltas for up to a few milliseconds (or
//!   until a notification is full, or the executor asks for a flush before
//!   committing a step, so a step's deltas arrive before its completion)
//!   and sends them, several per notification, on a connection of its own
//!   with `synchronous_commit` off: a notification carries no data worth a
//!   disk flush, and each `pg_notify` transaction is a commit.
//! - The **listener** hands revoked credentials to the process's
//!   `Revocations`, and what else arrives to the process's bus, except the
//!   deltas this process sent itself (its subscribers had them from memory;
//!   each delta notification names its sender), and stored events the bus
//!   already delivered (see [`super::EventBus::deliver`]).
//!
//! Every notification is a JSON array of encoded events of at most
//! [`MAX_PAYLOAD`] bytes (PostgreSQL refuses payloads of 8000 bytes or
//! more); a delta notification starts with `{"origin": …}`, an element
//! that decodes to no event, so a listener that does not know the marker
//! still reads the events after it.

use std::{str::FromStr, sync::Arc, time::Duration};

use brainstem_entity::{TaskId, TenantScope};
use chrono::{DateTime, Utc};
use sea_orm::{
    ConnectionTrait, DatabaseConnection, DbBackend, Statement,
    sqlx::{
        self, Connection,
        postgres::{PgConnectOptions, PgConnection, PgListener},
    },
};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use super::EventBus;
use crate::{
    Result,
    identity::revocations::{self, Revocations, Revoked},
    runtime::tasks::TaskEvent,
};

/// The PostgreSQL notification channel.
pub const CHANNEL: &str = "brainstem_events";
/// Notification payloads stay under this size; a stored event above it
/// travels as a reference the listener reads from the store, a token delta
/// above it as several deltas (PostgreSQL's limit is 8000 bytes).
pub(super) const MAX_PAYLOAD: usize = 7000;
/// Deltas waiting for the outbox's connection; past this the newest are
/// dropped (the executor never waits on subscribers, and the step's output
/// keeps the text).
const OUTBOX_CAPACITY: usize = 4096;
/// How long a stuck outbox may hold up the step that flushes it: after
/// this the deltas are late, never the step.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(2);

/// What the outbox sends.
enum Outgoing {
    /// An encoded token delta.
    Delta(String),
    /// Answered once everything queued before it has been sent.
    Flush(oneshot::Sender<()>),
}

/// A process's token deltas on their way to the other processes.
pub(super) struct Outbox {
    tx: mpsc::Sender<Outgoing>,
}

impl Outbox {
    /// Queue `delta` for the next notification; never waits.
    pub(super) fn push(&self, delta: &TaskEvent) {
        for encoded in encode_delta(delta) {
            if self.tx.try_send(Outgoing::Delta(encoded)).is_err() {
                tracing::debug!("live event outbox full; a token delta stays local");
            }
        }
    }

    /// Resolves once the deltas queued so far have been sent.
    pub(super) fn flush(&self) -> futures_util::future::BoxFuture<'static, ()> {
        let tx = self.tx.clone();
        Box::pin(async move {
            let (ack, acked) = oneshot::channel();
            let flushed = async move {
                if tx.send(Outgoing::Flush(ack)).await.is_ok() {
                    let _ = acked.await;
                }
            };
            let _ = tokio::time::timeout(FLUSH_TIMEOUT, flushed).await;
        })
    }
}

/// Start the outbox and the listener of `bus` on the database at `url`;
/// both run until the process ends. `linger` is how long a delta may wait
/// for others to share its notification.
pub(super) fn connect(
    bus: &Arc<EventBus>,
    db: DatabaseConnection,
    url: String,
    linger: Duration,
    revocations: Revocations,
) -> Outbox {
    let (tx, rx) = mpsc::channel(OUTBOX_CAPACITY);
    tokio::spawn(send_deltas(rx, url.clone(), bus.origin, linger));
    tokio::spawn(listen(bus.clone(), db, url, revocations));
    Outbox { tx }
}

/// The outbox's loop: one notification round at a time, in queue order.
async fn send_deltas(
    mut rx: mpsc::Receiver<Outgoing>,
    url: String,
    origin: Uuid,
    linger: Duration,
) {
    let mut conn: Option<PgConnection> = None;
    let mut round = Round::default();
    while let Some(first) = rx.recv().await {
        round.take(first);
        // Gather for at most `linger`, less when a notification is full or
        // a step waits to commit.
        let deadline = tokio::time::Instant::now() + linger;
        while round.acks.is_empty() && round.bytes < MAX_PAYLOAD {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(item)) => round.take(item),
                Ok(None) | Err(_) => break,
            }
        }
        if !round.encoded.is_empty() {
            let payloads = pack(origin, round.encoded.drain(..));
            if let Err(err) = send(&mut conn, &url, &payloads).await {
                tracing::warn!(%err, "could not send token deltas to other processes");
                conn = None;
            }
        }
        round.bytes = 0;
        for ack in round.acks.drain(..) {
            let _ = ack.send(());
        }
    }
}

/// What one notification round of the outbox gathered.
#[derive(Default)]
struct Round {
    encoded: Vec<String>,
    bytes: usize,
    acks: Vec<oneshot::Sender<()>>,
}

impl Round {
    fn take(&mut self, item: Outgoing) {
        match item {
            Outgoing::Delta(e) => {
                self.bytes += e.len() + 1;
                self.encoded.push(e);
            }
            Outgoing::Flush(ack) => self.acks.push(ack),
        }
    }
}

/// Send `payloads` in order, in one statement (one transaction), on the
/// outbox's own connection, opened when missing.
async fn send(
    conn: &mut Option<PgConnection>,
    url: &str,
    payloads: &[String],
) -> std::result::Result<(), sqlx::Error> {
    let conn = match conn {
        Some(c) => c,
        None => {
            let options = PgConnectOptions::from_str(url)?
                .application_name("brainstem events outbox")
                .options([("synchronous_commit", "off")]);
            conn.insert(PgConnection::connect_with(&options).await?)
        }
    };
    // `pg_notify` is volatile: evaluated row by row after the sort, so the
    // notifications queue in the array's order.
    sqlx::query(
        "SELECT pg_notify($1, p) FROM unnest($2::text[]) WITH ORDINALITY AS t(p, i) ORDER BY i",
    )
    .bind(CHANNEL)
    .bind(payloads)
    .execute(conn)
    .await?;
    Ok(())
}

async fn listen(bus: Arc<EventBus>, db: DatabaseConnection, url: String, revocations: Revocations) {
    loop {
        let mut listener = match PgListener::connect(&url).await {
            Ok(l) => l,
            Err(err) => {
                tracing::error!(%err, "event listener cannot connect; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        if let Err(err) = listener.listen_all([CHANNEL, revocations::CHANNEL]).await {
            tracing::error!(%err, "event listener cannot LISTEN; retrying");
            tokio::time::sleep(Duration::from_secs(1)).await;
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
                    let events = decode_all(note.payload(), bus.origin, &db).await;
                    if !events.is_empty() {
                        bus.deliver(&events);
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

/// Where the notification announcing stored events is sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Announce {
    /// Inside the statement that stores them, saving a round trip: on one
    /// PostgreSQL server every statement runs where the listeners are.
    #[default]
    InStatement,
    /// As a statement of its own, in the same transaction. On Citus a
    /// statement that writes a distributed table runs on the worker that
    /// holds the row, where no process listens (they `LISTEN` on the
    /// coordinator); a `SELECT pg_notify(…)` of no table runs on the
    /// coordinator and is still delivered at the transaction's commit
    /// (`docs/scale-out.md`, step 4).
    Apart,
}

impl Announce {
    /// [`Announce::Apart`] on a Citus coordinator, else
    /// [`Announce::InStatement`].
    pub async fn of(db: &DatabaseConnection) -> Result<Self> {
        if db.get_database_backend() != DbBackend::Postgres {
            return Ok(Self::InStatement);
        }
        let citus = db
            .query_one_raw(Statement::from_string(
                DbBackend::Postgres,
                "SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus') AS citus",
            ))
            .await?
            .map(|row| row.try_get::<bool>("", "citus"))
            .transpose()?
            .unwrap_or(false);
        Ok(if citus {
            Self::Apart
        } else {
            Self::InStatement
        })
    }
}

/// The `pg_notify` payloads announcing stored `events` to listeners: none
/// except on PostgreSQL. Sent inside the transaction that stores the
/// events, they are delivered at its commit, in commit order, and not at
/// all on rollback; the committing process delivers them to its own
/// subscribers right after the commit.
pub(crate) fn notification_payloads(backend: DbBackend, events: &[TaskEvent]) -> Vec<String> {
    if backend != DbBackend::Postgres || events.is_empty() {
        return Vec::new();
    }
    pack_values(events.iter().map(encode))
}

/// Send `payloads` through `db` (a transaction, usually).
pub(crate) async fn notify<C: ConnectionTrait>(db: &C, payloads: Vec<String>) -> Result<()> {
    for payload in payloads {
        db.execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT pg_notify($1, $2)",
            [CHANNEL.into(), payload.into()],
        ))
        .await?;
    }
    Ok(())
}

fn encode(event: &TaskEvent) -> String {
    let full = encode_full(event);
    if full.len() <= MAX_PAYLOAD {
        full
    } else {
        json!({"ref": true, "tenant": event.tenant.to_string(), "task": event.task_id.to_string(), "seq": event.seq})
            .to_string()
    }
}

fn encode_full(event: &TaskEvent) -> String {
    json!({
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
    .to_string()
}

/// A token delta encoded in pieces of at most [`MAX_PAYLOAD`] bytes (room
/// left for the origin marker): a longer text is cut into consecutive
/// deltas, which extend the step's text exactly as the whole one would.
fn encode_delta(delta: &TaskEvent) -> Vec<String> {
    let full = encode_full(delta);
    if full.len() + ORIGIN_ROOM <= MAX_PAYLOAD {
        return vec![full];
    }
    let offset = delta.data["offset"].as_u64().unwrap_or(0) as usize;
    let text = delta.data["text"].as_str().unwrap_or_default();
    let chars: Vec<char> = text.chars().collect();
    if chars.len() < 2 {
        return Vec::new(); // no text to cut: nothing a listener could use
    }
    let half = chars.len() / 2;
    let piece = |start: usize, end: usize| {
        let mut part = delta.clone();
        // An event of its own: subscribers' frames are shared by event id.
        part.id = Uuid::now_v7();
        part.data =
            json!({"offset": offset + start, "text": chars[start..end].iter().collect::<String>()});
        part
    };
    let mut out = encode_delta(&piece(0, half));
    out.extend(encode_delta(&piece(half, chars.len())));
    out
}

/// Bytes a delta notification keeps for its `{"origin": …}` marker.
const ORIGIN_ROOM: usize = 64;

/// Join encoded deltas into notifications that each start with the
/// sender's marker, keeping their order.
fn pack(origin: Uuid, encoded: impl Iterator<Item = String>) -> Vec<String> {
    let marker = json!({"origin": origin}).to_string();
    let mut payloads = Vec::new();
    let mut current = String::new();
    for event in encoded {
        if !current.is_empty() && current.len() + event.len() + 2 > MAX_PAYLOAD {
            current.push(']');
            payloads.push(std::mem::take(&mut current));
        }
        if current.is_empty() {
            current.push('[');
            current.push_str(&marker);
        }
        current.push(',');
        current.push_str(&event);
    }
    if !current.is_empty() {
        current.push(']');
        payloads.push(current);
    }
    payloads
}

/// Join encoded events into JSON arrays of at most [`MAX_PAYLOAD`] bytes
/// (an event longer than that travels alone), keeping their order.
fn pack_values(encoded: impl Iterator<Item = String>) -> Vec<String> {
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

/// The events of one notification (a JSON array of encoded events; a
/// single encoded event is accepted too); none when `own` sent it.
async fn decode_all(payload: &str, own: Uuid, db: &DatabaseConnection) -> Vec<TaskEvent> {
    let values = match serde_json::from_str::<Value>(payload) {
        Ok(Value::Array(values)) => values,
        Ok(value) => vec![value],
        Err(err) => {
            tracing::warn!(%err, "undecodable event notification");
            return Vec::new();
        }
    };
    if let Some(origin) = values.first().and_then(|v| v.get("origin"))
        && origin.as_str() == Some(own.to_string().as_str())
    {
        return Vec::new(); // this process's own deltas, delivered already
    }
    let mut events = Vec::with_capacity(values.len());
    for v in values {
        if v.get("origin").is_some() {
            continue;
        }
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
        return crate::kernel::row_security::as_tenant(tenant, stored)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::tasks::EventKind;

    #[test]
    fn packing_keeps_order_and_stays_under_the_payload_limit() {
        let events: Vec<String> = (0..2000).map(|i| format!("{{\"seq\":{i}}}")).collect();
        let payloads = pack_values(events.clone().into_iter());
        assert!(payloads.len() > 1);
        assert!(payloads.iter().all(|p| p.len() <= MAX_PAYLOAD));
        let back: Vec<String> = payloads
            .iter()
            .flat_map(|p| serde_json::from_str::<Vec<Value>>(p).unwrap())
            .map(|v| v.to_string())
            .collect();
        assert_eq!(back, events);
        // An event longer than the limit travels alone.
        let big = format!("\"{}\"", "x".repeat(MAX_PAYLOAD + 10));
        let payloads = pack_values(vec!["1".to_owned(), big.clone(), "2".to_owned()].into_iter());
        assert_eq!(
            payloads,
            vec!["[1]".to_owned(), format!("[{big}]"), "[2]".to_owned()]
        );
    }

    fn delta(offset: usize, text: &str) -> TaskEvent {
        TaskEvent {
            id: Uuid::now_v7(),
            tenant: Uuid::now_v7().into(),
            task_id: Uuid::now_v7().into(),
            seq: 0,
            kind: EventKind::TokenDelta,
            step_id: Some("s".into()),
            tool: None,
            status: None,
            summary: String::new(),
            error: None,
            data_keys: Vec::new(),
            data: json!({"offset": offset, "text": text}),
            created_at: Utc::now(),
        }
    }

    #[test]
    fn delta_notifications_name_their_sender_and_fit_the_limit() {
        let origin = Uuid::now_v7();
        // Quotes and control characters grow when encoded.
        let text: String = "ab\"\u{1}é".repeat(3000);
        let pieces = encode_delta(&delta(7, &text));
        assert!(pieces.len() > 1);
        let payloads = pack(origin, pieces.into_iter());
        let mut rebuilt = String::new();
        let mut ids = std::collections::HashSet::new();
        for p in &payloads {
            assert!(p.len() <= MAX_PAYLOAD, "{} bytes", p.len());
            let values: Vec<Value> = serde_json::from_str(p).unwrap();
            assert_eq!(values[0], json!({"origin": origin}));
            for v in &values[1..] {
                let offset = v["data"]["offset"].as_u64().unwrap() as usize;
                assert_eq!(offset, 7 + rebuilt.chars().count(), "consecutive pieces");
                rebuilt.push_str(v["data"]["text"].as_str().unwrap());
                assert!(
                    ids.insert(v["id"].clone()),
                    "each piece is an event of its own"
                );
            }
        }
        assert_eq!(rebuilt, text);
    }
}
