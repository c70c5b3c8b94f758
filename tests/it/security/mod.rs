//! Issue 10, security: every refusal proven against real processes.

mod credentials;
mod signing;
