#!/bin/sh
# Suspend, resume and delete hooks of the example database: the agent hands this body
# to the hook for those actions ($deploy_action says which), with the inputs of the
# deployment it acts on.
set -eu
: "${data_dir:?input data_dir is required}"
db_dir="$data_dir/db"
case "$deploy_action" in
  SUSPEND) touch "$db_dir/suspended"; echo "database suspended" ;;
  RESUME) rm -f "$db_dir/suspended"; echo "database resumed" ;;
  DELETE) rm -rf "$db_dir"; echo "database files removed" ;;
  *) echo "unexpected action $deploy_action" >&2; exit 2 ;;
esac
echo "$deploy_action db" >> "$data_dir/lifecycle.log"
