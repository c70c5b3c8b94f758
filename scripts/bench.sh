#!/usr/bin/env bash
# Benchmarks (not tests): Flue with every security feature off against on (tokens, agent credentials,
# signed requests and answers, sealing, TLS): latency, throughput, agent RSS, as a table.
# FLUE_BENCH_N=N sets the latency samples per mode (default 300).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
FLUE_NATS_SERVER="$(bash scripts/ensure-nats.sh)"
export FLUE_NATS_SERVER
cargo build --release --workspace --bins
cargo bench -p flue-tests --bench e2e -- "$@"
