#!/bin/sh
# Flue example, tier 1: pretends to set up a database server.
#
# Runs under the `script` hook group: inputs arrive as environment variables and each
# output is written to the file "${heat_outputs_path}.<name>".
#   inputs:  data_dir (where to keep all files), db_port, db_name
#   outputs: address (127.0.0.1:<db_port>), password (generated)
set -eu

: "${data_dir:?input data_dir is required}"
: "${heat_outputs_path:?heat_outputs_path is set by the agent}"
port="${db_port:-5432}"
name="${db_name:-app}"
case "$port" in
  '' | *[!0-9]*) echo "db_port must be a number, got '$port'" >&2; exit 2 ;;
esac

db_dir="$data_dir/db"
mkdir -p "$db_dir"

cat > "$db_dir/postgresql.conf" <<CONF
# written by examples/two-tier/db.sh (nothing listens: this database is pretend)
listen_addresses = '127.0.0.1'
port = $port
CONF
printf '%s\n' "$name" > "$db_dir/databases"

# A fresh password on every run; kept readable by the owner only.
password="$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
(umask 077 && printf '%s\n' "$password" > "$db_dir/password")

echo "initialised database cluster in $db_dir"
echo "created database '$name' and its owner"
echo "listening (pretend) on 127.0.0.1:$port"

printf '%s' "127.0.0.1:$port" > "${heat_outputs_path}.address"
printf '%s' "$password" > "${heat_outputs_path}.password"
