//! Cutting text to a byte budget on a character boundary: the one place the workspace does
//! it (reasons, captured output, progress lines, check details).

/// The longest beginning of `s` of at most `max` bytes that ends on a character boundary.
pub fn head(s: &str, max: usize) -> &str {
    &s[..s.floor_char_boundary(max)]
}

/// The longest end of `s` of at most `max` bytes that starts on a character boundary.
pub fn tail(s: &str, max: usize) -> &str {
    &s[s.ceil_char_boundary(s.len().saturating_sub(max))..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_fall_between_characters_and_never_exceed_the_budget() {
        let s = "aé€😀b";
        for max in 0..=s.len() + 2 {
            let h = head(s, max);
            let t = tail(s, max);
            assert!(h.len() <= max && s.starts_with(h), "{max}: {h:?}");
            assert!(t.len() <= max && s.ends_with(t), "{max}: {t:?}");
        }
        assert_eq!(head(s, 2), "a");
        assert_eq!(head(s, 3), "aé");
        assert_eq!(tail(s, 4), "b");
        assert_eq!(tail(s, 5), "😀b");
        assert_eq!(head(s, 100), s);
        assert_eq!(tail(s, 100), s);
    }
}
