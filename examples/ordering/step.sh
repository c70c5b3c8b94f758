#!/bin/sh
# One step of the ordering example: records its start and end in record_file.
# Inputs: record_file, step (and deploy_server_id, supplied by the agent).
set -eu
: "${record_file:?input record_file is required}"
: "${step:?input step is required}"
echo "start $step" >> "$record_file"
echo "$step runs on $deploy_server_id"
echo "end $step" >> "$record_file"
printf '%s' "$deploy_server_id" > "${heat_outputs_path}.ran_on"
