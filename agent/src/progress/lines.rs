//! Turning a stream of bytes into progress lines: splitting (with a bounded buffer),
//! cutting long lines and hiding the values of hidden inputs.

use flue_proto::DeploymentRequest;
use flue_proto::event::{OutputStream, ProgressLine};
use serde_json::Value;

use super::{HIDDEN, LINE_TRUNCATED_MARKER, MAX_LINE_BYTES, MIN_HIDDEN_BYTES};

/// One line as read, before it is cut to [`MAX_LINE_BYTES`] and redacted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawLine {
    /// Where it came from.
    pub stream: OutputStream,
    /// Its first bytes (lossy UTF-8), without the newline.
    pub text: String,
    /// True when the line was longer than what was kept.
    pub cut: bool,
}

/// Splits the bytes of one stream into lines, keeping at most `keep` bytes of each; the
/// rest of a longer line is skipped up to its newline, so memory stays bounded whatever
/// the hook prints.
#[derive(Debug)]
pub struct LineSplitter {
    stream: OutputStream,
    keep: usize,
    buf: Vec<u8>,
    cut: bool,
}

impl LineSplitter {
    /// A splitter for `stream` keeping the first `keep` bytes of each line.
    pub fn new(stream: OutputStream, keep: usize) -> Self {
        Self {
            stream,
            keep,
            buf: Vec::new(),
            cut: false,
        }
    }

    /// Reads `bytes`, calling `emit` for each line they complete, in order.
    pub fn push(&mut self, mut bytes: &[u8], mut emit: impl FnMut(RawLine)) {
        while let Some(end) = bytes.iter().position(|&b| b == b'\n') {
            self.take(&bytes[..end]);
            emit(self.line());
            bytes = &bytes[end + 1..];
        }
        self.take(bytes);
    }

    /// The end of the stream: a last line without a newline is emitted too.
    pub fn finish(&mut self, mut emit: impl FnMut(RawLine)) {
        if !self.buf.is_empty() || self.cut {
            emit(self.line());
        }
    }

    fn take(&mut self, bytes: &[u8]) {
        let room = self.keep.saturating_sub(self.buf.len());
        self.buf.extend_from_slice(&bytes[..bytes.len().min(room)]);
        self.cut |= bytes.len() > room;
    }

    fn line(&mut self) -> RawLine {
        if !self.cut && self.buf.last() == Some(&b'\r') {
            self.buf.pop();
        }
        let line = RawLine {
            stream: self.stream,
            text: String::from_utf8_lossy(&self.buf).into_owned(),
            cut: self.cut,
        };
        self.buf.clear();
        self.cut = false;
        line
    }
}

/// Replaces the values of a deployment's hidden inputs by [`HIDDEN`] in progress lines.
///
/// Values shorter than [`MIN_HIDDEN_BYTES`] are left alone (they would hide common words,
/// and hide little). A value spanning several lines is also hidden line by line, since
/// progress is sent line by line.
#[derive(Clone, Default)]
pub struct Redactor {
    /// Longest first, so that a value containing another is hidden whole.
    patterns: Vec<String>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the values themselves.
        f.debug_struct("Redactor")
            .field("patterns", &self.patterns.len())
            .finish()
    }
}

impl Redactor {
    /// Hides each of `values`.
    pub fn new(values: impl IntoIterator<Item = String>) -> Self {
        let mut patterns = Vec::new();
        for value in values {
            if value.contains('\n') {
                patterns.extend(
                    value
                        .split('\n')
                        .map(|l| l.strip_suffix('\r').unwrap_or(l).to_owned()),
                );
            }
            patterns.push(value);
        }
        patterns.retain(|p| p.len() >= MIN_HIDDEN_BYTES);
        patterns.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        patterns.dedup();
        Self { patterns }
    }

    /// Hides the value of every input `req`'s config declares hidden (a string as-is,
    /// anything else as its JSON text, which is how hooks get it).
    pub fn for_request(req: &DeploymentRequest) -> Self {
        let declared = req
            .config
            .inputs
            .iter()
            .filter(|decl| decl.hidden)
            .filter_map(|decl| req.input_values.get(&decl.name).or(decl.default.as_ref()));
        let carried = req
            .hidden_inputs
            .iter()
            .filter_map(|name| req.input_values.get(name));
        let values = declared.chain(carried).map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        });
        Self::new(values)
    }

    /// How many bytes of a line must be kept so that a hidden value starting within the
    /// first [`MAX_LINE_BYTES`] is seen whole.
    pub fn keep(&self) -> usize {
        let longest = self.patterns.first().map_or(0, String::len);
        MAX_LINE_BYTES + longest.saturating_sub(1)
    }

    /// The line as sent: hidden values replaced, cut after [`MAX_LINE_BYTES`] of what
    /// was read (a hidden value straddling the cut is replaced whole, never shown in
    /// part), and marked with [`LINE_TRUNCATED_MARKER`] when cut.
    pub fn render(&self, raw: &RawLine) -> ProgressLine {
        let text = &raw.text;
        let (mut out, mut cut) = if self.patterns.iter().any(|p| text.contains(p.as_str())) {
            self.replace(text)
        } else {
            let end = floor_char_boundary(text, MAX_LINE_BYTES);
            (text[..end].to_owned(), end < text.len())
        };
        // Replacements may have made it longer; what is left holds no hidden value.
        if out.len() > MAX_LINE_BYTES {
            out.truncate(floor_char_boundary(&out, MAX_LINE_BYTES));
            cut = true;
        }
        if cut || raw.cut {
            out.push_str(LINE_TRUNCATED_MARKER);
        }
        ProgressLine {
            stream: raw.stream,
            text: out,
        }
    }

    /// Copies `text` up to [`MAX_LINE_BYTES`] of it, replacing hidden values; true when
    /// some of it was left out.
    fn replace(&self, text: &str) -> (String, bool) {
        let mut out = String::with_capacity(text.len().min(MAX_LINE_BYTES));
        let mut i = 0;
        while i < text.len() && i < MAX_LINE_BYTES {
            let rest = &text[i..];
            if let Some(p) = self.patterns.iter().find(|p| rest.starts_with(p.as_str())) {
                out.push_str(HIDDEN);
                i += p.len();
            } else if let Some(c) = rest.chars().next() {
                out.push(c);
                i += c.len_utf8();
            }
        }
        (out, i < text.len())
    }
}

/// The largest char boundary of `s` at or below `at`.
fn floor_char_boundary(s: &str, at: usize) -> usize {
    if at >= s.len() {
        return s.len();
    }
    let mut end = at;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(keep: usize, chunks: &[&[u8]]) -> Vec<RawLine> {
        let mut s = LineSplitter::new(OutputStream::Stdout, keep);
        let mut lines = Vec::new();
        for c in chunks {
            s.push(c, |l| lines.push(l));
        }
        s.finish(|l| lines.push(l));
        lines
    }

    fn texts(lines: &[RawLine]) -> Vec<(&str, bool)> {
        lines.iter().map(|l| (l.text.as_str(), l.cut)).collect()
    }

    #[test]
    fn lines_are_split_across_chunks_and_the_last_one_needs_no_newline() {
        let lines = split(100, &[b"one\ntw", b"o\r\n\nthr", b"ee"]);
        assert_eq!(
            texts(&lines),
            [
                ("one", false),
                ("two", false),
                ("", false),
                ("three", false)
            ]
        );
        assert!(
            split(100, &[b"a\n"]).len() == 1,
            "no empty line after a final newline"
        );
        assert!(split(100, &[]).is_empty());
    }

    #[test]
    fn a_long_line_keeps_its_first_bytes_and_the_next_line_is_whole() {
        let lines = split(4, &[b"abcdef", b"gh\nxy\n", b"123456"]);
        assert_eq!(
            texts(&lines),
            [("abcd", true), ("xy", false), ("1234", true)]
        );
    }

    #[test]
    fn invalid_utf8_is_replaced() {
        let lines = split(100, &[b"a\xffb\n"]);
        assert_eq!(lines[0].text, "a\u{fffd}b");
    }

    fn raw(text: &str) -> RawLine {
        RawLine {
            stream: OutputStream::Stderr,
            text: text.to_owned(),
            cut: false,
        }
    }

    #[test]
    fn render_cuts_long_lines_on_a_char_boundary_and_marks_them() {
        let r = Redactor::default();
        assert_eq!(r.keep(), MAX_LINE_BYTES);
        let short = r.render(&raw("hello"));
        assert_eq!(short.text, "hello");
        assert_eq!(short.stream, OutputStream::Stderr);

        let exact = "x".repeat(MAX_LINE_BYTES);
        assert_eq!(r.render(&raw(&exact)).text, exact);
        let cut_earlier = RawLine {
            cut: true,
            ..raw(&exact)
        };
        assert_eq!(
            r.render(&cut_earlier).text,
            format!("{exact}{LINE_TRUNCATED_MARKER}")
        );

        let long = format!("{}é", "x".repeat(MAX_LINE_BYTES - 1));
        let line = r.render(&raw(&long)).text;
        assert_eq!(
            line,
            format!("{}{LINE_TRUNCATED_MARKER}", "x".repeat(MAX_LINE_BYTES - 1))
        );
    }

    #[test]
    fn hidden_values_are_replaced_and_short_ones_ignored() {
        let r = Redactor::new([
            "s3cret".to_owned(),
            "abc".to_owned(),
            "s3cret-longer".to_owned(),
        ]);
        assert_eq!(
            r.render(&raw("pw=s3cret-longer and s3cret, abc")).text,
            "pw=<hidden> and <hidden>, abc"
        );
        assert_eq!(format!("{r:?}"), "Redactor { patterns: 2 }");
    }

    #[test]
    fn a_multi_line_value_is_hidden_line_by_line() {
        let r = Redactor::new(["-----BEGIN KEY-----\r\nAAAABBBB\nok\n".to_owned()]);
        assert_eq!(r.render(&raw("-----BEGIN KEY-----")).text, HIDDEN);
        assert_eq!(r.render(&raw("  AAAABBBB")).text, "  <hidden>");
        assert_eq!(r.render(&raw("ok")).text, "ok");
    }

    #[test]
    fn a_hidden_value_straddling_the_cut_never_shows_in_part() {
        let secret = "0123456789abcdef";
        let r = Redactor::new([secret.to_owned()]);
        assert_eq!(r.keep(), MAX_LINE_BYTES + secret.len() - 1);
        // One secret early (shrinking nothing: same length as the marker or longer) and
        // one starting just before the cut.
        let mut text = format!("{secret}{}", "y".repeat(MAX_LINE_BYTES - secret.len() - 4));
        text.push_str(secret);
        text.push_str("tail");
        let lines = split(r.keep(), &[text.as_bytes()]);
        let line = r.render(&lines[0]).text;
        assert!(!line.contains("0123"), "{}", &line[line.len() - 40..]);
        assert!(line.ends_with(&format!("y{HIDDEN}{LINE_TRUNCATED_MARKER}")));
        // Many short values growing the line past the limit: cut after replacing.
        let r = Redactor::new(["abcd".to_owned()]);
        let line = r.render(&raw(&"abcd".repeat(MAX_LINE_BYTES / 4))).text;
        assert!(line.len() <= MAX_LINE_BYTES + LINE_TRUNCATED_MARKER.len());
        assert!(!line.contains("abcd"));
        assert!(line.ends_with(LINE_TRUNCATED_MARKER));
    }

    #[test]
    fn hidden_inputs_of_a_request_are_collected() {
        let req = crate::item::tests::request(
            serde_json::json!({
                "group": "script",
                "inputs": [
                    {"name": "pw", "hidden": true},
                    {"name": "port", "hidden": true, "default": 12345},
                    {"name": "short", "hidden": true},
                    {"name": "open"}
                ]
            }),
            serde_json::json!({"pw": "hunter22", "short": "ab", "open": "visible"}),
        );
        let r = Redactor::for_request(&req);
        assert_eq!(
            r.render(&raw("hunter22 12345 ab visible")).text,
            "<hidden> <hidden> ab visible"
        );
    }
}
