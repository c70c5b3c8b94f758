//! A webhook's target URL, checked once at creation and parsed into what a delivery needs.

use std::net::IpAddr;

use hyper::Uri;

use super::address::Refused;

use flue_proto::webhook::MAX_URL_BYTES;

/// Why a URL is refused as a webhook target.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// Longer than [`MAX_URL_BYTES`].
    #[error("is {0} bytes long, the limit is {MAX_URL_BYTES}")]
    TooLong(usize),
    /// Not a URL at all.
    #[error("is not a valid absolute URL ({0})")]
    Invalid(String),
    /// Another scheme than `http` or `https`.
    #[error("must start with http:// or https://")]
    Scheme,
    /// No host.
    #[error("has no host")]
    NoHost,
    /// A port that is not a number from 1 to 65535.
    #[error("has an invalid port {0:?} (1 to 65535)")]
    Port(String),
    /// `user:password@` in the URL: it would be shown by every read of the subscription.
    #[error(
        "must not contain credentials (user:password@); receivers authenticate deliveries by their signature"
    )]
    Credentials,
    /// The host is an address webhooks may not go to ([`super::address`]).
    #[error("is refused: {0}")]
    Refused(#[from] Refused),
}

/// A parsed target: where to connect and what to send as `Host` and request target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `https`, as opposed to plain `http`.
    pub tls: bool,
    /// Host name or IP address (IPv6 without brackets), for connecting and for TLS.
    pub host: String,
    /// Port, the scheme's default when the URL names none.
    pub port: u16,
    /// The `Host` header: the URL's authority.
    pub authority: String,
    /// The request target: path and query, at least `/`.
    pub path_and_query: String,
}

impl Target {
    /// Parses and checks `url`: `http://` or `https://`, a host, no credentials.
    pub fn parse(url: &str) -> Result<Self, TargetError> {
        if url.len() > MAX_URL_BYTES {
            return Err(TargetError::TooLong(url.len()));
        }
        let uri: Uri = url
            .parse()
            .map_err(|e: hyper::http::uri::InvalidUri| TargetError::Invalid(e.to_string()))?;
        let tls = match uri.scheme_str().map(str::to_ascii_lowercase).as_deref() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(TargetError::Scheme),
        };
        let authority = uri.authority().ok_or(TargetError::NoHost)?;
        if authority.as_str().contains('@') {
            return Err(TargetError::Credentials);
        }
        let host = authority.host();
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if host.is_empty() {
            return Err(TargetError::NoHost);
        }
        // After the host comes nothing or `:<port>` (no userinfo: refused above).
        // `port_u16` is `None` for a port that does not fit, which must not quietly
        // become the scheme's default.
        let after_host = &authority.as_str()[authority.host().len()..];
        let port = match after_host.strip_prefix(':') {
            None | Some("") => {
                if tls {
                    443
                } else {
                    80
                }
            }
            Some(p) => match p.parse::<u16>() {
                Ok(n) if n > 0 => n,
                _ => return Err(TargetError::Port(p.to_owned())),
            },
        };
        let path_and_query = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
        let path_and_query = if path_and_query.starts_with('/') {
            path_and_query
        } else {
            format!("/{path_and_query}")
        };
        Ok(Self {
            tls,
            host: host.to_owned(),
            port,
            authority: authority.as_str().to_owned(),
            path_and_query,
        })
    }

    /// The host when it is written as an IP address (also in an old numeric IPv4 form,
    /// `2130706433` or `127.1`, which resolvers read as one), which can be checked
    /// before any delivery (a name is checked on each resolved address at delivery).
    pub fn literal_ip(&self) -> Option<IpAddr> {
        self.host
            .parse()
            .ok()
            .or_else(|| super::address::numeric_ipv4(&self.host).map(IpAddr::V4))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_http_and_https_targets() {
        let t = Target::parse("http://127.0.0.1:8080/hook?a=1").expect("http");
        assert_eq!(
            t,
            Target {
                tls: false,
                host: "127.0.0.1".into(),
                port: 8080,
                authority: "127.0.0.1:8080".into(),
                path_and_query: "/hook?a=1".into(),
            }
        );
        let t = Target::parse("HTTPS://example.com").expect("https");
        assert!(t.tls);
        assert_eq!((t.port, t.path_and_query.as_str()), (443, "/"));
        let t = Target::parse("http://[::1]:9/x").expect("ipv6");
        assert_eq!((t.host.as_str(), t.authority.as_str()), ("::1", "[::1]:9"));
        assert_eq!(t.literal_ip(), Some("::1".parse().expect("ip")));
        let t = Target::parse("https://localhost:9/x").expect("name");
        assert_eq!(t.literal_ip(), None);
    }

    #[test]
    fn refuses_what_cannot_be_delivered_to() {
        for (url, want) in [
            ("ftp://h/x", TargetError::Scheme),
            ("/relative", TargetError::Scheme),
            ("http://u:p@h/x", TargetError::Credentials),
            ("http://127.0.0.1:99999/", TargetError::Port("99999".into())),
            ("http://127.0.0.1:0/", TargetError::Port("0".into())),
        ] {
            assert_eq!(Target::parse(url), Err(want), "{url}");
        }
        for url in ["", "not a url", "http://", "http://h/a b"] {
            assert!(Target::parse(url).is_err(), "{url}");
        }
        let long = format!("http://h/{}", "a".repeat(MAX_URL_BYTES));
        assert!(matches!(Target::parse(&long), Err(TargetError::TooLong(_))));
    }
}
