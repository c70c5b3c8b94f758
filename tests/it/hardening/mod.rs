//! Issue 9 ("Hardening"): stray requests, the broker's consumer limit, event fixes.

mod consumer_limit;
mod reregister;
mod stray;
