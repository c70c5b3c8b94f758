//! Events: sse.
