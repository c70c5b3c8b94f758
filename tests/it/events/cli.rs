//! Events: cli.
