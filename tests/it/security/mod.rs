//! Security (issue 10): each refusal proven against real processes.

mod broker_tls;
mod tls;
mod webhook_targets;
