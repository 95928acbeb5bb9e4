#!/usr/bin/env bash
# Podium's runner for Redis 7.0's instance-based suites, which start many servers at once:
# tests/sentinel (runtest-sentinel) and tests/cluster (runtest-cluster).
#
# Usage:
#   tests/redis-suite/instances.sh sentinel|cluster BIN [--tls] [--min-passed N] [--unit U ...]
#       sentinel: 5 data nodes (ports 30000-30004) run BIN, watched by 5 of Debian's
#                 redis-sentinel (installed if missing).
#       cluster:  20 nodes with `cluster-enabled yes` (ports 30000-30019, bus on port+10000)
#                 run BIN.
#   --unit U (repeatable) runs only the units whose file name contains U (runtest's --single),
#   e.g. --unit 00-base --unit 16-transactions; without it every unit runs.
#   --tls runs the suite over TLS, as Redis's `./runtest-cluster --tls`: every node gets
#   tls-port, tls-replication, tls-cluster (the bus over TLS) and the test certificates (made
#   by the tree's utils/gen-test-certs.sh), a plaintext port beside it, and the suite's clients
#   connect with tcl-tls. Needs openssl and tcl-tls (installed if missing).
#   --min-passed N is a ratchet for a suite still being completed: success when at least N
#   tests passed, even if some failed.
#
# Output: the units, each failure with its test's name, then "KIND: N passed, N failed" and
# the suite's output file when something failed. A test counts as passed when the suite
# printed OK for it; failures are the FAILED / exception lines, or the suite's own final
# count when it is higher (that one includes crash reports and unexpected output on a node's
# stderr, which the suite treats as failures). A run cut off by SUITE_TIMEOUT (seconds,
# default 2400) counts one more failure.
# A failure that is a known race of Redis's suite itself (KNOWN_RACES below) re-runs its unit
# alone, up to RACE_RETRIES times (default 2); the unit counts as the re-run's result when the
# re-run is clean and the first run failed nothing else, and the output says so ("[retry]").
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
min_passed="" units=() tls_opt=()
while [ $# -gt 0 ]; do
  case "$1" in
    --tls) tls_opt=(--tls); shift ;;
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
if [ ${#tls_opt[@]} -gt 0 ]; then
  bash "$(dirname "$0")/tls-certs.sh" "$work" "$tree" \
    || { echo "instances.sh: could not make the TLS test certificates" >&2; exit 2; }
fi

# Tests whose failure is a race in the suite itself, by unit. Sentinel's 12-master-reboot: a
# Sentinel turning the rebooted master into a replica sends CLIENT KILL TYPE normal, which
# also closes the test's own link to that node; the suite's client reconnects once, and when a
# second Sentinel sends the same reconfiguration moments later the reconnected link is closed
# too ("I/O error reading reply"). redis-server is open to the same race.
declare -A KNOWN_RACES=(
  ["The old master eventually gets reconfigured as a slave"]=12-master-reboot
)

cd "$work"
timeout "${SUITE_TIMEOUT:-2400}" "./runtest-$kind" "${tls_opt[@]}" "${units[@]}" >output.txt 2>&1
rc=$?
plain=$(sed 's/\x1b\[[0-9;]*m//g' output.txt)
grep -E '^Testing unit|FAILED|[Ee]xception|Crash report|test\(s\) failed' <<<"$plain" | head -n 100
passed=$(grep -c 'OK$' <<<"$plain")
failed=$(grep -c 'FAILED\|[Ee]xception' <<<"$plain")
reported=$(sed -n 's/.*WARNING \([0-9]*\) test(s) failed.*/\1/p' <<<"$plain" | tail -n 1)
[ -n "$reported" ] && [ "$reported" -gt "$failed" ] && failed=$reported

# The failures of a unit's section of the output, as the suite counts them: an assertion
# counts once, an error twice (the test, then the unit that it aborted).
unit_section() { awk -v u="$1" '/^Testing unit: /{on = index($0, u) > 0} on' <<<"$2"; }
suite_count() { echo $(( $(grep -c 'FAILED' <<<"$1") + $(grep -c 'FAILED: caught an error' <<<"$1") )); }
if [ $rc != 124 ] && [ "$failed" -gt 0 ]; then
  retry_units=() race_failures=0 unknown=0
  while IFS= read -r line; do
    name=$(sed -n 's/^[0-9:]*> \(.*\): FAILED.*/\1/p' <<<"$line")
    unit=${KNOWN_RACES[$name]-}
    if [ -z "$unit" ]; then unknown=1; continue; fi
    [[ " ${retry_units[*]-} " == *" $unit "* ]] || retry_units+=("$unit")
  done < <(grep 'FAILED' <<<"$plain" | grep -v '^FAILED: caught an error')
  for unit in "${retry_units[@]-}"; do
    [ -n "$unit" ] || continue
    section=$(unit_section "$unit" "$plain")
    race_failures=$((race_failures + $(suite_count "$section")))
  done
  if [ $unknown = 0 ] && [ ${#retry_units[@]} -gt 0 ] && [ "$race_failures" = "$failed" ]; then
    for unit in "${retry_units[@]}"; do
      clean=""
      for _ in $(seq "${RACE_RETRIES:-2}"); do
        timeout "${SUITE_TIMEOUT:-2400}" "./runtest-$kind" "${tls_opt[@]}" --single "$unit" >"retry-$unit.txt" 2>&1
        again=$(sed 's/\x1b\[[0-9;]*m//g' "retry-$unit.txt")
        if grep -q 'GOOD! No errors' <<<"$again" && ! grep -q 'FAILED\|[Ee]xception' <<<"$again"; then
          clean=1; break
        fi
      done
      [ -n "$clean" ] || continue
      first=$(unit_section "$unit" "$plain")
      passed=$((passed - $(grep -c 'OK$' <<<"$first") + $(grep -c 'OK$' <<<"$again")))
      failed=$((failed - $(suite_count "$first")))
      grep 'FAILED' <<<"$first" | grep -v '^FAILED: caught' | sed -n 's/^[0-9:]*> \(.*\): FAILED.*/    [retry]: \1: a known race of the suite, passed on a re-run of '"$unit"'/p'
    done
    [ "$failed" = 0 ] && rc=0
  fi
fi
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
