//! Hardening (issue 9): the gateway under hostile input.

mod hostile;
mod proptest_api;
mod wire_numbers;
