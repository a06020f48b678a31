#!/bin/sh
# Prints the version (exit 0), or what is missing (exit 1).
bin=${TOLLGATE_BIN:-}
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
    echo "TOLLGATE_BIN='$bin' is not an executable tollgate binary"
    exit 1
fi
echo "$("$bin" version 2>&1 | tr '\n' ' ')($bin)"
