//! One WebSocket connection: the protocol's states, its subscriptions, and
//! the one task that reads, runs and writes them.
//!
//! Invariants:
//! - The connection is one task. Reading, the credential check, every
//!   subscription's stream and every write are polled by it; nothing is
//!   spawned per subscription.
//! - Until `connection_init` is acknowledged no operation runs: a
//!   `subscribe` closes the socket with `4401`. Only one `connection_init`
//!   is accepted, and only within `ws_init_timeout_ms`.
//! - An id names at most one running subscription: on
//!   `graphql-transport-ws` a second `subscribe` with it closes the socket
//!   with `4409` (the legacy protocol replaces the first).
//! - A subscription whose operation fails before it runs (its first result
//!   has errors and no path: parse, validation, a limit) ends with `error`
//!   on `graphql-transport-ws`, never with `next` or `complete`. Every
//!   error a client reads has an `extensions.code`.
//! - A subscription the client completes sends nothing more, and its
//!   resources (its stream, its subscription slot) are dropped at once.
//! - A `taskEvents` subscription handed over to the connection (see
//!   [`crate::fanout`]) keeps its id: the hand-over is applied before the
//!   end of the operation that made it, so no `complete` is sent for it.
//! - A connection that authenticated with an API key stops when the key is
//!   revoked: each operation first checks that the key is still live (so
//!   none runs after the revocation commits, whichever process made it),
//!   and the revocation's announcement (see
//!   `brainstem_domain::identity::revocations`) closes the socket with
//!   `4403`. The connection listens for announcements from before its
//!   credential is checked, so none is missed; when some may have been (a
//!   lag, the listener reconnecting) it checks the key again.

use std::{collections::HashMap, future::Future, net::IpAddr, pin::Pin, sync::Arc, task::Poll};

use async_graphql::{Data, Response, http::WebSocketProtocols};
use axum::extract::ws::{CloseFrame, Message, WebSocket};
use brainstem_domain::{
    Actor, ApiKeyId, TenantScope,
    identity::revocations::Revoked,
    row_security::{self, RowAccess},
};
use chrono::{DateTime, Utc};
use futures_util::{
    FutureExt, SinkExt, Stream, StreamExt,
    future::{self, BoxFuture},
    stream::{BoxStream, SplitStream},
};
use serde_json::{Map, Value};
use tokio::{
    sync::{broadcast::error::RecvError, mpsc},
    time::Sleep,
};

use super::protocol::{self, ClientMessage, Invalid};
use crate::{
    ApiState,
    error::ensure_codes,
    fanout::{self, Fanout, Registration, Route, Shape},
    schema::{
        self,
        subscription::{EventRoute, SlotGuard},
    },
};

/// Where the connection is in the protocol.
enum Phase {
    /// No `connection_init` yet.
    Waiting,
    /// `connection_init` received; its credential is being checked.
    Initialising,
    /// Acknowledged: operations run with this context, seeing the rows
    /// of the caller's tenant.
    Ready(Arc<Data>, Option<RowAccess>),
}

/// A running subscription.
enum Subscription {
    /// Waiting for the check that the connection's API key is still live;
    /// then the request runs.
    Checking {
        live: KeyCheck,
        request: Box<async_graphql::Request>,
    },
    /// Run by async-graphql: each result becomes a `next` message.
    Executing {
        results: BoxStream<'static, Response>,
        started: bool,
    },
    /// A `taskEvents` subscription the connection delivers itself.
    Delivered {
        frames: BoxStream<'static, String>,
        /// Held while the subscription runs.
        _slot: Option<SlotGuard>,
    },
}

/// What one subscription has for the socket.
enum Progress {
    /// The connection's key was checked before the operation runs.
    Checked(Result<bool, brainstem_domain::Error>),
    Result {
        result: Box<Response>,
        first: bool,
    },
    /// The operation's stream ended.
    OperationEnded,
    Frame(String),
    /// A delivered subscription's events ended.
    DeliveryEnded,
}

/// What to write after one step: frames, then maybe a close.
#[derive(Default)]
struct Reply {
    frames: Vec<String>,
    close: Option<(u16, String)>,
}

impl Reply {
    fn frame(frame: String) -> Self {
        Self {
            frames: vec![frame],
            close: None,
        }
    }

    fn close(code: u16, reason: impl Into<String>) -> Self {
        Self {
            frames: Vec::new(),
            close: Some((code, reason.into())),
        }
    }
}

/// The credential check's outcome, or why the client may not connect.
type Init = Result<Admitted, String>;

/// A checked credential: the operations' context, when the token expires,
/// and the API key it is, if it is one.
struct Admitted {
    data: Data,
    access: Option<RowAccess>,
    expires_at: Option<DateTime<Utc>>,
    key: Option<HeldKey>,
}

/// The API key a connection authenticated with.
#[derive(Clone, Copy)]
struct HeldKey {
    scope: TenantScope,
    id: ApiKeyId,
}

/// Whether a connection's API key is still live.
type KeyCheck = BoxFuture<'static, Result<bool, brainstem_domain::Error>>;

/// Close code of a check that could not be made (the database failed).
const CLOSE_INTERNAL: u16 = 1011;

struct Connection {
    state: ApiState,
    protocol: WebSocketProtocols,
    phase: Phase,
    subscriptions: HashMap<String, Subscription>,
    /// The API key the connection holds, once acknowledged.
    key: Option<HeldKey>,
    /// A revocation was heard while the credential was being checked: the
    /// check may have read the key before it, so check again once ready.
    recheck_when_ready: bool,
}

pub(super) async fn serve(
    state: ApiState,
    socket: WebSocket,
    protocol: WebSocketProtocols,
    address: Option<IpAddr>,
) {
    state.metrics.websocket_connections.inc();
    // Before any credential is read, so no revocation after it is missed.
    let mut revocations = state.domain.revocations.subscribe();
    let mut hearing = true;
    let mut recheck: Option<KeyCheck> = None;
    let (mut sink, stream) = socket.split();
    let (handover_tx, mut handovers) = mpsc::unbounded_channel::<Registration>();
    let messages = read(stream, protocol, state.fanout.clone(), handover_tx);
    tokio::pin!(messages);
    let mut init: Option<BoxFuture<'static, Init>> = None;
    let mut init_deadline: Option<Pin<Box<Sleep>>> =
        Some(Box::pin(tokio::time::sleep(state.limits.ws_init_timeout)));
    let mut expiry: Option<Pin<Box<Sleep>>> = None;
    let mut departure = state.departure.watch();
    let mut connection = Connection {
        state,
        protocol,
        phase: Phase::Waiting,
        subscriptions: HashMap::new(),
        key: None,
        recheck_when_ready: false,
    };

    loop {
        let reply = tokio::select! {
            message = messages.next() => match message {
                None => break,
                Some(Err(Invalid(reason))) => {
                    Reply::close(protocol::CLOSE_INVALID_MESSAGE, reason)
                }
                Some(Ok(ClientMessage::ConnectionInit(payload))) => {
                    if matches!(connection.phase, Phase::Waiting) {
                        connection.phase = Phase::Initialising;
                        init_deadline = None;
                        let state = connection.state.clone();
                        init = Some(authenticate(state, payload, address).boxed());
                        Reply::default()
                    } else {
                        Reply::close(
                            protocol::CLOSE_TOO_MANY_INITS,
                            "Too many initialisation requests",
                        )
                    }
                }
                Some(Ok(ClientMessage::Terminate)) => break,
                Some(Ok(message)) => connection.on_message(message),
            },
            outcome = until(&mut init) => match outcome {
                Ok(admitted) => {
                    expiry = admitted.expires_at.map(|at| {
                        let left = (at - Utc::now()).to_std().unwrap_or_default();
                        Box::pin(tokio::time::sleep(left))
                    });
                    connection.phase = Phase::Ready(Arc::new(admitted.data), admitted.access);
                    connection.key = admitted.key;
                    if connection.recheck_when_ready {
                        recheck = connection.check_key();
                    }
                    Reply::frame(protocol::ack_frame())
                }
                Err(message) => connection.refused(&message),
            },
            notice = revocations.recv(), if hearing => match notice {
                Ok(Revoked::ApiKey(id)) => connection.on_revoked(Some(id), &mut recheck),
                Ok(Revoked::Unknown) | Err(RecvError::Lagged(_)) => {
                    connection.on_revoked(None, &mut recheck)
                }
                Err(RecvError::Closed) => {
                    hearing = false;
                    Reply::default()
                }
            },
            live = until(&mut recheck) => match live {
                Ok(true) => Reply::default(),
                Ok(false) => Reply::close(protocol::CLOSE_FORBIDDEN, "credential revoked"),
                Err(err) => {
                    tracing::warn!(%err, "a connection's API key could not be checked again");
                    Reply::close(CLOSE_INTERNAL, "internal error")
                }
            },
            () = until(&mut init_deadline) => Reply::close(
                protocol::CLOSE_INIT_TIMEOUT,
                "Connection initialisation timeout",
            ),
            () = until(&mut expiry) => {
                Reply::close(protocol::CLOSE_UNAUTHORIZED, "token expired")
            }
            Ok(_) = departure.wait_for(|leaving| *leaving) => {
                Reply::close(crate::edge::CLOSE_GOING_AWAY, "server shutting down")
            }
            (id, progress) = next_progress(&mut connection.subscriptions) => {
                // Hand-overs made while the operation ran come first: one
                // explains why its operation ends without a result.
                while let Ok(handover) = handovers.try_recv() {
                    connection.hand_over(handover);
                }
                connection.on_progress(id, progress)
            }
            Some(handover) = handovers.recv() => {
                connection.hand_over(handover);
                Reply::default()
            }
        };
        let reply = connection.with_ready_progress(reply, &mut handovers);
        if write(&mut sink, reply).await.is_err() {
            break;
        }
    }
    connection.state.metrics.websocket_connections.dec();
}

/// Write `reply` in one flush (one system call for a burst); `Err` when
/// the socket is done (closed by this reply or gone).
async fn write(
    sink: &mut futures_util::stream::SplitSink<WebSocket, Message>,
    reply: Reply,
) -> Result<(), ()> {
    if !reply.frames.is_empty() {
        for frame in reply.frames {
            sink.feed(Message::Text(frame.into()))
                .await
                .map_err(|_| ())?;
        }
        sink.flush().await.map_err(|_| ())?;
    }
    match reply.close {
        Some((code, reason)) => {
            let _ = sink.send(close(code, &reason)).await;
            Err(())
        }
        None => Ok(()),
    }
}

/// The most frames one write gathers from subscriptions already ready.
const MOST_FRAMES_PER_WRITE: usize = 64;

impl Connection {
    /// `reply` with the frames of the progress already waiting, so that a
    /// burst (a step's end, its task's end, `complete`; many subscribers'
    /// events at once) leaves in one write instead of one write each.
    /// Nothing waits here: what is not ready is left for the next turn.
    fn with_ready_progress(
        &mut self,
        mut reply: Reply,
        handovers: &mut mpsc::UnboundedReceiver<Registration>,
    ) -> Reply {
        while reply.close.is_none() && reply.frames.len() < MOST_FRAMES_PER_WRITE {
            let Some((id, progress)) = next_progress(&mut self.subscriptions).now_or_never() else {
                break;
            };
            while let Ok(handover) = handovers.try_recv() {
                self.hand_over(handover);
            }
            let more = self.on_progress(id, progress);
            reply.frames.extend(more.frames);
            reply.close = more.close;
        }
        reply
    }

    fn on_message(&mut self, message: ClientMessage) -> Reply {
        match message {
            ClientMessage::Ping(payload) => Reply::frame(protocol::pong_frame(payload)),
            ClientMessage::Subscribe { id, request } => self.subscribe(id, *request),
            ClientMessage::Complete { id } => {
                self.subscriptions.remove(&id);
                Reply::default()
            }
            ClientMessage::Pong | ClientMessage::ConnectionInit(_) | ClientMessage::Terminate => {
                Reply::default()
            }
        }
    }

    fn subscribe(&mut self, id: String, request: async_graphql::Request) -> Reply {
        if !matches!(self.phase, Phase::Ready(..)) {
            return Reply::close(protocol::CLOSE_UNAUTHORIZED, "Unauthorized");
        }
        if self.protocol == WebSocketProtocols::GraphQLWS && self.subscriptions.contains_key(&id) {
            let reason = format!("Subscriber for {id} already exists");
            return Reply::close(protocol::CLOSE_DUPLICATE_ID, reason);
        }
        // An API key may have been revoked since it was checked, on any
        // process: nothing runs on it unchecked.
        if let Some(live) = self.check_key() {
            self.subscriptions.insert(
                id,
                Subscription::Checking {
                    live,
                    request: Box::new(request),
                },
            );
            return Reply::default();
        }
        self.run(id, request);
        Reply::default()
    }

    /// Run `request` under `id`.
    fn run(&mut self, id: String, request: async_graphql::Request) {
        let Phase::Ready(data, access) = &self.phase else {
            return;
        };
        let results = self
            .state
            .schema
            .execute_stream_with_session_data(request, data.clone());
        let results = row_security::stream(*access, results).boxed();
        self.subscriptions.insert(
            id,
            Subscription::Executing {
                results,
                started: false,
            },
        );
    }

    /// Whether the connection's API key is still live, when it holds one.
    fn check_key(&self) -> Option<KeyCheck> {
        let key = self.key?;
        let domain = self.state.domain.clone();
        Some(async move { domain.api_keys.is_live(key.scope, key.id).await }.boxed())
    }

    /// A revocation was announced: `Some(key)` that key, `None` some that
    /// may have been missed.
    fn on_revoked(&mut self, revoked: Option<ApiKeyId>, recheck: &mut Option<KeyCheck>) -> Reply {
        match (&self.phase, self.key) {
            // The check to come reads the revocation.
            (Phase::Waiting, _) => Reply::default(),
            (Phase::Initialising, _) => {
                self.recheck_when_ready = true;
                Reply::default()
            }
            (Phase::Ready(..), Some(key)) if revoked == Some(key.id) => {
                Reply::close(protocol::CLOSE_FORBIDDEN, "credential revoked")
            }
            (Phase::Ready(..), Some(_)) if revoked.is_none() => {
                *recheck = self.check_key();
                Reply::default()
            }
            // Tokens are not revoked; another key is not this one's.
            (Phase::Ready(..), _) => Reply::default(),
        }
    }

    fn refused(&self, message: &str) -> Reply {
        let mut reply = Reply::close(protocol::CLOSE_FORBIDDEN, "Forbidden");
        if self.protocol == WebSocketProtocols::SubscriptionsTransportWS {
            reply.frames.push(protocol::connection_error_frame(message));
        }
        reply
    }

    /// A `taskEvents` resolver handed its stream over: the connection
    /// delivers it under the operation's id, if the operation still runs.
    fn hand_over(&mut self, handover: Registration) {
        let id = handover.id.clone();
        if !matches!(
            self.subscriptions.get(&id),
            Some(Subscription::Executing { .. })
        ) {
            return;
        }
        let (slot, frames) = fanout::frames(
            self.state.schema.clone(),
            self.state.fanout.clone(),
            self.protocol,
            handover,
        );
        self.subscriptions.insert(
            id,
            Subscription::Delivered {
                frames,
                _slot: slot,
            },
        );
    }

    fn on_progress(&mut self, id: String, progress: Progress) -> Reply {
        match progress {
            Progress::Checked(Ok(true)) => {
                if let Some(Subscription::Checking { request, .. }) = self.subscriptions.remove(&id)
                {
                    self.run(id, *request);
                }
                Reply::default()
            }
            Progress::Checked(Ok(false)) => {
                Reply::close(protocol::CLOSE_FORBIDDEN, "credential revoked")
            }
            Progress::Checked(Err(err)) => {
                tracing::warn!(%err, "a connection's API key could not be checked");
                Reply::close(CLOSE_INTERNAL, "internal error")
            }
            Progress::Frame(frame) => Reply::frame(frame),
            // A handed-over operation ends empty: its events follow.
            Progress::OperationEnded
                if matches!(
                    self.subscriptions.get(&id),
                    Some(Subscription::Delivered { .. })
                ) =>
            {
                Reply::default()
            }
            Progress::OperationEnded | Progress::DeliveryEnded => {
                self.subscriptions.remove(&id);
                Reply::frame(protocol::complete_frame(&id))
            }
            Progress::Result { mut result, first } => {
                ensure_codes(&mut result.errors, None);
                if first
                    && failed_before_running(&result)
                    && self.protocol == WebSocketProtocols::GraphQLWS
                {
                    self.subscriptions.remove(&id);
                    return Reply::frame(protocol::error_frame(&id, &result.errors));
                }
                Reply::frame(protocol::next_frame(self.protocol, &id, &result))
            }
        }
    }
}

/// An operation's first result says it never ran: no data, and only errors
/// without a path (parse, validation, limits, rate limits).
fn failed_before_running(result: &Response) -> bool {
    result.data == async_graphql::Value::Null
        && !result.errors.is_empty()
        && result.errors.iter().all(|e| e.path.is_empty())
}

/// Check the `connection_init` credential and build the context every
/// operation of the connection runs with.
async fn authenticate(
    state: ApiState,
    payload: Map<String, Value>,
    address: Option<IpAddr>,
) -> Init {
    let Some(header) = super::credential_in(&payload) else {
        return Err("connection_init must carry {\"Authorization\": \"Bearer <token>\"}".into());
    };
    let message = |err: brainstem_domain::Error| crate::error::code_and_message(&err).1;
    let mut credential = state
        .authenticate(Some(&header), address)
        .await
        .map_err(message)?;
    if let Some(tenant) = super::acting_tenant_in(&payload) {
        credential = state
            .auth
            .act_in_tenant(credential, &tenant)
            .await
            .map_err(message)?;
    }
    let expires_at = credential.as_ref().and_then(|c| c.expires_at);
    let access = credential
        .as_ref()
        .and_then(|c| row_security::of_principal(&c.principal));
    let key =
        credential
            .as_ref()
            .and_then(|c| match (c.principal.actor.clone(), c.principal.tenant) {
                (Actor::ApiKey(id), Some(tenant)) => Some(HeldKey {
                    scope: TenantScope::new(tenant),
                    id,
                }),
                _ => None,
            });
    let mut data = schema::caller_data(credential);
    data.insert(schema::subscription::SubscriptionSlots::new(
        state.limits.max_subscriptions,
    ));
    Ok(Admitted {
        data,
        access,
        expires_at,
        key,
    })
}

/// The client's messages, read and checked. A `subscribe` whose only root
/// field is `taskEvents` waits for its turn to be set up (see
/// [`Fanout::setup_turn`]) and gets a [`Route`] in its data, so that its
/// resolver can hand its stream to this connection.
fn read(
    stream: SplitStream<WebSocket>,
    protocol: WebSocketProtocols,
    fanout: Arc<Fanout>,
    handovers: mpsc::UnboundedSender<Registration>,
) -> impl Stream<Item = Result<ClientMessage, Invalid>> {
    stream
        .take_while(|message| future::ready(message.is_ok()))
        .filter_map(move |message| {
            let parsed = match message {
                Ok(Message::Text(text)) => Some(protocol::parse(protocol, text.as_bytes())),
                Ok(Message::Binary(bytes)) => Some(protocol::parse(protocol, &bytes)),
                _ => None,
            };
            let (fanout, handovers) = (fanout.clone(), handovers.clone());
            async move {
                let mut parsed = parsed?;
                if let Ok(ClientMessage::Subscribe { id, request }) = &mut parsed
                    && let Some(shape) = Shape::of(request)
                {
                    let turn = fanout.setup_turn().await;
                    request.data.insert(EventRoute(Box::new(Route {
                        id: id.clone(),
                        shape,
                        handovers,
                        _turn: turn,
                    })));
                }
                Some(parsed)
            }
        })
}

/// The next thing any subscription has; pending while none has one.
async fn next_progress(subscriptions: &mut HashMap<String, Subscription>) -> (String, Progress) {
    future::poll_fn(|cx| {
        for (id, subscription) in subscriptions.iter_mut() {
            let progress = match subscription {
                Subscription::Checking { live, .. } => match live.poll_unpin(cx) {
                    Poll::Ready(checked) => Progress::Checked(checked),
                    Poll::Pending => continue,
                },
                Subscription::Executing { results, started } => match results.poll_next_unpin(cx) {
                    Poll::Ready(Some(result)) => {
                        let first = !*started;
                        *started = true;
                        Progress::Result {
                            result: Box::new(result),
                            first,
                        }
                    }
                    Poll::Ready(None) => Progress::OperationEnded,
                    Poll::Pending => continue,
                },
                Subscription::Delivered { frames, .. } => match frames.poll_next_unpin(cx) {
                    Poll::Ready(Some(frame)) => Progress::Frame(frame),
                    Poll::Ready(None) => Progress::DeliveryEnded,
                    Poll::Pending => continue,
                },
            };
            return Poll::Ready((id.clone(), progress));
        }
        Poll::Pending
    })
    .await
}

/// The output of the future in `slot`, which is then emptied; pending
/// while the slot is empty.
async fn until<F: Future + Unpin>(slot: &mut Option<F>) -> F::Output {
    match slot {
        Some(fut) => {
            let output = fut.await;
            *slot = None;
            output
        }
        None => future::pending().await,
    }
}

fn close(code: u16, reason: &str) -> Message {
    // Close reasons are limited to 123 bytes.
    let reason: String = reason.chars().take(100).collect();
    Message::Close(Some(CloseFrame {
        code,
        reason: reason.into(),
    }))
}
