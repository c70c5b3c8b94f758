#!/usr/bin/env bash
# README command 2: runs every test against a real nats-server, gateway and agents.
# Installs the pinned nats-server into .venv/ if it is missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
FLUE_NATS_SERVER="$(bash scripts/ensure-nats.sh)"
export FLUE_NATS_SERVER
# The end-to-end tests start the real binaries, so build them first.
cargo build --workspace --bins
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --no-fail-fast "$@"
else
  cargo test --workspace --no-fail-fast "$@"
fi
