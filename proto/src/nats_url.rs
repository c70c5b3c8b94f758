//! Broker URLs as operators write them (`nats://user:password@host:4222,tls://token@other`):
//! the one parser of their credentials, and the one way they are shown.
//!
//! async-nats 0.51 does not authenticate with the userinfo of a URL (it connects without
//! it and the server answers "authorization violation"), so the gateway and the agent take
//! the credentials out of the URLs and hand them to the client as options
//! ([`NatsUrls::servers`], [`NatsUrls::credentials`], and with the `client` feature
//! `NatsUrls::with_credentials`).
//!
//! Parsing: URLs are comma separated (blanks around them and empty entries ignored); a
//! scheme (`nats://`, `tls://`, `ws://`…) is optional; everything before the *last* `@`
//! after the scheme is the userinfo, so a password holding `@`, `/`, `?` or `:` still
//! works. `user:password` is a user and a password (split at the first `:`), anything
//! else a token; `%XX` escapes are decoded in both. The first URL with credentials gives
//! them (the client has one set for all servers).
//!
//! Showing: [`redact`] (and `Display` / `Debug` of [`NatsUrls`]) keeps the user and
//! replaces a password by `***` (`nats://user:***@host:4222`) and a token whole
//! (`nats://***@host:4222`); it is what logs and errors print. [`NatsUrls::secrets`] are
//! the texts to hide wherever else they could show up (a hook's output).

use std::fmt;

/// What a URL's userinfo holds, decoded.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    /// `user:password@`.
    UserPassword(String, String),
    /// `token@`.
    Token(String),
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UserPassword(user, _) => write!(f, "UserPassword({user:?}, \"{MASK}\")"),
            Self::Token(_) => write!(f, "Token(\"{MASK}\")"),
        }
    }
}

/// What replaces a password or token when URLs are shown.
pub const MASK: &str = "***";

/// One URL, split around its userinfo.
#[derive(Clone, PartialEq, Eq)]
struct Url {
    /// `nats://`, or empty when the URL has no scheme.
    scheme: String,
    /// The userinfo as written (escapes not decoded), never empty.
    userinfo: Option<String>,
    /// Host, port and anything after them.
    rest: String,
}

impl Url {
    fn parse(url: &str) -> Self {
        let start = url.find("://").map_or(0, |i| i + 3);
        let (scheme, after) = url.split_at(start);
        let (userinfo, rest) = match after.rsplit_once('@') {
            Some((userinfo, rest)) => ((!userinfo.is_empty()).then_some(userinfo), rest),
            None => (None, after),
        };
        Self {
            scheme: scheme.to_owned(),
            userinfo: userinfo.map(str::to_owned),
            rest: rest.to_owned(),
        }
    }

    fn credentials(&self) -> Option<Credentials> {
        let userinfo = self.userinfo.as_deref()?;
        Some(match userinfo.split_once(':') {
            Some((user, password)) => Credentials::UserPassword(decode(user), decode(password)),
            None => Credentials::Token(decode(userinfo)),
        })
    }

    fn without_userinfo(&self) -> String {
        format!("{}{}", self.scheme, self.rest)
    }

    fn redacted(&self) -> String {
        match self.userinfo.as_deref().map(|u| u.split_once(':')) {
            None => self.without_userinfo(),
            Some(Some((user, _))) => format!("{}{user}:{MASK}@{}", self.scheme, self.rest),
            Some(None) => format!("{}{MASK}@{}", self.scheme, self.rest),
        }
    }
}

/// Comma-separated broker URLs, parsed once (see the module docs for the rules).
#[derive(Clone, PartialEq, Eq)]
pub struct NatsUrls {
    urls: Vec<Url>,
}

impl NatsUrls {
    /// Parses `urls`; never fails (a URL the client cannot use fails when connecting).
    pub fn parse(urls: &str) -> Self {
        let urls = urls
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(Url::parse)
            .collect();
        Self { urls }
    }

    /// The URLs without their userinfo, to connect to.
    pub fn servers(&self) -> Vec<String> {
        self.urls.iter().map(Url::without_userinfo).collect()
    }

    /// The credentials of the first URL that has any.
    pub fn credentials(&self) -> Option<Credentials> {
        self.urls.iter().find_map(Url::credentials)
    }

    /// The URLs without their userinfo, comma separated: what may be handed to others.
    pub fn without_credentials(&self) -> String {
        self.servers().join(",")
    }

    /// The URLs as logs and errors show them: passwords and tokens replaced by [`MASK`].
    pub fn redacted(&self) -> String {
        let shown: Vec<String> = self.urls.iter().map(Url::redacted).collect();
        shown.join(",")
    }

    /// Every text that would give credentials away, as written and decoded: whole
    /// userinfos, passwords, tokens. Longest first, without repeats.
    pub fn secrets(&self) -> Vec<String> {
        let mut found = Vec::new();
        for url in &self.urls {
            let Some(userinfo) = &url.userinfo else {
                continue;
            };
            found.push(userinfo.clone());
            match url.credentials() {
                Some(Credentials::UserPassword(_, password)) => {
                    if let Some((_, raw)) = userinfo.split_once(':') {
                        found.push(raw.to_owned());
                    }
                    found.push(password);
                }
                Some(Credentials::Token(token)) => found.push(token),
                None => {}
            }
        }
        found.retain(|s| !s.is_empty());
        found.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        found.dedup();
        found
    }

    /// `options` with the credentials (if any) set, ready to connect to [`servers`](Self::servers).
    #[cfg(feature = "client")]
    pub fn with_credentials(
        &self,
        options: async_nats::ConnectOptions,
    ) -> async_nats::ConnectOptions {
        match self.credentials() {
            Some(Credentials::UserPassword(user, password)) => {
                options.user_and_password(user, password)
            }
            Some(Credentials::Token(token)) => options.token(token),
            None => options,
        }
    }
}

impl fmt::Display for NatsUrls {
    /// The [redacted](NatsUrls::redacted) form.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl fmt::Debug for NatsUrls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NatsUrls({:?})", self.redacted())
    }
}

/// Comma-separated broker URLs as logs and errors show them (see [`NatsUrls::redacted`]).
pub fn redact(urls: &str) -> String {
    NatsUrls::parse(urls).redacted()
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
mod tests;
