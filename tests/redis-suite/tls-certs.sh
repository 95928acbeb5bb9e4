#!/usr/bin/env bash
# The test certificates of Redis's suites in TLS mode, made in a private copy of the tree:
#   tests/redis-suite/tls-certs.sh WORK TREE
# WORK gets utils/gen-test-certs.sh from TREE (Redis's own script) and tests/tls/ with a CA,
# server and client pairs and DH parameters, where the suites' server managers look for
# them. The DH parameters are RFC 7919's ffdhe2048 (openssl's named group): quick, unlike
# generating new ones. openssl and tcl-tls are installed if missing. On failure the end of
# the log (WORK/certs.log) goes to stderr and the exit status is 1.
# Used by run.sh --tls and instances.sh --tls.
set -u
work=$1 tree=$2
command -v openssl >/dev/null || { apt-get update -qq && apt-get install -y -qq openssl >/dev/null; }
dpkg -s tcl-tls >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq tcl-tls >/dev/null; }
mkdir -p "$work/utils" "$work/tests/tls"
cp "$tree/utils/gen-test-certs.sh" "$work/utils/"
if ! (cd "$work" && openssl genpkey -genparam -algorithm DH -pkeyopt group:ffdhe2048 \
        -out tests/tls/redis.dh && bash utils/gen-test-certs.sh) >"$work/certs.log" 2>&1; then
  sed 's/^/    /' "$work/certs.log" | tail -n 8 >&2
  exit 1
fi
