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
cargo build --workspace --bins
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

section "flue stack delete shop: delete hooks in reverse dependency order (web, then db)"
"$flue" stack delete shop || die "the delete of shop did not complete"
echo "lifecycle record of shop ($demo/shop/lifecycle.log):"
sed 's/^/    /' "$demo/shop/lifecycle.log"

section "presence: stopping compute3's agent (SIGTERM) is reported offline at once"
compute3_pid=${pids[-1]}
kill -TERM "$compute3_pid"
offline_seen() { "$flue" events --server compute3 --type server.offline | grep -q '"type":"io.flue.server.offline"'; }
wait_for "compute3's offline event" 20 "${pids[0]}" nats-server "$demo/nats.log" offline_seen
"$flue" events --server compute3 --type server.online,server.offline | python3 -c '
import json, sys
for line in sys.stdin:
    e = json.loads(line)
    d = e["data"]
    print("    %s %s %s %s" % (e["time"], e["type"], d["server_id"], d.get("reason", "")))'

section "flue stack list"
"$flue" stack list

section "deployments per server"
for server in db head compute1; do
  echo "$server:"
  "$flue" server deployments "$server" | sed 's/^/    /'
done

section "what the listener recorded (.flue-demo/events.jsonl), by type"
events_listed() { [ "$(grep -c '"type":"io.flue.server.offline"' "$demo/events.jsonl" || true)" -ge 1 ]; }
wait_for "the listener to catch up" 20 "${pids[0]}" nats-server "$demo/nats.log" events_listed
python3 -c '
import collections, json, sys
events = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
seqs = [e["seq"] for e in events]
print(f"    {len(events)} events, stream sequences {seqs[0]}..{seqs[-1]}, none missing: {seqs == list(range(seqs[0], seqs[-1] + 1))}")
for ty, n in sorted(collections.Counter(e["type"] for e in events).items()):
    print(f"    {n:5d}  {ty}")' "$demo/events.jsonl"

# ns_tcp NS HOST PORT: a TCP connect from inside namespace NS; prints connected, refused or
# unreachable.
ns_tcp() {
  local err
  if err="$(ip netns exec "$1" timeout 2 bash -c "exec 3<>/dev/tcp/$2/$3" 2>&1)"; then
    echo connected
  elif [[ $err == *refused* ]]; then
    echo refused
  else
    echo unreachable
  fi
}

# An isolated tenant network, in network namespaces (needs root), run the secure way: a
# control plane `cp` with its own hub and gateway, both bound to cp's loopback, and a tenant
# network `t1` linked to cp only, with a NATS leaf node and the agents of db and web connected
# to it. The hub comes from `flue-gateway init` (operator mode, TLS on its client and
# leaf-node ports with a CA made here), the leaf node from `flue-gateway leaf-config` (tenant
# t1's account only, its link allowed what the agents of db and web need, the hub's
# certificate verified); the agents hold the credentials their registration minted. The flue CLI runs inside cp.
tenant_network_demo() {
  local cp="flue-demo-$$-cp" t1="flue-demo-$$-t1" dir="$demo/isolated"
  local state="$demo/isolated/gateway-state"
  mkdir -p "$dir"
  ip netns add "$cp" && namespaces+=("$cp")
  ip netns add "$t1" && namespaces+=("$t1")
  ip -n "$cp" link set lo up
  ip -n "$t1" link set lo up
  ip link add v1a netns "$cp" type veth peer name v1b netns "$t1"
  ip -n "$cp" addr add 10.250.1.1/24 dev v1a
  ip -n "$t1" addr add 10.250.1.2/24 dev v1b
  ip -n "$cp" link set v1a up
  ip -n "$t1" link set v1b up
  echo "namespaces $cp (10.250.1.1) and $t1 (10.250.1.2), one veth link between them, no other route"

  # A CA of the demo's own, and the hub's certificate for the addresses it is dialled at.
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
    -subj "/CN=flue demo CA" -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=hub" \
    -keyout "$dir/hub.key" -out "$dir/hub.csr" 2>/dev/null
  openssl x509 -req -in "$dir/hub.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial \
    -days 1 -out "$dir/hub.pem" 2>/dev/null \
    -extfile <(printf 'subjectAltName=IP:127.0.0.1,IP:10.250.1.1\nextendedKeyUsage=serverAuth,clientAuth\n')
  "$gateway_bin" init --state-dir "$state" --tenant t1 --store-dir "$dir/hub-js" \
    --broker-listen 127.0.0.1:4222 --leafnode-listen 0.0.0.0:7422 \
    --tls-cert "$dir/hub.pem" --tls-key "$dir/hub.key" --tls-ca "$dir/ca.pem" >/dev/null
  "$gateway_bin" leaf-config --state-dir "$state" --tenant t1 --hub nats-leaf://10.250.1.1:7422 \
    --tls-ca "$dir/ca.pem" --listen 127.0.0.1:4222 --server db --server web \
    --out "$dir/leaf-t1" >/dev/null
  echo "flue-gateway init: operator, system account and tenant t1's accounts, hub config with TLS" \
    "(demo CA .flue-demo/isolated/ca.pem); flue-gateway leaf-config: t1's leaf node and its user" \
    "(the agents of db and web, t1's data space)"

  ip netns exec "$cp" "$nats_server" -c "$state/broker/nats-server.conf" >"$dir/hub.log" 2>&1 &
  pids+=($!)
  wait_for "the hub in cp" 15 "${pids[-1]}" "nats hub" "$dir/hub.log" grep -qs 'Server is ready' "$dir/hub.log"
  ip netns exec "$cp" "$gateway_bin" --listen 127.0.0.1:8470 --nats-url nats://127.0.0.1:4222 \
    --nats-ca "$dir/ca.pem" --state-dir "$state" >"$dir/gateway.out" 2>"$dir/gateway.log" &
  pids+=($!)
  wait_for "the gateway in cp" 30 "${pids[-1]}" flue-gateway "$dir/gateway.log" \
    grep -qs '^flue-gateway listening on' "$dir/gateway.out"
  ip netns exec "$t1" "$nats_server" -c "$dir/leaf-t1/leaf.conf" >"$dir/leaf.log" 2>&1 &
  pids+=($!)
  # Printed once TLS is verified and the leaf's user admitted ("Leafnode connection created"
  # comes before the handshake).
  wait_for "the leaf node in t1" 15 "${pids[-1]}" "nats leaf" "$dir/leaf.log" \
    grep -qs 'JetStream using domains' "$dir/leaf.log"
  echo "hub (operator mode) and gateway in cp on its loopback; leaf node in t1, linked over TLS" \
    "to 10.250.1.1:7422 as a user of tenant t1's account"

  echo "from t1: leaf-node port 10.250.1.1:7422 $(ns_tcp "$t1" 10.250.1.1 7422);" \
    "gateway port 10.250.1.1:8470 $(ns_tcp "$t1" 10.250.1.1 8470);" \
    "hub client port 10.250.1.1:4222 $(ns_tcp "$t1" 10.250.1.1 4222)"
  echo "from cp: gateway 127.0.0.1:8470 $(ns_tcp "$cp" 127.0.0.1 8470)"

  local token admin server log
  token="$("$gateway_bin" token --state-dir "$state" --role engine --tenant t1 --name demo-engine)"
  admin="$("$gateway_bin" token --state-dir "$state" --role admin --tenant t1 --name demo-admin)"
  local in_cp=(ip netns exec "$cp" env FLUE_TOKEN="$token" "$flue" --gateway http://127.0.0.1:8470)
  for server in db web; do
    ip netns exec "$cp" env FLUE_TOKEN="$admin" "$flue" --gateway http://127.0.0.1:8470 \
      server register "$server" --creds "$dir/$server.creds" >/dev/null
    log="$dir/agent-$server.log"
    ip netns exec "$t1" "$agent_bin" run --nats-url nats://127.0.0.1:4222 --tenant t1 \
      --server-id "$server" --creds "$dir/$server.creds" --state-dir "$dir/agent-$server" \
      --hook-dir "$root/examples/hooks" --shutdown-grace-secs 5 >"$log" 2>&1 &
    pids+=($!)
    wait_for "agent $server in t1" 30 "${pids[-1]}" "flue-agent $server" "$log" grep -qs 'agent ready' "$log"
  done
  echo "agents db and web ready in t1 with their own credentials, connected to the leaf node only"
  echo "flue stack create shop (inside cp): examples/two-tier, every request and answer through the leaf node"
  "${in_cp[@]}" stack create shop -t examples/two-tier/stack.yaml -P data_dir="$dir/shop" ||
    die "stack shop did not complete in the tenant network"
}

section "an isolated tenant network in network namespaces (operator mode, TLS on the leaf link)"
if [ "$(id -u)" != 0 ]; then
  echo "not shown: creating network namespaces needs root (run the demo as root to see it)"
elif ! command -v ip >/dev/null 2>&1; then
  echo "not shown: iproute2's \`ip\` is not installed"
elif ! command -v openssl >/dev/null 2>&1; then
  echo "not shown: \`openssl\` is not installed (it makes the demo's certificate authority)"
else
  echo "running as root: showing the isolated tenant network topology, the secure way (docs/broker-accounts.md)"
  tenant_network_demo
fi

section "done: every stack operation COMPLETE (files under .flue-demo/, logs alongside)"
