//! Events: presence.
