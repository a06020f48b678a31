#!/bin/sh
# The A/B peer: the tollgate peer run with TOLLGATE_BASE_BIN (e.g. a build of
# main) so two tollgate binaries are measured side by side in one run.
TOLLGATE_BIN=${TOLLGATE_BASE_BIN:?TOLLGATE_BASE_BIN is not set}
export TOLLGATE_BIN
exec "$(dirname "$0")/../tollgate/start.sh"
