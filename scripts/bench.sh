#!/usr/bin/env bash
# Benchmarks (not tests), release build.
#
#   bash scripts/bench.sh            Flue with every security feature off against on (tokens,
#                                    agent credentials, signed requests and answers, sealing,
#                                    TLS): latency, throughput, agent RSS, as a table.
#                                    FLUE_BENCH_N=N sets the latency samples per mode (default 300).
#                                    Then the layout bench below, with its defaults.
#   bash scripts/bench.sh scale [N…] N simulated agents (default 1000 5000) on one broker and one
#                                    gateway: registration, RSS per server, idle presence CPU, one
#                                    deployment to every server, a group stack over all N through
#                                    `flue stack create` (engine workers), broker shutdown
#                                    (docs/benchmarks.md). `--stack-only`: registration, agents
#                                    and the group stack only.
#   bash scripts/bench.sh scale --cluster [--consumers file|memory] [--consumer-replicas R] [N…]
#                                    the same on a local 3-node cluster (replicas 3), with the
#                                    gateway's --request-consumer-storage (default file) and
#                                    --request-consumer-replicas (default: the stream's, 3).
#   bash scripts/bench.sh throughput deployments/s accepted and answered through one gateway with
#                                    simulated agents, and a no-op deployment's latency against
#                                    the physical floor measured in the same run (issue 11,
#                                    point 6; FLUE_BENCH_AGENTS, _CLIENTS, _SECS, _N).
#   bash scripts/bench.sh backlog    a gateway killed, N deployments answered while it is down
#                                    (FLUE_BENCH_N, default 10000, over FLUE_BENCH_AGENTS servers,
#                                    100), then started: time to ready, time to drain, the drain
#                                    rate against the ceilings measured in the same run (issue 24).
#   bash scripts/bench.sh stacks [N…] one group stack over N simulated servers (default 1000 3000):
#                                    create, update, delete; time and bytes written per operation.
#   bash scripts/bench.sh long-polls N concurrent long polls on one gateway, default settings
#                                    (FLUE_BENCH_POLLS, default 10000; FLUE_BENCH_WAIT, default 30 s):
#                                    answers by status, time to answer all, record reads, gateway RSS.
#   bash scripts/bench.sh layout     agents of the edge layout (users of the edge account, service
#                                    imports) against agents of the old one (users of the state
#                                    account) on one broker and gateway, in alternating rounds:
#                                    latency, messages and CPU per deployment, throughput, and the
#                                    ratios edge / old (issue 22, point 7; FLUE_BENCH_N, _ROUNDS,
#                                    _COUNTED, _AGENTS, _CLIENTS, _SECS). Also run by the default.
#   bash scripts/bench.sh poll       a polling server (stock os-collect-config, installed by
#                                    scripts/test.sh) against a flue-agent (FLUE_BENCH_N default 20).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
FLUE_NATS_SERVER="$(bash scripts/ensure-nats.sh)"
export FLUE_NATS_SERVER
cargo build --release --workspace --bins
if [[ "${1:-}" == poll ]]; then
  shift
  cargo bench -p flue-tests --bench poll -- "$@"
elif [[ "${1:-}" == throughput ]]; then
  shift
  ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
  cargo bench -p flue-tests --bench throughput -- "$@"
elif [[ "${1:-}" == long-polls ]]; then
  shift
  # A socket per poll in the bench and in the gateway.
  ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
  cargo bench -p flue-tests --bench long_polls -- "$@"
elif [[ "${1:-}" == backlog ]]; then
  shift
  ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
  cargo bench -p flue-tests --bench backlog -- "$@"
elif [[ "${1:-}" == stacks ]]; then
  shift
  ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
  cargo bench -p flue-tests --bench stacks -- "$@"
elif [[ "${1:-}" == layout ]]; then
  shift
  # One connection per simulated agent, plus the broker's own per connection.
  ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
  cargo bench -p flue-tests --bench layout -- "$@"
elif [[ "${1:-}" == scale ]]; then
  shift
  # One connection per simulated agent, plus the broker's own per connection.
  ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
  cargo bench -p flue-tests --bench scale -- "$@"
else
  cargo bench -p flue-tests --bench e2e -- "$@"
  ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
  env -u FLUE_BENCH_N cargo bench -p flue-tests --bench layout
fi
