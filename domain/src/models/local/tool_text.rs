//! Tool calls written as text, the way small local models write them:
//! Qwen's own `<tool_call>{…}</tool_call>` tags, a fenced ```` ```json ````
//! block, or a bare JSON object, each `{"name": …, "arguments": {…}}`
//! (also `"parameters"` for the arguments, or the OpenAI shape
//! `{"function": {"name": …, "arguments": …}}`), one or several.
//!
//! Invariants:
//! - [`call_start`] never says "no call" for a text that [`parse_calls`]
//!   would read a call from: text before it can be streamed safely.
//! - A call whose JSON is cut short (the model stopped inside it) is
//!   closed with up to three braces; one that still does not parse is not
//!   a call, and the text stays an answer. Whether the name is one offered
//!   and the arguments fit is the agent loop's business, which refuses and
//!   tells the model, so a malformed call never fails a task.

use serde_json::Value;

const TAG: &str = "<tool_call>";
const TAG_END: &str = "</tool_call>";
const FENCE: &str = "```";

/// A call read from the model's text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TextCall {
    pub name: String,
    /// The arguments as JSON text.
    pub arguments: String,
}

/// Where a tool call may begin in `text` (a tag, a fence, a `{` opening a
/// line, or the end of the text being the start of a tag or fence).
pub fn call_start(text: &str) -> Option<usize> {
    let mut starts = Vec::new();
    for marker in [TAG, FENCE] {
        if let Some(i) = text.find(marker) {
            starts.push(i);
        }
        for k in 1..marker.len() {
            if text.ends_with(&marker[..k]) {
                starts.push(text.len() - k);
            }
        }
    }
    let mut line_start = 0;
    for line in text.split_inclusive('\n') {
        if line.trim_start().starts_with('{') {
            starts.push(line_start);
            break;
        }
        line_start += line.len();
    }
    starts.into_iter().min()
}

/// The calls in `text`, in order; none if it holds no readable call.
pub fn parse_calls(text: &str) -> Vec<TextCall> {
    let mut blobs: Vec<&str> = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(TAG) {
        let body = &rest[i + TAG.len()..];
        let end = body.find(TAG_END).unwrap_or(body.len());
        blobs.push(&body[..end]);
        rest = &body[end..];
    }
    if blobs.is_empty() {
        let mut rest = text;
        while let Some(i) = rest.find(FENCE) {
            let body = &rest[i + FENCE.len()..];
            // Skip the language name on the fence's line.
            let body = body.find('\n').map_or(body, |n| &body[n + 1..]);
            let end = body.find(FENCE).unwrap_or(body.len());
            blobs.push(&body[..end]);
            rest = body.get(end + FENCE.len()..).unwrap_or("");
        }
    }
    if blobs.is_empty()
        && let Some(i) = call_start(text)
    {
        blobs.push(&text[i..]);
    }
    blobs
        .into_iter()
        .filter_map(json_of)
        .flat_map(|value| match value {
            Value::Array(items) => items,
            other => vec![other],
        })
        .filter_map(|value| call_of(&value))
        .collect()
}

/// `blob` as JSON, closing up to three braces the model left open.
fn json_of(blob: &str) -> Option<Value> {
    let blob = blob.trim();
    if !blob.starts_with('{') && !blob.starts_with('[') {
        return None;
    }
    let mut candidate = blob.to_owned();
    for _ in 0..4 {
        match serde_json::from_str::<Value>(&candidate) {
            Ok(value) => return Some(value),
            Err(e) if e.is_eof() => candidate.push('}'),
            Err(_) => return None,
        }
    }
    None
}

fn call_of(value: &Value) -> Option<TextCall> {
    let call = value
        .get("function")
        .filter(|f| f.is_object())
        .unwrap_or(value);
    let name = call.get("name")?.as_str()?.trim().to_owned();
    if name.is_empty() {
        return None;
    }
    let arguments = match call.get("arguments").or_else(|| call.get("parameters")) {
        Some(Value::String(text)) => text.clone(),
        Some(other) => other.to_string(),
        None => "{}".to_owned(),
    };
    Some(TextCall { name, arguments })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, arguments: &str) -> TextCall {
        TextCall {
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    #[test]
    fn reads_tagged_fenced_and_bare_calls() {
        let tagged = "<tool_call>\n{\"name\": \"memory_search\", \"arguments\": {\"query\": \"Maria\"}}\n</tool_call>";
        assert_eq!(
            parse_calls(tagged),
            vec![call("memory_search", r#"{"query":"Maria"}"#)]
        );
        let fenced = "```json\n{\n  \"name\": \"http_request\",\n  \"arguments\": {\"url\": \"https://x.test/\"}\n}\n```";
        assert_eq!(
            parse_calls(fenced),
            vec![call("http_request", r#"{"url":"https://x.test/"}"#)]
        );
        let bare =
            r#"{"name": "memory_remember", "parameters": {"content": "Berlin closes at 6"}}"#;
        assert_eq!(
            parse_calls(bare),
            vec![call(
                "memory_remember",
                r#"{"content":"Berlin closes at 6"}"#
            )]
        );
        let openai = r#"{"function": {"name": "f", "arguments": "{\"a\": 1}"}}"#;
        assert_eq!(parse_calls(openai), vec![call("f", r#"{"a": 1}"#)]);
        let two = "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n<tool_call>{\"name\": \"b\"}</tool_call>";
        assert_eq!(parse_calls(two), vec![call("a", "{}"), call("b", "{}")]);
    }

    #[test]
    fn closes_a_call_cut_short_and_leaves_prose_alone() {
        let cut = "<tool_call>\n{\"name\": \"memory_search\", \"arguments\": {\"query\": \"Maria\"";
        assert_eq!(
            parse_calls(cut),
            vec![call("memory_search", r#"{"query":"Maria"}"#)]
        );
        assert!(parse_calls("Maria Lopez is allergic to penicillin.").is_empty());
        assert!(parse_calls("<tool_call>\n{\"name\": oops}</tool_call>").is_empty());
        assert!(parse_calls("```rust\nfn main() {}\n```").is_empty());
    }

    #[test]
    fn a_call_never_starts_after_the_point_it_reports() {
        for text in [
            "Let me look.\n<tool_call>{\"name\": \"a\"}</tool_call>",
            "Sure:\n```json\n{\"name\": \"a\"}\n```",
            "  {\"name\": \"a\"}",
            "prose then <tool_c",
            "prose then ``",
        ] {
            let start = call_start(text).expect(text);
            assert!(start <= text.len());
            if !text.ends_with('c') && !text.ends_with('`') {
                assert_eq!(parse_calls(&text[start..]), parse_calls(text), "{text}");
                assert!(!parse_calls(text).is_empty(), "{text}");
            }
        }
        assert_eq!(call_start("Maria Lopez is allergic to penicillin."), None);
    }
}
