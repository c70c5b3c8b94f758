#!/usr/bin/env bash
# Flue end-to-end demo: a real nats-server, the gateway and two agents on loopback,
# then the two-tier example (db, then web fed with the db's outputs) and a third
# deployment through the external `json-echo` hook. Everything lives in .flue-demo/
# (wiped at start); every process started here is stopped on exit, error or Ctrl-C.
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
# Stops what was started, newest first (agents, then the gateway, then nats-server), so
# each one drains while the broker is still up; each gets 10 s before SIGKILL.
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

section "starting nats-server with JetStream on loopback"
nats_port="$(free_port)"
"$nats_server" -js -a 127.0.0.1 -p "$nats_port" -sd "$demo/js" >"$demo/nats.log" 2>&1 &
pids+=($!)
wait_for "nats-server on port $nats_port" 15 "${pids[-1]}" nats-server "$demo/nats.log" tcp_open "$nats_port"
nats_url="nats://127.0.0.1:$nats_port"
echo "nats-server $("$nats_server" --version | awk '{print $NF}') at $nats_url (log: .flue-demo/nats.log)"

section "starting flue-gateway"
"$gateway_bin" --listen 127.0.0.1:0 --nats-url "$nats_url" \
  >"$demo/gateway.out" 2>"$demo/gateway.log" &
pids+=($!)
gateway_listening() { grep -q '^flue-gateway listening on http://' "$demo/gateway.out"; }
wait_for "the gateway's listening line" 30 "${pids[-1]}" flue-gateway "$demo/gateway.log" gateway_listening
gateway_url="$(sed -n 's/^flue-gateway listening on //p' "$demo/gateway.out" | head -n 1)"
export FLUE_GATEWAY_URL="$gateway_url"
echo "gateway at $gateway_url (log: .flue-demo/gateway.log)"

section "registering servers db and web, starting their agents"
for server in db web; do
  "$flue" server register "$server" --name "demo $server server" --env >"$demo/agent-$server.env"
  echo "flue server register $server --env:"
  sed 's/^/    /' "$demo/agent-$server.env"
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
  agent_ready() { grep -q 'agent ready' "$1"; }
  wait_for "agent $server to be ready" 30 "${pids[-1]}" "flue-agent $server" "$log" agent_ready "$log"
  echo "agent $server ready (log: .flue-demo/agent-$server.log)"
done

section "creating configs from examples/two-tier"
"$flue" config create --id db --name "demo database" --group script \
  --config-file examples/two-tier/db.sh \
  --input data_dir --input db_port --input db_name \
  --output address --output password >"$demo/config-db.json"
echo "config db   (script examples/two-tier/db.sh; outputs address, password)"
"$flue" config create --id web --name "demo web app" --group script \
  --config-file examples/two-tier/web.sh \
  --input data_dir --input db_address --hidden-input db_password --input app_port \
  --output url >"$demo/config-web.json"
echo "config web  (script examples/two-tier/web.sh; hidden input db_password; output url)"
"$flue" config create --spec examples/two-tier/facts.json >"$demo/config-facts.json"
echo "config facts (group json-echo, from examples/two-tier/facts.json)"

section "deploying db on server db"
"$flue" deploy --config db --server db --id db-create \
  --input data_dir="$demo/srv-db" --input-json db_port=5432 --input db_name=app --wait ||
  die "deployment db-create did not complete"

section "reading the db deployment's outputs"
db_address="$("$flue" deployment show db-create --output address)"
db_password="$("$flue" deployment show db-create --output password)"
echo "address  = $db_address"
echo "password = (${#db_password} characters, handed to web as a hidden input)"

section "deploying web on server web, wired to the database"
"$flue" deploy --config web --server web --id web-create \
  --input data_dir="$demo/srv-web" --input db_address="$db_address" \
  --input db_password="$db_password" --input app_port=8080 --wait ||
  die "deployment web-create did not complete"
web_url="$("$flue" deployment show web-create --output url)"
echo "the API shows the hidden input as: $("$flue" deployment show web-create |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["input_values"]["db_password"])')"

section "a third deployment on web through the external json-echo hook"
"$flue" deploy --config facts --server web --id web-facts --input url="$web_url" --wait ||
  die "deployment web-facts did not complete"

section "deployments per server"
for server in db web; do
  echo "$server:"
  "$flue" server deployments "$server" | sed 's/^/    /'
done

section "done: every deployment is COMPLETE (files under .flue-demo/, logs alongside)"
