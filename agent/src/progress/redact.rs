//! Hiding the values of a deployment's hidden inputs in what its hook prints: in each
//! progress line as it is sent, and (with its hidden outputs' values too) in the output
//! streams of its result.

use std::ops::Range;

use flue_proto::DeploymentRequest;
use flue_proto::event::ProgressLine;
use flue_proto::heat::{self, InputType};
use serde_json::Value;

use super::lines::RawLine;
use super::{HIDDEN, LINE_TRUNCATED_MARKER, MAX_LINE_BYTES, MIN_HIDDEN_BYTES};

/// Replaces the values of a deployment's hidden inputs (and outputs) by [`HIDDEN`].
///
/// Values shorter than [`MIN_HIDDEN_BYTES`] are left alone (they would hide common words,
/// and hide little). A value spanning several lines is also hidden line by line, since
/// progress is sent line by line. Every byte any occurrence of any value covers is hidden,
/// even where two values overlap.
#[derive(Clone, Default)]
pub struct Redactor {
    /// Longest first (the longest one sets how much of a line is kept).
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
        Self::default().and(values)
    }

    /// Hides each of `values` as well.
    pub fn and(mut self, values: impl IntoIterator<Item = String>) -> Self {
        let patterns = &mut self.patterns;
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
        self
    }

    /// Hides the value of every input `req`'s config declares hidden or `req` carries as
    /// hidden, in every form a hook may print it: as given (a string as-is, anything else
    /// as its JSON text) and as the hook gets it (of its declared type, a `String`'s made
    /// text, and as the `script` group's environment writes it, `flue_proto::heat`).
    pub fn for_request(req: &DeploymentRequest) -> Self {
        let kind = |name: &str| {
            let decl = req.config.inputs.iter().find(|d| d.name == name);
            decl.map_or(InputType::String, |d| InputType::parse(&d.kind))
        };
        let declared = req
            .config
            .inputs
            .iter()
            .filter(|decl| decl.hidden)
            .filter_map(|decl| {
                let value = req.input_values.get(&decl.name).or(decl.default.as_ref());
                value.map(|v| (decl.name.as_str(), v))
            });
        let carried = req
            .hidden_inputs
            .iter()
            .filter_map(|name| req.input_values.get(name).map(|v| (name.as_str(), v)));
        let forms = declared.chain(carried).flat_map(|(name, raw)| {
            let kind = kind(name);
            let typed = heat::typed_or_as_is(kind, raw);
            let given = heat::dispatched(kind, typed.clone());
            [
                as_text(raw),
                as_text(&typed),
                as_text(&given),
                heat::env_text(&given),
            ]
        });
        Self::new(forms)
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
        let (mut out, mut cut) = self.replace(&raw.text, MAX_LINE_BYTES);
        // Replacements may have made it longer; what is left holds no hidden value.
        if out.len() > MAX_LINE_BYTES {
            out.truncate(flue_proto::text::head(&out, MAX_LINE_BYTES).len());
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

    /// `text` with every hidden value in it replaced, however long the text.
    pub fn hide(&self, text: &str) -> String {
        self.replace(text, text.len()).0
    }

    /// Like [`hide`](Self::hide), for text that was cut short: an end that is the
    /// beginning of a hidden value is replaced too, since the rest of the value may be
    /// what was cut off.
    pub fn hide_cut(&self, text: &str) -> String {
        let mut out = self.hide(text);
        let partial = self
            .patterns
            .iter()
            .filter_map(|p| partial_at_end(&out, p))
            .min();
        if let Some(start) = partial {
            out.truncate(start);
            out.push_str(HIDDEN);
        }
        out
    }

    /// Copies `text` up to `limit` bytes of it with every hidden value replaced (one that
    /// starts before `limit` is replaced whole); true when some of it was left out.
    fn replace(&self, text: &str, limit: usize) -> (String, bool) {
        let mut out = String::with_capacity(text.len().min(limit));
        let mut at = 0;
        for span in self.spans(text) {
            if span.start >= limit {
                break;
            }
            out.push_str(&text[at..span.start]);
            out.push_str(HIDDEN);
            at = span.end;
        }
        let end = text.floor_char_boundary(limit).max(at);
        out.push_str(&text[at..end]);
        (out, end < text.len())
    }

    /// Where hidden values occur in `text`, overlapping ones merged, in order.
    fn spans(&self, text: &str) -> Vec<Range<usize>> {
        let mut found = Vec::new();
        for p in &self.patterns {
            let mut from = 0;
            while let Some(i) = text[from..].find(p.as_str()) {
                let start = from + i;
                found.push(start..start + p.len());
                // Overlapping occurrences count too: search again one character on.
                from = start + text[start..].chars().next().map_or(1, char::len_utf8);
            }
        }
        found.sort_by_key(|r| r.start);
        let mut merged: Vec<Range<usize>> = Vec::with_capacity(found.len());
        for r in found {
            match merged.last_mut() {
                Some(last) if r.start < last.end => last.end = last.end.max(r.end),
                _ => merged.push(r),
            }
        }
        merged
    }
}

/// Where the longest end of `text` that is a proper beginning of `pattern` starts.
fn partial_at_end(text: &str, pattern: &str) -> Option<usize> {
    let first = text.len().saturating_sub(pattern.len() - 1);
    (first..text.len())
        .filter(|&i| text.is_char_boundary(i))
        .find(|&i| pattern.starts_with(&text[i..]))
}

/// A value as a hook gets it: a string as-is, anything else as its JSON text.
pub fn as_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flue_proto::event::OutputStream;

    fn split(keep: usize, text: &str) -> Vec<RawLine> {
        let mut s = super::super::LineSplitter::new(OutputStream::Stdout, keep);
        let mut lines = Vec::new();
        s.push(text.as_bytes(), |l| lines.push(l));
        s.finish(|l| lines.push(l));
        lines
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
        let lines = split(r.keep(), &text);
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

    #[test]
    fn a_hidden_value_is_hidden_in_the_form_the_hook_gets_it_too() {
        let req = crate::item::tests::request(
            serde_json::json!({
                "group": "script",
                "inputs": [{"name": "conf", "type": "Json", "hidden": true}]
            }),
            serde_json::json!({"conf": "{\"pw\":\"hunter22\"}"}),
        );
        let r = Redactor::for_request(&req);
        // Given as compact text; the script's environment writes it as Python does.
        assert_eq!(
            r.hide(r#"{"pw":"hunter22"} {"pw": "hunter22"}"#),
            "<hidden> <hidden>"
        );
    }

    #[test]
    fn overlapping_values_are_hidden_whole() {
        let r = Redactor::new(["abcdefgh".to_owned(), "efghijkl".to_owned()]);
        assert_eq!(r.render(&raw("<abcdefghijkl>")).text, "<<hidden>>");
        assert_eq!(r.hide("x abcdefghijkl y efghijkl"), "x <hidden> y <hidden>");
        // Overlapping occurrences of one value.
        let r = Redactor::new(["aaaa".to_owned()]);
        assert_eq!(r.hide("baaaaab"), "b<hidden>b");
    }

    #[test]
    fn whole_streams_are_hidden_and_a_cut_end_never_shows_a_value_in_part() {
        let r = Redactor::new(["s3cret-Value".to_owned(), "line one\nline two".to_owned()]);
        let long = format!("{}s3cret-Value\n", "x".repeat(3 * MAX_LINE_BYTES));
        assert_eq!(
            r.hide(&long),
            format!("{}<hidden>\n", "x".repeat(3 * MAX_LINE_BYTES))
        );
        assert_eq!(r.hide("a line one\nline two b"), "a <hidden> b");
        assert_eq!(r.hide("line two only"), "<hidden> only");
        assert_eq!(r.hide_cut("pw=s3cret-Va"), "pw=<hidden>");
        assert_eq!(r.hide_cut("pw=s3cret-Value"), "pw=<hidden>");
        assert_eq!(r.hide_cut("ends with s"), "ends with <hidden>");
        assert_eq!(r.hide_cut("nothing to hide"), "nothing to hide");
        assert_eq!(Redactor::default().hide_cut("x"), "x");
    }

    #[test]
    fn broker_credentials_are_hidden_as_written_and_decoded() {
        let urls = flue_proto::nats_url::NatsUrls::parse(
            "nats://gw:pa55%40word@h1:4222, tls://t0ken-xyz@h2,h3:4222",
        );
        let r = Redactor::new(urls.secrets());
        assert_eq!(
            r.hide("FLUE_NATS_URL=nats://gw:pa55%40word@h1:4222"),
            "FLUE_NATS_URL=nats://<hidden>@h1:4222"
        );
        assert_eq!(r.hide("password: pa55@word"), "password: <hidden>");
        assert_eq!(r.hide("token t0ken-xyz"), "token <hidden>");
        assert_eq!(r.hide("nats://127.0.0.1:4222"), "nats://127.0.0.1:4222");
    }
}
