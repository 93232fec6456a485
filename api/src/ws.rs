//! GraphQL over WebSocket at `/graphql/ws`, for both subprotocols:
//! `graphql-transport-ws` (async-graphql calls it `GraphQLWS`) and the legacy
//! `graphql-ws` (`SubscriptionsTransportWS`).
//!
//! The client authenticates in `connection_init` with a payload of
//! `{"Authorization": "Bearer <token>"}` (or `{"token": "<token>"}`); a
//! platform admin may add `"X-Acting-Tenant": "<slug or id>"`. A
//! missing or bad credential closes the socket with `4403 Forbidden`. When a
//! bearer token expires the socket is closed with `4401 Unauthorized`, so a
//! client must reconnect with a fresh token.
//!
//! async-graphql's transport-agnostic `WebSocket` runs the protocol; this
//! module adds the credential check and the close codes around it, and
//! delivers `taskEvents` subscriptions itself (see [`crate::fanout`]): their
//! streams are polled in the connection's own task, with no task or channel
//! per subscription, and each event's payload is rendered once per shape.

use std::{
    collections::HashMap,
    str::FromStr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use async_graphql::http::{
    ClientMessage, WebSocket as GraphqlWebSocket, WebSocketProtocols, WsMessage,
};
use axum::{
    extract::{
        State,
        ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade},
    },
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
};
use chrono::{DateTime, Utc};
use futures_util::{SinkExt, StreamExt, future, stream::BoxStream};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::{
    ApiState,
    fanout::{self, Control, Route, Shape},
    schema::{self, subscription::SlotGuard},
};

/// Read and write buffer of each connection, in bytes.
const WS_BUFFER: usize = 1024;

/// Close code when `connection_init` carries no valid credential.
pub const CLOSE_FORBIDDEN: u16 = 4403;
/// Close code when the connection's bearer token expires.
pub const CLOSE_TOKEN_EXPIRED: u16 = 4401;

pub async fn handler(
    State(state): State<ApiState>,
    headers: HeaderMap,
    upgrade: WebSocketUpgrade,
) -> Response {
    let Some(protocol) = headers
        .get(header::SEC_WEBSOCKET_PROTOCOL)
        .and_then(|v| v.to_str().ok())
        .and_then(|list| {
            list.split(',')
                .find_map(|p| WebSocketProtocols::from_str(p.trim()).ok())
        })
    else {
        return (
            StatusCode::BAD_REQUEST,
            "use the graphql-transport-ws (or legacy graphql-ws) subprotocol",
        )
            .into_response();
    };
    // GraphQL messages are small: modest buffers keep an idle subscriber
    // cheap (the defaults reserve 128 KiB each way per connection).
    upgrade
        .read_buffer_size(WS_BUFFER)
        .write_buffer_size(WS_BUFFER)
        .protocols([protocol.sec_websocket_protocol()])
        .on_upgrade(move |socket| serve(state, socket, protocol))
}

fn credential_in(payload: &Value) -> Option<String> {
    let field = |name: &str| payload.get(name).and_then(Value::as_str);
    field("Authorization")
        .or_else(|| field("authorization"))
        .map(str::to_owned)
        .or_else(|| {
            field("token")
                .or_else(|| field("apiKey"))
                .map(|t| format!("Bearer {t}"))
        })
        .or_else(|| payload.get("headers").and_then(credential_in))
}

/// `X-Acting-Tenant` (or `actingTenant`) in the `connection_init` payload.
fn acting_tenant_in(payload: &Value) -> Option<String> {
    let field = |name: &str| payload.get(name).and_then(Value::as_str);
    field("X-Acting-Tenant")
        .or_else(|| field("x-acting-tenant"))
        .or_else(|| field("actingTenant"))
        .map(str::to_owned)
        .or_else(|| payload.get("headers").and_then(acting_tenant_in))
}

/// A `taskEvents` subscription the connection delivers itself.
struct Delivered {
    frames: BoxStream<'static, String>,
    /// Held while the subscription runs.
    _slot: Option<SlotGuard>,
}

/// What the connection's delivered subscriptions have for the socket.
enum Ready {
    Frame(String),
    Ended(String),
}

/// The next frame of any delivered subscription; pending while none has one.
async fn next_delivered(delivered: &mut HashMap<String, Delivered>) -> Ready {
    future::poll_fn(|cx| {
        for (id, sub) in delivered.iter_mut() {
            match sub.frames.poll_next_unpin(cx) {
                std::task::Poll::Ready(Some(frame)) => {
                    return std::task::Poll::Ready(Ready::Frame(frame));
                }
                std::task::Poll::Ready(None) => {
                    return std::task::Poll::Ready(Ready::Ended(id.clone()));
                }
                std::task::Poll::Pending => {}
            }
        }
        std::task::Poll::Pending
    })
    .await
}

/// The id of a `complete` message async-graphql writes.
fn completed_id(text: &str) -> Option<String> {
    if !text.starts_with(r#"{"type":"complete""#) {
        return None;
    }
    let v: Value = serde_json::from_str(text).ok()?;
    v["id"].as_str().map(str::to_owned)
}

async fn serve(state: ApiState, socket: WebSocket, protocol: WebSocketProtocols) {
    state.metrics.websocket_connections.inc();
    let (mut sink, stream) = socket.split();
    let (control_tx, mut control_rx) = mpsc::unbounded_channel::<Control>();
    let input = {
        let control = control_tx.clone();
        let fanout = state.fanout.clone();
        stream
            .take_while(|msg| future::ready(msg.is_ok()))
            .filter_map(move |msg| {
                let bytes = match msg {
                    Ok(Message::Text(text)) => Some(text.as_bytes().to_vec()),
                    Ok(Message::Binary(bytes)) => Some(bytes.to_vec()),
                    _ => None,
                };
                let (control, fanout) = (control.clone(), fanout.clone());
                async move {
                    match bytes {
                        Some(b) => {
                            Some(route(&control, &fanout, ClientMessage::from_bytes(b)).await)
                        }
                        None => None,
                    }
                }
            })
    };
    drop(control_tx);

    let rejected = Arc::new(AtomicBool::new(false));
    let (expiry_tx, expiry_rx) = oneshot::channel::<DateTime<Utc>>();
    let auth = state.auth.clone();
    let max_subscriptions = state.limits.max_subscriptions;
    let on_init = {
        let rejected = rejected.clone();
        move |payload: Value| async move {
            let result = match credential_in(&payload) {
                None => Err(brainstem_domain::Error::Unauthenticated(
                    "connection_init must carry {\"Authorization\": \"Bearer <token>\"}".into(),
                )),
                Some(header) => match auth.authenticate_header(Some(&header)).await {
                    Ok(credential) => match acting_tenant_in(&payload) {
                        Some(tenant) => auth.act_in_tenant(credential, &tenant).await,
                        None => Ok(credential),
                    },
                    Err(err) => Err(err),
                },
            };
            match result {
                Ok(credential) => {
                    if let Some(expires_at) = credential.as_ref().and_then(|c| c.expires_at) {
                        let _ = expiry_tx.send(expires_at);
                    }
                    let mut data = schema::caller_data(credential);
                    data.insert(schema::subscription::SubscriptionSlots::new(
                        max_subscriptions,
                    ));
                    Ok(data)
                }
                Err(err) => {
                    rejected.store(true, Ordering::SeqCst);
                    let (_, message) = crate::error::code_and_message(&err);
                    Err(async_graphql::Error::new(message))
                }
            }
        }
    };

    let outgoing = GraphqlWebSocket::from_message_stream(state.schema.clone(), input, protocol)
        .on_connection_init(on_init)
        .keepalive_timeout(Duration::from_secs(60));
    tokio::pin!(outgoing);

    let expired = async move {
        match expiry_rx.await {
            Ok(at) => {
                let left = (at - Utc::now()).to_std().unwrap_or(Duration::ZERO);
                tokio::time::sleep(left).await;
            }
            Err(_) => future::pending::<()>().await,
        }
    };
    tokio::pin!(expired);

    // Subscriptions delivered here, by id, and how many of async-graphql's
    // `complete` messages for an id to drop: its stream of a delivered
    // subscription is empty and ends at once.
    let mut delivered: HashMap<String, Delivered> = HashMap::new();
    let mut handed_over: HashMap<String, usize> = HashMap::new();
    let apply = |control: Control,
                 delivered: &mut HashMap<String, Delivered>,
                 handed_over: &mut HashMap<String, usize>|
     -> Option<String> {
        match control {
            Control::Register(registration) => {
                let id = registration.id.clone();
                *handed_over.entry(id.clone()).or_default() += 1;
                let (slot, frames) = fanout::frames(
                    state.schema.clone(),
                    state.fanout.clone(),
                    protocol,
                    registration,
                );
                delivered.insert(
                    id,
                    Delivered {
                        frames,
                        _slot: slot,
                    },
                );
                None
            }
            // async-graphql replaces a stream silently; so does this.
            Control::Replace(id) => {
                delivered.remove(&id);
                None
            }
            // async-graphql answers a stop of a stream it has with `complete`.
            Control::Stop(id) => delivered.remove(&id).map(|_| fanout::complete_frame(&id)),
        }
    };

    loop {
        let out = tokio::select! {
            message = outgoing.next() => {
                // The controls sent while async-graphql ran come first: a
                // registration precedes the `complete` it explains.
                let mut extra = Vec::new();
                while let Ok(control) = control_rx.try_recv() {
                    extra.extend(apply(control, &mut delivered, &mut handed_over));
                }
                let mut failed = false;
                for frame in extra {
                    failed |= sink.send(Message::Text(frame.into())).await.is_err();
                }
                if failed {
                    break;
                }
                let Some(message) = message else {
                    if rejected.load(Ordering::SeqCst) {
                        let _ = sink.send(close(CLOSE_FORBIDDEN, "forbidden")).await;
                    }
                    break;
                };
                match message {
                    WsMessage::Text(text) => {
                        if let Some(id) = completed_id(&text)
                            && let Some(n) = handed_over.get_mut(&id)
                        {
                            *n -= 1;
                            if *n == 0 {
                                handed_over.remove(&id);
                            }
                            continue;
                        }
                        (Message::Text(text.into()), false)
                    }
                    WsMessage::Close(code, reason) => {
                        let code = if rejected.load(Ordering::SeqCst) { CLOSE_FORBIDDEN } else { code };
                        (close(code, &reason), true)
                    }
                }
            }
            Some(control) = control_rx.recv() => {
                match apply(control, &mut delivered, &mut handed_over) {
                    Some(frame) => (Message::Text(frame.into()), false),
                    None => continue,
                }
            }
            ready = next_delivered(&mut delivered) => match ready {
                Ready::Frame(frame) => (Message::Text(frame.into()), false),
                Ready::Ended(id) => {
                    delivered.remove(&id);
                    (Message::Text(fanout::complete_frame(&id).into()), false)
                }
            },
            () = &mut expired => {
                let _ = sink.send(close(CLOSE_TOKEN_EXPIRED, "token expired")).await;
                break;
            }
        };
        let (out, closing) = out;
        if sink.send(out).await.is_err() || closing {
            break;
        }
    }
    state.metrics.websocket_connections.dec();
}

/// Reads one client message: a `subscribe` whose only root field is
/// `taskEvents` gets a [`Route`] in its data, so the resolver can hand its
/// stream to this connection; subscription ids the connection may be
/// delivering are told of a new `subscribe` or a stop.
async fn route(
    control: &mpsc::UnboundedSender<Control>,
    fanout: &fanout::Fanout,
    message: serde_json::Result<ClientMessage>,
) -> serde_json::Result<ClientMessage> {
    match message {
        Ok(ClientMessage::Start { id, mut payload }) => {
            let _ = control.send(Control::Replace(id.clone()));
            if let Some(shape) = Shape::of(&payload) {
                let turn = fanout.setup_turn().await;
                payload.data.insert(Route {
                    id: id.clone(),
                    shape,
                    control: control.clone(),
                    _turn: turn,
                });
            }
            Ok(ClientMessage::Start { id, payload })
        }
        Ok(ClientMessage::Stop { id }) => {
            let _ = control.send(Control::Stop(id.clone()));
            Ok(ClientMessage::Stop { id })
        }
        other => other,
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
