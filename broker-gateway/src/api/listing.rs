//! The answer of a listing: the JSON array, and how many stored records were left out.

use axum::Json;
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use flue_proto::SKIPPED_RECORDS_HEADER;
use serde::Serialize;

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
