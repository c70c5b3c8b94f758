//! Identifier types that can only hold a valid NATS subject token.
//!
//! Tenant, server, config, deployment and stack ids all end up inside subject names
//! (`flue.<tenant>.req.<server>`) or KV keys, so a `.`, `*`, `>` or whitespace in one
//! would change which messages a subscription matches. The only way to build an id is
//! through [`validate`], and deserialising runs the same check.

use std::fmt;
use std::str::FromStr;

/// Longest id accepted, in bytes.
pub const MAX_ID_LEN: usize = 64;

/// Why a string was refused as an id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// The string was empty.
    #[error("must not be empty")]
    Empty,
    /// The string was longer than [`MAX_ID_LEN`] bytes.
    #[error("is {len} bytes long, the limit is {MAX_ID_LEN}")]
    TooLong {
        /// Length of the refused string, in bytes.
        len: usize,
    },
    /// The string held a character outside `[A-Za-z0-9_-]`.
    #[error("contains {found:?} at byte {at}; only letters, digits, '_' and '-' are allowed")]
    BadChar {
        /// The first offending character.
        found: char,
        /// Its byte offset.
        at: usize,
    },
}

/// Checks that `s` is a valid subject token: 1 to [`MAX_ID_LEN`] bytes of `[A-Za-z0-9_-]`.
pub fn validate(s: &str) -> Result<(), IdError> {
    if s.is_empty() {
        return Err(IdError::Empty);
    }
    if let Some((at, found)) = s
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        return Err(IdError::BadChar { found, at });
    }
    if s.len() > MAX_ID_LEN {
        return Err(IdError::TooLong { len: s.len() });
    }
    Ok(())
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// Validates `s` and wraps it.
            pub fn new(s: impl Into<String>) -> Result<Self, IdError> {
                let s = s.into();
                validate(&s)?;
                Ok(Self(s))
            }

            /// A fresh random id (a UUID v4 in simple hex form, always valid).
            pub fn random() -> Self {
                Self(crate::random_token())
            }

            /// The id as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(s: String) -> Result<Self, IdError> {
                Self::new(s)
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, IdError> {
                Self::new(s)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        #[cfg(feature = "openapi")]
        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                crate::openapi::token_schema()
            }
        }

        #[cfg(feature = "openapi")]
        impl utoipa::ToSchema for $name {}
    };
}

id_type!(
    /// A tenant: the top-level namespace of every subject and key.
    TenantId
);
id_type!(
    /// A webhook subscription.
    WebhookId
);
id_type!(
    /// A server (one agent) inside a tenant.
    ServerId
);
id_type!(
    /// An immutable software config.
    ConfigId
);
id_type!(
    /// One deployment: a config applied to a server for one action.
    DeploymentId
);
id_type!(
    /// A stack, as named by the engine that drives it.
    StackId
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_letters_digits_underscore_dash() {
        for ok in ["a", "web-1", "DB_primary", "0", &"x".repeat(MAX_ID_LEN)] {
            assert!(ServerId::new(ok).is_ok(), "{ok:?} should be valid");
        }
    }

    #[test]
    fn rejects_every_subject_metacharacter_and_whitespace() {
        for (bad, ch) in [
            ("a.b", '.'),
            ("a*", '*'),
            (">", '>'),
            ("a b", ' '),
            ("a\tb", '\t'),
            ("a\nb", '\n'),
            ("é", 'é'),
            ("a/b", '/'),
        ] {
            match ServerId::new(bad) {
                Err(IdError::BadChar { found, .. }) => assert_eq!(found, ch, "{bad:?}"),
                other => panic!("{bad:?} gave {other:?}"),
            }
        }
    }

    #[test]
    fn rejects_empty_and_over_long() {
        assert_eq!(TenantId::new(""), Err(IdError::Empty));
        assert_eq!(
            TenantId::new("x".repeat(MAX_ID_LEN + 1)),
            Err(IdError::TooLong {
                len: MAX_ID_LEN + 1
            })
        );
    }

    #[test]
    fn deserialising_validates() {
        let ok: DeploymentId = serde_json::from_str("\"d-1\"").expect("valid id");
        assert_eq!(ok.as_str(), "d-1");
        let err = serde_json::from_str::<DeploymentId>("\"d.1\"").expect_err("dot refused");
        assert!(
            err.to_string().contains("'.'") || err.to_string().contains("\".\""),
            "{err}"
        );
        assert_eq!(serde_json::to_string(&ok).expect("serialise"), "\"d-1\"");
    }

    #[test]
    fn random_ids_are_valid_and_distinct() {
        let a = DeploymentId::random();
        let b = DeploymentId::random();
        assert_ne!(a, b);
        assert!(validate(a.as_str()).is_ok());
    }
}
