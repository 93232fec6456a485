//! The messages of GraphQL over WebSocket, as they are read and written,
//! and the close codes of `graphql-transport-ws`.
//!
//! Invariants:
//! - Reading is strict, as `graphql-transport-ws` requires: a message that
//!   is not a JSON object, has a `type` the client may not send, or lacks a
//!   field its type needs is [`Invalid`], and the connection closes with
//!   [`CLOSE_INVALID_MESSAGE`]. The legacy `graphql-ws` also accepts its
//!   own names (`start`, `stop`, `connection_terminate`).
//! - Every frame written here is one JSON object with a `type`; an `id` is
//!   always a JSON string, escaped by serde.

use async_graphql::{Request, Response, ServerError, http::WebSocketProtocols};
use serde_json::{Map, Value, json};

/// A message that is not valid: closes with [`CLOSE_INVALID_MESSAGE`].
pub const CLOSE_INVALID_MESSAGE: u16 = 4400;
/// A `subscribe` before the connection is acknowledged, or a token that
/// has expired.
pub const CLOSE_UNAUTHORIZED: u16 = 4401;
/// `connection_init` carried no valid credential.
pub const CLOSE_FORBIDDEN: u16 = 4403;
/// No `connection_init` in time.
pub const CLOSE_INIT_TIMEOUT: u16 = 4408;
/// A `subscribe` with the id of a subscription still running.
pub const CLOSE_DUPLICATE_ID: u16 = 4409;
/// A second `connection_init`.
pub const CLOSE_TOO_MANY_INITS: u16 = 4429;

/// What a client may send.
#[derive(Debug)]
pub enum ClientMessage {
    /// `connection_init`, with its payload (an object; empty if none).
    ConnectionInit(Map<String, Value>),
    Ping(Option<Value>),
    Pong,
    /// `subscribe` (legacy `start`).
    Subscribe {
        id: String,
        request: Box<Request>,
    },
    /// `complete` (legacy `stop`): the client stops listening.
    Complete {
        id: String,
    },
    /// Legacy `connection_terminate`.
    Terminate,
}

/// Why a message is not valid; the close reason.
#[derive(Debug, PartialEq, Eq)]
pub struct Invalid(pub String);

/// Read one message of `protocol`.
pub fn parse(protocol: WebSocketProtocols, bytes: &[u8]) -> Result<ClientMessage, Invalid> {
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|err| Invalid(format!("Invalid message received: {err}")))?;
    let Value::Object(mut message) = value else {
        return Err(Invalid("Invalid message received: not an object".into()));
    };
    let kind = match message.get("type") {
        Some(Value::String(kind)) => kind.clone(),
        _ => return Err(Invalid("Invalid message received: no type".into())),
    };
    let legacy = protocol == WebSocketProtocols::SubscriptionsTransportWS;
    match kind.as_str() {
        "connection_init" => match optional_object(&mut message, "payload", &kind)? {
            Some(Value::Object(payload)) => Ok(ClientMessage::ConnectionInit(payload)),
            _ => Ok(ClientMessage::ConnectionInit(Map::new())),
        },
        "ping" => Ok(ClientMessage::Ping(optional_object(
            &mut message,
            "payload",
            &kind,
        )?)),
        "pong" => {
            optional_object(&mut message, "payload", &kind)?;
            Ok(ClientMessage::Pong)
        }
        "subscribe" => subscribe(&mut message, &kind),
        "start" if legacy => subscribe(&mut message, &kind),
        "complete" => Ok(ClientMessage::Complete {
            id: id_of(&message, &kind)?,
        }),
        "stop" if legacy => Ok(ClientMessage::Complete {
            id: id_of(&message, &kind)?,
        }),
        "connection_terminate" if legacy => Ok(ClientMessage::Terminate),
        other => Err(Invalid(format!(
            "Unexpected message of type {other} received"
        ))),
    }
}

fn subscribe(message: &mut Map<String, Value>, kind: &str) -> Result<ClientMessage, Invalid> {
    let id = id_of(message, kind)?;
    let Some(Value::Object(mut payload)) = message.remove("payload") else {
        return Err(Invalid(format!(
            "Invalid message received: {kind} needs a payload object"
        )));
    };
    // A persisted query may come as its hash alone.
    let persisted = payload
        .get("extensions")
        .and_then(|e| e.get("persistedQuery"))
        .is_some();
    match payload.get("query") {
        Some(Value::String(_)) => {}
        None | Some(Value::Null) if persisted => {}
        _ => {
            return Err(Invalid(format!(
                "Invalid message received: {kind} payload needs a query string"
            )));
        }
    }
    for field in ["variables", "extensions"] {
        optional_object(&mut payload, field, kind)?;
    }
    match payload.get("operationName") {
        None | Some(Value::Null | Value::String(_)) => {}
        _ => {
            return Err(Invalid(format!(
                "Invalid message received: {kind} operationName must be a string"
            )));
        }
    }
    let request: Request = serde_json::from_value(Value::Object(payload))
        .map_err(|err| Invalid(format!("Invalid message received: {err}")))?;
    Ok(ClientMessage::Subscribe {
        id,
        request: Box::new(request),
    })
}

/// `message[field]` if it is an object; absent and `null` are `None`.
/// The value stays in `message`.
fn optional_object(
    message: &mut Map<String, Value>,
    field: &str,
    kind: &str,
) -> Result<Option<Value>, Invalid> {
    match message.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(_)) => Ok(message.get(field).cloned()),
        Some(_) => Err(Invalid(format!(
            "Invalid message received: {kind} {field} must be an object"
        ))),
    }
}

fn id_of(message: &Map<String, Value>, kind: &str) -> Result<String, Invalid> {
    match message.get("id") {
        Some(Value::String(id)) if !id.is_empty() => Ok(id.clone()),
        _ => Err(Invalid(format!(
            "Invalid message received: {kind} needs a non-empty string id"
        ))),
    }
}

pub fn ack_frame() -> String {
    r#"{"type":"connection_ack"}"#.to_owned()
}

pub fn pong_frame(payload: Option<Value>) -> String {
    match payload {
        Some(payload) => json!({"type": "pong", "payload": payload}).to_string(),
        None => r#"{"type":"pong"}"#.to_owned(),
    }
}

/// One result of a subscription: `next` (legacy `data`).
pub fn next_frame(protocol: WebSocketProtocols, id: &str, response: &Response) -> String {
    let id = serde_json::to_string(id).unwrap_or_default();
    let payload = serde_json::to_string(response).unwrap_or_else(|err| {
        tracing::error!(%err, "could not serialize a subscription result");
        r#"{"data":null,"errors":[{"message":"internal error","extensions":{"code":"INTERNAL"}}]}"#
            .into()
    });
    crate::fanout::next_frame(protocol, &id, &payload)
}

/// The errors that ended a subscription before it ran: `error`, whose
/// payload is the list of errors.
pub fn error_frame(id: &str, errors: &[ServerError]) -> String {
    json!({"type": "error", "id": id, "payload": errors}).to_string()
}

pub fn complete_frame(id: &str) -> String {
    crate::fanout::complete_frame(id)
}

/// Legacy `connection_error`, sent before the socket closes.
pub fn connection_error_frame(message: &str) -> String {
    json!({"type": "connection_error", "payload": {"message": message}}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MODERN: WebSocketProtocols = WebSocketProtocols::GraphQLWS;
    const LEGACY: WebSocketProtocols = WebSocketProtocols::SubscriptionsTransportWS;

    fn parse_json(protocol: WebSocketProtocols, message: Value) -> Result<ClientMessage, Invalid> {
        parse(protocol, message.to_string().as_bytes())
    }

    #[test]
    fn valid_messages_parse() {
        let init = parse_json(MODERN, json!({"type": "connection_init"})).unwrap();
        assert!(matches!(init, ClientMessage::ConnectionInit(p) if p.is_empty()));
        let init = parse_json(
            MODERN,
            json!({"type": "connection_init", "payload": {"a": 1}}),
        );
        assert!(matches!(init, Ok(ClientMessage::ConnectionInit(p)) if p["a"] == 1));
        let sub = parse_json(
            MODERN,
            json!({"type": "subscribe", "id": "1", "payload": {
                "query": "subscription { x }", "variables": {"a": 1}, "operationName": null}}),
        )
        .unwrap();
        match sub {
            ClientMessage::Subscribe { id, request } => {
                assert_eq!(id, "1");
                assert_eq!(request.query, "subscription { x }");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse_json(MODERN, json!({"type": "complete", "id": "1"})),
            Ok(ClientMessage::Complete { id }) if id == "1"
        ));
        assert!(matches!(
            parse_json(MODERN, json!({"type": "ping", "payload": {"t": 1}})),
            Ok(ClientMessage::Ping(Some(_)))
        ));
    }

    #[test]
    fn invalid_messages_are_refused() {
        for bad in [
            json!("connection_init"),
            json!({"type": "connection_init", "payload": "token"}),
            json!({"type": "hello"}),
            json!({"id": "1"}),
            json!({"type": "subscribe", "payload": {"query": "{ a }"}}),
            json!({"type": "subscribe", "id": "", "payload": {"query": "{ a }"}}),
            json!({"type": "subscribe", "id": "1"}),
            json!({"type": "subscribe", "id": "1", "payload": {"qeury": "{ a }"}}),
            json!({"type": "subscribe", "id": "1", "payload": {"query": "{ a }", "variables": []}}),
            json!({"type": "subscribe", "id": "1", "payload": {"query": "{ a }", "operationName": 1}}),
            json!({"type": "complete"}),
            json!({"type": "next", "id": "1", "payload": {}}),
            json!({"type": "start", "id": "1", "payload": {"query": "{ a }"}}),
            json!({"type": "connection_terminate"}),
        ] {
            assert!(
                parse_json(MODERN, bad.clone()).is_err(),
                "{bad} was accepted"
            );
        }
        assert!(parse(MODERN, b"{not json").is_err());
    }

    #[test]
    fn the_legacy_protocol_accepts_its_names() {
        assert!(matches!(
            parse_json(
                LEGACY,
                json!({"type": "start", "id": "1", "payload": {"query": "{ a }"}})
            ),
            Ok(ClientMessage::Subscribe { .. })
        ));
        assert!(matches!(
            parse_json(LEGACY, json!({"type": "stop", "id": "1"})),
            Ok(ClientMessage::Complete { .. })
        ));
        assert!(matches!(
            parse_json(LEGACY, json!({"type": "connection_terminate"})),
            Ok(ClientMessage::Terminate)
        ));
    }

    #[test]
    fn a_persisted_query_may_come_without_its_text() {
        let sub = parse_json(
            MODERN,
            json!({"type": "subscribe", "id": "1", "payload": {
                "extensions": {"persistedQuery": {"version": 1, "sha256Hash": "ab"}}}}),
        );
        assert!(
            matches!(sub, Ok(ClientMessage::Subscribe { .. })),
            "{sub:?}"
        );
    }

    #[test]
    fn frames_are_json_with_escaped_ids() {
        let frame: Value = serde_json::from_str(&error_frame("a\"b", &[])).unwrap();
        assert_eq!(frame, json!({"type": "error", "id": "a\"b", "payload": []}));
        let frame: Value = serde_json::from_str(&pong_frame(Some(json!({"t": 1})))).unwrap();
        assert_eq!(frame, json!({"type": "pong", "payload": {"t": 1}}));
        let frame: Value = serde_json::from_str(&connection_error_frame("no")).unwrap();
        assert_eq!(frame["payload"]["message"], "no");
    }
}
