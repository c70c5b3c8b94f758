//! Events: deployments.
