#!/usr/bin/env bash
# Runs groups of make targets side by side: `make test` uses it to keep CI within its budget on
# two cores. Most of make test waits rather than computes (Redis's Tcl suites sleep, poll and
# time out far more than they use a core), so the Tcl suites run in one lane while cargo test,
# the instance suites, fuzzing and the compose scenarios run in the other.
#
# Usage: tools/lanes.sh 'NAME: TARGET...' 'NAME: TARGET...' ...
#   Each lane runs its targets one after another with `make --no-print-directory TARGET`,
#   going on after a failing target as `make -k` would, so one run shows every failure.
#   Every output line is prefixed with "[NAME] " as it comes (the lanes' lines interleave).
#   At the end: one line per target with its status and minutes, the wall time, then the
#   lines that named a failure (a Tcl test's [err] or [exception], a count of failures, a
#   FAILED case or test), at most 24, and each failed target's last 8 lines, last: CI keeps
#   only the tail of the output.
# Exit status: 0 when every target passed, 1 otherwise.
#
# The lanes must not share ports: the Tcl suites' servers use SUITE_PORT's range, the
# instance suites 20000-20004 and 30000-30019 (bus ports 40000-40019), the compose scenarios
# publish none, and the integration tests pick ports the kernel hands out.
set -u
[ $# -gt 0 ] || { sed -n '2,/^set -u$/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2; exit 2; }

MAKE=${MAKE:-make}
results=$(mktemp -d)
trap 'rm -rf "$results"' EXIT
started=$(date +%s)

run_lane() {
  local name=$1 targets=$2 t t0 rc
  for t in $targets; do
    t0=$(date +%s)
    $MAKE --no-print-directory "$t" 2>&1 | sed -u "s/^/[$name] /" | tee "$results/$name.$t.out"
    rc=${PIPESTATUS[0]}
    printf '%s\t%s\t%s\t%s\n' "$name" "$t" "$rc" "$(( $(date +%s) - t0 ))" >>"$results/$name"
  done
}

pids=()
for spec in "$@"; do
  name=${spec%%:*} targets=${spec#*:}
  [ "$name" != "$spec" ] && [ -n "${targets// /}" ] || { echo "lanes.sh: bad lane '$spec'" >&2; exit 2; }
  run_lane "$name" "$targets" &
  pids+=($!)
done
wait "${pids[@]}"

status=0
echo "--- lanes: every target ---"
for spec in "$@"; do
  name=${spec%%:*}
  while IFS=$'\t' read -r lane target rc secs; do
    verdict=passed; [ "$rc" = 0 ] || { verdict="FAILED (exit $rc)"; status=1; }
    awk -v l="$lane" -v t="$target" -v v="$verdict" -v s="$secs" \
      'BEGIN { printf "[%s] %-16s %-18s %5.1f min\n", l, t, v, s / 60 }'
  done < <(cat "$results/$name" 2>/dev/null)
done
awk -v s=$(( $(date +%s) - started )) 'BEGIN { printf "wall time %.1f min\n", s / 60 }'
if [ $status != 0 ]; then
  echo "--- lanes: what failed ---"
  # A Tcl test that failed and then passed on its re-run (run.sh's known races, "[retry]: NAME:
  # ...") is left out: it did not fail the target.
  # Only failed targets' output: a passing ratchet's expected failures would crowd the rest.
  for spec in "$@"; do
    name=${spec%%:*}
    while IFS=$'\t' read -r lane target rc secs; do
      [ "$rc" = 0 ] || cat "$results/$lane.$target.out"
    done < <(cat "$results/$name" 2>/dev/null)
  done |
    awk '/\[retry\]: / { sub(/.*\[retry\]: /, ""); sub(/: [^:]*$/, ""); retried[$0] = 1; next }
         { lines[++n] = $0 }
         END { for (i = 1; i <= n; i++) { l = lines[i]; name = l
                 if (sub(/.*\[err\]: /, "", name) && sub(/ in tests\/.*$/, "", name) && (name in retried)) continue
                 print l } }' |
    grep -aE '\[(err|exception)\]|FAILED|panicked|(^|[^0-9])[1-9][0-9]* (failed|errors|not reached)' |
    grep -av 'make\[[0-9]*\]: \*\*\*' | cut -c1-200 | tail -24
  # And each failed target's last lines, where a runner sums up what failed and why.
  for spec in "$@"; do
    name=${spec%%:*}
    while IFS=$'\t' read -r lane target rc secs; do
      [ "$rc" = 0 ] && continue
      echo "--- [$lane] $target: its last lines"
      grep -av 'make\(\[[0-9]*\]\)\{0,1\}: \*\*\*' "$results/$lane.$target.out" | tail -8 | cut -c1-200
    done < <(cat "$results/$name" 2>/dev/null)
  done
fi
exit $status
