#!/usr/bin/env bash
# README command 2: runs every test against a real nats-server, gateway and agents.
# Installs the pinned nats-server, nats-py, standardwebhooks and prometheus-client into .venv/ (schemathesis into its own
# .venv/schemathesis) if they are missing, and Debian's chromium
# (for the dashboard test), iproute2 (for the network-namespace tests) and cloud-init (for the
# packaging tests) when they are missing and this runs as root with apt-get.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
FLUE_NATS_SERVER="$(bash scripts/ensure-nats.sh)"
export FLUE_NATS_SERVER
# The README's non-Rust listener (examples/listeners/flue_events.py) is tested with nats-py.
NATS_PY_PIN=2.16.0
# The [nkeys] extra signs in with a listener's .creds file on a secured broker.
if ! .venv/bin/python -c "import nats, nkeys" 2>/dev/null; then
  echo "installing nats-py[nkeys] ${NATS_PY_PIN} into .venv (for the Python listener tests)" >&2
  .venv/bin/pip install --quiet --disable-pip-version-check "nats-py[nkeys]==${NATS_PY_PIN}" >&2
fi
# Webhook receivers verify deliveries with the official Standard Webhooks package
# (tests/it/events/webhooks/standard.rs), and /metrics' classic text format is checked with
# the Prometheus Python client's parser (tests/it/metrics.rs).
STANDARDWEBHOOKS_PIN=1.1.0
PROMETHEUS_CLIENT_PIN=0.26.0
if ! .venv/bin/python -c "import standardwebhooks, prometheus_client" 2>/dev/null \
  || [ "$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("standardwebhooks"), m.version("prometheus-client"))' 2>/dev/null)" \
    != "${STANDARDWEBHOOKS_PIN} ${PROMETHEUS_CLIENT_PIN}" ]; then
  echo "installing standardwebhooks ${STANDARDWEBHOOKS_PIN} and prometheus-client ${PROMETHEUS_CLIENT_PIN} into .venv (for the webhook and metrics tests)" >&2
  .venv/bin/pip install --quiet --disable-pip-version-check \
    "standardwebhooks==${STANDARDWEBHOOKS_PIN}" "prometheus-client==${PROMETHEUS_CLIENT_PIN}" >&2
fi
# Heat compatibility: tests/it/heat runs heat-agents' stock hooks unmodified through the agent,
# tests/it/poll runs a server with the stock tools of a Heat image (os-collect-config,
# os-refresh-config, os-apply-config with their dependencies: ~10 s, and heat-agents'
# 55-heat-config, heat-config-notify and hooks). heat-agents' wheel holds none of those
# files, so its pinned sdist is unpacked into .venv/share instead.
OCC_PIN=14.1.0
HEAT_AGENTS_PIN=13.0.0
for tool in os-collect-config os-refresh-config os-apply-config; do
  if ! .venv/bin/python -c "import ${tool//-/_}" 2>/dev/null; then
    echo "installing ${tool} ${OCC_PIN} into .venv (for the polling-server tests)" >&2
    .venv/bin/pip install --quiet --disable-pip-version-check "${tool}==${OCC_PIN}" >&2
  fi
done
if [ ! -f ".venv/share/heat_agents-${HEAT_AGENTS_PIN}/heat-config/bin/heat-config-notify" ]; then
  echo "unpacking heat-agents ${HEAT_AGENTS_PIN} (sdist) into .venv/share (for the Heat tests)" >&2
  heat_tmp="$(mktemp -d)"
  .venv/bin/pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
    -d "$heat_tmp" "heat-agents==${HEAT_AGENTS_PIN}" >&2
  mkdir -p .venv/share
  tar -xzf "$heat_tmp/heat_agents-${HEAT_AGENTS_PIN}.tar.gz" -C .venv/share
  rm -rf "$heat_tmp"
fi
# Their stock Ansible hook runs a real ansible-playbook (installed in about 10 s).
ANSIBLE_CORE_PIN=2.19.14
if [ ! -x .venv/bin/ansible-playbook ]; then
  echo "installing ansible-core ${ANSIBLE_CORE_PIN} into .venv (for the Heat compatibility tests)" >&2
  .venv/bin/pip install --quiet --disable-pip-version-check "ansible-core==${ANSIBLE_CORE_PIN}" >&2
fi
# The API contract test (tests/it/contract.rs) runs schemathesis against a real gateway's
# /openapi.json. It gets its own venv, so its dependencies cannot clash with the pins above.
SCHEMATHESIS_PIN=4.32.5
if ! compgen -G ".venv/schemathesis/lib/python3*/site-packages/schemathesis-${SCHEMATHESIS_PIN}.dist-info" >/dev/null; then
  echo "installing schemathesis ${SCHEMATHESIS_PIN} into .venv/schemathesis (for the API contract test)" >&2
  [ -x .venv/schemathesis/bin/pip ] || .venv/bin/python -m venv .venv/schemathesis >&2
  .venv/schemathesis/bin/pip install --quiet --disable-pip-version-check "schemathesis==${SCHEMATHESIS_PIN}" >&2
fi
# apt_install PACKAGE WHY HINT: installs Debian's PACKAGE when this runs as root with
# apt-get, else warns that the tests WHY names will fail (HINT: how to fix it).
apt_install() {
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing $1 ($2)" >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1" >&2
  else
    echo "warning: $1 is not installed, so $2 will fail; $3" >&2
  fi
}
# The dashboard test drives Debian's headless `chromium` (or $FLUE_CHROMIUM).
if [ -z "${FLUE_CHROMIUM:-}" ] && ! command -v chromium >/dev/null 2>&1; then
  apt_install chromium "the dashboard tests" \
    "install it with \`sudo apt-get install chromium\` or set FLUE_CHROMIUM"
fi
# The isolated-network tests (security::netns) make network namespaces and veth links: they
# need root and iproute2's `ip` (and `ss`), and fail saying so without them.
if ! command -v ip >/dev/null 2>&1 || ! command -v ss >/dev/null 2>&1; then
  apt_install iproute2 "the network-namespace tests" \
    "install it with \`sudo apt-get install iproute2\` and run the tests as root"
fi
# The packaging tests (packaging::) check the agent's unit with `systemd-analyze verify` and
# the `--cloud-init` user data with Debian's `cloud-init schema`; they fail saying so without them.
if ! command -v cloud-init >/dev/null 2>&1; then
  apt_install cloud-init "the packaging tests" "install it with \`sudo apt-get install cloud-init\`"
fi
if ! command -v systemd-analyze >/dev/null 2>&1; then
  apt_install systemd "the packaging tests" "install it with \`sudo apt-get install systemd\`"
fi
if [ "$(id -u)" != 0 ]; then
  echo "warning: not root, so the network-namespace tests (security::netns) will fail;" \
    "CI runs the suite as root" >&2
fi
# The end-to-end tests start the real binaries, so build them first. The agent-upgrade
# tests (tests/it/upgrade.rs) also need two other agents, copied out of the same target dir
# before the normal build overwrites them (deps reused; measured: ~6 s for the second build,
# ~2 min the first time for the previous release, then seconds):
# - the previous release's agent (the version-skew policy, docs/agent.md), built from git
#   history; no history, no build: the script fails rather than skip the test. Cargo names
#   a workspace crate's artifacts without its path, so the previous release's flue-agent
#   shares them with this tree's `cargo build -p flue-agent`; a binary that has this tree's
#   `version` command is not the previous release, and the script stops saying so;
# - this tree's agent built with another build id (version 0.1.0+next).
PREVIOUS_RELEASE=46f44ea
target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
extra_bins="$target_dir/debug/flue-upgrade"
mkdir -p "$extra_bins"
if [ ! -x "$extra_bins/flue-agent-previous" ] || [ "$(cat "$extra_bins/previous.commit" 2>/dev/null)" != "$PREVIOUS_RELEASE" ]; then
  echo "building the agent of the previous release ($PREVIOUS_RELEASE) for the version-skew test" >&2
  previous_src="$(mktemp -d)"
  git archive "$PREVIOUS_RELEASE" | tar -x -C "$previous_src"
  (cd "$previous_src" && cargo build --locked -p flue-agent --bin flue-agent --target-dir "$target_dir")
  if "$target_dir/debug/flue-agent" version >/dev/null 2>&1; then
    echo "error: the agent built from $PREVIOUS_RELEASE is this tree's (cargo found this tree's artifacts fresh): run \`cargo clean -p flue-agent\` and this script again" >&2
    exit 1
  fi
  cp "$target_dir/debug/flue-agent" "$extra_bins/flue-agent-previous"
  echo "$PREVIOUS_RELEASE" > "$extra_bins/previous.commit"
  rm -rf "$previous_src"
fi
FLUE_BUILD_ID=next cargo build --workspace --bins
cp "$target_dir/debug/flue-agent" "$extra_bins/flue-agent-next"
cargo build --workspace --bins
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --no-fail-fast "$@"
else
  cargo test --workspace --no-fail-fast "$@"
fi
