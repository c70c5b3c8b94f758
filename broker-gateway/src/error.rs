//! Error-chain formatting for logs.

/// An error and all its causes, joined by `": "`, for logs.
///
/// Some errors (async-nats's among them) already print their cause; a cause whose text
/// is already there is not repeated.
pub fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("wrapper: {0}")]
    struct Repeats(#[source] std::io::Error);

    #[test]
    fn chain_joins_causes_once() {
        let io = || std::io::Error::other("disk full");
        assert_eq!(chain(&Outer(io())), "outer: disk full");
        assert_eq!(chain(&Repeats(io())), "wrapper: disk full");
    }
}
