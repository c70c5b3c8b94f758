#!/usr/bin/env bash
# Flue end-to-end demo: a real nats-server, the gateway and six agents on loopback,
# then the example stacks: two-tier (create, show, backup action, update, delete),
# ordering, and the cluster scaled out from 2 to 3 compute members, with every lifecycle event
# recorded by a listener and summarised at the end. When run as root it then shows an isolated
# tenant network in network namespaces (a control plane with hub and gateway, a tenant
# network with a NATS leaf node and two agents that reach nothing else), in operator mode with
# TLS on the leaf link; otherwise it says why not. Everything lives in .flue-demo/ (wiped at start); every process and namespace
# started here is stopped or removed on exit, error or Ctrl-C.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
demo="$root/.flue-demo"
flue="$root/target/debug/flue"
gateway_bin="$root/target/debug/flue-gateway"
agent_bin="$root/target/debug/flue-agent"

section() { printf '\n==> %s\n' "$*"; }
die() {
  echo "demo: $*" >&2
  exit 1
}

pids=()
namespaces=()
# Stops what was started, newest first (agents, then the gateway, then nats-server), so
# each one drains while the broker is still up; each gets 10 s before SIGKILL. Then removes
# the network namespaces made here (whatever still runs in one is killed first).
stop_all() {
  local status=$?
  trap - EXIT INT TERM
  local i pid _
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    pid=${pids[i]}
    kill -TERM "$pid" 2>/dev/null || continue
    for _ in $(seq 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  local ns
  for ns in "${namespaces[@]}"; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  exit "$status"
}
trap stop_all EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# still_running PID NAME LOG: fails with the log's tail when the process has exited.
still_running() {
  kill -0 "$1" 2>/dev/null && return 0
  echo "demo: $2 exited early; last lines of $3:" >&2
  tail -n 20 "$3" >&2 || true
  exit 1
}

# wait_for WHAT SECONDS PID NAME LOG CHECK...: runs CHECK every 0.1 s until it succeeds,
# the process dies or SECONDS pass.
wait_for() {
  local what=$1 limit=$2 pid=$3 name=$4 log=$5
  shift 5
  local deadline=$((SECONDS + limit))
  until "$@"; do
    still_running "$pid" "$name" "$log"
    ((SECONDS < deadline)) || die "timed out after ${limit}s waiting for $what (see $log)"
    sleep 0.1
  done
}

tcp_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

section "building (cargo build --workspace --bins)"
nats_server="$(bash scripts/ensure-nats.sh)"
true
rm -rf "$demo"
mkdir -p "$demo"

section "flue-gateway init: the broker's operator, system account and tenant default's accounts"
nats_port="$(free_port)"
# The keys (0600) stay in the gateway's state dir; the broker gets only public JWTs.
"$gateway_bin" init --state-dir "$demo/gateway-state" --broker-listen "127.0.0.1:$nats_port" \
  --store-dir "$demo/js" >"$demo/init.out"
echo "operator mode: no anonymous client; one NATS account per tenant (+ one for its events)"
echo "broker configuration: .flue-demo/gateway-state/broker/nats-server.conf"

section "starting nats-server with that configuration (JetStream, domain flue) on loopback"
"$nats_server" -c "$demo/gateway-state/broker/nats-server.conf" >"$demo/nats.log" 2>&1 &
pids+=($!)
wait_for "nats-server on port $nats_port" 15 "${pids[-1]}" nats-server "$demo/nats.log" tcp_open "$nats_port"
nats_url="nats://127.0.0.1:$nats_port"
echo "nats-server $("$nats_server" --version | awk '{print $NF}') at $nats_url (log: .flue-demo/nats.log)"

section "starting flue-gateway (broker keys and HTTP API token key in .flue-demo/gateway-state)"
"$gateway_bin" --listen 127.0.0.1:0 --nats-url "$nats_url" --state-dir "$demo/gateway-state" \
  >"$demo/gateway.out" 2>"$demo/gateway.log" &
pids+=($!)
gateway_listening() { grep -q '^flue-gateway listening on http://' "$demo/gateway.out"; }
wait_for "the gateway's listening line" 30 "${pids[-1]}" flue-gateway "$demo/gateway.log" gateway_listening
gateway_url="$(sed -n 's/^flue-gateway listening on //p' "$demo/gateway.out" | head -n 1)"
export FLUE_GATEWAY_URL="$gateway_url"
echo "gateway at $gateway_url (log: .flue-demo/gateway.log); dashboard: $gateway_url/"
# Tokens minted offline from the gateway's state dir: an admin one registers servers, an
# engine one (FLUE_TOKEN, read by every flue command) runs the stacks; the viewer one
# is for the dashboard's login form.
admin_token="$("$gateway_bin" token --state-dir "$demo/gateway-state" --role admin --name demo-admin --ttl 12h)"
FLUE_TOKEN="$("$gateway_bin" token --state-dir "$demo/gateway-state" --role engine --name demo-engine --ttl 12h)"
export FLUE_TOKEN
"$gateway_bin" token --state-dir "$demo/gateway-state" --role viewer --name dashboard --ttl 12h \
  >"$demo/dashboard.token"
echo "tokens minted: admin (servers), engine (FLUE_TOKEN), viewer for the dashboard in .flue-demo/dashboard.token"

section "listening to every lifecycle event: flue events --all --follow --with-seq > .flue-demo/events.jsonl"
"$flue" events --all --follow --with-seq >"$demo/events.jsonl" 2>"$demo/events.err" &
pids+=($!)

servers=(db web head compute1 compute2 compute3)
section "registering servers ${servers[*]}, starting their agents"
agent_ready() { grep -q 'agent ready' "$1"; }
for server in "${servers[@]}"; do
  # The credentials file (0600) is the agent's identity: its own NATS user (allowed only its
  # queue, answers, heartbeats and inbox), and it pins the gateway's signing key.
  FLUE_TOKEN="$admin_token" "$flue" server register "$server" --name "demo $server server" --env \
    --creds "$demo/agent-$server.creds" >"$demo/agent-$server.env"
  log="$demo/agent-$server.log"
  (
    set -a
    # shellcheck disable=SC1090 # written just above by `flue server register --env`
    . "$demo/agent-$server.env"
    set +a
    exec "$agent_bin" run --server-id "$server" --state-dir "$demo/agent-$server" \
      --hook-dir "$root/examples/hooks" --shutdown-grace-secs 5
  ) >"$log" 2>&1 &
  pids+=($!)
  wait_for "agent $server to be ready" 30 "${pids[-1]}" "flue-agent $server" "$log" agent_ready "$log"
  echo "agent $server ready (log: .flue-demo/agent-$server.log)"
done
echo "flue server register db --env (what an agent needs, printed for a server's cloud-init):"
sed 's/^/    /' "$demo/agent-db.env"

section "flue stack create shop: examples/two-tier (web gets db's address and password, the password as a hidden input)"
"$flue" stack create shop -t examples/two-tier/stack.yaml -P data_dir="$demo/shop" ||
  die "stack shop did not complete"

section "flue stack show shop"
"$flue" stack show shop

section "flue stack action shop db_deploy backup (an ad-hoc action declared by db's config)"
"$flue" stack action shop db_deploy backup || die "the backup action failed"

section "flue stack update shop -P app_port=9090: only web changes, db is left alone"
"$flue" stack update shop -t examples/two-tier/stack.yaml -P app_port=9090 ||
  die "the update of shop did not complete"

section "flue stack operations shop: each command was submitted and ran in a gateway's engine worker"
"$flue" stack operations shop

section "flue stack create order: examples/ordering (config1, then config3 on the other server, then config2)"
"$flue" stack create order -t examples/ordering/stack.yaml \
  -P server1=db -P server2=web -P record_file="$demo/order.log" || die "stack order did not complete"
echo "the hooks' own record ($demo/order.log):"
sed 's/^/    /' "$demo/order.log"

section "flue stack create hpc: examples/cluster with 2 compute members"
"$flue" stack create hpc -t examples/cluster/stack.yaml -P state_dir="$demo/hpc" ||
  die "stack hpc did not complete"

section "scale out to 3 members: c3 CREATE, c1 and c2 re-run (UPDATE) with the new member list"
"$flue" stack update hpc -t examples/cluster/stack.yaml \
  -P 'compute_servers={"c1": "compute1", "c2": "compute2", "c3": "compute3"}' ||
  die "the scale-out of hpc did not complete"
echo "compute1 now knows the members: $(cat "$demo/hpc/compute1/members.json")"
echo "the head now knows: $(cat "$demo/hpc/head/computes.json")"

section "the group's membership as a PaaS layer sees it: flue events --stack hpc --type group.member_joined"
"$flue" events --stack hpc --type group.member_joined | python3 -c '
import json, sys
for line in sys.stdin:
    e = json.loads(line)
    d = e["data"]
    print("    %s: %s/%s on %s (operation %s)" % (e["type"], d["group"], d["member"], d["server_id"], d["operation_id"]))'

section "flue stack create legacy: examples/heat/two-servers.yaml, written for Heat, run unchanged"
# Its OS::Nova::Server resources are not Flue's to create: --server maps each onto a
# registered server; -e is a Heat environment file; the RandomString password stays hidden.
"$flue" stack create legacy -t examples/heat/two-servers.yaml -e examples/heat/two-servers-env.yaml \
  --server db_server=db --server web_server=web -P data_dir="$demo/legacy" ||
  die "stack legacy did not complete"

echo "$gateway_url" > /tmp/lead-st/url
echo "$admin_token" > /tmp/lead-st/admin.token
echo "$FLUE_TOKEN" > /tmp/lead-st/engine.token
cp "$demo/dashboard.token" /tmp/lead-st/viewer.token
"$gateway_bin" token --state-dir "$demo/gateway-state" --role listener --name st-l --ttl 12h > /tmp/lead-st/listener.token
"$gateway_bin" token --state-dir "$demo/gateway-state" --role operator --name st-o --ttl 12h > /tmp/lead-st/operator.token || true
echo READY > /tmp/lead-st/ready
while [ ! -f /tmp/lead-st/stop ]; do sleep 2; done
