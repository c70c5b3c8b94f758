//! Security (issue 10): each refusal proven against real processes.

mod tls;
mod webhook_targets;
