#!/bin/sh
# Flue example, tier 2: pretends to set up a web application that uses the database.
#
# Runs under the `script` hook group: inputs arrive as environment variables and each
# output is written to the file "${heat_outputs_path}.<name>".
#   inputs:  data_dir, db_address (host:port from the db deployment),
#            db_password (hidden: never shown in API reads or logs), app_port
#   outputs: url
set -eu

: "${data_dir:?input data_dir is required}"
: "${heat_outputs_path:?heat_outputs_path is set by the agent}"
: "${db_address:?input db_address is required}"
if [ -z "${db_password:-}" ]; then
  echo "db_password is empty: deploy the database first and pass its password output" >&2
  exit 1
fi
case "$db_address" in
  *:*) ;;
  *) echo "db_address must look like host:port, got '$db_address'" >&2; exit 2 ;;
esac
port="${app_port:-8080}"

app_dir="$data_dir/web"
mkdir -p "$app_dir"
# The config holds the password, so only the owner may read it.
(
  umask 077
  cat > "$app_dir/app.conf" <<CONF
# written by examples/two-tier/web.sh
listen = 127.0.0.1:$port
database_url = postgres://app:$db_password@$db_address/app
CONF
)

echo "wrote $app_dir/app.conf"
echo "app will use the database at $db_address (password not shown)"
echo "serving (pretend) on http://127.0.0.1:$port/"

printf '%s' "http://127.0.0.1:$port/" > "${heat_outputs_path}.url"
