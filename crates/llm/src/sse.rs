//! An incremental server-sent-events parser (the subset of the HTML spec that chat
//! completion streams use).
//!
//! Bytes arrive in arbitrary pieces: a line, a CRLF pair or a multi-byte character may be
//! split across two reads, so whole lines are buffered as bytes and decoded only once they
//! are complete. Lines end with LF, CRLF or CR. `:` starts a comment, `field:value` and
//! `field: value` are the same (one leading space is dropped), `data` lines accumulate
//! (joined with `\n`) and a blank line dispatches the event. At the end of the input a
//! pending event is dispatched even without its blank line, so a stream cut after its
//! last `data:` line still yields that line.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SseEvent {
    /// The `event:` field (empty for the default `message` type).
    pub(crate) event: String,
    /// The `data:` lines joined with `\n`.
    pub(crate) data: String,
}

/// Feed it bytes with [`feed`](Self::feed); call [`finish`](Self::finish) at the end.
#[derive(Debug, Default)]
pub(crate) struct SseParser {
    line: Vec<u8>,
    data: String,
    has_data: bool,
    event: String,
    /// The previous piece ended in CR: a LF at the start of the next one belongs to it.
    after_cr: bool,
    /// Past the first line (a UTF-8 BOM is only stripped from the very start).
    started: bool,
}

impl SseParser {
    /// A parser at the start of a stream.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Parses `bytes`, appending each completed event to `out`.
    pub(crate) fn feed(&mut self, bytes: &[u8], out: &mut Vec<SseEvent>) {
        for &b in bytes {
            if self.after_cr {
                self.after_cr = false;
                if b == b'\n' {
                    continue;
                }
            }
            match b {
                b'\n' => self.end_line(out),
                b'\r' => {
                    self.after_cr = true;
                    self.end_line(out);
                }
                _ => self.line.push(b),
            }
        }
    }

    /// Ends the stream: a last line without a newline is parsed, and a pending event is
    /// dispatched even though no blank line followed it.
    pub(crate) fn finish(&mut self, out: &mut Vec<SseEvent>) {
        if !self.line.is_empty() {
            self.end_line(out);
        }
        self.dispatch(out);
    }

    fn end_line(&mut self, out: &mut Vec<SseEvent>) {
        let raw = std::mem::take(&mut self.line);
        let mut bytes = raw.as_slice();
        if !self.started {
            self.started = true;
            bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
        }
        if bytes.is_empty() {
            self.dispatch(out);
            return;
        }
        let line = String::from_utf8_lossy(bytes);
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line.as_ref(), ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = value.to_owned(),
            // `id` and `retry` matter only for reconnecting EventSource clients.
            _ => {}
        }
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let event = std::mem::take(&mut self.event);
        if std::mem::take(&mut self.has_data) {
            out.push(SseEvent {
                event,
                data: std::mem::take(&mut self.data),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_pieces(pieces: &[&[u8]]) -> Vec<String> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for piece in pieces {
            p.feed(piece, &mut out);
        }
        p.finish(&mut out);
        out.into_iter().map(|e| e.data).collect()
    }

    fn parse(s: &str) -> Vec<String> {
        parse_pieces(&[s.as_bytes()])
    }

    #[test]
    fn plain_events() {
        assert_eq!(
            parse("data: a\n\ndata: b\n\ndata: [DONE]\n\n"),
            ["a", "b", "[DONE]"]
        );
    }

    #[test]
    fn lines_split_across_reads_at_every_byte() {
        let s = "data: {\"x\":\"é\"}\r\n\r\n: keep-alive\r\ndata:second\r\n\r\n";
        let expected = ["{\"x\":\"é\"}", "second"];
        let bytes = s.as_bytes();
        // Every single split point, including inside the CRLF pair and inside `é`.
        for cut in 0..=bytes.len() {
            assert_eq!(
                parse_pieces(&[&bytes[..cut], &bytes[cut..]]),
                expected,
                "cut {cut}"
            );
        }
        // One byte at a time.
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(parse_pieces(&singles), expected);
    }

    #[test]
    fn comments_are_ignored() {
        assert_eq!(parse(": ping\n\n:\ndata: x\n: between\n\n"), ["x"]);
        assert!(parse(": only a comment\n\n").is_empty());
    }

    #[test]
    fn data_without_space_and_with_two_spaces() {
        assert_eq!(parse("data:x\n\ndata:  y\n\n"), ["x", " y"]);
    }

    #[test]
    fn crlf_and_lone_cr_line_endings() {
        assert_eq!(
            parse("data: a\r\n\r\ndata: b\r\rdata: c\n\n"),
            ["a", "b", "c"]
        );
    }

    #[test]
    fn missing_done_and_missing_final_blank_line() {
        assert_eq!(parse("data: a\n\ndata: b\n"), ["a", "b"]);
        assert_eq!(parse("data: a\n\ndata: b"), ["a", "b"]);
    }

    #[test]
    fn multi_line_data_is_joined_and_event_field_kept() {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        p.feed(
            b"event: error\ndata: one\ndata: two\nid: 7\nretry: 10\n\n",
            &mut out,
        );
        p.finish(&mut out);
        assert_eq!(
            out,
            [SseEvent {
                event: "error".into(),
                data: "one\ntwo".into()
            }]
        );
    }

    #[test]
    fn empty_data_field_is_an_event_and_blank_lines_alone_are_not() {
        assert_eq!(parse("\n\n\ndata\n\n"), [""]);
        assert!(parse("\n\r\n\r").is_empty());
    }

    #[test]
    fn bom_at_start_is_stripped_and_invalid_utf8_does_not_panic() {
        assert_eq!(parse("\u{feff}data: a\n\n"), ["a"]);
        let out = parse_pieces(&[b"data: \xff\xfe\n\n"]);
        assert_eq!(out.len(), 1);
    }
}
