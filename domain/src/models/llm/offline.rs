//! The offline provider: no network, no model weights, no randomness. It
//! answers every request with a short text derived from the last user
//! message, streamed word by word, so that plans with LLM steps run (and
//! stream) on a bare machine and in tests. It is not a language model: the
//! answer says so.
//!
//! **Tools.** When the request offers tools, the offline model calls them
//! as the last user message tells it to, so that agent steps run end to end
//! without a network: each line of that message of the form
//! `call <tool name> <arguments>` (the name as offered, the arguments the
//! rest of the line, passed on as written, valid JSON or not) becomes one
//! tool call, in order. Once results of its calls follow that message, it
//! answers with them: `[offline model] Tool results: <name>: <result>; …`
//! (each result cut to 200 characters). A line naming a tool that is not
//! offered is ignored.
//!
//! Token counts are estimates ([`super::estimate_tokens`]: a quarter of the
//! characters, rounded up, plus 4 per message for the prompt), and the
//! answer stops before it would pass `max_tokens`.

use async_trait::async_trait;
use futures_util::stream;

use super::{
    Chunk, ChunkStream, CompletionRequest, FinishReason, LanguageModel, LlmError, Role, TokenUsage,
    ToolCall, ToolCallDelta, estimate_tokens,
};

/// The provider's name and its one model.
pub const PROVIDER: &str = "offline";
pub const MODEL: &str = "offline";

/// How many words of the prompt the answer quotes.
const QUOTED_WORDS: usize = 12;

pub struct Offline;

/// How much of each tool result the answer quotes.
const QUOTED_RESULT_CHARS: usize = 200;

/// The tool calls the last user message asks for (see the module's
/// documentation), if the request offers tools and no result of a call
/// follows that message yet.
pub fn tool_calls(request: &CompletionRequest) -> Vec<ToolCall> {
    let Some(last_user) = request.messages.iter().rposition(|m| m.role == Role::User) else {
        return Vec::new();
    };
    if request.tools.is_empty()
        || request.messages[last_user..]
            .iter()
            .any(|m| m.role == Role::Tool)
    {
        return Vec::new();
    }
    request.messages[last_user]
        .content
        .lines()
        .filter_map(|line| {
            let rest = line.trim().strip_prefix("call ")?.trim_start();
            let (name, arguments) = rest.split_once(char::is_whitespace).unwrap_or((rest, "{}"));
            request
                .tools
                .iter()
                .any(|t| t.name == name)
                .then(|| (name.to_owned(), arguments.trim().to_owned()))
        })
        .enumerate()
        .map(|(i, (name, arguments))| ToolCall {
            id: format!("call_{}", i + 1),
            name,
            arguments,
        })
        .collect()
}

/// The answer to `request`: the same every time.
pub fn answer(request: &CompletionRequest) -> String {
    let last_user = request.messages.iter().rposition(|m| m.role == Role::User);
    let results: Vec<String> = last_user
        .map(|at| &request.messages[at..])
        .unwrap_or_default()
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| {
            let name = request
                .messages
                .iter()
                .flat_map(|m| &m.tool_calls)
                .find(|c| Some(&c.id) == m.tool_call_id.as_ref())
                .map_or("?", |c| c.name.as_str());
            let quoted: String = m.content.chars().take(QUOTED_RESULT_CHARS).collect();
            format!("{name}: {quoted}")
        })
        .collect();
    if !results.is_empty() {
        return format!("[offline model] Tool results: {}", results.join("; "));
    }
    let prompt = last_user
        .map(|at| request.messages[at].content.as_str())
        .unwrap_or_default();
    let words: Vec<&str> = prompt.split_whitespace().collect();
    if words.is_empty() {
        return "[offline model] The prompt was empty.".to_owned();
    }
    let quoted = words
        .iter()
        .take(QUOTED_WORDS)
        .copied()
        .collect::<Vec<_>>()
        .join(" ");
    let more = if words.len() > QUOTED_WORDS {
        " …"
    } else {
        ""
    };
    format!(
        "[offline model] Received {} word(s): \"{quoted}{more}\"",
        words.len()
    )
}

#[async_trait]
impl LanguageModel for Offline {
    fn provider(&self) -> &str {
        PROVIDER
    }

    async fn stream(&self, request: &CompletionRequest) -> Result<ChunkStream, LlmError> {
        let calls = tool_calls(request);
        if !calls.is_empty() {
            let output: u64 = calls
                .iter()
                .map(|c| estimate_tokens(&c.name) + estimate_tokens(&c.arguments))
                .sum();
            let mut chunks: Vec<Result<Chunk, LlmError>> = calls
                .into_iter()
                .enumerate()
                .map(|(index, c)| {
                    Ok(Chunk::ToolCall(ToolCallDelta {
                        index,
                        id: Some(c.id),
                        name: Some(c.name),
                        arguments: c.arguments,
                    }))
                })
                .collect();
            chunks.push(Ok(Chunk::Finish(FinishReason::ToolUse)));
            chunks.push(Ok(Chunk::Usage(TokenUsage {
                input_tokens: request.estimated_prompt_tokens(),
                output_tokens: output,
                cached_input_tokens: 0,
            })));
            return Ok(Box::pin(stream::iter(chunks)));
        }
        let limit = u64::from(request.max_tokens);
        let mut text = String::new();
        let mut chunks = Vec::new();
        for (i, word) in answer(request).split(' ').enumerate() {
            let delta = if i == 0 {
                word.to_owned()
            } else {
                format!(" {word}")
            };
            if estimate_tokens(&format!("{text}{delta}")) > limit {
                break;
            }
            text.push_str(&delta);
            chunks.push(Ok(Chunk::Delta(delta)));
        }
        chunks.push(Ok(Chunk::Usage(TokenUsage {
            input_tokens: request.estimated_prompt_tokens(),
            output_tokens: estimate_tokens(&text),
            cached_input_tokens: 0,
        })));
        Ok(Box::pin(stream::iter(chunks)))
    }
}

#[cfg(test)]
mod tests {
    use futures_util::StreamExt;

    use super::*;
    use crate::models::llm::Message;

    fn request(prompt: &str, max_tokens: u32) -> CompletionRequest {
        CompletionRequest {
            messages: vec![Message::system("ignored"), Message::user(prompt)],
            model: MODEL.into(),
            max_tokens,
            temperature: 0.7,
            tools: Vec::new(),
        }
    }

    #[tokio::test]
    async fn streams_a_deterministic_answer_word_by_word() {
        let req = request("Summarise   the quarterly report please", 1000);
        let chunks: Vec<Chunk> = Offline
            .stream(&req)
            .await
            .unwrap()
            .map(|c| c.unwrap())
            .collect()
            .await;
        let text: String = chunks
            .iter()
            .filter_map(|c| match c {
                Chunk::Delta(d) => Some(d.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(
            text,
            "[offline model] Received 5 word(s): \"Summarise the quarterly report please\""
        );
        assert_eq!(text, answer(&req));
        assert!(chunks.len() > 5, "one delta per word");
        assert_eq!(
            chunks.last(),
            Some(&Chunk::Usage(TokenUsage {
                input_tokens: req.estimated_prompt_tokens(),
                output_tokens: estimate_tokens(&text),
                cached_input_tokens: 0,
            }))
        );
    }

    #[tokio::test]
    async fn stops_before_max_tokens() {
        let req = request(&"word ".repeat(50), 5);
        let chunks: Vec<Chunk> = Offline
            .stream(&req)
            .await
            .unwrap()
            .map(|c| c.unwrap())
            .collect()
            .await;
        let Some(Chunk::Usage(usage)) = chunks.last() else {
            panic!("usage last")
        };
        assert!(usage.output_tokens <= 5 && usage.output_tokens > 0);
        assert!(answer(&req).ends_with("…\""));
    }

    fn offering(prompt: &str) -> CompletionRequest {
        CompletionRequest {
            tools: vec![crate::models::llm::ToolSpec {
                name: "memory_search".into(),
                description: "search".into(),
                parameters: serde_json::json!({"type": "object"}),
            }],
            ..request(prompt, 1000)
        }
    }

    #[test]
    fn calls_the_offered_tools_the_user_names_line_by_line() {
        let req = offering(
            "Look this up.\ncall memory_search {\"query\": \"visits\"}\ncall unknown {}\n  call memory_search not json",
        );
        let calls = tool_calls(&req);
        assert_eq!(
            calls,
            vec![
                ToolCall {
                    id: "call_1".into(),
                    name: "memory_search".into(),
                    arguments: "{\"query\": \"visits\"}".into()
                },
                ToolCall {
                    id: "call_2".into(),
                    name: "memory_search".into(),
                    arguments: "not json".into()
                },
            ]
        );
        assert!(
            tool_calls(&request("call memory_search {}", 100)).is_empty(),
            "no tools offered, no calls"
        );
    }

    #[test]
    fn answers_with_the_results_once_they_follow_the_question() {
        let mut req = offering("call memory_search {}");
        let calls = tool_calls(&req);
        req.messages.push(Message::assistant("", calls));
        req.messages
            .push(Message::tool("call_1", "{\"hits\":[\"morning visits\"]}"));
        assert!(tool_calls(&req).is_empty(), "results are in: no more calls");
        assert_eq!(
            answer(&req),
            "[offline model] Tool results: memory_search: {\"hits\":[\"morning visits\"]}"
        );
    }
}
