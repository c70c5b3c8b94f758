//! Issue 9, hardening: each module reproduces one point against real processes.

mod hook_lifetime;
