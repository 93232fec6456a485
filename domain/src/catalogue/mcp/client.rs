//! One `tools/call` (or `tools/list`) to a remote MCP server over Streamable HTTP, made with
//! the outbound client ([`Outbound`]): the allow-list, the address rules,
//! same-origin redirects and the answer's size cap apply to it as to every
//! call a tenant's work steers.
//!
//! [`list_tools`] reads what the server offers, with the same opening;
//! when the server says it announces changes to its list
//! (`capabilities.tools.listChanged`) and keeps a session, [`watch`]
//! listens on the session's stream (a `GET`) for
//! `notifications/tools/list_changed`.
//!
//! The exchange is MCP's: `initialize` (keeping the `Mcp-Session-Id` the
//! server may assign, and the protocol version it chose), the
//! `notifications/initialized` notification, then `tools/call`. An answer
//! may be JSON or an event stream (`text/event-stream`); the message with
//! the request's id is the answer. The step's idempotency key goes in the
//! call's `_meta` (`io.brainstem/idempotencyKey`) and as an
//! `Idempotency-Key` header, so a server can find the effect of an earlier
//! attempt.
//!
//! Failures: a timeout, a connection failure, `429` or `5xx` may pass and
//! are retryable (the step's retry policy applies); any other refusal, a
//! JSON-RPC error or a result with `isError` fails the step for good. A
//! `401` is told apart ([`ExchangeError::Unauthorized`]): a connection
//! with OAuth client credentials tries once more with a new token.

use reqwest::{Method, header::HeaderMap};
use serde_json::{Value, json};

use crate::{
    catalogue::tool::ToolError,
    kernel::outbound::{CallFailure, Outbound},
};

/// The protocol version asked for in `initialize`.
pub const PROTOCOL_VERSION: &str = "2025-06-18";

/// The `_meta` key carrying the step's idempotency key.
pub const IDEMPOTENCY_META: &str = "io.brainstem/idempotencyKey";

/// Where and as whom to call.
pub struct Endpoint<'a> {
    pub url: &'a str,
    /// The `Authorization` header's value, from the connection's secret.
    pub authorization: Option<String>,
}

/// How an exchange failed.
#[derive(Debug)]
pub enum ExchangeError {
    /// The server refused the credential (`401`): a new one may pass.
    Unauthorized(ToolError),
    Failed(ToolError),
}

impl From<ToolError> for ExchangeError {
    fn from(e: ToolError) -> Self {
        ExchangeError::Failed(e)
    }
}

impl From<CallFailure> for ExchangeError {
    fn from(f: CallFailure) -> Self {
        ExchangeError::Failed(f.into())
    }
}

impl From<ExchangeError> for ToolError {
    fn from(e: ExchangeError) -> Self {
        match e {
            ExchangeError::Unauthorized(e) | ExchangeError::Failed(e) => e,
        }
    }
}

/// A session with a server, for one call.
struct Session<'a> {
    outbound: &'a Outbound,
    endpoint: &'a Endpoint<'a>,
    session_id: Option<String>,
    protocol: String,
    /// Whether the server announces changes to its tool list.
    announces_list_changes: bool,
}

/// What `tools/list` read, and where to hear of a change to it.
pub struct Listed {
    pub tools: Vec<Value>,
    /// Set when the server announces changes and gave a session to
    /// listen on.
    pub watch: Option<Watch>,
}

/// A server's session on which it announces changes to its tool list.
#[derive(Clone, Debug)]
pub struct Watch {
    session_id: String,
    protocol: String,
}

/// How listening on a session ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Heard {
    /// The server said its tool list changed.
    ListChanged,
    /// The stream ended, or the server offers none, without a change.
    Closed,
}

/// The largest event of a session's stream read; a larger one ends the
/// listening (the list is then kept until it expires).
pub const MAX_EVENT_BYTES: usize = 64 * 1024;

/// Call `tool` with `arguments`; the call's result (`content`,
/// `structuredContent`, …) when it succeeds.
pub async fn call_tool(
    outbound: &Outbound,
    endpoint: &Endpoint<'_>,
    tool: &str,
    arguments: Value,
    idempotency_key: &str,
) -> Result<Value, ExchangeError> {
    let mut session = Session::open(outbound, endpoint).await?;
    let result = session
        .request(
            2,
            "tools/call",
            json!({
                "name": tool,
                "arguments": arguments,
                "_meta": {IDEMPOTENCY_META: idempotency_key},
            }),
            Some(idempotency_key),
        )
        .await?;
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        return Err(
            ToolError::fatal(format!("MCP tool `{tool}` failed: {}", text_of(&result)))
                .with_output(result)
                .into(),
        );
    }
    Ok(result)
}

/// The tools the server lists (`tools/list`, every page, at most
/// [`MAX_PAGES`]), as it describes them.
pub async fn list_tools(
    outbound: &Outbound,
    endpoint: &Endpoint<'_>,
) -> Result<Listed, ExchangeError> {
    let mut session = Session::open(outbound, endpoint).await?;
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    for page in 0..MAX_PAGES {
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let result = session
            .request(2 + page, "tools/list", params, None)
            .await?;
        if let Some(listed) = result.get("tools").and_then(Value::as_array) {
            tools.extend(listed.iter().cloned());
        }
        cursor = result
            .get("nextCursor")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if cursor.is_none() {
            break;
        }
    }
    let watch = match (&session.session_id, session.announces_list_changes) {
        (Some(id), true) => Some(Watch {
            session_id: id.clone(),
            protocol: session.protocol.clone(),
        }),
        _ => None,
    };
    Ok(Listed { tools, watch })
}

/// Listen on the session of `watch` until the server says its tool list
/// changed, or the stream ends. The stream is read event by event, each
/// at most [`MAX_EVENT_BYTES`]; the caller bounds how long it listens.
pub async fn watch(
    outbound: &Outbound,
    endpoint: &Endpoint<'_>,
    watch: &Watch,
) -> Result<Heard, ToolError> {
    const METHOD: &str = "GET (the session's stream)";
    let mut request = outbound
        .request(Method::GET, endpoint.url)?
        .header("Accept", "text/event-stream")
        .header("MCP-Protocol-Version", &watch.protocol)
        .header("Mcp-Session-Id", &watch.session_id);
    if let Some(authorization) = &endpoint.authorization {
        request = request.header("Authorization", authorization);
    }
    let mut response = outbound.send(request).await.map_err(failure(METHOD))?;
    // A server may offer no stream (`405`): nothing will be heard.
    if !response.status().is_success() {
        return Ok(Heard::Closed);
    }
    let mut events = EventSplitter::default();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| failure(METHOD)(CallFailure::of(&e)))?
    {
        for message in events.push(&chunk)? {
            if message.get("method").and_then(Value::as_str)
                == Some("notifications/tools/list_changed")
            {
                return Ok(Heard::ListChanged);
            }
        }
    }
    Ok(Heard::Closed)
}

/// End the session of `watch` (`DELETE`), as a client that no longer
/// needs it should; a failure only leaves it to the server to expire.
pub async fn close(outbound: &Outbound, endpoint: &Endpoint<'_>, watch: &Watch) {
    let Ok(mut request) = outbound.request(Method::DELETE, endpoint.url) else {
        return;
    };
    request = request
        .header("MCP-Protocol-Version", &watch.protocol)
        .header("Mcp-Session-Id", &watch.session_id);
    if let Some(authorization) = &endpoint.authorization {
        request = request.header("Authorization", authorization);
    }
    if let Err(err) = outbound.send(request).await {
        tracing::debug!(%err, "could not end an MCP session");
    }
}

/// Splits an event stream, as it arrives, into its JSON messages.
#[derive(Default)]
struct EventSplitter {
    pending: Vec<u8>,
}

impl EventSplitter {
    /// The messages of the events `chunk` completes.
    fn push(&mut self, chunk: &[u8]) -> Result<Vec<Value>, ToolError> {
        self.pending
            .extend(chunk.iter().copied().filter(|&b| b != b'\r'));
        let mut messages = Vec::new();
        while let Some(end) = self.pending.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = self.pending.drain(..end + 2).collect();
            messages.extend(message_of(&String::from_utf8_lossy(&event)));
        }
        if self.pending.len() > MAX_EVENT_BYTES {
            return Err(ToolError::fatal(format!(
                "an event of the MCP server's stream is larger than {MAX_EVENT_BYTES} bytes"
            )));
        }
        Ok(messages)
    }
}

/// The JSON-RPC message of one event's `data:` lines.
fn message_of(event: &str) -> Option<Value> {
    let data: Vec<&str> = event
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(str::trim_start)
        .collect();
    serde_json::from_str::<Value>(&data.join("\n")).ok()
}

/// Pages of `tools/list` read before the rest is left out.
pub const MAX_PAGES: u64 = 10;

impl<'a> Session<'a> {
    /// `initialize`, then `notifications/initialized`.
    async fn open(
        outbound: &'a Outbound,
        endpoint: &'a Endpoint<'a>,
    ) -> Result<Self, ExchangeError> {
        let mut session = Session {
            outbound,
            endpoint,
            session_id: None,
            protocol: PROTOCOL_VERSION.to_owned(),
            announces_list_changes: false,
        };
        let initialized = session
            .request(
                1,
                "initialize",
                json!({
                    "protocolVersion": PROTOCOL_VERSION,
                    "capabilities": {},
                    "clientInfo": {"name": "brainstem", "version": env!("CARGO_PKG_VERSION")},
                }),
                None,
            )
            .await?;
        if let Some(version) = initialized.get("protocolVersion").and_then(Value::as_str) {
            session.protocol = version.to_owned();
        }
        session.announces_list_changes = initialized
            .pointer("/capabilities/tools/listChanged")
            .and_then(Value::as_bool)
            == Some(true);
        session.notify("notifications/initialized").await?;
        Ok(session)
    }
}

impl Session<'_> {
    fn post(&self, body: &Value) -> Result<reqwest::RequestBuilder, ToolError> {
        let mut request = self
            .outbound
            .request(Method::POST, self.endpoint.url)?
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", &self.protocol)
            .json(body);
        if let Some(authorization) = &self.endpoint.authorization {
            request = request.header("Authorization", authorization);
        }
        if let Some(id) = &self.session_id {
            request = request.header("Mcp-Session-Id", id);
        }
        Ok(request)
    }

    /// Send a request and return its JSON-RPC `result`.
    async fn request(
        &mut self,
        id: u64,
        method: &str,
        params: Value,
        idempotency_key: Option<&str>,
    ) -> Result<Value, ExchangeError> {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let mut request = self.post(&body)?;
        if let Some(key) = idempotency_key {
            request = request.header("Idempotency-Key", key);
        }
        let response = self.outbound.send(request).await.map_err(failure(method))?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let bytes = self
            .outbound
            .read(response)
            .await
            .map_err(failure(method))?;
        check_status(method, status)?;
        if let Some(session) = header(&headers, "mcp-session-id") {
            self.session_id = Some(session);
        }
        let message = answer_to(&headers, &bytes, id).ok_or_else(|| {
            ToolError::fatal(format!(
                "the MCP server's answer to `{method}` is not JSON-RPC"
            ))
        })?;
        if let Some(error) = message.get("error") {
            let text = error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("an error");
            return Err(
                ToolError::fatal(format!("the MCP server refused `{method}`: {text}")).into(),
            );
        }
        Ok(message.get("result").cloned().unwrap_or(Value::Null))
    }

    async fn notify(&self, method: &str) -> Result<(), ExchangeError> {
        let request = self.post(&json!({"jsonrpc": "2.0", "method": method}))?;
        let response = self.outbound.send(request).await.map_err(failure(method))?;
        check_status(method, response.status().as_u16())
    }
}

fn failure(method: &str) -> impl Fn(CallFailure) -> ToolError + '_ {
    move |f| {
        if f.timed_out || f.retryable {
            ToolError::retryable(format!("the MCP server did not answer `{method}`: {f}"))
        } else {
            ToolError::fatal(format!("`{method}`: {f}"))
        }
    }
}

fn check_status(method: &str, status: u16) -> Result<(), ExchangeError> {
    let answered = format!("the MCP server answered `{method}` with {status}");
    match status {
        200..=299 => Ok(()),
        401 => Err(ExchangeError::Unauthorized(ToolError::fatal(answered))),
        429 | 500..=599 => Err(ToolError::retryable(answered).into()),
        _ => Err(ToolError::fatal(answered).into()),
    }
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// The JSON-RPC message answering request `id`: the body itself, or the
/// event of an event stream that carries it.
fn answer_to(headers: &HeaderMap, body: &[u8], id: u64) -> Option<Value> {
    let is_stream =
        header(headers, "content-type").is_some_and(|ct| ct.starts_with("text/event-stream"));
    if !is_stream {
        return serde_json::from_slice(body).ok();
    }
    let text = String::from_utf8_lossy(body).replace('\r', "");
    text.split("\n\n")
        .filter_map(message_of)
        .find(|message| message.get("id").and_then(Value::as_u64) == Some(id))
}

/// The text of a result's content, for an error message.
fn text_of(result: &Value) -> String {
    result
        .get("content")
        .and_then(Value::as_array)
        .map(|blocks| {
            blocks
                .iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| "no message".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_is_found_in_an_event_stream_by_its_id() {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", "text/event-stream".parse().unwrap());
        let body = b"data: \nretry: 3000\n\n\
            data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n\
            data: {\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"ok\":true}}\n\n";
        assert_eq!(
            answer_to(&headers, body, 2).unwrap()["result"]["ok"],
            json!(true)
        );
        assert!(answer_to(&headers, body, 3).is_none());
        let json = HeaderMap::new();
        assert_eq!(
            answer_to(&json, br#"{"jsonrpc":"2.0","id":1,"result":{}}"#, 1).unwrap()["id"],
            json!(1)
        );
    }

    #[test]
    fn a_stream_is_split_into_messages_as_it_arrives() {
        let mut events = EventSplitter::default();
        assert!(
            events
                .push(b"id: 1\r\ndata: {\"method\":")
                .unwrap()
                .is_empty()
        );
        let messages = events
            .push(b"\"a\"}\r\n\r\ndata: {\"method\":\"b\"}\n\n: ping\n\ndata: ")
            .unwrap();
        let methods: Vec<&str> = messages
            .iter()
            .filter_map(|m| m["method"].as_str())
            .collect();
        assert_eq!(methods, ["a", "b"]);
        assert!(events.push(&[b'x'; MAX_EVENT_BYTES]).is_err());
    }
}
