//! The web dashboard (work in progress).

use super::error::ApiError;

/// `GET /`.
pub async fn page() -> Result<(), ApiError> {
    Err(ApiError::NotFound("not yet".into()))
}
