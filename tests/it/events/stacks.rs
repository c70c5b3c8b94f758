//! Events: stacks.
