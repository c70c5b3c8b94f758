//! Turning a stream of bytes into lines, with a bounded buffer: each line keeps its first
//! bytes only, whatever the hook prints.

use flue_proto::event::OutputStream;

/// One line as read, before it is cut to [`MAX_LINE_BYTES`](super::MAX_LINE_BYTES) and
/// redacted.
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
}
