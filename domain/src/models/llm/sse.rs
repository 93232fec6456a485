//! A server-sent events parser, fed bytes as they arrive.
//!
//! Per the WHATWG format: lines end in `\n` or `\r\n`; `data:` lines (one
//! optional space after the colon is dropped) accumulate, joined by `\n`,
//! until a blank line dispatches the event; lines starting with `:` are
//! comments; other fields (`event`, `id`, `retry`) are not needed by the
//! providers and are ignored. Chunks may split lines (and UTF-8 characters)
//! anywhere: bytes are kept until their line is complete.

#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    data: Vec<String>,
}

impl SseParser {
    /// Feed bytes; returns the data of every event they complete.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<String> {
        let mut events = Vec::new();
        for &b in bytes {
            if b == b'\n' {
                let mut line = std::mem::take(&mut self.line);
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                self.line_done(&line, &mut events);
            } else {
                self.line.push(b);
            }
        }
        events
    }

    /// The input ended: dispatch what a server left without a final blank
    /// line.
    pub fn finish(&mut self) -> Option<String> {
        let mut events = Vec::new();
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.line_done(&line, &mut events);
        }
        self.line_done(b"", &mut events);
        events.pop()
    }

    fn line_done(&mut self, line: &[u8], events: &mut Vec<String>) {
        if line.is_empty() {
            if !self.data.is_empty() {
                events.push(self.data.join("\n"));
                self.data.clear();
            }
            return;
        }
        if line.starts_with(b":") {
            return;
        }
        let line = String::from_utf8_lossy(line);
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line.as_ref(), ""),
        };
        if field == "data" {
            self.data.push(value.to_owned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_split_on_blank_lines_whatever_the_chunking() {
        let input = "data: {\"a\":1}\n\n: keep-alive\n\ndata:{\"b\":\"é\"}\r\n\r\nevent: x\nid: 7\ndata: [DONE]\n\n";
        let expected = vec!["{\"a\":1}", "{\"b\":\"é\"}", "[DONE]"];
        // Whole, and byte by byte (which also splits the two-byte `é`).
        let mut parser = SseParser::default();
        assert_eq!(parser.feed(input.as_bytes()), expected);
        let mut parser = SseParser::default();
        let mut got = Vec::new();
        for b in input.as_bytes() {
            got.extend(parser.feed(&[*b]));
        }
        assert_eq!(got, expected);
        assert_eq!(parser.finish(), None);
    }

    #[test]
    fn multi_line_data_is_joined_and_a_missing_final_blank_line_is_tolerated() {
        let mut parser = SseParser::default();
        assert_eq!(
            parser.feed(b"data: one\ndata: two\n\ndata: last"),
            vec!["one\ntwo"]
        );
        assert_eq!(parser.finish().as_deref(), Some("last"));
        assert_eq!(parser.finish(), None);
    }
}
