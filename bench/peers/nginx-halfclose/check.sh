#!/bin/sh
# The nginx peer's check: the same binary and stream module.
exec "$(dirname "$0")/../nginx/check.sh"
