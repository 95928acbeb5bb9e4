#!/usr/bin/env bash
# Podium's runner for Redis 7.0's instance-based suites, which start many servers at once:
# tests/sentinel (runtest-sentinel) and tests/cluster (runtest-cluster).
#
# Usage:
#   tests/redis-suite/instances.sh sentinel|cluster BIN [--min-passed N] [--unit U ...]
#       sentinel: 5 data nodes (ports 30000-30004) run BIN, watched by 5 of Debian's
#                 redis-sentinel (installed if missing).
#       cluster:  20 nodes with `cluster-enabled yes` (ports 30000-30019, bus on port+10000)
#                 run BIN.
#   --unit U (repeatable) runs only the units whose file name contains U (runtest's --single),
#   e.g. --unit 00-base --unit 16-transactions; without it every unit runs.
#   --min-passed N is a ratchet for a suite still being completed: success when at least N
#   tests passed, even if some failed.
#
# Output: the units, each failure with its test's name, then "KIND: N passed, N failed" and
# the suite's output file when something failed. A test counts as passed when the suite
# printed OK for it; failures are the FAILED / exception lines, or the suite's own final
# count when it is higher (that one includes crash reports and unexpected output on a node's
# stderr, which the suite treats as failures). A run cut off by SUITE_TIMEOUT (seconds,
# default 2400) counts one more failure.
# Exit status: 0 when nothing failed (or the ratchet was met), 1 otherwise, 2 on a usage error.
#
# Redis's tests come from the tree tools/redis-source.sh fetches (Debian's 7.0.15 source), as
# for run.sh. Redis 7.0.15 itself as BIN passes sentinel 152 and cluster 580.
set -u

usage() { sed -n '2,/^set -u$/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }

kind=${1:-} bin=${2:-}
case "$kind" in sentinel|cluster) ;; -h|--help) usage; exit 0 ;; *) usage >&2; exit 2 ;; esac
[ -n "$bin" ] && [ -x "$bin" ] || { echo "instances.sh: $bin is not an executable" >&2; exit 2; }
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
shift 2
min_passed="" units=()
while [ $# -gt 0 ]; do
  case "$1" in
    --min-passed) min_passed=${2-}; shift 2 || break ;;
    --unit) [ $# -ge 2 ] || { echo "instances.sh: --unit takes a name" >&2; exit 2; }
            units+=(--single "$2"); shift 2 ;;
    *) echo "instances.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$min_passed" in *[!0-9]*) echo "instances.sh: --min-passed takes a number" >&2; exit 2 ;; esac

command -v tclsh >/dev/null || { apt-get update -qq && apt-get install -y -qq tcl >/dev/null; }
need=()
command -v redis-cli >/dev/null || need+=(redis-tools)
[ "$kind" = sentinel ] && ! command -v redis-sentinel >/dev/null && need+=(redis-sentinel)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && apt-get install -y -qq "${need[@]}" >/dev/null \
    || { echo "instances.sh: could not install ${need[*]}" >&2; exit 2; }
fi
tree=$(bash "$(dirname "$0")/../../tools/redis-source.sh") || exit 2

# A private copy of the tree whose src/ holds BIN as redis-server (and the real sentinel and
# cli beside it), so the suite's instance manager starts BIN for every data node.
work=$(mktemp -d "/tmp/podium-$kind-suite.XXXXXX")
cp -r "$tree/tests" "$tree/runtest-$kind" "$work/"
mkdir -p "$work/src"
ln -s "$bin" "$work/src/redis-server"
ln -s "$(command -v redis-cli)" "$work/src/redis-cli"
[ "$kind" = sentinel ] && ln -s "$(command -v redis-sentinel)" "$work/src/redis-sentinel"

cd "$work"
timeout "${SUITE_TIMEOUT:-2400}" "./runtest-$kind" "${units[@]}" >output.txt 2>&1
rc=$?
plain=$(sed 's/\x1b\[[0-9;]*m//g' output.txt)
grep -E '^Testing unit|FAILED|[Ee]xception|Crash report|test\(s\) failed' <<<"$plain" | head -n 100
passed=$(grep -c 'OK$' <<<"$plain")
failed=$(grep -c 'FAILED\|[Ee]xception' <<<"$plain")
reported=$(sed -n 's/.*WARNING \([0-9]*\) test(s) failed.*/\1/p' <<<"$plain" | tail -n 1)
[ -n "$reported" ] && [ "$reported" -gt "$failed" ] && failed=$reported
if [ $rc = 124 ]; then
  echo "$kind: stopped after SUITE_TIMEOUT=${SUITE_TIMEOUT:-2400} s"
  failed=$((failed + 1))
elif [ $rc != 0 ] && [ "$failed" = 0 ]; then
  failed=1
fi
echo "$kind: $passed passed, $failed failed"
if [ -n "$min_passed" ]; then
  ok=$([ "$passed" -ge "$min_passed" ] && echo 1)
else
  ok=$([ "$failed" = 0 ] && [ "$passed" -gt 0 ] && echo 1)
fi
if [ -n "$ok" ]; then
  cd / && rm -rf "$work"
  exit 0
fi
echo "(output kept in $work/output.txt)"
exit 1
