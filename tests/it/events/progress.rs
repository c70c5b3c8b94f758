//! Events: progress.
