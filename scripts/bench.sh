#!/usr/bin/env bash
# Benchmarks (not tests): Flue with every security feature off against on (tokens, agent credentials,
# signed requests and answers, sealing, TLS): latency, throughput, agent RSS, as a table.
# FLUE_BENCH_N=N sets the latency samples per mode (default 300).
# `bash scripts/bench.sh poll`: a polling server (stock os-collect-config, installed by
# scripts/test.sh) against a flue-agent instead (FLUE_BENCH_N default 20).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
FLUE_NATS_SERVER="$(bash scripts/ensure-nats.sh)"
export FLUE_NATS_SERVER
cargo build --release --workspace --bins
if [ "${1:-}" = poll ]; then
  shift
  cargo bench -p flue-tests --bench poll -- "$@"
else
  cargo bench -p flue-tests --bench e2e -- "$@"
fi
