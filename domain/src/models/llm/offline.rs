//! The offline provider: no network, no model weights, no randomness. It
//! answers every request with a short text derived from the last user
//! message, streamed word by word, so that plans with LLM steps run (and
//! stream) on a bare machine and in tests. It is not a language model: the
//! answer says so.
//!
//! Token counts are estimates ([`super::estimate_tokens`]: a quarter of the
//! characters, rounded up, plus 4 per message for the prompt), and the
//! answer stops before it would pass `max_tokens`.

use async_trait::async_trait;
use futures_util::stream;

use super::{
    Chunk, ChunkStream, CompletionRequest, LanguageModel, LlmError, Role, TokenUsage,
    estimate_tokens,
};

/// The provider's name and its one model.
pub const PROVIDER: &str = "offline";
pub const MODEL: &str = "offline";

/// How many words of the prompt the answer quotes.
const QUOTED_WORDS: usize = 12;

pub struct Offline;

/// The answer to `request`: the same every time.
pub fn answer(request: &CompletionRequest) -> String {
    let prompt = request
        .messages
        .iter()
        .rev()
        .find(|m| m.role == Role::User)
        .map(|m| m.content.as_str())
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
                Chunk::Usage(_) => None,
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
}
