//! A hook's `deploy_stdout` / `deploy_stderr` as they travel: the marker of a cut stream, and
//! shortening both streams to fit a message.
//!
//! The agent shortens them so that its `finished` answer fits one broker message; the
//! gateway shortens them again when a finished record (input values plus result) would not
//! fit one KV value. Both must cut the same way, so the rule lives here.

/// Appended to a stream that was cut (by the agent's 1 MiB bound or to fit a message).
pub const TRUNCATED_MARKER: &str = "\n[truncated]";

/// Bytes `c` takes inside a JSON string.
fn json_char_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// Bytes `s` takes inside a JSON string, quotes excluded.
pub fn json_len(s: &str) -> usize {
    s.chars().map(json_char_len).sum()
}

/// Shortens `stdout` and `stderr` so that together they take at most `room` bytes inside
/// JSON strings, sharing the room fairly: a short stream is kept whole, two long ones get
/// half each. Each cut stream ends with [`TRUNCATED_MARKER`] (once).
pub fn shorten_streams(stdout: &mut String, stderr: &mut String, room: usize) {
    let (out, err) = (json_len(stdout), json_len(stderr));
    let half = room / 2;
    let (out_room, err_room) = if out <= half {
        (out, room - out)
    } else if err <= half {
        (room - err, err)
    } else {
        (half, room - half)
    };
    shorten(stdout, out_room);
    shorten(stderr, err_room);
}

/// Cuts `s` so that it takes at most `room` bytes inside a JSON string, marker included,
/// and marks it truncated (once). Leaves it alone when it already fits.
fn shorten(s: &mut String, room: usize) {
    if json_len(s) <= room {
        return;
    }
    if let Some(stripped) = s.strip_suffix(TRUNCATED_MARKER) {
        s.truncate(stripped.len());
    }
    let keep = room.saturating_sub(json_len(TRUNCATED_MARKER));
    let mut used = 0;
    let end = s
        .char_indices()
        .find_map(|(i, c)| {
            used += json_char_len(c);
            (used > keep).then_some(i)
        })
        .unwrap_or(s.len());
    s.truncate(end);
    s.push_str(TRUNCATED_MARKER);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_len_counts_escapes() {
        assert_eq!(json_len("a\"\n\u{1}é"), 1 + 2 + 2 + 6 + 2);
    }

    #[test]
    fn a_short_stream_is_kept_whole_and_a_long_one_cut_once_with_the_marker() {
        let (mut out, mut err) = ("x".repeat(1000), "short".to_owned());
        shorten_streams(&mut out, &mut err, 200);
        assert_eq!(err, "short");
        assert!(out.ends_with(TRUNCATED_MARKER), "{out}");
        assert!(json_len(&out) + json_len(&err) <= 200);
        // Cutting again never adds a second marker.
        shorten_streams(&mut out, &mut err, 100);
        assert_eq!(out.matches(TRUNCATED_MARKER).count(), 1);
        assert!(json_len(&out) + json_len(&err) <= 100);
    }

    #[test]
    fn two_long_streams_get_half_each_and_cuts_fall_on_char_boundaries() {
        let (mut out, mut err) = ("é".repeat(500), "\u{1}".repeat(500));
        shorten_streams(&mut out, &mut err, 300);
        assert!(json_len(&out) <= 150 && json_len(&err) <= 150);
        assert!(out.ends_with(TRUNCATED_MARKER) && err.ends_with(TRUNCATED_MARKER));
    }
}
