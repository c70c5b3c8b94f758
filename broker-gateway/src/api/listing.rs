//! The answer of a listing: the JSON array, how many stored records were left out and,
//! for the paginated ones, the cursor of the next page.

use axum::Json;
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use flue_proto::{NEXT_CURSOR_HEADER, SKIPPED_RECORDS_HEADER, TenantId};
use serde::Serialize;

use super::error::ApiError;

/// A listing's answer: the items as a JSON array and, when some stored records could not
/// be decoded and were left out, their number in the [`SKIPPED_RECORDS_HEADER`] header.
#[derive(Debug)]
pub struct Listed<T> {
    /// What the listing shows.
    pub items: Vec<T>,
    /// Stored records left out because they cannot be decoded.
    pub skipped: usize,
}

impl<T: Serialize> IntoResponse for Listed<T> {
    fn into_response(self) -> Response {
        let mut response = Json(self.items).into_response();
        if self.skipped > 0 {
            response
                .headers_mut()
                .insert(SKIPPED_RECORDS_HEADER, HeaderValue::from(self.skipped));
        }
        response
    }
}

/// One page of a paginated listing: the items as a bare JSON array (as before
/// pagination, so one-page clients keep working) and, when there is more, the cursor of
/// the next page in the [`NEXT_CURSOR_HEADER`] header.
#[derive(Debug)]
pub struct Paged<T> {
    /// The page.
    pub listed: Listed<T>,
    /// The cursor of the next page, if there is one.
    pub next: Option<String>,
}

impl<T: Serialize> IntoResponse for Paged<T> {
    fn into_response(self) -> Response {
        let mut response = self.listed.into_response();
        if let Some(next) = self.next.and_then(|n| HeaderValue::from_str(&n).ok()) {
            response.headers_mut().insert(NEXT_CURSOR_HEADER, next);
        }
        response
    }
}

/// Default of `limit` in the paginated listings.
pub const DEFAULT_PAGE_LIMIT: usize = 100;
/// Largest `limit` in the paginated listings.
pub const MAX_PAGE_LIMIT: usize = 1000;

/// The `limit` parameter of a paginated listing: absent is [`DEFAULT_PAGE_LIMIT`].
pub fn page_limit(value: Option<&str>) -> Result<usize, ApiError> {
    let Some(raw) = value else {
        return Ok(DEFAULT_PAGE_LIMIT);
    };
    match raw.parse::<usize>() {
        Ok(n) if (1..=MAX_PAGE_LIMIT).contains(&n) => Ok(n),
        _ => Err(ApiError::InvalidQuery(format!(
            "query parameter \"limit\": must be a whole number from 1 to {MAX_PAGE_LIMIT}, got {raw:?}"
        ))),
    }
}

/// The listings a cursor can belong to: one listing's cursor is refused by another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pages {
    /// `GET /v1/deployments`.
    Deployments,
    /// `GET /v1/servers`.
    Servers,
    /// `GET /v1/stacks` (by id).
    Stacks,
    /// `GET /v1/stacks/{id}/units` (by unit key).
    StackUnits,
    /// `GET /v1/stacks/{id}/operations` (the sequence is a submission time, in
    /// nanoseconds since the epoch, that the page's operations are older than).
    Operations,
}

impl Pages {
    fn name(self) -> &'static str {
        match self {
            Self::Deployments => "deployments",
            Self::Servers => "servers",
            Self::Stacks => "stacks",
            Self::StackUnits => "stack units",
            Self::Operations => "operations",
        }
    }

    /// The opaque cursor of the page starting after key `key` of `tenant` (listings
    /// sorted by key): as [`Pages::cursor`], with the key for the sequence.
    pub fn cursor_after(self, tenant: &TenantId, key: &str) -> String {
        format!("{}:{tenant}:{key}", self.name())
            .bytes()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// The key a `cursor` parameter of a listing sorted by key starts after (`None`, the
    /// start, when absent); a 400 naming `cursor` when it is not one of this listing's
    /// for `tenant`.
    pub fn after(
        self,
        tenant: &TenantId,
        cursor: Option<&str>,
    ) -> Result<Option<String>, ApiError> {
        let Some(raw) = cursor.filter(|c| !c.is_empty()) else {
            return Ok(None);
        };
        let text = unhex(raw).ok_or_else(|| self.invalid())?;
        let mut parts = text.splitn(3, ':');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(listing), Some(owner), Some(key))
                if listing == self.name() && owner == tenant.as_str() && !key.is_empty() =>
            {
                Ok(Some(key.to_owned()))
            }
            _ => Err(self.invalid()),
        }
    }

    fn invalid(self) -> ApiError {
        ApiError::InvalidQuery(format!(
            "query parameter \"cursor\": not a cursor of this {} listing; pass back the {NEXT_CURSOR_HEADER} header of the previous page",
            self.name()
        ))
    }

    /// The opaque cursor of the page starting at index sequence `seq` of `tenant`.
    ///
    /// Hex of `<listing>:<tenant>:<seq>`: opaque to clients (they only pass it back),
    /// and bound to the tenant and the listing, so that a cursor taken elsewhere is a
    /// 400 rather than a read of something the caller did not ask for.
    pub fn cursor(self, tenant: &TenantId, seq: u64) -> String {
        format!("{}:{tenant}:{seq}", self.name())
            .bytes()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// The index sequence a `cursor` parameter names (1, the start, when absent); a 400
    /// naming `cursor` when it is not one of this listing's for `tenant`.
    pub fn start(self, tenant: &TenantId, cursor: Option<&str>) -> Result<u64, ApiError> {
        let Some(raw) = cursor.filter(|c| !c.is_empty()) else {
            return Ok(1);
        };
        let invalid = || self.invalid();
        let text = unhex(raw).ok_or_else(invalid)?;
        let mut parts = text.splitn(3, ':');
        let (Some(listing), Some(owner), Some(seq)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(invalid());
        };
        if listing != self.name() || owner != tenant.as_str() {
            return Err(invalid());
        }
        seq.parse::<u64>()
            .ok()
            .filter(|s| *s > 0)
            .ok_or_else(invalid)
    }
}

/// The text whose bytes `hex` spells, if it is lowercase hex of UTF-8.
fn unhex(hex: &str) -> Option<String> {
    // Room for a unit key (`flue_proto::stack::MAX_UNIT_KEY`) and the prefix.
    if !hex.len().is_multiple_of(2) || hex.len() > 1024 {
        return None;
    }
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| {
            hex.get(i..i + 2)
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
        })
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(name: &str) -> TenantId {
        TenantId::new(name).expect("tenant id")
    }

    #[test]
    fn a_cursor_names_the_sequence_it_was_made_for() {
        let t = tenant("acme");
        let cursor = Pages::Deployments.cursor(&t, 42);
        assert_eq!(
            Pages::Deployments.start(&t, Some(&cursor)).expect("start"),
            42
        );
        assert_eq!(Pages::Deployments.start(&t, None).expect("start"), 1);
    }

    #[test]
    fn a_cursor_of_another_tenant_or_listing_or_made_up_is_refused() {
        let t = tenant("acme");
        let other = Pages::Deployments.cursor(&tenant("globex"), 42);
        let servers = Pages::Servers.cursor(&t, 42);
        for bad in [
            other.as_str(),
            servers.as_str(),
            "zz",
            "abc",
            "6465706c6f796d656e74733a61636d653a30",
        ] {
            let err = Pages::Deployments.start(&t, Some(bad)).expect_err(bad);
            assert!(err.to_string().contains("cursor"), "{err}");
        }
    }

    #[test]
    fn a_key_cursor_names_its_key_and_is_refused_by_another_listing_or_tenant() {
        let t = tenant("acme");
        let cursor = Pages::StackUnits.cursor_after(&t, "grp/c:1");
        assert_eq!(
            Pages::StackUnits.after(&t, Some(&cursor)).expect("after"),
            Some("grp/c:1".to_owned())
        );
        assert_eq!(Pages::Stacks.after(&t, None).expect("start"), None);
        for bad in [
            Pages::Stacks.cursor_after(&t, "grp/c:1"),
            Pages::StackUnits.cursor_after(&tenant("globex"), "x"),
            Pages::Servers.cursor(&t, 3),
            "zz".to_owned(),
        ] {
            let err = Pages::StackUnits.after(&t, Some(&bad)).expect_err(&bad);
            assert!(err.to_string().contains("cursor"), "{err}");
        }
    }
}
