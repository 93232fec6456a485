//! How an agent loop ends: the task's result (its answer, the model, the
//! tokens of every iteration, why it finished, and the memories the model
//! suggests), stored on the task by the step's commit.
//!
//! Memory suggestions (specification A.24): the structured form first (an
//! answer that is a JSON object `{"content": …, "memory_suggestions": […]}`),
//! else `[REMEMBER: …]` tags in the text (removed from the answer). Only
//! suggestions of 1 to 200 characters with nothing that looks like a secret
//! are kept, at most 5. They become memories only when a client accepts
//! them.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Value, json};

use super::transcript::Tokens;

/// The answer past the iteration cap, verbatim from the specification.
pub const ITERATION_LIMIT_MESSAGE: &str = "I was unable to complete this task due to complexity. The request required too many reasoning steps. Please try breaking it into smaller requests.";

pub const MAX_SUGGESTIONS: usize = 5;
pub const MAX_SUGGESTION_CHARS: usize = 200;

/// Why a loop finished (the GraphQL `FinishReason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    Complete,
    ToolUse,
    MaxTokens,
    IterationLimit,
    Error,
}

impl Finish {
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Complete => "COMPLETE",
            Finish::ToolUse => "TOOL_USE",
            Finish::MaxTokens => "MAX_TOKENS",
            Finish::IterationLimit => "ITERATION_LIMIT",
            Finish::Error => "ERROR",
        }
    }
}

static REMEMBER: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"\[REMEMBER:\s*(.+?)\]").ok());

static SENSITIVE: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    [
        r"(?i)password",
        r"(?i)secret",
        r"(?i)api[_-]?key",
        r"(?i)token",
        r"(?i)credential",
        r"\b[A-Za-z0-9]{32,}\b",
    ]
    .iter()
    .filter_map(|p| Regex::new(p).ok())
    .collect()
});

/// The answer to show and the memories suggested, from the model's text.
pub fn split_suggestions(text: &str) -> (String, Vec<String>) {
    let structured = serde_json::from_str::<Value>(text.trim())
        .ok()
        .and_then(|v| {
            let content = v.get("content")?.as_str()?.to_owned();
            Some((content, crate::tools::string_list(&v, "memory_suggestions")))
        });
    let (content, suggestions) = match structured {
        Some((content, suggestions)) if !suggestions.is_empty() => (content, suggestions),
        Some((content, _)) => fallback(&content),
        None => fallback(text),
    };
    (content, sanitise(suggestions))
}

fn fallback(text: &str) -> (String, Vec<String>) {
    let Some(tag) = REMEMBER.as_ref() else {
        return (text.to_owned(), Vec::new());
    };
    let suggestions = tag
        .captures_iter(text)
        .filter_map(|c| c.get(1).map(|m| m.as_str().trim().to_owned()))
        .collect();
    let cleaned = tag.replace_all(text, "").trim().to_owned();
    (cleaned, suggestions)
}

fn sanitise(suggestions: Vec<String>) -> Vec<String> {
    suggestions
        .into_iter()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty() && s.chars().count() <= MAX_SUGGESTION_CHARS)
        .filter(|s| !SENSITIVE.iter().any(|p| p.is_match(s)))
        .take(MAX_SUGGESTIONS)
        .collect()
}

/// The task's result, as stored (and shown as `Task.result`).
pub fn result(
    content: &str,
    model: &str,
    tokens: Tokens,
    finish: Finish,
    suggestions: &[String],
    tool_calls: u32,
    iterations: u32,
) -> Value {
    json!({
        "content": content,
        "model": model,
        "token_usage": {"input": tokens.input, "output": tokens.output},
        "finish_reason": finish.as_str(),
        "memory_suggestions": suggestions,
        "tool_calls": tool_calls,
        "iterations": iterations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structured_suggestions_come_first() {
        let (content, suggestions) = split_suggestions(
            r#"{"content": "Booked.", "memory_suggestions": ["Prefers mornings", "[REMEMBER: ignored]"]}"#,
        );
        assert_eq!(content, "Booked.");
        assert_eq!(suggestions, ["Prefers mornings", "[REMEMBER: ignored]"]);
    }

    #[test]
    fn tags_are_the_fallback_and_leave_the_answer() {
        let (content, suggestions) =
            split_suggestions("Sure. [REMEMBER: prefers metric units] Done.");
        assert_eq!(content, "Sure.  Done.");
        assert_eq!(suggestions, ["prefers metric units"]);
    }

    #[test]
    fn secrets_long_ones_and_more_than_five_are_dropped() {
        let text = format!(
            "ok [REMEMBER: my password is x] [REMEMBER: {}] [REMEMBER: key {}] {}",
            "a".repeat(201),
            "A1".repeat(20),
            (1..=7)
                .map(|i| format!("[REMEMBER: fact {i}]"))
                .collect::<String>()
        );
        let (content, suggestions) = split_suggestions(&text);
        assert_eq!(content, "ok");
        assert_eq!(
            suggestions,
            ["fact 1", "fact 2", "fact 3", "fact 4", "fact 5"]
        );
    }

    #[test]
    fn a_plain_answer_suggests_nothing() {
        assert_eq!(
            split_suggestions("Paris."),
            ("Paris.".to_owned(), Vec::new())
        );
    }
}
