//! Telling a lost compare-and-set race from a failed write.
//!
//! async-nats 0.51 reports a KV update whose revision is stale as
//! [`kv::UpdateErrorKind::WrongLastRevision`] only when the broker answers with JetStream
//! error 10071. A clustered (replicated) stream answers the same conflict with 10164
//! ("wrong last sequence", checked before the write is proposed), which the client
//! reports as `Other`: every compare-and-set loop would then fail a write it should
//! simply retry on the record as it now is.

use async_nats::jetstream::{self, kv};

/// Whether `e` says the key changed since the revision the update named.
pub fn lost_race(e: &kv::UpdateError) -> bool {
    e.kind() == kv::UpdateErrorKind::WrongLastRevision || stale_in_chain(e)
}

/// Whether `e` says the key changed since the revision the delete named.
pub fn lost_delete_race(e: &kv::DeleteError) -> bool {
    e.kind() == kv::DeleteErrorKind::WrongLastRevision || stale_in_chain(e)
}

/// Whether a JetStream error in `e`'s sources is a stale expected sequence.
fn stale_in_chain(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = e.source();
    while let Some(err) = source {
        if let Some(js) = err.downcast_ref::<jetstream::Error>() {
            let code = js.error_code();
            return code == jetstream::ErrorCode::STREAM_WRONG_LAST_SEQUENCE
                || code == jetstream::ErrorCode::STREAM_WRONG_LAST_SEQUENCE_CONSTANT;
        }
        source = err.source();
    }
    false
}
