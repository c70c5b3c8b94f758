#!/usr/bin/env bash
# Flue past one machine, on one machine: a 3-node NATS cluster in operator mode (written by
# `flue-gateway cluster-config`, routes on loopback), two gateways serving it with
# --replicas 3 (every stream and KV bucket kept on all three nodes), two agents; the
# two-tier stack created through gateway 1 and read back through gateway 2; then one NATS
# node SIGKILLed and the stack updated through gateway 2 while it is down; the node
# restarted and rejoining. Everything lives in .flue-cluster/ (wiped at start); every
# process started here is stopped on exit, error or Ctrl-C. Installs nothing beyond what
# scripts/ensure-nats.sh gives.
#
# The two gateways share one state directory: they must hold the same keys (the operator
# and account keys that mint broker users, the request-signing key agents pin, the sealing
# key, the HTTP token key). On separate machines, copy the state directory (0700, keys
# only) to each gateway host; NATS carries everything else.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
work="$root/.flue-cluster"
flue="$root/target/debug/flue"
gateway_bin="$root/target/debug/flue-gateway"
agent_bin="$root/target/debug/flue-agent"

section() { printf '\n==> %s\n' "$*"; }
die() {
  echo "cluster: $*" >&2
  exit 1
}

pids=()
node_pids=()
# stop PID: SIGTERM, 10 s to exit, then SIGKILL.
stop() {
  local pid=$1 _
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
# Stops what was started: agents and gateways newest first, while the cluster is still up
# for them to drain, then the NATS nodes.
stop_all() {
  local status=$?
  trap - EXIT INT TERM
  local i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do stop "${pids[i]}"; done
  for ((i = ${#node_pids[@]} - 1; i >= 0; i--)); do stop "${node_pids[i]}"; done
  exit "$status"
}
trap stop_all EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# wait_for WHAT SECONDS PID LOG CHECK...: runs CHECK every 0.1 s until it succeeds, the
# process dies (its log's tail is shown) or SECONDS pass.
wait_for() {
  local what=$1 limit=$2 pid=$3 log=$4
  shift 4
  local deadline=$((SECONDS + limit))
  until "$@"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 20 "$log" >&2 || true
      die "exited while waiting for $what (see $log)"
    fi
    ((SECONDS < deadline)) || die "timed out after ${limit}s waiting for $what (see $log)"
    sleep 0.1
  done
}
logged() { grep -q "$2" "$1"; }
now_ms() { date +%s%3N; }

section "building (cargo build --workspace --bins)"
nats_server="$(bash scripts/ensure-nats.sh)"
cargo build --workspace --bins
rm -rf "$work"
mkdir -p "$work"
state="$work/gateway-state"

section "flue-gateway init + cluster-config: one nats-server.conf per node"
"$gateway_bin" init --state-dir "$state" >"$work/init.out"
nodes=(n1 n2 n3)
declare -A client_port node_pid
node_args=()
for n in "${nodes[@]}"; do
  client_port[$n]="$(free_port)"
  node_args+=(--node "$n,127.0.0.1:${client_port[$n]},127.0.0.1:$(free_port)")
done
"$gateway_bin" cluster-config --state-dir "$state" --name flue --out "$work/nodes" "${node_args[@]}" |
  sed 's/^/    /'

start_node() {
  local n=$1
  "$nats_server" -c "$work/nodes/$n/nats-server.conf" >>"$work/nats-$n.log" 2>&1 &
  node_pid[$n]=$!
  node_pids+=($!)
}

section "starting the three nodes (operator mode, full resolver, JetStream domain flue)"
started=$(now_ms)
for n in "${nodes[@]}"; do start_node "$n"; done
for n in "${nodes[@]}"; do
  wait_for "$n's JetStream meta leader" 30 "${node_pid[$n]}" "$work/nats-$n.log" \
    logged "$work/nats-$n.log" "metadata leader"
done
echo "cluster up with a JetStream meta leader in $(($(now_ms) - started)) ms (logs: .flue-cluster/nats-n*.log)"
urls="$(for n in "${nodes[@]}"; do printf 'nats://127.0.0.1:%s,' "${client_port[$n]}"; done)"
urls="${urls%,}"

# start_gateway N: starts gateway N and sets gateway_url (not run in a subshell, so that
# its pid reaches the list stopped on exit).
start_gateway() {
  local g=$1
  "$gateway_bin" --listen 127.0.0.1:0 --nats-url "$urls" --state-dir "$state" --replicas 3 \
    >"$work/gateway$g.out" 2>"$work/gateway$g.log" &
  pids+=($!)
  wait_for "gateway $g's listening line" 60 "${pids[-1]}" "$work/gateway$g.log" \
    logged "$work/gateway$g.out" '^flue-gateway listening on http://'
  gateway_url="$(sed -n 's/^flue-gateway listening on //p' "$work/gateway$g.out" | head -n 1)"
}

section "starting two gateways on the same state dir, --replicas 3, every node's URL"
started=$(now_ms)
start_gateway 1
gw1=$gateway_url
echo "gateway 1 serving in $(($(now_ms) - started)) ms (it created every stream and bucket with 3 replicas)"
start_gateway 2
gw2=$gateway_url
echo "gateway 1 at $gw1, gateway 2 at $gw2 (logs: .flue-cluster/gateway*.log)"
admin_token="$("$gateway_bin" token --state-dir "$state" --role admin --name cluster-admin --ttl 1h)"
FLUE_TOKEN="$("$gateway_bin" token --state-dir "$state" --role engine --name cluster-engine --ttl 1h)"
export FLUE_TOKEN

section "registering db and web through gateway 1, starting their agents"
for server in db web; do
  FLUE_TOKEN="$admin_token" "$flue" --gateway "$gw1" server register "$server" --env \
    --creds "$work/agent-$server.creds" >"$work/agent-$server.env"
  log="$work/agent-$server.log"
  (
    set -a
    # shellcheck disable=SC1090 # written just above by `flue server register --env`
    . "$work/agent-$server.env"
    set +a
    exec "$agent_bin" run --server-id "$server" --state-dir "$work/agent-$server" \
      --hook-dir "$root/examples/hooks" --shutdown-grace-secs 5
  ) >"$log" 2>&1 &
  pids+=($!)
  wait_for "agent $server" 30 "${pids[-1]}" "$log" logged "$log" 'agent ready'
  echo "agent $server ready; its broker URLs: $(sed -n 's/^FLUE_NATS_URL=//p' "$work/agent-$server.env")"
done

section "flue stack create shop (examples/two-tier) through gateway 1"
started=$(now_ms)
"$flue" --gateway "$gw1" stack create shop -t examples/two-tier/stack.yaml -P data_dir="$work/shop" ||
  die "stack shop did not complete"
echo "created in $(($(now_ms) - started)) ms"

section "read back through gateway 2: flue stack show shop"
"$flue" --gateway "$gw2" stack show shop
echo "the operation as gateway 2 lists it (its worker may be either gateway's):"
"$flue" --gateway "$gw2" stack operations shop | sed 's/^/    /'

# The node leading FLUE_REQ (the leader logs its own election) is the one to kill.
victim=n1
for n in "${nodes[@]}"; do
  grep -q "new stream leader for .* > FLUE_REQ'" "$work/nats-$n.log" && victim=$n
done
section "SIGKILL node $victim (leading FLUE_REQ), then flue stack update shop -P db_port=5433 through gateway 2"
kill -KILL "${node_pid[$victim]}"
wait "${node_pid[$victim]}" 2>/dev/null || true
started=$(now_ms)
# Until the other nodes have elected new leaders for the streams $victim led (about 5 s
# here), the gateway answers 503 "retry later"; flue does not retry by itself, and an
# operation run again resumes where it stopped.
for attempt in $(seq 30); do
  if "$flue" --gateway "$gw2" stack update shop -t examples/two-tier/stack.yaml -P db_port=5433; then
    break
  fi
  ((attempt < 30)) || die "the update of shop did not complete with $victim down"
  echo "(attempt $attempt failed while the cluster elects new leaders; running it again)"
  sleep 1
done
echo "updated with $victim down in $(($(now_ms) - started)) ms"
"$flue" --gateway "$gw1" stack show shop | sed 's/^/    /'

section "restarting $victim: it rejoins and catches up"
from=$(wc -l <"$work/nats-$victim.log")
start_node "$victim"
rejoined() { tail -n +"$((from + 1))" "$work/nats-$victim.log" | grep -q "metadata leader"; }
wait_for "$victim to rejoin" 30 "${node_pid[$victim]}" "$work/nats-$victim.log" rejoined
echo "$victim is back in the cluster (it catches up on what it missed from the stream leaders)"

section "flue stack delete shop through gateway 1"
"$flue" --gateway "$gw1" stack delete shop || die "the delete of shop did not complete"
echo "lifecycle record of shop (.flue-cluster/shop/lifecycle.log):"
sed 's/^/    /' "$work/shop/lifecycle.log"

section "done: stopping agents, gateways and nodes"
