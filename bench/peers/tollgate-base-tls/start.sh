#!/bin/sh
# The A/B peer of tollgate-tls: the same configuration run with
# TOLLGATE_BASE_BIN, so two tollgate binaries terminate TLS side by side.
TOLLGATE_BIN=${TOLLGATE_BASE_BIN:?TOLLGATE_BASE_BIN is not set}
export TOLLGATE_BIN
exec "$(dirname "$0")/../tollgate-tls/start.sh"
