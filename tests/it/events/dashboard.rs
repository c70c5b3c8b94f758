//! Events: dashboard.
