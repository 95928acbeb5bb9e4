#!/usr/bin/env bash
# Podium's runner for Redis 7.0's own Tcl test suites, the judge of compatibility.
#
# Usage:
#   tests/redis-suite/run.sh --server 'CMD' [--port P] [--min-passed N] SUITE...
#       For each suite, starts CMD on a fresh port ({port} in CMD becomes P), runs the suite
#       against it in Redis's external mode, then stops it (SIGTERM, SIGKILL after 5 s).
#   tests/redis-suite/run.sh --external [--port P] [--min-passed N] SUITE...
#       Runs against a server already listening on 127.0.0.1:P.
#   tests/redis-suite/run.sh --native BIN [--port P] [--min-passed N] SUITE...
#       The suites' own mode: their server manager starts BIN as `src/redis-server CONFIG`
#       itself (restarts, config files, tests tagged external:skip). BIN must print Redis's
#       startup lines " PID: <pid>" and "Ready to accept connections"; a pre-flight checks that
#       first and fails in seconds with BIN's first output lines when it does not.
#   tests/redis-suite/run.sh --native BIN --tls [--port P] [--min-passed N] SUITE...
#       The same over TLS, as Redis's `./runtest --tls`: the server manager starts BIN with
#       tls-port (and port 0), tls-replication and the test certificates, which are made
#       first by the tree's utils/gen-test-certs.sh (its DH parameters are RFC 7919's
#       ffdhe2048 group instead of a fresh `openssl dhparam`, which takes up to a minute);
#       every client connects with tcl-tls. Needs openssl and tcl-tls (installed if missing).
#
# SUITE is a name such as unit/type/zset or integration/rdb.
# --min-passed N is a ratchet for a suite still being completed: success when at least N tests
# passed in all, even if some failed.
# --skip PATTERN (repeatable) leaves out the tests it names, as runtest's --skiptest: an exact
# name, or a regular expression after a '/'. make test uses it for a fixed subset of a suite
# too long for CI's budget (see the Makefile); such a run's count has no Redis total.
#
# Output: one line per suite, "SUITE: N passed, N failed, N errors, N not reached, of N",
# where the last number is what Redis 7.0.15 itself passes in that mode ("?" when not recorded);
# failing tests' names go to stderr. Last line: "N passed, N failed".
# Exit status: 0 when everything expected passed (or the ratchet was met), 1 otherwise,
# 2 on a usage error or when Redis's tests cannot be fetched.
#
# Redis's tests come from Debian's `redis` source package (7.0.15 on bookworm, pinned by
# tools/redis-source.sh), fetched once with `apt-get source --download-only redis` into
# $REDIS_SUITE_CACHE (default ~/.cache/redis-suite).
# SUITE_TIMEOUT: seconds a suite may run before it is stopped (default 600).
set -u

usage() { sed -n '2,/^set -u$/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }

# Tests Redis 7.0.15 passes in each mode (one test client, fresh server per suite). A suite that
# stops early (a crash, a hang) is short by the difference, counted as "not reached".
declare -A EXTERNAL_TOTAL=(
  [unit/type/zset]=308 [unit/type/set]=95 [unit/type/string]=75 [unit/type/hash]=72
  [unit/type/incr]=23 [unit/type/list]=220 [unit/type/list-2]=2 [unit/type/list-3]=11
  [unit/type/stream]=63 [unit/type/stream-cgroups]=48 [unit/expire]=58 [unit/keyspace]=52
  [unit/multi]=35 [unit/scan]=17 [unit/protocol]=19 [unit/info-command]=3 [unit/quit]=3
  [unit/sort]=52 [unit/pubsub]=29 [unit/tracking]=51 [unit/introspection]=27
  [unit/introspection-2]=43 [unit/latency-monitor]=13 [unit/slowlog]=9 [unit/scripting]=186
  [unit/functions]=86 [unit/querybuf]=2 [unit/pause]=14 [unit/other]=17 [unit/dump]=9
  [unit/bitops]=45 [unit/bitfield]=16 [unit/geo]=59 [unit/hyperloglog]=20 [unit/lazyfree]=4)
declare -A NATIVE_TOTAL=(
  [unit/type/zset]=312 [unit/expire]=70 [unit/keyspace]=53 [unit/multi]=63 [unit/auth]=10
  [unit/acl]=90 [unit/acl-v2]=30 [unit/info]=17 [unit/limits]=1 [unit/obuf-limits]=9
  [unit/networking]=5 [unit/shutdown]=8 [unit/maxmemory]=31 [unit/introspection]=43
  [unit/introspection-2]=43 [unit/latency-monitor]=14 [unit/slowlog]=16 [unit/pubsub]=30
  [unit/pubsubshard]=11 [unit/type/stream-cgroups]=57 [integration/aof-multi-part]=35 [unit/tracking]=54 [unit/querybuf]=2 [unit/pause]=16 [unit/other]=26
  [unit/scripting]=306 [unit/functions]=109 [integration/rdb]=14 [integration/logging]=3
  [integration/redis-cli]=31 [integration/redis-benchmark]=9 [unit/client-eviction]=17
  [unit/replybufsize]=1 [unit/pendingquerybuf]=1
  [integration/replication]=59 [integration/replication-psync]=60 [integration/replication-buffer]=8 [integration/dismiss-mem]=4 [unit/cluster]=13
  [unit/cluster-scripting]=3 [unit/cluster/misc]=1 [unit/cluster/links]=1
  [unit/cluster/announced-endpoints]=2)

# Tests Redis 7.0.15 passes natively over TLS (--tls): the suites skip their `tls:skip` tests
# there, so some counts differ from the plain ones.
declare -A TLS_TOTAL=(
  [unit/tls]=8 [unit/lazyfree]=4 [unit/type/zset]=312 [unit/type/string]=77 [unit/type/hash]=73
  [unit/sort]=52 [unit/scan]=17 [unit/type/incr]=25 [unit/protocol]=25 [unit/info-command]=3
  [unit/quit]=3 [unit/keyspace]=53 [unit/tracking]=54 [unit/acl]=90 [unit/acl-v2]=30
  [unit/dump]=26 [unit/slowlog]=16 [unit/latency-monitor]=14 [integration/rdb]=14 [unit/aofrw]=20
  [unit/geo]=59 [unit/bitops]=45 [unit/hyperloglog]=20 [unit/type/stream]=72 [unit/info]=17
  [unit/introspection-2]=43 [unit/auth]=10 [unit/pubsubshard]=11 [unit/networking]=5
  [unit/oom-score-adj]=5 [unit/wait]=5 [integration/replication-2]=7 [integration/block-repl]=2
  [integration/redis-benchmark]=12 [unit/bitfield]=20 [integration/aof]=40 [unit/introspection]=43
  [unit/scripting]=306 [unit/functions]=109 [unit/limits]=1 [unit/querybuf]=2 [unit/shutdown]=8
  [unit/pause]=16 [integration/redis-cli]=30 [unit/pubsub]=30 [unit/type/stream-cgroups]=57
  [integration/aof-multi-part]=35 [unit/multi]=63 [unit/type/list]=240 [unit/type/list-2]=2
  [unit/cluster-scripting]=3 [unit/cluster/misc]=1 [unit/cluster/links]=1
  [unit/type/list-3]=11 [unit/expire]=70 [integration/replication-3]=7 [integration/logging]=3
  [unit/obuf-limits]=9 [integration/replication-4]=16 [unit/maxmemory]=31 [integration/shutdown]=5
  [integration/failover]=13 [integration/psync2-master-restart]=4 [integration/convert-zipmap-hash-on-load]=3 [integration/convert-
  ziplist-hash-on-load]=2 [integration/convert-ziplist-zset-on-load]=2
  [unit/client-eviction]=17 [unit/replybufsize]=1 [unit/pendingquerybuf]=1
)

# Tests that rely on Redis's single thread: most on it serving two connections in the order
# their requests arrived, microseconds apart (the test sends a request on one connection without
# waiting for its reply, then one on another that must come after it); two on a stop signal
# stopping the whole server at once (below). Podium's worker threads can run the
# second first when both arrive in one wake-up (README, "Known gaps"). Such a test that fails is
# run again on its own (a fresh server, `--only`), up to RACE_RETRIES times; it counts as passed
# only if a re-run passes, and the suite's line says how many needed it. Any other failure, or
# a race lost every time, fails the suite as before.
declare -A KNOWN_RACES=(
  ["BRPOPLPUSH does not affect WATCH while still blocked"]=unit/type/list
  ["PUBLISH/SUBSCRIBE after UNSUBSCRIBE without arguments"]=unit/pubsub
  ["PUBLISH/PSUBSCRIBE after PUNSUBSCRIBE without arguments"]=unit/pubsub
  ["Blocking XREADGROUP: key deleted"]=unit/type/stream-cgroups
  ["Blocking XREADGROUP: key type changed with SET"]=unit/type/stream-cgroups
  ["Blocking XREADGROUP: key type changed with transaction"]=unit/type/stream-cgroups
  ["Blocking XREADGROUP: flushed DB"]=unit/type/stream-cgroups
  ["Blocking XREADGROUP: swapped DB, key doesn't exist"]=unit/type/stream-cgroups
  ["Blocking XREADGROUP: swapped DB, key is not a stream"]=unit/type/stream-cgroups
  # Two deferred SHUTDOWNs on two connections, then INFO on a third expecting both blocked:
  # three requests in one burst, one more than src/arrival.rs orders (ordering three cost
  # 15-35% of `redis-benchmark -c 4 -P 1 get` throughput and 5-20% at -c 50, 3 rounds each).
  ["Shutting down master waits for replica then aborted"]=integration/shutdown
  ["Shutting down master waits for replica then fails"]=integration/shutdown
  # Needs the whole pipeline read in one go while another client's DEBUG SLEEP stops the
  # server: a pipeline the socket hands over in two reads fits the limit.
  ["No response for multi commands in pipeline if client output buffer limit is enforced"]=unit/obuf-limits
  # Two GETs sent while the server is stopped (SIGSTOP), then CLIENT LIST on a third connection
  # right after SIGCONT, expecting both GETs' clients closed by their output limit: three
  # requests in one burst, one more than src/arrival.rs orders, and the second GET (a 4 MB
  # value) may still be running when CLIENT LIST does.
  ["avoid client eviction when client is freed by output buffer limit"]=unit/client-eviction
  # The sharded twin of unit/pubsub's race above: SUNSUBSCRIBE without arguments is sent and
  # not waited for, then SPUBLISH on another connection. A lost race skips the test's `$rd1
  # close`, and the tests after it then count that client's subscriptions (see below).
  ["SPUBLISH/SSUBSCRIBE after UNSUBSCRIBE without arguments"]=unit/pubsubshard
  # SIGSTOP the replica, write, then WAIT expecting no acknowledgement. A stop signal sent to a
  # process wakes one of its threads, and the others stop only once that one has run (Linux's
  # group stop); Redis's single thread stops at once, but a Podium replica whose link thread
  # is running while the woken thread waits for a core (make test's load) can still read the
  # writes and answer the WAIT's GETACK.
  ["WAIT should not acknowledge 1 additional copy if slave is blocked"]=unit/wait
  ["WAIT implicitly blocks on client pause since ACKs aren't sent"]=unit/wait
)
# Tests a known race's re-run needs first (its suite's setup written as a test).
declare -A RACE_NEEDS=(
  ["WAIT should not acknowledge 1 additional copy if slave is blocked"]="Setup slave"
  ["WAIT implicitly blocks on client pause since ACKs aren't sent"]="Setup slave"
)
RACE_RETRIES=${RACE_RETRIES:-3}

mode="" server_cmd="" native_bin="" port=6399 min_passed="" tls="" suites=() skip_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --server) mode=server; server_cmd=${2-}; shift 2 || break ;;
    --external) mode=external; shift ;;
    --native) mode=native; native_bin=${2-}; shift 2 || break ;;
    --port) port=${2-}; shift 2 || break ;;
    --min-passed) min_passed=${2-}; shift 2 || break ;;
    --tls) tls=1; shift ;;
    --skip) [ $# -ge 2 ] || break; skip_args+=(--skiptest "$2"); shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) suites+=("$1"); shift ;;
  esac
done
if [ -z "$mode" ] || [ ${#suites[@]} = 0 ]; then
  echo "run.sh: give --server 'CMD', --external or --native BIN, and at least one SUITE (see --help)" >&2
  exit 2
fi
if [ "$mode" = server ] && [ -z "$server_cmd" ] || [ "$mode" = native ] && [ -z "$native_bin" ]; then
  echo "run.sh: --server and --native take an argument (see --help)" >&2; exit 2
fi
if [ -n "$tls" ] && [ "$mode" != native ]; then echo "run.sh: --tls needs --native BIN" >&2; exit 2; fi
case "$port$min_passed" in *[!0-9]*) echo "run.sh: --port and --min-passed take numbers" >&2; exit 2 ;; esac

# --- Redis's test tree ---------------------------------------------------------------------------
# tools/redis-source.sh fetches the pinned 7.0.15 tree once; the generated tables are checked
# against the same tree (tools/check-generated.sh).
command -v tclsh >/dev/null || { apt-get update -qq && apt-get install -y -qq tcl >/dev/null; } \
  || { echo "run.sh: tclsh is missing and could not be installed" >&2; exit 2; }
tree=$(bash "$(dirname "$0")/../../tools/redis-source.sh") || exit 2
[ -x "$tree/runtest" ] || { echo "run.sh: no runtest in the Redis tree $tree" >&2; exit 2; }

cleanup_paths=()
cleanup() { [ ${#cleanup_paths[@]} = 0 ] || rm -rf "${cleanup_paths[@]}"; }
trap cleanup EXIT

# Prints the per-suite lines for suites that could not run at all, then the closing line; exits 1.
fail_all() {
  local why=$1 short=0 s n
  for s in "${suites[@]}"; do
    n=$(expected_total "$s")
    echo "$s: 0 passed, 0 failed, 0 errors, $n not reached, of $n ($why)"
    [ "$n" = "?" ] && n=1
    short=$((short + n))
  done
  echo "0 passed, $short failed"
  exit 1
}
expected_total() {
  if [ -n "$tls" ]; then echo "${TLS_TOTAL[$1]:-?}"
  elif [ "$mode" = native ]; then echo "${NATIVE_TOTAL[$1]:-?}"; else echo "${EXTERNAL_TOTAL[$1]:-?}"; fi
}

# --- native mode: a private copy of the tree whose src/ holds BIN as redis-server ----------------
if [ "$mode" = native ]; then
  bin=$(command -v "$native_bin" 2>/dev/null || true)
  [ -n "$bin" ] && [ -x "$bin" ] || { echo "run.sh: --native $native_bin is not an executable" >&2; exit 2; }
  bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
  if ! command -v redis-cli >/dev/null || ! command -v redis-check-aof >/dev/null; then
    apt-get update -qq && apt-get install -y -qq redis-tools >/dev/null
  fi
  work=$(mktemp -d /tmp/podium-suite-native.XXXXXX); cleanup_paths+=("$work")
  cp -r "$tree/runtest" "$tree/tests" "$work/" && mkdir -p "$work/src"
  ln -s "$bin" "$work/src/redis-server"
  for t in redis-cli redis-benchmark redis-check-aof redis-check-rdb; do
    p=$(command -v $t) && ln -s "$p" "$work/src/$t"
  done
  if [ -n "$tls" ]; then
    bash "$(dirname "$0")/tls-certs.sh" "$work" "$tree" || fail_all "could not make the TLS test certificates"
  fi
  tree=$work

  # Pre-flight: start BIN as the server manager does and wait for its two log lines.
  pre=$(mktemp -d); cleanup_paths+=("$pre")
  pre_port=$((port + 1))
  sed -e "s/^port .*/port $pre_port/" -e "s|^dir .*|dir $pre|" -e "s|^pidfile .*|pidfile $pre/pid|" \
    "$tree/tests/assets/default.conf" >"$pre/default.conf"
  "$bin" "$pre/default.conf" >"$pre/out" 2>&1 &
  pre_pid=$!
  started=no
  for _ in $(seq 100); do
    if grep -q " PID: $pre_pid" "$pre/out" && grep -q "Ready to accept connections" "$pre/out"; then
      started=yes; break
    fi
    kill -0 "$pre_pid" 2>/dev/null || break
    sleep 0.1
  done
  kill "$pre_pid" 2>/dev/null; wait "$pre_pid" 2>/dev/null
  if [ $started = no ]; then
    {
      echo "run.sh: --native: $native_bin, started with the suites' tests/assets/default.conf, did not"
      echo "print \" PID: <its pid>\" and \"Ready to accept connections\" within 10 s. Its first lines:"
      head -n 8 "$pre/out" | sed 's/^/    /'
    } >&2
    fail_all "not startable natively"
  fi
fi

port_taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_for_port() {
  for _ in $(seq 100); do port_taken "$port" && return 0; kill -0 "$1" 2>/dev/null || return 1; sleep 0.1; done
  return 1
}
stop_server() {
  kill "$1" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$1" 2>/dev/null; wait "$1" 2>/dev/null
}

# Runs SUITE once (extra runtest arguments after it) with the output in $out; sets rc. In
# --server mode it starts and stops a fresh server around the run; returns 1 when it can't.
run_suite_once() {
  local suite=$1; shift
  local server_pid=""
  if [ "$mode" = server ]; then
    if port_taken "$port"; then start_failure="port $port already in use"; return 1; fi
    server_log=$(mktemp); cleanup_paths+=("$server_log")
    bash -c "exec ${server_cmd//\{port\}/$port}" >"$server_log" 2>&1 &
    server_pid=$!
    if ! wait_for_port "$server_pid"; then
      start_failure="server did not start"
      sed 's/^/    /' "$server_log" | head -n 8 >&2
      stop_server "$server_pid"; return 1
    fi
  fi
  out=$(mktemp); cleanup_paths+=("$out")
  # The harness's own ports (its client socket just below --baseport, servers it spawns from
  # it) are kept next to P, so runs on different P do not race for its default 21079-21111.
  harness_ports=(--baseport $((port + 40)) --portcount 50)
  if [ "$mode" = native ]; then
    local tls_opt=(); [ -n "$tls" ] && tls_opt=(--tls)
    (cd "$tree" && timeout "${SUITE_TIMEOUT:-600}" ./runtest --single "$suite" --durable \
      --ignore-encoding --clients 1 "${harness_ports[@]}" "${tls_opt[@]}" "${skip_args[@]}" "$@") >"$out" 2>&1
  else
    (cd "$tree" && timeout "${SUITE_TIMEOUT:-600}" ./runtest --host 127.0.0.1 --port "$port" \
      --single "$suite" --durable --ignore-encoding --ignore-digest --clients 1 "${harness_ports[@]}" \
      --tags -needs:debug --tags -needs:repl --tags -needs:config-maxmemory "${skip_args[@]}" "$@") >"$out" 2>&1
  fi
  rc=$?
  [ -n "$server_pid" ] && stop_server "$server_pid"
  return 0
}

passed_all=0 short_all=0 status=0
for suite in "${suites[@]}"; do
  expected=$(expected_total "$suite")
  [ ${#skip_args[@]} -gt 0 ] && expected="?"
  if ! run_suite_once "$suite"; then
    echo "$suite: 0 passed, 0 failed, 0 errors, $expected not reached, of $expected ($start_failure)"
    status=1; [ "$expected" = "?" ] && short_all=$((short_all + 1)) || short_all=$((short_all + expected))
    continue
  fi
  suite_rc=$rc
  text=$(sed 's/\x1b\[[0-9;]*m//g' "$out")
  ok=$(grep -c '^\[ok\]' <<<"$text")
  failed=$(grep -c '^\[err\]' <<<"$text")
  errors=$(grep -c '^\[exception\]' <<<"$text")
  # Known races lost in the full run: re-run each on its own.
  retried=0
  while IFS= read -r name; do
    [ -n "$name" ] && [ "${KNOWN_RACES[$name]-}" = "$suite" ] || continue
    needs=(); [ -n "${RACE_NEEDS[$name]-}" ] && needs=(--only "${RACE_NEEDS[$name]}")
    for _ in $(seq "$RACE_RETRIES"); do
      run_suite_once "$suite" "${needs[@]}" --only "$name" || continue
      if sed 's/\x1b\[[0-9;]*m//g' "$out" | grep -F -- "[ok]: $name (" | grep -q '^\[ok\]'; then
        ok=$((ok + 1)); failed=$((failed - 1)); retried=$((retried + 1))
        echo "    [retry]: $name: lost a known race in the full run, passed alone" >&2
        break
      fi
    done
  done < <(sed -n 's/^\[err\]: \(.*\) in tests\/.*$/\1/p' <<<"$text")
  # A known race lost in the full run can leave state the tests after it trip over (a client
  # its failed assertion did not close); when other failures remain besides the race, the
  # suite runs whole once more, and a clean re-run stands for it. The line says so.
  whole_rerun=""
  if [ $retried -gt 0 ] && [ $((failed + errors)) -gt 0 ] && [ "$expected" != "?" ]; then
    first_failed=$((failed + errors))
    if run_suite_once "$suite"; then
      again=$(sed 's/\x1b\[[0-9;]*m//g' "$out")
      again_ok=$(grep -c '^\[ok\]' <<<"$again")
      if [ $rc = 0 ] && [ "$again_ok" -ge "$expected" ] && ! grep -q '^\[err\]\|^\[exception\]' <<<"$again"; then
        echo "    [retry]: $suite: whole suite clean on a re-run; the first run's $first_failed other failures followed a lost known race" >&2
        ok=$again_ok; failed=0; errors=0; suite_rc=0
        whole_rerun=" (whole suite re-run after a known race: clean)"
      fi
    fi
  fi
  unreached=0
  if [ "$expected" != "?" ]; then
    unreached=$((expected - ok - failed - errors)); [ $unreached -lt 0 ] && unreached=0
  fi
  note=""; [ $suite_rc = 124 ] && note=" (stopped after ${SUITE_TIMEOUT:-600} s)"
  [ $retried -gt 0 ] && note="$note ($retried passed on a re-run: known race)"
  note="$note$whole_rerun"
  # A suite Redis has no count for still fails when the harness itself did not finish cleanly
  # (a known race that passed on its re-run explains the harness's failing status).
  [ "$expected" = "?" ] && [ $suite_rc != 0 ] && [ $((failed + errors)) = 0 ] && [ $retried = 0 ] \
    && unreached=1
  echo "$suite: $ok passed, $failed failed, $errors errors, $unreached not reached, of $expected$note"
  grep -A2 '^\[err\]\|^\[exception\]' <<<"$text" | head -n 40 | sed 's/^/    /' >&2
  short=$((failed + errors + unreached)); [ $short -gt 0 ] && status=1
  passed_all=$((passed_all + ok)); short_all=$((short_all + short))
done

if [ -n "$min_passed" ]; then
  if [ "$passed_all" -ge "$min_passed" ]; then verdict=met; else verdict="NOT met"; fi
  echo "ratchet --min-passed $min_passed $verdict"
  echo "$passed_all passed, $short_all failed"
  [ "$passed_all" -ge "$min_passed" ]; exit $?
fi
echo "$passed_all passed, $short_all failed"
exit $status
