#!/bin/sh
# Prints the version (exit 0), or what is missing (exit 1): the binary, and
# CrowdSec's crowdsec and cscli for the run's Local API.
bin=${TOLLGATE_BIN:-}
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
    echo "TOLLGATE_BIN='$bin' is not an executable tollgate binary"
    exit 1
fi
if ! command -v crowdsec >/dev/null || ! command -v cscli >/dev/null; then
    echo "crowdsec and cscli not found (the chain's Local API): apt-get install crowdsec"
    exit 1
fi
echo "$("$bin" version 2>&1 | tr '\n' ' ')($bin), crowdsec $(crowdsec -version 2>&1 | grep -m1 -o 'v[0-9][^ ]*')"
