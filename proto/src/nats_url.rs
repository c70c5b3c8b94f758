//! Credentials written into NATS URLs (`nats://user:pass@host:4222`, `nats://token@host`).
//!
//! async-nats 0.51 does not authenticate with the userinfo of a URL (it connects without
//! it and the server answers "authorization violation"), so the gateway and the agent take
//! the credentials out of the URL and hand them to the client as options.

/// What a URL's userinfo holds.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    /// `user:password@`.
    UserPassword(String, String),
    /// `token@`.
    Token(String),
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::UserPassword(user, _) => write!(f, "UserPassword({user:?}, \"***\")"),
            Self::Token(_) => f.write_str("Token(\"***\")"),
        }
    }
}

/// Splits comma-separated NATS URLs into the URLs without userinfo and the first
/// credentials found (percent-escapes such as `%40` decoded). Everything before the last
/// `@` after the scheme counts as userinfo, so a password holding `/` or `?` still works.
pub fn split_credentials(urls: &str) -> (Vec<String>, Option<Credentials>) {
    let mut found = None;
    let mut plain = Vec::new();
    for url in urls.split(',').map(str::trim).filter(|u| !u.is_empty()) {
        let start = url.find("://").map_or(0, |i| i + 3);
        let (scheme, rest) = url.split_at(start);
        match rest.rsplit_once('@') {
            Some((userinfo, host)) => {
                if found.is_none() {
                    found = Some(match userinfo.split_once(':') {
                        Some((user, pass)) => Credentials::UserPassword(decode(user), decode(pass)),
                        None => Credentials::Token(decode(userinfo)),
                    });
                }
                plain.push(format!("{scheme}{host}"));
            }
            None => plain.push(url.to_owned()),
        }
    }
    (plain, found)
}

/// Decodes `%XX` escapes; anything malformed is kept as written.
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_come_out_of_the_urls() {
        let (urls, creds) = split_credentials("nats://gw:p%40ss/w?@a:4222, tls://b:4223");
        assert_eq!(urls, ["nats://a:4222", "tls://b:4223"]);
        assert_eq!(
            creds,
            Some(Credentials::UserPassword("gw".into(), "p@ss/w?".into()))
        );
        assert!(!format!("{creds:?}").contains("p@ss"));
        let (urls, creds) = split_credentials("t0k3n@h:1");
        assert_eq!(urls, ["h:1"]);
        assert_eq!(creds, Some(Credentials::Token("t0k3n".into())));
        assert_eq!(split_credentials("nats://h:1").1, None);
        assert_eq!(decode("a%zz%4"), "a%zz%4");
    }
}
