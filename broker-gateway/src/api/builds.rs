//! `/v1/agent-builds`: agent builds uploaded in chunks for agent upgrades
//! (`flue_proto::upgrade`). The gateway stores the bytes and checks only their shape: the
//! agent checks the size, SHA-256 and release signature itself, so a gateway (or an
//! uploader) cannot make it install anything else.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use flue_proto::upgrade::{CHUNK_SIZE, MAX_BUILD_SIZE, is_sha256_hex};
use tracing::info;

use super::error::ApiError;
use crate::service::Service;

/// `PUT /v1/agent-builds/{sha256}/chunks/{n}` (engine or admin): 204 once chunk `n` (from
/// 0) of the build whose SHA-256 is `sha256` is stored (a chunk put again is replaced).
/// Every chunk but the last holds exactly 512 KiB; 400 naming `sha256`, `n` or the body
/// when one is out of shape.
#[utoipa::path(
    put,
    operation_id = "put_agent_build_chunk",
    path = "/v1/agent-builds/{sha256}/chunks/{n}",
    tag = "servers",
    summary = "Upload one chunk of an agent build (engine or admin)",
    params(
        ("sha256" = String, Path, description = "SHA-256 of the whole build, 64 lower-case hex digits."),
        ("n" = u64, Path, description = "The chunk's index, from 0; 512 KiB each but the last."),
    ),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses(
        (status = 204, description = "Stored."),
        (status = 400, description = "The digest, index or body is out of shape (the message names it).", body = flue_proto::ErrorBody),
    )
)]
pub async fn put_chunk(
    State(service): State<Service>,
    Path((sha256, n)): Path<(String, String)>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    if !is_sha256_hex(&sha256) {
        return Err(ApiError::InvalidInput(
            "sha256: 64 lower-case hex digits (the whole build's SHA-256)".to_owned(),
        ));
    }
    let max_chunks = MAX_BUILD_SIZE / CHUNK_SIZE;
    let n = n
        .parse::<u64>()
        .ok()
        .filter(|n| *n < max_chunks)
        .ok_or_else(|| {
            ApiError::InvalidInput(format!("n: a chunk index from 0 to {}", max_chunks - 1))
        })?;
    if body.is_empty() || body.len() as u64 > CHUNK_SIZE {
        return Err(ApiError::InvalidInput(format!(
            "body: a chunk holds 1 to {CHUNK_SIZE} bytes, this one {}",
            body.len()
        )));
    }
    let tenant = &service.config.tenant;
    let len = body.len();
    service
        .store
        .builds
        .put_chunk(tenant, &sha256, n, body)
        .await?;
    info!(sha256 = %sha256, chunk = n, bytes = len, "agent build chunk stored");
    Ok(StatusCode::NO_CONTENT)
}
