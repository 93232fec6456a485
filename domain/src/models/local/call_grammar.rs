//! The shape a tool call must take ([`CallGrammar`]), built from the tools
//! offered and checked on the text a local model is writing, so that
//! decoding lets through only tokens that keep a call valid:
//! `{"name": <an offered tool>, "arguments": {…}}`, whose arguments hold
//! only the tool's parameters (when its schema lists them), each of its
//! type (string, number, integer, boolean, object, array, one of a string
//! enum; any JSON value otherwise), and every required one before the
//! object closes. Opened by Qwen's `<tool_call>` tag, a ```` ```json ````
//! fence, or a bare `{` opening a line, as [`super::tool_text`] reads them.
//!
//! Invariants:
//! - [`CallGrammar::check`] is a prefix check: it answers
//!   [`Verdict::Invalid`] only when no continuation of the text is a valid
//!   call, so a decoder that never keeps an `Invalid` text ends with
//!   valid calls, or one cut short by its token budget.
//! - Text that is not a call (before a call starts, a fence holding code)
//!   is never constrained.
//! - What the grammar cannot see (a string's length or format, numbers'
//!   ranges) is left to the agent loop, which checks every call against
//!   the tool's schema and refuses a wrong one without failing the task.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::models::llm::ToolSpec;

const TAG: &str = "<tool_call>";
const FENCE: &str = "```";
/// Deeper JSON than this inside arguments is refused.
const MAX_DEPTH: usize = 16;
/// Longer runs of whitespace between tokens are refused: a model held
/// back from what it wanted to write must not pad the call forever.
const MAX_SPACE: usize = 24;

/// What may continue a text, as far as a call is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No continuation makes it a valid call.
    Invalid,
    /// Valid so far: a call not finished, or not a call at all.
    Open,
    /// A whole call ends at this byte offset.
    Complete(usize),
}

/// The calls the offered tools allow; see the module docs.
pub struct CallGrammar {
    tools: Vec<Tool>,
}

struct Tool {
    name: String,
    /// `None`: the schema lists no properties, so any keys.
    properties: Option<BTreeMap<String, Kind>>,
    required: Vec<String>,
}

/// A parameter's type, as far as the grammar enforces it.
enum Kind {
    String,
    Number,
    Integer,
    Boolean,
    Object,
    Array,
    OneOf(Vec<String>),
    Any,
}

impl Kind {
    fn of(schema: &Value) -> Self {
        if let Some(values) = schema.get("enum").and_then(Value::as_array) {
            let strings: Option<Vec<String>> = values
                .iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect();
            return match strings {
                Some(strings) if !strings.is_empty() => Kind::OneOf(strings),
                _ => Kind::Any,
            };
        }
        match schema.get("type").and_then(Value::as_str) {
            Some("string") => Kind::String,
            Some("number") => Kind::Number,
            Some("integer") => Kind::Integer,
            Some("boolean") => Kind::Boolean,
            Some("object") => Kind::Object,
            Some("array") => Kind::Array,
            _ => Kind::Any,
        }
    }
}

impl CallGrammar {
    /// The grammar of calls to `tools`.
    pub fn new(tools: &[ToolSpec]) -> Self {
        let tools = tools
            .iter()
            .map(|tool| {
                let properties = tool
                    .parameters
                    .get("properties")
                    .and_then(Value::as_object)
                    .filter(|p| !p.is_empty())
                    .map(|p| {
                        p.iter()
                            .map(|(key, schema)| (key.clone(), Kind::of(schema)))
                            .collect::<BTreeMap<_, _>>()
                    });
                let required = tool
                    .parameters
                    .get("required")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .filter(|key| properties.as_ref().is_none_or(|p| p.contains_key(*key)))
                    .map(str::to_owned)
                    .collect();
                Tool {
                    name: tool.name.clone(),
                    properties,
                    required,
                }
            })
            .collect();
        Self { tools }
    }

    /// `text`, from where [`super::tool_text::call_start`] says a call may
    /// begin: what may continue it.
    pub fn check(&self, text: &str) -> Verdict {
        let (opener, strict) = if let Some(rest) = text.strip_prefix(TAG) {
            (text.len() - rest.len(), true)
        } else if let Some(rest) = text.strip_prefix(FENCE) {
            // A fence holds a call only when its first line opens one;
            // otherwise it is code, not constrained.
            let Some(line_end) = rest.find('\n') else {
                return Verdict::Open;
            };
            if !matches!(rest[..line_end].trim(), "" | "json") {
                return Verdict::Open;
            }
            (FENCE.len() + line_end + 1, false)
        } else if text.starts_with('{') {
            (0, true)
        } else {
            // The start of a tag or fence, not yet whole.
            return Verdict::Open;
        };
        let body = &text[opener..];
        let skipped = body.len() - body.trim_start().len();
        let body = &body[skipped..];
        match strict {
            true if skipped > MAX_SPACE => return Verdict::Invalid,
            false if skipped > MAX_SPACE || !(body.is_empty() || body.starts_with('{')) => {
                return Verdict::Open;
            }
            _ => {}
        }
        let mut cursor = Cursor {
            text: body.as_bytes(),
            at: 0,
        };
        match self.call(&mut cursor) {
            Ok(()) => Verdict::Complete(opener + skipped + cursor.at),
            Err(Stop::More) => Verdict::Open,
            Err(Stop::Invalid) => Verdict::Invalid,
        }
    }

    fn call(&self, c: &mut Cursor) -> Step<()> {
        c.byte(b'{')?;
        c.space()?;
        c.string(|key, closed| fits("name", key, closed))?;
        c.space()?;
        c.byte(b':')?;
        c.space()?;
        let name =
            c.string(|name, closed| self.tools.iter().any(|t| fits(&t.name, name, closed)))?;
        let tool = self
            .tools
            .iter()
            .find(|t| t.name == name)
            .ok_or(Stop::Invalid)?;
        c.space()?;
        c.byte(b',')?;
        c.space()?;
        c.string(|key, closed| fits("arguments", key, closed))?;
        c.space()?;
        c.byte(b':')?;
        c.space()?;
        tool.arguments(c)?;
        c.space()?;
        c.byte(b'}')
    }
}

impl Tool {
    fn arguments(&self, c: &mut Cursor) -> Step<()> {
        c.byte(b'{')?;
        let mut seen: Vec<String> = Vec::new();
        c.space()?;
        if c.peek()? == b'}' {
            return self.close(c, &seen);
        }
        loop {
            c.space()?;
            let key = c.string(|key, closed| self.may_name(key, closed, &seen))?;
            c.space()?;
            c.byte(b':')?;
            c.space()?;
            let kind = self.properties.as_ref().and_then(|p| p.get(&key));
            c.value(kind.unwrap_or(&Kind::Any), 0)?;
            seen.push(key);
            c.space()?;
            match c.peek()? {
                b',' if self.may_add(&seen) => c.at += 1,
                b'}' => return self.close(c, &seen),
                _ => return Err(Stop::Invalid),
            }
        }
    }

    /// Whether another argument may follow those `seen`.
    fn may_add(&self, seen: &[String]) -> bool {
        self.properties
            .as_ref()
            .is_none_or(|p| p.keys().any(|key| !seen.contains(key)))
    }

    /// Whether `key` (whole when `closed`) may name the next argument.
    fn may_name(&self, key: &str, closed: bool, seen: &[String]) -> bool {
        match &self.properties {
            None => !closed || !seen.iter().any(|s| s == key),
            Some(properties) => properties
                .keys()
                .filter(|p| !seen.contains(p))
                .any(|p| fits(p, key, closed)),
        }
    }

    fn close(&self, c: &mut Cursor, seen: &[String]) -> Step<()> {
        match self.required.iter().all(|r| seen.contains(r)) {
            true => c.byte(b'}'),
            false => Err(Stop::Invalid),
        }
    }
}

/// Whether `written` is `word` (when `closed`) or may still become it.
fn fits(word: &str, written: &str, closed: bool) -> bool {
    match closed {
        true => word == written,
        false => word.starts_with(written),
    }
}

/// Why checking stopped before the end of a call.
enum Stop {
    /// The text ended; it may go on to a valid call.
    More,
    /// Nothing after this makes a valid call.
    Invalid,
}

type Step<T> = Result<T, Stop>;

struct Cursor<'a> {
    text: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Step<u8> {
        self.text.get(self.at).copied().ok_or(Stop::More)
    }

    fn byte(&mut self, expected: u8) -> Step<()> {
        match self.peek()? == expected {
            true => {
                self.at += 1;
                Ok(())
            }
            false => Err(Stop::Invalid),
        }
    }

    fn space(&mut self) -> Step<()> {
        let start = self.at;
        while matches!(self.text.get(self.at), Some(b' ' | b'\n' | b'\r' | b'\t')) {
            self.at += 1;
        }
        match self.at - start > MAX_SPACE {
            true => Err(Stop::Invalid),
            false => Ok(()),
        }
    }

    fn literal(&mut self, word: &[u8]) -> Step<()> {
        for &expected in word {
            self.byte(expected)?;
        }
        Ok(())
    }

    /// A JSON string whose content `allowed` accepts (whole when its
    /// second argument is true, so far otherwise); its content. Every
    /// `allowed` here is a prefix test (what fails for a beginning fails
    /// for every longer one), so it is asked only where the text ends or
    /// the string closes.
    fn string(&mut self, allowed: impl Fn(&str, bool) -> bool) -> Step<String> {
        self.byte(b'"')?;
        let mut content: Vec<u8> = Vec::new();
        let so_far = |content: &[u8]| match allowed(&String::from_utf8_lossy(content), false) {
            true => Stop::More,
            false => Stop::Invalid,
        };
        loop {
            let Some(&byte) = self.text.get(self.at) else {
                return Err(so_far(&content));
            };
            self.at += 1;
            match byte {
                b'"' => {
                    let content = String::from_utf8_lossy(&content).into_owned();
                    return match allowed(&content, true) {
                        true => Ok(content),
                        false => Err(Stop::Invalid),
                    };
                }
                b'\\' => {
                    let Some(&escape) = self.text.get(self.at) else {
                        return Err(so_far(&content));
                    };
                    self.at += 1;
                    let decoded = match escape {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let mut code = 0u32;
                            for _ in 0..4 {
                                let Some(&digit) = self.text.get(self.at) else {
                                    return Err(so_far(&content));
                                };
                                let value = char::from(digit).to_digit(16).ok_or(Stop::Invalid)?;
                                code = code * 16 + value;
                                self.at += 1;
                            }
                            char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER)
                        }
                        _ => return Err(Stop::Invalid),
                    };
                    let mut buffer = [0u8; 4];
                    content.extend_from_slice(decoded.encode_utf8(&mut buffer).as_bytes());
                }
                byte if byte < 0x20 => return Err(Stop::Invalid),
                byte => content.push(byte),
            }
        }
    }

    /// A JSON number (without a fraction or exponent if `integer`).
    fn number(&mut self, integer: bool) -> Step<()> {
        if self.peek()? == b'-' {
            self.at += 1;
        }
        match self.peek()? {
            b'0' => self.at += 1,
            b'1'..=b'9' => self.digits(),
            _ => return Err(Stop::Invalid),
        }
        if !integer {
            if self.text.get(self.at) == Some(&b'.') {
                self.at += 1;
                self.one_or_more_digits()?;
            }
            if matches!(self.text.get(self.at), Some(b'e' | b'E')) {
                self.at += 1;
                if matches!(self.text.get(self.at), Some(b'+' | b'-')) {
                    self.at += 1;
                }
                self.one_or_more_digits()?;
            }
        }
        // A number at the end of the text may go on.
        match self.at == self.text.len() {
            true => Err(Stop::More),
            false => Ok(()),
        }
    }

    fn digits(&mut self) {
        while self.text.get(self.at).is_some_and(u8::is_ascii_digit) {
            self.at += 1;
        }
    }

    fn one_or_more_digits(&mut self) -> Step<()> {
        match self.peek()?.is_ascii_digit() {
            true => {
                self.digits();
                Ok(())
            }
            false => Err(Stop::Invalid),
        }
    }

    fn value(&mut self, kind: &Kind, depth: usize) -> Step<()> {
        if depth > MAX_DEPTH {
            return Err(Stop::Invalid);
        }
        let first = self.peek()?;
        match kind {
            Kind::String => self.string(|_, _| true).map(drop),
            Kind::OneOf(values) => self
                .string(|s, closed| values.iter().any(|v| fits(v, s, closed)))
                .map(drop),
            Kind::Number => self.number(false),
            Kind::Integer => self.number(true),
            Kind::Boolean => match first {
                b't' => self.literal(b"true"),
                b'f' => self.literal(b"false"),
                _ => Err(Stop::Invalid),
            },
            Kind::Object if first != b'{' => Err(Stop::Invalid),
            Kind::Array if first != b'[' => Err(Stop::Invalid),
            Kind::Object | Kind::Array | Kind::Any => match first {
                b'{' => self.object(depth),
                b'[' => self.array(depth),
                b'"' => self.string(|_, _| true).map(drop),
                b't' => self.literal(b"true"),
                b'f' => self.literal(b"false"),
                b'n' => self.literal(b"null"),
                b'-' | b'0'..=b'9' => self.number(false),
                _ => Err(Stop::Invalid),
            },
        }
    }

    fn object(&mut self, depth: usize) -> Step<()> {
        self.byte(b'{')?;
        self.space()?;
        if self.peek()? == b'}' {
            self.at += 1;
            return Ok(());
        }
        loop {
            self.space()?;
            self.string(|_, _| true)?;
            self.space()?;
            self.byte(b':')?;
            self.space()?;
            self.value(&Kind::Any, depth + 1)?;
            self.space()?;
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Ok(());
                }
                _ => return Err(Stop::Invalid),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Step<()> {
        self.byte(b'[')?;
        self.space()?;
        if self.peek()? == b']' {
            self.at += 1;
            return Ok(());
        }
        loop {
            self.space()?;
            self.value(&Kind::Any, depth + 1)?;
            self.space()?;
            match self.peek()? {
                b',' => self.at += 1,
                b']' => {
                    self.at += 1;
                    return Ok(());
                }
                _ => return Err(Stop::Invalid),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn grammar() -> CallGrammar {
        CallGrammar::new(&[
            ToolSpec {
                name: "memory_recall".into(),
                description: String::new(),
                parameters: json!({"type": "object", "required": ["query"],
                    "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}}}),
            },
            ToolSpec {
                name: "http_request".into(),
                description: String::new(),
                parameters: json!({"type": "object", "required": ["url"],
                    "properties": {"url": {"type": "string"},
                        "method": {"enum": ["GET", "POST"]},
                        "headers": {"type": "object"}, "body": {}}}),
            },
            ToolSpec {
                name: "free".into(),
                description: String::new(),
                parameters: json!({"type": "object"}),
            },
        ])
    }

    /// Every proper prefix of `text` is `Open`; the whole is complete.
    fn accepted_throughout(grammar: &CallGrammar, text: &str) {
        for end in (1..text.len()).filter(|&end| text.is_char_boundary(end)) {
            assert_eq!(
                grammar.check(&text[..end]),
                Verdict::Open,
                "prefix {:?} of {text:?}",
                &text[..end]
            );
        }
        assert_eq!(
            grammar.check(text),
            Verdict::Complete(text.len()),
            "{text:?}"
        );
    }

    #[test]
    fn valid_calls_in_every_opening_are_open_until_whole() {
        let grammar = grammar();
        accepted_throughout(
            &grammar,
            r#"{"name": "memory_recall", "arguments": {"query": "Maria's \"allergy\" é", "limit": 3}}"#,
        );
        accepted_throughout(
            &grammar,
            "<tool_call>\n{\"name\":\"http_request\",\"arguments\":{\"url\":\"https://a.example/x\",\
             \"method\":\"GET\",\"headers\":{\"a\":[1,-2.5e3,true,null]},\"body\":{\"k\":\"v\"}}}",
        );
        accepted_throughout(
            &grammar,
            "```json\n{\n  \"name\": \"free\",\n  \"arguments\": {\"anything\": [], \"more\": 1}\n}",
        );
        let call = r#"{"name": "free", "arguments": {}}"#;
        assert_eq!(
            grammar.check(&format!("{call} and then text")),
            Verdict::Complete(call.len()),
            "the call ends at its closing brace"
        );
    }

    #[test]
    fn a_name_not_offered_an_unknown_or_mistyped_argument_or_a_missing_required_one_is_invalid() {
        let grammar = grammar();
        for text in [
            r#"{"name": "memory_recal_"#,
            r#"{"name": "memory_recall2""#,
            r#"{"tool": "#,
            r#"{"name": "memory_recall", "parameters""#,
            r#"{"name": "memory_recall", "arguments": {"x"#,
            r#"{"name": "memory_recall", "arguments": {"query": 3"#,
            r#"{"name": "memory_recall", "arguments": {"query": "x", "limit": 2."#,
            r#"{"name": "memory_recall", "arguments": {"query": "x", "query""#,
            r#"{"name": "memory_recall", "arguments": {"limit": 2}"#,
            r#"{"name": "memory_recall", "arguments": {}"#,
            r#"{"name": "http_request", "arguments": {"url": "u", "method": "GETS"#,
            r#"{"name": "http_request", "arguments": {"url": "u", "headers": ["#,
            "{\"name\": \"memory_recall\", \"arguments\": {\"query\": \"a\nb",
            r#"{"name": "memory_recall", "arguments": {"query": "x", "limit": 1,"#,
            "{\"name\": \"free\", \"arguments\": {\"a\": 1,                              ",
            "<tool_call>\nSure, I will call",
            r#"{"name": "free", "arguments": {"a": 1, "a""#,
        ] {
            assert_eq!(grammar.check(text), Verdict::Invalid, "{text:?}");
        }
    }

    #[test]
    fn text_that_is_not_a_call_is_not_constrained() {
        let grammar = grammar();
        for text in [
            "<tool_",
            "``",
            "```python\nprint('x')\n",
            "```\nplain text in a fence",
            "<tool_call>",
            "<tool_call>\n",
        ] {
            assert_eq!(grammar.check(text), Verdict::Open, "{text:?}");
        }
    }
}
