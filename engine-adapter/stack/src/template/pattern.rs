//! `allowed_pattern` as Heat checks it: Python's `re.match(pattern, value)`, accepted
//! when that first match ends at the end of the value. Patterns the `regex` crate reads
//! use it; look-around and back-references (Python has them, `regex` does not) use
//! `fancy-regex`, a backtracking engine, for those patterns only.

/// A compiled `allowed_pattern`.
#[derive(Debug)]
pub(super) enum Pattern {
    /// Read by the `regex` crate (linear time).
    Plain(regex::Regex),
    /// Look-around or back-references: read by `fancy-regex`.
    Fancy(Box<fancy_regex::Regex>),
}

impl Pattern {
    /// Compiles `pattern` anchored at the start of the value, as `re.match` reads it;
    /// the error is the one of the engine that was tried last.
    pub(super) fn new(pattern: &str) -> Result<Self, String> {
        let anchored = format!(r"\A(?:{pattern})");
        if let Ok(re) = regex::Regex::new(&anchored) {
            return Ok(Self::Plain(re));
        }
        let anchored = format!(r"\A(?:{})", unrepeat_look_arounds(pattern));
        fancy_regex::Regex::new(&anchored)
            .map(|re| Self::Fancy(Box::new(re)))
            .map_err(|e| e.to_string())
    }

    /// True when the first match (leftmost, the earliest alternative first, as Python
    /// takes it) covers the whole value. A match that runs out of the backtracking
    /// budget counts as no match.
    pub(super) fn matches_whole(&self, value: &str) -> bool {
        let end = match self {
            Self::Plain(re) => re.find(value).map(|m| m.end()),
            Self::Fancy(re) => re.find(value).ok().flatten().map(|m| m.end()),
        };
        end == Some(value.len())
    }
}

/// `pattern` with every quantified look-around written as Python reads it: a
/// zero-width assertion repeated is the assertion once when the quantifier needs at
/// least one (`+`, `{1,…}`), and nothing when it may repeat zero times (`*`, `?`,
/// `{0,…}`). Python accepts `(?=x)*`; `fancy-regex` refuses a repeated assertion.
fn unrepeat_look_arounds(pattern: &str) -> String {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::with_capacity(pattern.len());
    let mut i = 0;
    while i < chars.len() {
        let ahead: String = chars[i..chars.len().min(i + 4)].iter().collect();
        let is_look = ["(?=", "(?!", "(?<=", "(?<!"]
            .iter()
            .any(|open| ahead.starts_with(open));
        if chars[i] == '\\' {
            out.extend(chars.get(i..i + 2).unwrap_or(&chars[i..]));
            i += 2;
            continue;
        }
        if chars[i] == '[' {
            let end = class_end(&chars, i);
            out.extend(&chars[i..end]);
            i = end;
            continue;
        }
        if !is_look {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let end = group_end(&chars, i);
        let (quantifier_len, at_least_one) = quantifier(&chars[end..]);
        let group: String = chars[i..end].iter().collect();
        // The group's own insides may hold quantified look-arounds too.
        let group = format!("({}", unrepeat_look_arounds(&group[1..]));
        if quantifier_len == 0 || at_least_one {
            out.push_str(&group);
        }
        i = end + quantifier_len;
    }
    out
}

/// One past the `]` closing the class that opens at `start`.
fn class_end(chars: &[char], start: usize) -> usize {
    let mut i = start + 1;
    // A `]` right after `[` or `[^` is a literal.
    if chars.get(i) == Some(&'^') {
        i += 1;
    }
    if chars.get(i) == Some(&']') {
        i += 1;
    }
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            ']' => return i + 1,
            _ => i += 1,
        }
    }
    chars.len()
}

/// One past the `)` closing the group that opens at `start`.
fn group_end(chars: &[char], start: usize) -> usize {
    let mut depth = 0;
    let mut i = start;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '[' => i = class_end(chars, i),
            '(' => {
                depth += 1;
                i += 1;
            }
            ')' => {
                depth -= 1;
                i += 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => i += 1,
        }
    }
    chars.len()
}

/// The length of the quantifier at the start of `rest` (0 for none, a lazy `?` or
/// possessive `+` after it included), and whether it asks for at least one repeat.
fn quantifier(rest: &[char]) -> (usize, bool) {
    let (len, at_least_one) = match rest.first() {
        Some('*' | '?') => (1, false),
        Some('+') => (1, true),
        Some('{') => match rest.iter().position(|c| *c == '}') {
            Some(close) => {
                let body: String = rest[1..close].iter().collect();
                let min = body.split(',').next().unwrap_or("").trim();
                match min.parse::<u64>() {
                    Ok(n) if body.chars().all(|c| c.is_ascii_digit() || c == ',') => {
                        (close + 1, n > 0)
                    }
                    _ => return (0, false),
                }
            }
            None => return (0, false),
        },
        _ => return (0, false),
    };
    match rest.get(len) {
        Some('?' | '+') => (len + 1, at_least_one),
        _ => (len, at_least_one),
    }
}

#[cfg(test)]
mod tests {
    use super::Pattern;

    fn whole(p: &str, v: &str) -> bool {
        Pattern::new(p).expect("compiles").matches_whole(v)
    }

    #[test]
    fn a_pattern_matches_as_python_re_match_then_checks_the_end() {
        assert!(whole("[a-zA-Z][a-zA-Z0-9]*", "admin1"));
        assert!(!whole("[a-zA-Z][a-zA-Z0-9]*", "1admin"));
        assert!(!whole("[a-z]+", "abc-"));
        // Python takes the first alternative that matches, not the longest: `a` here.
        assert!(!whole("a|ab", "ab"));
        assert!(whole("ab|a", "ab"));
    }

    #[test]
    fn look_around_and_back_references_read_as_python_reads_them() {
        // The Windows templates' password rule: 6-255 characters, three classes.
        let p = r"(?=^.{6,255}$)((?=.*\d)(?=.*[A-Z])(?=.*[a-z])|(?=.*\d)(?=.*[^A-Za-z0-9])(?=.*[a-z])|(?=.*[^A-Za-z0-9])(?=.*[A-Z])(?=.*[a-z])|(?=.*\d)(?=.*[A-Z])(?=.*[^A-Za-z0-9]))^.*";
        assert!(matches!(Pattern::new(p), Ok(Pattern::Fancy(_))));
        assert!(whole(p, "Passw0rd"));
        assert!(!whole(p, "password"));
        assert!(!whole(p, "Pa0"));
        assert!(whole(r#"^(?!.*["\r\n\f]).*$"#, "plain text"));
        assert!(!whole(r#"^(?!.*["\r\n\f]).*$"#, "a \"quote\""));
        assert!(whole(r"(\w)\1", "aa"));
        assert!(!whole(r"(\w)\1", "ab"));
        assert!(matches!(Pattern::new("[a-z]+"), Ok(Pattern::Plain(_))));
    }

    #[test]
    fn a_repeated_look_around_reads_as_python_reads_it() {
        // The Active Directory template's domain name rule.
        let p = r"[A-Za-z0-9]+(?=[\.\-][a-zA-Z0-9])*\.[a-zA-z09]+";
        assert!(whole(p, "corp.example"));
        assert!(!whole(p, "corp"));
        assert_eq!(
            super::unrepeat_look_arounds("(?=a)+a(?!b)*[(?=]"),
            "(?=a)a[(?=]"
        );
        assert_eq!(super::unrepeat_look_arounds(r"(?=x){2,}y"), "(?=x)y");
        assert_eq!(super::unrepeat_look_arounds(r"\(?=x)*"), r"\(?=x)*");
        assert_eq!(super::unrepeat_look_arounds("(?<=a){0,3}b"), "b");
        assert_eq!(super::unrepeat_look_arounds("(?<n>a)*"), "(?<n>a)*");
    }

    #[test]
    fn a_pattern_neither_engine_reads_is_an_error() {
        assert!(Pattern::new("(unclosed").is_err());
        assert!(Pattern::new("[z-a]").is_err());
    }
}
