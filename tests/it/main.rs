//! End-to-end tests: a real nats-server per test, the real gateway and agent binaries,
//! real hooks. Build the binaries first (`bash scripts/test.sh` does).

mod api_errors;
mod broker_round_trip;
mod cli;
mod cluster;
mod contract;
mod data_space;
mod delivery;
mod deploy;
mod events;
mod gateway;
mod hardening;
mod heat;
mod ledger_reuse;
mod limits;
mod metrics;
mod operations;
mod packaging;
mod paging;
mod poll;
mod request_consumers;
mod resilience;
mod security;
mod sim_agents;
mod stack;
mod structure;
mod upgrade;
