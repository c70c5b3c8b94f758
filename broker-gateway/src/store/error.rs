//! Why reading or writing the gateway state failed.

use super::cas::MAX_CAS_ATTEMPTS;

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why the state store failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A bucket could not be created or opened.
    #[error("cannot open bucket {bucket}")]
    Open {
        /// Bucket name.
        bucket: &'static str,
        /// Cause.
        #[source]
        source: BoxError,
    },
    /// Reading a key failed.
    #[error("cannot read {key:?} from bucket {bucket}")]
    Read {
        /// Bucket name.
        bucket: &'static str,
        /// Key.
        key: String,
        /// Cause.
        #[source]
        source: BoxError,
    },
    /// Writing a key failed.
    #[error("cannot write {key:?} to bucket {bucket}")]
    Write {
        /// Bucket name.
        bucket: &'static str,
        /// Key.
        key: String,
        /// Cause.
        #[source]
        source: BoxError,
    },
    /// Listing keys failed.
    #[error("cannot list keys of bucket {bucket}")]
    List {
        /// Bucket name.
        bucket: &'static str,
        /// Cause.
        #[source]
        source: BoxError,
    },
    /// A stored value is not what the gateway wrote.
    #[error("stored value of {key:?} in bucket {bucket} cannot be decoded")]
    Decode {
        /// Bucket name.
        bucket: &'static str,
        /// Key.
        key: String,
        /// Cause.
        #[source]
        source: serde_json::Error,
    },
    /// Other writers kept changing the key; the change was not made.
    #[error("gave up updating {key:?} after {MAX_CAS_ATTEMPTS} concurrent changes")]
    Contention {
        /// Key.
        key: String,
    },
    /// Purging a range of keys failed.
    #[error("cannot purge {filter:?} from bucket {bucket}")]
    Purge {
        /// Bucket name.
        bucket: &'static str,
        /// Subject filter of the purge.
        filter: String,
        /// Cause.
        #[source]
        source: BoxError,
    },
    /// Watching a key failed.
    #[error("cannot watch {key:?} in bucket {bucket}")]
    Watch {
        /// Bucket name.
        bucket: &'static str,
        /// Key.
        key: String,
        /// Cause.
        #[source]
        source: BoxError,
    },
}

impl StoreError {
    /// The bucket the failed call was on, when there is one (a 507 names it).
    pub fn bucket(&self) -> Option<&'static str> {
        match self {
            Self::Open { bucket, .. }
            | Self::Read { bucket, .. }
            | Self::Write { bucket, .. }
            | Self::List { bucket, .. }
            | Self::Decode { bucket, .. }
            | Self::Purge { bucket, .. }
            | Self::Watch { bucket, .. } => Some(bucket),
            Self::Contention { .. } => None,
        }
    }
}
