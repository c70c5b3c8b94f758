//! Events: webhooks.
