//! Issue 10, security: what the broker, the stores and the logs may hold.

mod scan;
mod sealing;
