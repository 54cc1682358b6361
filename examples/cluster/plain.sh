#!/bin/bash
# The same without a scheduler: run this on every machine (same checkout path on each). The first
# command to run creates the study; later `search` commands with the same --trials add to its budget,
# so use `worker` on all machines but one.
#
#   machine 1:   AUTOTUNE_STORAGE=postgresql+psycopg://user@db-host/autotune bash examples/cluster/plain.sh search
#   machine 2+:  AUTOTUNE_STORAGE=postgresql+psycopg://user@db-host/autotune bash examples/cluster/plain.sh worker
set -euo pipefail
: "${AUTOTUNE_STORAGE:?set AUTOTUNE_STORAGE to the shared database URL}"
case "${1:-worker}" in
  search) exec autotune search examples/digits/model.py --study-name digits-shared --trials 32 ;;
  worker) exec autotune worker --study-name digits-shared ;;
  *) echo "usage: $0 search|worker" >&2; exit 2 ;;
esac
