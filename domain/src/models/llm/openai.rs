//! Any OpenAI-compatible chat endpoint (OpenAI, vLLM, Ollama, llama.cpp
//! server, …): `POST {base_url}/chat/completions` with `stream: true` and
//! `stream_options: {include_usage: true}`; the answer is server-sent events,
//! one `chat.completion.chunk` JSON per `data:` line, then `data: [DONE]`.
//! With `include_usage` the last chunk carries `usage` (and no choices).
//!
//! **Tools.** Offered tools go out as `tools: [{type: "function", function:
//! {name, description, parameters}}]`; the model's calls stream back as
//! `delta.tool_calls` pieces (`index`, then `id` and `function.name` on the
//! first piece, `function.arguments` spread over any number), and
//! `finish_reason` says `tool_calls`, `stop` or `length`. An assistant turn
//! that called tools is sent back with its `tool_calls`, and each result as
//! a `tool` message naming its `tool_call_id`.
//!
//! Answers map to errors as: 429 → `RATE_LIMITED`, 408 → `TIMEOUT`, 5xx →
//! `MODEL_ERROR` (retryable), any other non-2xx → `MODEL_ERROR` (not
//! retryable: the same request will be refused again). The provider's own
//! error message is kept (truncated); the API key never appears in errors
//! or logs.

use std::collections::VecDeque;

use async_trait::async_trait;
use futures_util::{StreamExt, stream};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};

use super::{
    Chunk, ChunkStream, CompletionRequest, ErrorKind, FinishReason, LanguageModel, LlmError,
    Message, Role, TokenUsage, ToolCallDelta, sse::SseParser,
};

pub struct OpenAiCompatible {
    http: reqwest::Client,
    base_url: String,
    api_key: Option<SecretString>,
}

impl OpenAiCompatible {
    /// `base_url` includes the version path, e.g. `https://api.openai.com/v1`
    /// or `http://localhost:11434/v1` (Ollama).
    pub fn new(http: reqwest::Client, base_url: &str, api_key: Option<SecretString>) -> Self {
        Self {
            http,
            base_url: base_url.trim_end_matches('/').to_owned(),
            api_key,
        }
    }

    fn body(request: &CompletionRequest) -> Value {
        let messages: Vec<Value> = request.messages.iter().map(message).collect();
        let mut body = json!({
            "model": request.model,
            "messages": messages,
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.parameters,
                    }})
                })
                .collect();
        }
        body
    }
}

/// One message as the chat API takes it.
fn message(m: &Message) -> Value {
    match m.role {
        Role::Assistant if !m.tool_calls.is_empty() => {
            let calls: Vec<Value> = m
                .tool_calls
                .iter()
                .map(|c| {
                    json!({"id": c.id, "type": "function",
                           "function": {"name": c.name, "arguments": c.arguments}})
                })
                .collect();
            let content = if m.content.is_empty() {
                Value::Null
            } else {
                Value::String(m.content.clone())
            };
            json!({"role": "assistant", "content": content, "tool_calls": calls})
        }
        Role::Tool => json!({
            "role": "tool",
            "tool_call_id": m.tool_call_id.as_deref().unwrap_or_default(),
            "content": m.content,
        }),
        _ => json!({"role": m.role.as_str(), "content": m.content}),
    }
}

#[async_trait]
impl LanguageModel for OpenAiCompatible {
    fn provider(&self) -> &str {
        "openai-compatible"
    }

    async fn stream(&self, request: &CompletionRequest) -> Result<ChunkStream, LlmError> {
        let mut builder = self
            .http
            .post(format!("{}/chat/completions", self.base_url))
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .json(&Self::body(request));
        if let Some(key) = &self.api_key {
            builder = builder.bearer_auth(key.expose_secret());
        }
        let response = builder.send().await.map_err(transport_error)?;
        let status = response.status().as_u16();
        if !(200..=299).contains(&status) {
            let text = response.text().await.unwrap_or_default();
            let kind = match status {
                429 => ErrorKind::RateLimited,
                408 => ErrorKind::Timeout,
                500..=599 => ErrorKind::Unavailable,
                _ => ErrorKind::Rejected,
            };
            return Err(LlmError::new(
                kind,
                format!(
                    "the model provider answered {status}: {}",
                    provider_message(&text)
                ),
            ));
        }
        Ok(chunks(response.bytes_stream()))
    }
}

fn transport_error(err: reqwest::Error) -> LlmError {
    let kind = if err.is_timeout() {
        ErrorKind::Timeout
    } else {
        ErrorKind::Connection
    };
    // `without_url`: the URL is configuration, but keep errors short.
    LlmError::new(
        kind,
        format!("cannot reach the model provider: {}", err.without_url()),
    )
}

/// The provider's error message from an error body, shortened.
fn provider_message(body: &str) -> String {
    let message = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message")
                .or_else(|| v.get("error"))
                .or_else(|| v.get("message"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_else(|| body.trim().to_owned());
    if message.chars().count() > 300 {
        format!("{}…", message.chars().take(300).collect::<String>())
    } else {
        message
    }
}

/// Turn the event stream's bytes into chunks.
fn chunks<S, B>(bytes: S) -> ChunkStream
where
    S: futures_util::Stream<Item = reqwest::Result<B>> + Send + 'static,
    B: AsRef<[u8]>,
{
    struct State<S> {
        bytes: std::pin::Pin<Box<S>>,
        parser: SseParser,
        queue: VecDeque<Result<Chunk, LlmError>>,
        done: bool,
    }
    let state = State {
        bytes: Box::pin(bytes),
        parser: SseParser::default(),
        queue: VecDeque::new(),
        done: false,
    };
    Box::pin(stream::unfold(state, |mut st| async move {
        loop {
            if let Some(item) = st.queue.pop_front() {
                if item.is_err() {
                    st.queue.clear();
                    st.done = true;
                }
                return Some((item, st));
            }
            if st.done {
                return None;
            }
            let events = match st.bytes.next().await {
                Some(Ok(bytes)) => st.parser.feed(bytes.as_ref()),
                Some(Err(err)) => {
                    st.done = true;
                    st.queue.push_back(Err(LlmError::new(
                        ErrorKind::Connection,
                        format!("the model's stream broke: {}", err.without_url()),
                    )));
                    continue;
                }
                None => {
                    st.done = true;
                    st.parser.finish().into_iter().collect()
                }
            };
            for data in events {
                if data.trim() == "[DONE]" {
                    st.done = true;
                    break;
                }
                match parse_chunk(&data) {
                    Ok(chunks) => st.queue.extend(chunks.into_iter().map(Ok)),
                    Err(err) => {
                        st.queue.push_back(Err(err));
                        break;
                    }
                }
            }
        }
    }))
}

/// One `chat.completion.chunk`: the first choice's content (if any) and
/// the usage (if present).
pub(crate) fn parse_chunk(data: &str) -> Result<Vec<Chunk>, LlmError> {
    let value: Value = serde_json::from_str(data).map_err(|e| {
        LlmError::new(
            ErrorKind::InvalidResponse,
            format!("the model's stream held something other than JSON: {e}"),
        )
    })?;
    if let Some(error) = value.get("error") {
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| error.to_string());
        return Err(LlmError::new(
            ErrorKind::Unavailable,
            format!("the model provider failed mid-stream: {message}"),
        ));
    }
    let mut out = Vec::new();
    let choice = value
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|choices| {
            choices
                .iter()
                .find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
        });
    let content = choice
        .and_then(|c| c.pointer("/delta/content"))
        .and_then(Value::as_str);
    if let Some(text) = content.filter(|t| !t.is_empty()) {
        out.push(Chunk::Delta(text.to_owned()));
    }
    let calls = choice
        .and_then(|c| c.pointer("/delta/tool_calls"))
        .and_then(Value::as_array);
    for (position, call) in calls.into_iter().flatten().enumerate() {
        let text = |pointer: &str| call.pointer(pointer).and_then(Value::as_str);
        out.push(Chunk::ToolCall(ToolCallDelta {
            index: call
                .get("index")
                .and_then(Value::as_u64)
                .map_or(position, |i| i as usize),
            id: text("/id").map(str::to_owned),
            name: text("/function/name").map(str::to_owned),
            arguments: text("/function/arguments").unwrap_or_default().to_owned(),
        }));
    }
    let finish = choice
        .and_then(|c| c.get("finish_reason"))
        .and_then(Value::as_str)
        .map(|reason| match reason {
            "tool_calls" | "function_call" => FinishReason::ToolUse,
            "length" => FinishReason::MaxTokens,
            _ => FinishReason::Complete,
        });
    if let Some(reason) = finish {
        out.push(Chunk::Finish(reason));
    }
    if let Some(usage) = value.get("usage").filter(|u| u.is_object()) {
        let n = |k: &str| usage.get(k).and_then(Value::as_u64).unwrap_or(0);
        out.push(Chunk::Usage(TokenUsage {
            input_tokens: n("prompt_tokens"),
            output_tokens: n("completion_tokens"),
            cached_input_tokens: usage
                .pointer("/prompt_tokens_details/cached_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0),
        }));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::llm::Message;

    #[test]
    fn the_request_asks_for_a_stream_with_usage() {
        let body = OpenAiCompatible::body(&CompletionRequest {
            messages: vec![Message::system("be brief"), Message::user("hi")],
            model: "gpt-4o".into(),
            max_tokens: 64,
            temperature: 0.5,
            tools: Vec::new(),
        });
        assert_eq!(
            body,
            json!({
                "model": "gpt-4o",
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": "hi"}
                ],
                "max_tokens": 64,
                "temperature": 0.5,
                "stream": true,
                "stream_options": {"include_usage": true}
            })
        );
    }

    #[test]
    fn chunks_yield_content_and_usage() {
        let role_only = r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#;
        assert_eq!(parse_chunk(role_only).unwrap(), vec![]);
        let text = r#"{"choices":[{"index":0,"delta":{"content":"Hel"}}]}"#;
        assert_eq!(parse_chunk(text).unwrap(), vec![Chunk::Delta("Hel".into())]);
        let usage = r#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}"#;
        assert_eq!(
            parse_chunk(usage).unwrap(),
            vec![Chunk::Usage(TokenUsage {
                input_tokens: 12,
                output_tokens: 3,
                cached_input_tokens: 0,
            })]
        );
        let null_usage = r#"{"choices":[{"index":0,"delta":{"content":"x"}}],"usage":null}"#;
        assert_eq!(
            parse_chunk(null_usage).unwrap(),
            vec![Chunk::Delta("x".into())]
        );
        let err = parse_chunk(r#"{"error":{"message":"overloaded"}}"#).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Unavailable);
        assert!(err.message.contains("overloaded"));
        assert_eq!(
            parse_chunk("not json").unwrap_err().kind,
            ErrorKind::InvalidResponse
        );
    }

    #[tokio::test]
    async fn a_byte_stream_split_anywhere_becomes_chunks_until_done() {
        let body = concat!(
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
            ": comment\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Héllo\"}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\", world\"}}]}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2}}\n\n",
            "data: [DONE]\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"after done\"}}]}\n\n",
        );
        // Split into 7-byte pieces: lines and `é` cross chunk boundaries.
        let pieces: Vec<reqwest::Result<Vec<u8>>> =
            body.as_bytes().chunks(7).map(|c| Ok(c.to_vec())).collect();
        let got: Vec<_> = chunks(stream::iter(pieces)).collect().await;
        assert_eq!(
            got,
            vec![
                Ok(Chunk::Delta("Héllo".into())),
                Ok(Chunk::Delta(", world".into())),
                Ok(Chunk::Usage(TokenUsage {
                    input_tokens: 9,
                    output_tokens: 2,
                    cached_input_tokens: 0,
                })),
            ]
        );
    }

    #[tokio::test]
    async fn garbage_in_the_stream_ends_it_with_an_error() {
        let body = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\ndata: oops\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\"}}]}\n\n";
        let got: Vec<_> = chunks(stream::iter([Ok::<_, reqwest::Error>(
            body.as_bytes().to_vec(),
        )]))
        .collect()
        .await;
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], Ok(Chunk::Delta("a".into())));
        assert_eq!(
            got[1].as_ref().unwrap_err().kind,
            ErrorKind::InvalidResponse
        );
    }

    #[test]
    fn tools_and_a_turn_that_called_them_are_sent_as_the_chat_api_takes_them() {
        use crate::models::llm::{ToolCall, ToolSpec};
        let call = ToolCall {
            id: "call_1".into(),
            name: "memory_search".into(),
            arguments: r#"{"q":"x"}"#.into(),
        };
        let body = OpenAiCompatible::body(&CompletionRequest {
            messages: vec![
                Message::user("find x"),
                Message::assistant("", vec![call]),
                Message::tool("call_1", "[]"),
            ],
            model: "m".into(),
            max_tokens: 10,
            temperature: 0.0,
            tools: vec![ToolSpec {
                name: "memory_search".into(),
                description: "search".into(),
                parameters: json!({"type": "object"}),
            }],
        });
        assert_eq!(
            body["messages"][1],
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "memory_search", "arguments": "{\"q\":\"x\"}"}}
            ]})
        );
        assert_eq!(
            body["messages"][2],
            json!({"role": "tool", "tool_call_id": "call_1", "content": "[]"})
        );
        assert_eq!(
            body["tools"],
            json!([{"type": "function", "function": {
                "name": "memory_search", "description": "search", "parameters": {"type": "object"}}}])
        );
    }

    #[test]
    fn streamed_tool_call_pieces_and_the_finish_reason_are_read() {
        let first = r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_9","type":"function","function":{"name":"memory_search","arguments":""}}]}}]}"#;
        assert_eq!(
            parse_chunk(first).unwrap(),
            vec![Chunk::ToolCall(ToolCallDelta {
                index: 0,
                id: Some("call_9".into()),
                name: Some("memory_search".into()),
                arguments: String::new(),
            })]
        );
        let more = r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"q\":"}}]}}]}"#;
        assert_eq!(
            parse_chunk(more).unwrap(),
            vec![Chunk::ToolCall(ToolCallDelta {
                index: 0,
                id: None,
                name: None,
                arguments: "{\"q\":".into(),
            })]
        );
        let end = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#;
        assert_eq!(
            parse_chunk(end).unwrap(),
            vec![Chunk::Finish(FinishReason::ToolUse)]
        );
        let length = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#;
        assert_eq!(
            parse_chunk(length).unwrap(),
            vec![Chunk::Finish(FinishReason::MaxTokens)]
        );
    }

    #[test]
    fn provider_messages_are_taken_from_error_bodies_and_shortened() {
        assert_eq!(
            provider_message(r#"{"error":{"message":"bad model","type":"x"}}"#),
            "bad model"
        );
        assert_eq!(provider_message("plain text\n"), "plain text");
        assert_eq!(provider_message(&"x".repeat(400)).chars().count(), 301);
    }
}
