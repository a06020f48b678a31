#!/bin/sh
# Prints the version (exit 0), or what is missing (exit 1).
if [ -z "${TOLLGATE_BASE_BIN:-}" ]; then
    echo "TOLLGATE_BASE_BIN is not set (or set TOLLGATE_BASE_REF=<git ref> for run.sh to build it)"
    exit 1
fi
TOLLGATE_BIN=$TOLLGATE_BASE_BIN
export TOLLGATE_BIN
exec "$(dirname "$0")/../tollgate/check.sh"
