#!/bin/sh
# The tollgate peer's check: the same binary.
exec "$(dirname "$0")/../tollgate/check.sh"
