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
//! module only adds the credential check and the close codes around it.

use std::{
    str::FromStr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use async_graphql::http::{WebSocket as GraphqlWebSocket, WebSocketProtocols, WsMessage};
use axum::{
    extract::{
        State,
        ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade},
    },
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
};
use chrono::{DateTime, Utc};
use futures_util::{SinkExt, StreamExt, future};
use serde_json::Value;
use tokio::sync::oneshot;

use crate::{ApiState, schema};

/// Read and write buffer of each connection, in bytes.
const WS_BUFFER: usize = 4 * 1024;

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

async fn serve(state: ApiState, socket: WebSocket, protocol: WebSocketProtocols) {
    state.metrics.websocket_connections.inc();
    let (mut sink, stream) = socket.split();
    let input = stream
        .take_while(|msg| future::ready(msg.is_ok()))
        .filter_map(|msg| {
            future::ready(match msg {
                Ok(Message::Text(text)) => Some(text.as_bytes().to_vec()),
                Ok(Message::Binary(bytes)) => Some(bytes.to_vec()),
                _ => None,
            })
        });

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

    let mut outgoing = GraphqlWebSocket::new(state.schema.clone(), input, protocol)
        .on_connection_init(on_init)
        .keepalive_timeout(Duration::from_secs(60));

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

    loop {
        tokio::select! {
            message = outgoing.next() => {
                let Some(message) = message else {
                    if rejected.load(Ordering::SeqCst) {
                        let _ = sink.send(close(CLOSE_FORBIDDEN, "forbidden")).await;
                    }
                    break;
                };
                let (out, closing) = match message {
                    WsMessage::Text(text) => (Message::Text(text.into()), false),
                    WsMessage::Close(code, reason) => {
                        let code = if rejected.load(Ordering::SeqCst) { CLOSE_FORBIDDEN } else { code };
                        (close(code, &reason), true)
                    }
                };
                if sink.send(out).await.is_err() || closing {
                    break;
                }
            }
            () = &mut expired => {
                let _ = sink.send(close(CLOSE_TOKEN_EXPIRED, "token expired")).await;
                break;
            }
        }
    }
    state.metrics.websocket_connections.dec();
}

fn close(code: u16, reason: &str) -> Message {
    // Close reasons are limited to 123 bytes.
    let reason: String = reason.chars().take(100).collect();
    Message::Close(Some(CloseFrame {
        code,
        reason: reason.into(),
    }))
}
