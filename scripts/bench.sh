#!/usr/bin/env bash
# Benchmarks (not tests): raw JetStream round trip vs Flue deployment latency, throughput, agent RSS.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
FLUE_NATS_SERVER="$(bash scripts/ensure-nats.sh)"
export FLUE_NATS_SERVER
cargo build --release --workspace --bins
cargo bench -p flue-tests --bench e2e -- "$@"
