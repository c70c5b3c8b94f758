//! Grouping progress lines into numbered batches within a deployment's budget.

use flue_proto::event::ProgressLine;

use super::{MAX_BATCH_BYTES, MAX_BATCH_LINES, MAX_PROGRESS_BYTES};

/// One progress message to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// 1, 2, 3, … per deployment.
    pub seq: u64,
    /// The lines, in the order they were read.
    pub lines: Vec<ProgressLine>,
    /// Lines the queue dropped since the previous batch.
    pub dropped_lines: u64,
    /// Set on the last batch, sent once the deployment's budget is spent.
    pub truncated: bool,
}

/// What a line takes in a progress message: its text as a JSON string and the
/// `{"stream":"stdout","text":""},` around it. Counting this rather than the text keeps
/// what a deployment sends within the budget whatever it prints: ten thousand empty lines
/// are 300 KB of messages, and a control character takes six bytes as `\u0001`.
pub fn encoded_size(line: &ProgressLine) -> usize {
    LINE_FRAMING + flue_proto::output::json_len(&line.text)
}

/// The bytes around a line's text in a message (see [`encoded_size`]).
const LINE_FRAMING: usize = r#"{"stream":"stdout","text":""},"#.len();

/// Collects lines into batches: a batch is due when it holds [`MAX_BATCH_BYTES`] or
/// [`MAX_BATCH_LINES`], or when the caller flushes (every
/// [`BATCH_INTERVAL`](super::BATCH_INTERVAL) and at the end). Once a line would take
/// the deployment past [`MAX_PROGRESS_BYTES`], the lines before it go out as the last
/// batch, marked `truncated`, and everything after is ignored.
///
/// A line counts its [`encoded_size`].
#[derive(Debug)]
pub struct Batcher {
    next_seq: u64,
    budget: usize,
    batch_bytes: usize,
    batch_lines: usize,
    spent: usize,
    pending: Vec<ProgressLine>,
    pending_bytes: usize,
    dropped: u64,
    done: bool,
}

impl Default for Batcher {
    fn default() -> Self {
        Self::with_limits(MAX_PROGRESS_BYTES, MAX_BATCH_BYTES, MAX_BATCH_LINES)
    }
}

impl Batcher {
    /// A batcher with other limits than the documented ones (for tests).
    pub fn with_limits(budget: usize, batch_bytes: usize, batch_lines: usize) -> Self {
        Self {
            next_seq: 1,
            budget,
            batch_bytes,
            batch_lines: batch_lines.max(1),
            spent: 0,
            pending: Vec::new(),
            pending_bytes: 0,
            dropped: 0,
            done: false,
        }
    }

    /// Counts `n` lines the queue dropped; reported with the next batch.
    pub fn dropped(&mut self, n: u64) {
        self.dropped = self.dropped.saturating_add(n);
    }

    /// True once the last (`truncated`) batch was handed out.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Adds a line; returns a batch that is due now, if one is.
    pub fn push(&mut self, line: ProgressLine) -> Option<Batch> {
        if self.done {
            return None;
        }
        let size = encoded_size(&line);
        if self.spent + size > self.budget {
            self.done = true;
            return Some(self.take(true));
        }
        self.spent += size;
        self.pending_bytes += size;
        self.pending.push(line);
        if self.pending_bytes >= self.batch_bytes || self.pending.len() >= self.batch_lines {
            return Some(self.take(false));
        }
        None
    }

    /// The pending lines (or just a count of dropped ones) as a batch, if there is any.
    pub fn flush(&mut self) -> Option<Batch> {
        if self.done || (self.pending.is_empty() && self.dropped == 0) {
            return None;
        }
        Some(self.take(false))
    }

    fn take(&mut self, truncated: bool) -> Batch {
        let batch = Batch {
            seq: self.next_seq,
            lines: std::mem::take(&mut self.pending),
            dropped_lines: std::mem::take(&mut self.dropped),
            truncated,
        };
        self.next_seq += 1;
        self.pending_bytes = 0;
        batch
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flue_proto::event::OutputStream;

    fn line(text: &str) -> ProgressLine {
        ProgressLine {
            stream: OutputStream::Stdout,
            text: text.to_owned(),
        }
    }

    fn texts(b: &Batch) -> Vec<&str> {
        b.lines.iter().map(|l| l.text.as_str()).collect()
    }

    #[test]
    fn nothing_pending_means_no_batch() {
        let mut b = Batcher::default();
        assert_eq!(b.flush(), None);
    }

    #[test]
    fn flushes_number_batches_in_order() {
        let mut b = Batcher::default();
        assert_eq!(b.push(line("a")), None);
        assert_eq!(b.push(line("b")), None);
        let first = b.flush().expect("batch");
        assert_eq!((first.seq, texts(&first)), (1, vec!["a", "b"]));
        assert!(!first.truncated);
        assert_eq!(b.flush(), None);
        b.push(line("c"));
        let second = b.flush().expect("batch");
        assert_eq!((second.seq, texts(&second)), (2, vec!["c"]));
    }

    #[test]
    fn a_batch_is_due_at_its_size_or_line_limit() {
        let mut b = Batcher::with_limits(1000, 2 * 34, 3);
        assert_eq!(b.push(line("1234")), None);
        let full = b.push(line("5678")).expect("two lines of 34 bytes");
        assert_eq!(texts(&full), ["1234", "5678"]);
        b.push(line(""));
        b.push(line(""));
        let by_count = b.push(line("")).expect("3 lines");
        assert_eq!((by_count.seq, by_count.lines.len()), (2, 3));
    }

    #[test]
    fn dropped_lines_go_with_the_next_batch_even_an_empty_one() {
        let mut b = Batcher::default();
        b.dropped(3);
        b.push(line("x"));
        b.dropped(2);
        let batch = b.flush().expect("batch");
        assert_eq!(batch.dropped_lines, 5);
        b.dropped(7);
        let only_count = b.flush().expect("a count alone is worth a batch");
        assert_eq!((only_count.lines.len(), only_count.dropped_lines), (0, 7));
    }

    #[test]
    fn the_budget_ends_with_one_truncated_batch_then_nothing() {
        let mut b = Batcher::with_limits(2 * 34, 1000, 1000);
        assert_eq!(b.push(line("1234")), None);
        assert_eq!(b.push(line("abcd")), None);
        b.dropped(1);
        let last = b.push(line("overflow")).expect("the last batch");
        assert!(last.truncated);
        assert_eq!(texts(&last), ["1234", "abcd"]);
        assert_eq!(last.dropped_lines, 1);
        assert!(b.is_done());
        assert_eq!(b.push(line("x")), None);
        b.dropped(4);
        assert_eq!(b.flush(), None);
    }

    #[test]
    fn the_default_budget_bounds_the_lines_as_sent_even_empty_ones() {
        for text in ["y".repeat(99), String::new(), "\u{1}".repeat(50)] {
            let mut b = Batcher::default();
            let mut sent = Vec::new();
            while !b.is_done() {
                sent.extend(b.push(line(&text)));
            }
            let lines = sent.iter().flat_map(|b| &b.lines);
            let total: usize = lines
                .map(|l| serde_json::to_string(l).expect("json").len() + 1)
                .sum();
            let one = serde_json::to_string(&line(&text)).expect("json").len() + 1;
            assert!(total <= MAX_PROGRESS_BYTES && total > MAX_PROGRESS_BYTES - one);
            assert_batches(&sent);
        }
    }

    /// Numbered 1, 2, …, only the last one truncated, none with too many lines.
    fn assert_batches(sent: &[Batch]) {
        let seqs: Vec<u64> = sent.iter().map(|b| b.seq).collect();
        assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
        assert!(sent.last().expect("some").truncated);
        assert!(sent.iter().rev().skip(1).all(|b| !b.truncated));
        assert!(sent.iter().all(|b| b.lines.len() <= MAX_BATCH_LINES));
    }

    #[test]
    fn a_line_counts_what_it_takes_in_a_message() {
        for (stream, text) in [
            (OutputStream::Stdout, ""),
            (OutputStream::Stderr, "plain"),
            (OutputStream::Stdout, "tab\t \"quoted\" \\ é \u{1} \u{7f}"),
        ] {
            let l = ProgressLine {
                stream,
                text: text.to_owned(),
            };
            let json = serde_json::to_string(&l).expect("json");
            assert_eq!(encoded_size(&l), json.len() + 1, "{json}");
        }
    }
}
