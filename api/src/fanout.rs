//! Fan-out of live task events to WebSocket subscribers.
//!
//! Many subscribers usually watch one task with the same subscription
//! document. Resolving and serializing the selection of every event once per
//! subscriber is what limits a busy server, so a `taskEvents` subscription
//! over WebSocket whose only root field is `taskEvents` takes this path:
//!
//! - the resolver does its checks as always (scope, `NOT_FOUND`, the
//!   connection's subscription slots), then hands the task's event stream to
//!   the connection (a [`Route`], the schema's `EventRoute`) instead of to async-graphql, which
//!   keeps no state for it;
//! - each event the bus shares with all live subscribers
//!   ([`Delivery::Shared`]) is rendered once per (subscriber's tenant,
//!   document, operation name, variables) and the JSON payload is shared
//!   ([`FrameCache`]); each subscriber only wraps it in its own `next`
//!   message. Events for one subscriber only (replay, catch-up, a token
//!   delta trimmed to what it has seen) are rendered for it alone.
//!
//! Rendering runs the subscriber's own document and variables through the
//! schema with the event in the context ([`RenderOne`]) and no caller, so the
//! JSON is exactly what the subscription's own execution produces, and
//! nothing in a shared payload can depend on who asked: a `TaskEvent` field
//! that needed the caller would fail here, not leak another caller's view.

use std::{
    collections::{HashMap, VecDeque},
    hash::{Hash, Hasher},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use async_graphql::{
    Request, Response, ServerError, Variables,
    http::WebSocketProtocols,
    parser::{
        parse_query,
        types::{DocumentOperations, OperationType, Selection},
    },
};
use brainstem_domain::{
    TenantId,
    events::Delivery,
    row_security::{self, RowAccess},
    tasks::TaskEvent,
};
use futures_util::{StreamExt, stream::BoxStream};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::{OnceCell, OwnedSemaphorePermit, Semaphore, mpsc};
use uuid::Uuid;

use crate::schema::{
    BrainstemSchema,
    context::RenderOne,
    subscription::{DeliverEvents, SlotGuard},
};

/// Rendered payloads kept for subscribers still to receive them. Every
/// subscriber of an event asks within moments of each other; this bounds
/// the memory, not the sharing.
pub const FRAME_CACHE_SIZE: usize = 4096;

/// `taskEvents` subscriptions of this process being set up at once (the
/// caller's checks, up to the hand-over to the connection). A burst of
/// thousands of subscribers then waits as small messages, not as thousands
/// of half-run operations each holding its parsed document while it waits
/// for the database.
pub const MAX_SETUPS: usize = 64;

/// The process's fan-out state, shared by all connections.
pub struct Fanout {
    pub frames: FrameCache,
    setups: Arc<Semaphore>,
    /// Payloads rendered (`websocket_event_renders_total`).
    pub renders: Counter,
    /// `next` messages sent (`websocket_event_frames_total`).
    pub sent: Counter,
}

impl Default for Fanout {
    fn default() -> Self {
        Self {
            frames: FrameCache::new(FRAME_CACHE_SIZE),
            setups: Arc::new(Semaphore::new(MAX_SETUPS)),
            renders: Counter::default(),
            sent: Counter::default(),
        }
    }
}

/// The longest a subscription's set-up holds its turn. A set-up only runs
/// while its connection is polled, and a connection whose client stops
/// reading stops being polled: its turn must not block everyone else's.
pub const SETUP_TURN_MAX: Duration = Duration::from_secs(5);

/// A turn to set up a subscription: ends when dropped, or after
/// [`SETUP_TURN_MAX`], whichever comes first.
#[derive(Clone)]
pub struct Turn {
    _held: Arc<Mutex<Option<OwnedSemaphorePermit>>>,
}

impl Fanout {
    /// Wait for a turn to set up a subscription.
    pub async fn setup_turn(&self) -> Option<Turn> {
        let permit = self.setups.clone().acquire_owned().await.ok()?;
        let held = Arc::new(Mutex::new(Some(permit)));
        let weak = Arc::downgrade(&held);
        tokio::spawn(async move {
            tokio::time::sleep(SETUP_TURN_MAX).await;
            if let Some(held) = weak.upgrade()
                && let Ok(mut permit) = held.lock()
            {
                permit.take();
            }
        });
        Some(Turn { _held: held })
    }
}

/// What an event's rendering depends on besides the event: the
/// subscription's document, operation and variables.
#[derive(Debug)]
pub struct Shape {
    query: String,
    operation_name: Option<String>,
    variables: Variables,
    variables_json: String,
    hash: u64,
}

impl PartialEq for Shape {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
            || self.hash == other.hash
                && self.query == other.query
                && self.operation_name == other.operation_name
                && self.variables_json == other.variables_json
    }
}

impl Eq for Shape {}

impl Hash for Shape {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Computed once: every delivery of a shared event looks its shape up.
        state.write_u64(self.hash);
    }
}

impl Shape {
    /// The shape of a subscription request whose operation has `taskEvents`
    /// as its only root field (no directive on it); `None` for any other
    /// request, which async-graphql runs as usual.
    pub fn of(request: &Request) -> Option<Arc<Shape>> {
        if request.query.is_empty() {
            return None; // a persisted query: async-graphql looks it up
        }
        let doc = parse_query(&request.query).ok()?;
        let op = match (&doc.operations, request.operation_name.as_deref()) {
            (DocumentOperations::Single(op), _) => op,
            (DocumentOperations::Multiple(ops), Some(name)) => {
                ops.iter().find(|(n, _)| n.as_str() == name)?.1
            }
            (DocumentOperations::Multiple(_), None) => return None,
        };
        if op.node.ty != OperationType::Subscription {
            return None;
        }
        match op.node.selection_set.node.items.as_slice() {
            [selection] => match &selection.node {
                Selection::Field(field)
                    if field.node.name.node == "taskEvents" && field.node.directives.is_empty() => {
                }
                _ => return None,
            },
            _ => return None,
        }
        let variables_json = serde_json::to_string(&request.variables).ok()?;
        let mut hasher = std::hash::DefaultHasher::new();
        (&request.query, &request.operation_name, &variables_json).hash(&mut hasher);
        Some(Arc::new(Shape {
            query: request.query.clone(),
            operation_name: request.operation_name.clone(),
            variables: request.variables.clone(),
            variables_json,
            hash: hasher.finish(),
        }))
    }
}

/// Put in a request's data by the WebSocket transport: where the
/// `taskEvents` resolver hands its stream.
#[derive(Clone)]
pub struct Route {
    pub(crate) id: String,
    pub(crate) shape: Arc<Shape>,
    pub(crate) handovers: mpsc::UnboundedSender<Registration>,
    /// The subscription's turn to be set up: it ends when async-graphql
    /// drops the request, right after the hand-over (or the error).
    pub(crate) _turn: Option<Turn>,
}

impl DeliverEvents for Route {
    /// A closed connection drops the registration, and with it the slot.
    fn deliver(
        &self,
        tenant: TenantId,
        deliveries: BoxStream<'static, Delivery>,
        slot: Option<SlotGuard>,
    ) {
        let _ = self.handovers.send(Registration {
            id: self.id.clone(),
            shape: self.shape.clone(),
            tenant,
            deliveries,
            slot,
        });
    }
}

/// A `taskEvents` subscription that passed its checks, handed to its
/// connection.
pub(crate) struct Registration {
    pub(crate) id: String,
    pub(crate) shape: Arc<Shape>,
    pub(crate) tenant: TenantId,
    pub(crate) deliveries: BoxStream<'static, Delivery>,
    pub(crate) slot: Option<SlotGuard>,
}

/// Where a shared event comes from. The bus's copy of an event and the
/// stored row may differ in representation (the time's precision), so they
/// are rendered apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    Live,
    Stored,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    tenant: TenantId,
    source: Source,
    event: Uuid,
    seq: i64,
    shape: Arc<Shape>,
}

type Cell = Arc<OnceCell<Arc<str>>>;

/// Payloads of shared events, each rendered by its first subscriber.
pub struct FrameCache {
    entries: Mutex<(HashMap<Key, Cell>, VecDeque<Key>)>,
    capacity: usize,
    renders: AtomicU64,
}

impl FrameCache {
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: Mutex::new((HashMap::new(), VecDeque::new())),
            capacity: capacity.max(1),
            renders: AtomicU64::new(0),
        }
    }

    /// How many payloads were rendered (not shared) so far.
    pub fn renders(&self) -> u64 {
        self.renders.load(Ordering::Relaxed)
    }

    /// The payload of the shared `event` for a subscriber of `tenant` with
    /// `shape`: rendered by `render` for the first such subscriber, shared
    /// with the others. The tenant is part of the key, so a payload never
    /// crosses tenants.
    pub async fn payload<F, Fut>(
        &self,
        tenant: TenantId,
        source: Source,
        shape: &Arc<Shape>,
        event: Uuid,
        seq: i64,
        render: F,
    ) -> Arc<str>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Arc<str>>,
    {
        let key = Key {
            tenant,
            source,
            event,
            seq,
            shape: shape.clone(),
        };
        let cell = match self.entries.lock() {
            Ok(mut guard) => {
                let (map, order) = &mut *guard;
                match map.get(&key) {
                    Some(cell) => cell.clone(),
                    None => {
                        let cell = Cell::default();
                        map.insert(key.clone(), cell.clone());
                        order.push_back(key);
                        while order.len() > self.capacity {
                            if let Some(old) = order.pop_front() {
                                map.remove(&old);
                            }
                        }
                        cell
                    }
                }
            }
            // A poisoned cache: render for this subscriber alone.
            Err(_) => Cell::default(),
        };
        cell.get_or_init(|| {
            self.renders.fetch_add(1, Ordering::Relaxed);
            render()
        })
        .await
        .clone()
    }
}

/// The subscription's `payload` for one event: its document run against
/// the schema with the event in the context and no caller.
pub(crate) async fn render(
    schema: &BrainstemSchema,
    shape: &Shape,
    event: Arc<TaskEvent>,
) -> Arc<str> {
    let mut request = Request::new(shape.query.clone())
        .variables(shape.variables.clone())
        .data(RenderOne(event));
    if let Some(name) = &shape.operation_name {
        request = request.operation_name(name.clone());
    }
    let response = schema
        .execute_stream(request)
        .next()
        .await
        .unwrap_or_else(|| {
            Response::from_errors(vec![ServerError::new(
                "the event could not be rendered",
                None,
            )])
        });
    match serde_json::to_string(&response) {
        Ok(json) => json.into(),
        Err(err) => {
            tracing::error!(%err, "could not serialize a task event");
            r#"{"data":null,"errors":[{"message":"internal error","extensions":{"code":"INTERNAL"}}]}"#.into()
        }
    }
}

/// The frames of one registered subscription: a `next` (or legacy `data`)
/// message per event, rendered once per shape for shared events.
pub(crate) fn frames(
    schema: BrainstemSchema,
    fanout: Arc<Fanout>,
    protocol: WebSocketProtocols,
    registration: Registration,
) -> (Option<SlotGuard>, BoxStream<'static, String>) {
    let Registration {
        id,
        shape,
        tenant,
        deliveries,
        slot,
    } = registration;
    let id_json: Arc<str> = serde_json::to_string(&id).unwrap_or_default().into();
    let stream = deliveries.then(move |delivery| {
        let (schema, fanout, shape, id_json) = (
            schema.clone(),
            fanout.clone(),
            shape.clone(),
            id_json.clone(),
        );
        async move {
            let render = |event: Arc<TaskEvent>| {
                fanout.renders.inc();
                render(&schema, &shape, event)
            };
            let payload = match delivery {
                Delivery::Shared { event, seq } => {
                    let (id, live_seq) = (event.id, seq);
                    fanout
                        .frames
                        .payload(tenant, Source::Live, &shape, id, live_seq, || {
                            // A token delta is sent at the subscriber's seq.
                            let event = if event.seq == seq {
                                event
                            } else {
                                let mut at = (*event).clone();
                                at.seq = seq;
                                Arc::new(at)
                            };
                            render(event)
                        })
                        .await
                }
                Delivery::Stored(event) => {
                    let (id, seq) = (event.id, event.seq);
                    fanout
                        .frames
                        .payload(tenant, Source::Stored, &shape, id, seq, || {
                            render(Arc::new(*event))
                        })
                        .await
                }
                Delivery::Own(event) => render(Arc::new(*event)).await,
            };
            fanout.sent.inc();
            next_frame(protocol, &id_json, &payload)
        }
    });
    // Catch-up reads and renders see the subscriber's tenant's rows only.
    let stream = row_security::stream(Some(RowAccess::Tenant(tenant)), stream).boxed();
    (slot, stream)
}

/// `{"type":"next","id":…,"payload":…}` (`"data"` on the legacy protocol),
/// as the connection writes every result (see `crate::ws::protocol`).
pub(crate) fn next_frame(protocol: WebSocketProtocols, id_json: &str, payload: &str) -> String {
    let kind = match protocol {
        WebSocketProtocols::GraphQLWS => "next",
        WebSocketProtocols::SubscriptionsTransportWS => "data",
    };
    let mut frame = String::with_capacity(32 + id_json.len() + payload.len());
    frame.push_str(r#"{"type":""#);
    frame.push_str(kind);
    frame.push_str(r#"","id":"#);
    frame.push_str(id_json);
    frame.push_str(r#","payload":"#);
    frame.push_str(payload);
    frame.push('}');
    frame
}

/// `{"type":"complete","id":…}`.
pub(crate) fn complete_frame(id: &str) -> String {
    let id = serde_json::to_string(id).unwrap_or_default();
    format!(r#"{{"type":"complete","id":{id}}}"#)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(query: &str, variables: serde_json::Value) -> Arc<Shape> {
        let request = Request::new(query).variables(Variables::from_json(variables));
        Shape::of(&request).unwrap()
    }

    fn event(seq: i64) -> TaskEvent {
        TaskEvent {
            id: Uuid::now_v7(),
            tenant: TenantId::from(Uuid::now_v7()),
            task_id: brainstem_domain::TaskId::from(Uuid::now_v7()),
            seq,
            kind: brainstem_domain::tasks::EventKind::TokenDelta,
            step_id: Some("s".into()),
            tool: None,
            status: None,
            summary: String::new(),
            error: None,
            data_keys: Vec::new(),
            data: serde_json::json!({"offset": 0, "text": "hi"}),
            created_at: chrono::Utc::now(),
        }
    }

    const Q: &str = "subscription($id: ID!) { taskEvents(taskId: $id) { seq } }";

    #[test]
    fn only_a_lone_task_events_root_field_takes_the_shared_path() {
        let of = |q: &str| Shape::of(&Request::new(q)).is_some();
        assert!(of(Q));
        assert!(of("subscription { e: taskEvents(taskId: \"x\") { seq } }"));
        assert!(!of("subscription { taskUpdates { id } }"));
        assert!(!of("query { viewer { subject } }"));
        assert!(!of(
            "subscription { a: taskEvents(taskId: \"x\") { seq } b: taskEvents(taskId: \"y\") { seq } }"
        ));
        assert!(!of(
            "subscription($s: Boolean!) { taskEvents(taskId: \"x\") @skip(if: $s) { seq } }"
        ));
        assert!(!of("subscription { taskEvents(taskId: "));
        assert!(!of(""));
        // Several operations: the named one decides.
        let two = "subscription A { taskEvents(taskId: \"x\") { seq } } subscription B { taskUpdates { id } }";
        assert!(Shape::of(&Request::new(two).operation_name("A")).is_some());
        assert!(Shape::of(&Request::new(two).operation_name("B")).is_none());
        assert!(Shape::of(&Request::new(two)).is_none());
    }

    #[test]
    fn shapes_differ_by_document_and_variables() {
        let a = shape(Q, serde_json::json!({"id": "t1"}));
        assert_eq!(a, shape(Q, serde_json::json!({"id": "t1"})));
        assert_ne!(a, shape(Q, serde_json::json!({"id": "t2"})));
        assert_ne!(
            a,
            shape(
                "subscription($id: ID!) { taskEvents(taskId: $id) { seq kind } }",
                serde_json::json!({"id": "t1"})
            )
        );
    }

    #[tokio::test]
    async fn a_payload_is_rendered_once_per_tenant_and_shape() {
        let cache = FrameCache::new(16);
        let acme = TenantId::from(Uuid::now_v7());
        let globex = TenantId::from(Uuid::now_v7());
        let a = shape(Q, serde_json::json!({"id": "t1"}));
        let b = shape(
            "subscription($id: ID!) { taskEvents(taskId: $id) { kind } }",
            serde_json::json!({"id": "t1"}),
        );
        let e = event(3);
        let get = |tenant, shape: &Arc<Shape>, label: &'static str| {
            let shape = shape.clone();
            let cache = &cache;
            let e = &e;
            async move {
                cache
                    .payload(tenant, Source::Live, &shape, e.id, e.seq, || async move {
                        Arc::from(label)
                    })
                    .await
            }
        };
        assert_eq!(&*get(acme, &a, "acme-a").await, "acme-a");
        // The same tenant, event and shape: shared, not rendered again.
        assert_eq!(&*get(acme, &a, "other").await, "acme-a");
        assert_eq!(cache.renders(), 1);
        // Another shape, or another tenant: rendered on its own.
        assert_eq!(&*get(acme, &b, "acme-b").await, "acme-b");
        assert_eq!(&*get(globex, &a, "globex-a").await, "globex-a");
        assert_eq!(cache.renders(), 3);
        // Another event (or the same event at another seq) too.
        let mut later = e.clone();
        later.seq = 4;
        let got = cache
            .payload(acme, Source::Live, &a, later.id, later.seq, || async {
                Arc::from("seq-4")
            })
            .await;
        assert_eq!(&*got, "seq-4");
        assert_eq!(cache.renders(), 4);
        // The stored row of the same event: rendered on its own.
        let got = cache
            .payload(acme, Source::Stored, &a, e.id, e.seq, || async {
                Arc::from("row")
            })
            .await;
        assert_eq!(&*got, "row");
        assert_eq!(cache.renders(), 5);
    }

    #[tokio::test]
    async fn the_cache_is_bounded() {
        let cache = FrameCache::new(2);
        let tenant = TenantId::from(Uuid::now_v7());
        let a = shape(Q, serde_json::json!({}));
        let events: Vec<TaskEvent> = (1..=3).map(event).collect();
        for e in &events {
            cache
                .payload(tenant, Source::Live, &a, e.id, e.seq, || async {
                    Arc::from("x")
                })
                .await;
        }
        // The oldest was evicted: asking again renders it again.
        cache
            .payload(
                tenant,
                Source::Live,
                &a,
                events[0].id,
                events[0].seq,
                || async { Arc::from("x") },
            )
            .await;
        assert_eq!(cache.renders(), 4);
        assert!(cache.entries.lock().unwrap().0.len() <= 2);
    }

    #[test]
    fn frames_match_the_protocols() {
        let payload = r#"{"data":{"taskEvents":{"seq":1}}}"#;
        let next = next_frame(WebSocketProtocols::GraphQLWS, "\"1\"", payload);
        assert_eq!(
            next,
            r#"{"type":"next","id":"1","payload":{"data":{"taskEvents":{"seq":1}}}}"#
        );
        let v: serde_json::Value = serde_json::from_str(&next).unwrap();
        assert_eq!(v["payload"]["data"]["taskEvents"]["seq"], 1);
        assert!(
            next_frame(
                WebSocketProtocols::SubscriptionsTransportWS,
                "\"a\"",
                payload
            )
            .starts_with(r#"{"type":"data","id":"a","#)
        );
        assert_eq!(complete_frame("7"), r#"{"type":"complete","id":"7"}"#);
    }
}
