//! Incremental server-sent-events parsing: bytes in (any chunking), `data:` payloads out.
//!
//! Follows the SSE rules that matter for OpenAI-style streams: lines end in `\n`, `\r\n` or `\r`;
//! a blank line ends an event; several `data:` lines of one event are joined with `\n`; lines
//! starting with `:` are comments; other fields (`event:`, `id:`, `retry:`) are ignored.

#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    data: Option<String>,
    last_was_cr: bool,
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds bytes; returns the payloads of the events completed by them.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        for &b in bytes {
            if self.last_was_cr {
                self.last_was_cr = false;
                if b == b'\n' {
                    continue; // the \n of a \r\n
                }
            }
            match b {
                b'\n' | b'\r' => {
                    self.last_was_cr = b == b'\r';
                    self.end_line(&mut out);
                }
                _ => self.line.push(b),
            }
        }
        out
    }

    /// Ends the stream: an event not closed by a blank line is still returned (lenient).
    pub fn finish(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.line.is_empty() {
            self.end_line(&mut out);
        }
        if let Some(d) = self.data.take() {
            out.push(d);
        }
        out
    }

    fn end_line(&mut self, out: &mut Vec<String>) {
        let line = std::mem::take(&mut self.line);
        if line.is_empty() {
            if let Some(d) = self.data.take() {
                out.push(d);
            }
            return;
        }
        if line[0] == b':' {
            return;
        }
        let (field, value) = match line.iter().position(|&c| c == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (&line[..], &b""[..]),
        };
        if field == b"data" {
            let v = String::from_utf8_lossy(value);
            match &mut self.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(&v);
                }
                None => self.data = Some(v.into_owned()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_across_chunks_and_line_endings() {
        let input = b": ping\r\n\r\ndata: {\"a\":1}\r\n\r\nevent: x\ndata: one\ndata: two\n\ndata: [DONE]\n\n";
        // Every possible split point gives the same events.
        for cut in 0..input.len() {
            let mut p = SseParser::new();
            let mut ev = p.push(&input[..cut]);
            ev.extend(p.push(&input[cut..]));
            ev.extend(p.finish());
            assert_eq!(ev, vec!["{\"a\":1}", "one\ntwo", "[DONE]"], "cut {cut}");
        }
    }

    #[test]
    fn unterminated_last_event_is_kept() {
        let mut p = SseParser::new();
        assert!(p.push(b"data: x").is_empty());
        assert_eq!(p.finish(), vec!["x"]);
    }
}
