#!/bin/sh
# The example database's ad-hoc `backup` action: copies the database files.
set -eu
: "${data_dir:?input data_dir is required}"
dest="$data_dir/backups/$(date -u +%Y%m%dT%H%M%SZ)-$$"
mkdir -p "$dest"
cp -R "$data_dir/db/." "$dest/"
echo "backed up $data_dir/db to $dest"
echo "backup db" >> "$data_dir/lifecycle.log"
printf '%s' "$dest" > "${heat_outputs_path}.backup_path"
