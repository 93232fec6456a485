//! GraphQL over WebSocket at `/graphql/ws`, for both subprotocols:
//! `graphql-transport-ws` and the legacy `graphql-ws`
//! (subscriptions-transport-ws).
//!
//! The client authenticates in `connection_init` with a payload of
//! `{"Authorization": "Bearer <token>"}` (or `{"token": "<token>"}`); a
//! platform admin may add `"X-Acting-Tenant": "<slug or id>"`.
//!
//! Each connection runs the protocol itself ([`connection`]), to the letter
//! of `graphql-transport-ws`:
//!
//! | what the client does | the server |
//! |---|---|
//! | sends a message that is not valid JSON, or of an unknown type | closes `4400` |
//! | subscribes before the server acknowledged `connection_init` | closes `4401` |
//! | sends no or a bad credential in `connection_init` | closes `4403` |
//! | sends no `connection_init` within `ws_init_timeout_ms` | closes `4408` |
//! | subscribes with the id of a subscription still running | closes `4409` |
//! | sends a second `connection_init` | closes `4429` |
//! | keeps the socket open past its token's expiry | closes `4401` |
//! | holds an API key that is revoked | closes `4403` |
//! | subscribes to an operation that fails before it runs (invalid, over a limit) | `error` with the coded errors, and nothing more for that id |
//!
//! `taskEvents` subscriptions are delivered by the connection itself (see
//! [`crate::fanout`]): their streams are polled in the connection's own
//! task, with no task or channel per subscription, and each event's payload
//! is rendered once per shape.

mod connection;
pub mod protocol;

use std::{net::SocketAddr, str::FromStr};

use async_graphql::http::WebSocketProtocols;
use axum::{
    Extension,
    extract::{ConnectInfo, State, ws::WebSocketUpgrade},
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde_json::{Map, Value};

use crate::ApiState;

pub use protocol::{
    CLOSE_DUPLICATE_ID, CLOSE_FORBIDDEN, CLOSE_INIT_TIMEOUT, CLOSE_INVALID_MESSAGE,
    CLOSE_TOO_MANY_INITS, CLOSE_UNAUTHORIZED,
};

/// Read and write buffer of each connection, in bytes.
const WS_BUFFER: usize = 1024;

/// Largest message a client may send, as over HTTP: a larger one ends the
/// connection.
const MAX_MESSAGE_BYTES: usize = 2 << 20;

pub async fn handler(
    State(state): State<ApiState>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
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
        .max_message_size(MAX_MESSAGE_BYTES)
        .protocols([protocol.sec_websocket_protocol()])
        .on_upgrade(move |socket| {
            let address = peer.map(|Extension(ConnectInfo(a))| a.ip());
            connection::serve(state, socket, protocol, address)
        })
}

/// The `Authorization` value in a `connection_init` payload.
fn credential_in(payload: &Map<String, Value>) -> Option<String> {
    let field = |name: &str| payload.get(name).and_then(Value::as_str);
    field("Authorization")
        .or_else(|| field("authorization"))
        .map(str::to_owned)
        .or_else(|| {
            field("token")
                .or_else(|| field("apiKey"))
                .map(|t| format!("Bearer {t}"))
        })
        .or_else(|| {
            payload
                .get("headers")
                .and_then(Value::as_object)
                .and_then(credential_in)
        })
}

/// `X-Acting-Tenant` (or `actingTenant`) in the `connection_init` payload.
fn acting_tenant_in(payload: &Map<String, Value>) -> Option<String> {
    let field = |name: &str| payload.get(name).and_then(Value::as_str);
    field("X-Acting-Tenant")
        .or_else(|| field("x-acting-tenant"))
        .or_else(|| field("actingTenant"))
        .map(str::to_owned)
        .or_else(|| {
            payload
                .get("headers")
                .and_then(Value::as_object)
                .and_then(acting_tenant_in)
        })
}
