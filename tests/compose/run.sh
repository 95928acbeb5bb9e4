#!/usr/bin/env bash
# The compose tests: each scenario's compose file, run with Podium's image and with the
# reference image of Debian's redis-server (built the same way), outcomes compared.
#
#   tests/compose/run.sh [--no-build] [--images "podium:latest redis-ref:latest"] [SCENARIO...]
#
# Scenarios: habits (docker run with the official image's command lines), app (1-app),
# sentinel (2-sentinel), mixed (3-mixed), partition (4-partition), exporter (5-exporter),
# cluster (6-cluster-partition).
# Default: all, in that order.
# Docker and a compose tool are required: without them this fails, it does not skip.
# Images are built first (docker/build-images.sh, base image included) unless --no-build.
# Output and logs: target/compose-test/. The last line is "N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD

build=1
IMAGES="podium:latest redis-ref:latest"
scenarios=()
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) build=0 ;;
    --images) IMAGES=$2; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) scenarios+=("$1") ;;
  esac
  shift
done
[ ${#scenarios[@]} -gt 0 ] || scenarios=(habits app sentinel mixed partition exporter cluster)

die() { echo "compose-test: FAIL: $*" >&2; exit 1; }
command -v docker >/dev/null || die "docker is not installed (the compose tests need Docker Engine)"
docker info >/dev/null 2>&1 || die "the Docker Engine does not answer (docker info failed)"
if docker compose version >/dev/null 2>&1; then
  DC=(docker compose)
elif command -v docker-compose >/dev/null; then
  DC=(docker-compose)
else
  die "neither 'docker compose' nor 'docker-compose' is installed"
fi

OUTROOT=$ROOT/target/compose-test
mkdir -p "$OUTROOT"
t_all=$(date +%s)
if [ $build = 1 ]; then
  docker/build-images.sh
fi

TIMINGS=$OUTROOT/timings.txt
: >"$TIMINGS"
rm -rf "$OUTROOT/results" "$OUTROOT/logs"
mkdir -p "$OUTROOT/results" "$OUTROOT/logs"

note() { echo "compose-test: $*"; }

# dc FILE PROJECT ARGS...: the compose tool on one scenario's file under one project name.
dc() {
  local file=$1 project=$2
  shift 2
  "${DC[@]}" --ansi never -p "$project" -f "$file" "$@"
}
# dcq: the same, its chatter ("Creating ... done") in the case's compose-ops.log.
dcq() {
  dc "$@" >>"${out:-$OUTROOT}/compose-ops.log" 2>&1 || { tail -20 "${out:-$OUTROOT}/compose-ops.log" >&2; return 1; }
}

# cid PROJECT SERVICE: the id of the service's running container, from compose's labels (one
# docker call; one-off `run` containers excluded).
cid() {
  docker ps -q --filter "label=com.docker.compose.project=$1" --filter "label=com.docker.compose.service=$2" \
    --filter "label=com.docker.compose.oneoff=False" | head -1
}

# app_up FILE PROJECT [RUN OPTIONS]: a long-lived container of the service `app` (its
# depends_on honoured) that the steps `docker exec` into: one container, not one per step.
app_up() {
  local id
  id=$(dc "$1" "$2" run -d "${@:3}" app sh -c 'trap "exit 0" TERM; sleep infinity & wait' 2>>"${out:-$OUTROOT}/compose-ops.log" | tail -1)
  [ -n "$id" ] || { echo "compose-test: the app container did not start" >&2; return 1; }
  echo "$id"
}

# wait_healthy FILE PROJECT SERVICE [SECONDS]
wait_healthy() {
  local file=$1 project=$2 svc=$3 limit=${4:-60} id status deadline
  deadline=$(( $(date +%s) + limit ))
  while :; do
    id=$(cid "$project" "$svc")
    status=
    [ -n "$id" ] && status=$(docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}' "$id" 2>/dev/null || true)
    [ "$status" = healthy ] && return 0
    if [ "$(date +%s)" -ge "$deadline" ]; then
      echo "compose-test: $svc of $project not healthy after ${limit}s (status: ${status:-no container})" >&2
      return 1
    fi
    sleep 0.3
  done
}

# cleanup_on_exit FILE PROJECT OUTDIR: remove what a previous run left; at exit keep the
# services' logs in OUTDIR/compose.log and remove containers, network and volumes.
cleanup_on_exit() {
  dc "$1" "$2" down -v --remove-orphans >/dev/null 2>&1 || true
  # shellcheck disable=SC2064 # expanded now, on purpose
  trap "dc '$1' '$2' logs --no-color >'$3/compose.log' 2>&1 || true; dc '$1' '$2' down -v --remove-orphans >/dev/null 2>&1 || true" EXIT
}

# run_case NAME FUNCTION ARGS...: a scenario with one image, in a subshell; its result line
# goes to $OUTROOT/results/ (counted at the end) and to timings.txt.
run_case() {
  local name=$1 t0 rc res
  shift
  t0=$(date +%s)
  res=$OUTROOT/results/${name//\//_}
  set +e
  ( set -euo pipefail; "$@" )
  rc=$?
  set -e
  if [ $rc = 0 ]; then
    echo "$name: ok in $(( $(date +%s) - t0 )) s" >"$res"
  else
    echo "$name: FAILED (exit $rc) after $(( $(date +%s) - t0 )) s" >"$res"
  fi
  cat "$res" >>"$TIMINGS"
  return $rc
}

# bg_case NAME FUNCTION ARGS...: run_case in the background, its output in logs/, at most
# JOBS at once (the oldest is waited for first); wait_cases waits for the rest. Each case has
# its own compose project and networks, and mostly waits on servers and timers.
JOBS=${COMPOSE_JOBS:-4}
bg_pids=()
bg_logs=()
bg_case() {
  while [ ${#bg_pids[@]} -ge "$JOBS" ]; do wait_oldest; done
  local log=$OUTROOT/logs/${1//\//_}.log
  run_case "$@" >"$log" 2>&1 &
  bg_pids+=($!)
  bg_logs+=("$log")
}
wait_oldest() {
  wait "${bg_pids[0]}" || true
  note "--- $(basename "${bg_logs[0]}" .log)"
  cat "${bg_logs[0]}"
  bg_pids=("${bg_pids[@]:1}")
  bg_logs=("${bg_logs[@]:1}")
}
wait_cases() {
  while [ ${#bg_pids[@]} -gt 0 ]; do wait_oldest; done
}

# each_image SCENARIO FUNCTION: FUNCTION IMAGE INDEX for every image.
each_image() {
  local i=0 img
  for img in $IMAGES; do
    bg_case "$1/${img%%:*}" "$2" "$img" "$i"
    i=$((i + 1))
  done
}

# compare NAME FILE...: the same file from each image's run must be identical.
compare() {
  local name=$1 rel=$2 first='' f
  shift 2
  for img in $IMAGES; do
    f=$OUTROOT/$name-${img%%:*}/$rel
    if [ ! -s "$f" ]; then
      echo "compose-test: $f is missing" >&2
      return 1
    fi
    if [ -z "$first" ]; then
      first=$f
    elif ! diff -u "$first" "$f" >"$OUTROOT/$name-compare.diff"; then
      echo "compose-test: $rel differs between images:" >&2
      head -40 "$OUTROOT/$name-compare.diff" >&2
      return 1
    fi
  done
  echo "compose-test: $rel identical for: $IMAGES"
}

# ---------------------------------------------------------------------------------------
# Scenario 1: app + server, restart, down/up with the volume.
# ---------------------------------------------------------------------------------------
s1() {
  local img=$1
  local out=$OUTROOT/app-${img%%:*} f=$ROOT/tests/compose/1-app/docker-compose.yml
  local p=podiumtest-app-${img%%:*}
  rm -rf "$out"; mkdir -p "$out"
  export REDIS_IMAGE=$img COMPOSE_OUT=$out
  cleanup_on_exit "$f" "$p" "$out"
  dcq "$f" "$p" up -d redis redis-conf
  wait_healthy "$f" "$p" redis
  wait_healthy "$f" "$p" redis-conf
  local a
  a=$(app_up "$f" "$p")
  app() { docker exec "$a" python3 /app/leaderboard.py "$@"; }
  app seed
  sleep 0.3 # the otp:* keys (PX 200) expire
  app verify seed

  # Writes across `restart redis`: none acknowledged may be lost.
  rm -f "$out/stop"
  app stream >"$out/stream.log" 2>&1 &
  local writer=$! t0
  sleep 2
  t0=$(date +%s.%N)
  dcq "$f" "$p" restart redis
  wait_healthy "$f" "$p" redis
  echo "restart redis -> healthy: $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s" | tee "$out/restart.txt"
  sleep 2
  touch "$out/stop"
  wait $writer || { cat "$out/stream.log"; return 1; }
  cat "$out/stream.log"
  app verify restart

  # down (the volume stays) and up again.
  docker rm -f "$a" >/dev/null
  dcq "$f" "$p" down
  dcq "$f" "$p" up -d redis
  wait_healthy "$f" "$p" redis
  a=$(app_up "$f" "$p")
  app verify final

  # The mounted redis.conf as first argument: auth, memory policy, protected mode.
  dcq "$f" "$p" up -d redis-conf
  wait_healthy "$f" "$p" redis-conf
  local cli=(docker exec "$a" redis-cli -h redis-conf)
  local noauth
  noauth=$("${cli[@]}" ping 2>/dev/null || true)
  echo "without password: $noauth" | tee "$out/conf.txt"
  case "$noauth" in *NOAUTH*) ;; *) echo "expected NOAUTH, got: $noauth" >&2; return 1 ;; esac
  for k in maxmemory maxmemory-policy appendonly appendfsync save protected-mode port; do
    "${cli[@]}" -a s3cret --no-auth-warning config get "$k" 2>/dev/null | tr '\n' ' ' | tee -a "$out/conf.txt"
    echo | tee -a "$out/conf.txt"
  done
  grep -q '^maxmemory 268435456 $' "$out/conf.txt" || { echo "maxmemory not from the file" >&2; return 1; }
  grep -q '^protected-mode no $' "$out/conf.txt" || { echo "protected-mode should be off" >&2; return 1; }
  local id
  id=$(cid "$p" redis)
  docker exec "$id" sh -c 'stat -c "%U %a" /data; grep -E "^(Uid|Gid)" /proc/1/status' | tee "$out/user.txt"
  grep -q '^redis ' "$out/user.txt" || { echo "/data is not owned by redis" >&2; return 1; }
  grep -Eq '^Uid:\s+999\s' "$out/user.txt" || { echo "the server does not run as redis (999)" >&2; return 1; }
}

# summarize: the figures of each case, one line each (docs/containers.md quotes them).
summarize() {
  local d
  for d in "$OUTROOT"/app-* ; do [ -f "$d/restart.txt" ] && echo "${d##*/}: $(cat "$d/restart.txt")"; done
  for d in "$OUTROOT"/sentinel-* ; do [ -f "$d/result.json" ] && echo "${d##*/}: $(cat "$d/result.json")"; done
  for d in "$OUTROOT"/mixed-* ; do [ -f "$d/digests.txt" ] && echo "${d##*/}: $(cat "$d/digests.txt")"; done
  for d in "$OUTROOT"/partition-* ; do
    [ -f "$d/partition-result.json" ] && echo "${d##*/}: $(head -1 "$d/stale.txt"); $(cat "$d/partition-result.json")"
  done
  for d in "$OUTROOT"/cluster-* ; do [ -f "$d/cluster-result.json" ] && echo "${d##*/}: $(cat "$d/cluster-result.json")"; done
}

for f in tests/compose/scenario-*.sh; do
  # shellcheck source=/dev/null
  . "$f"
done

compares=()
for sc in "${scenarios[@]}"; do
  case "$sc" in
    habits)
      each_image habits s0
      compares+=("habits habits.txt")
      ;;
    app)
      each_image app s1
      compares+=("app summary-final.json" "app conf.txt")
      ;;
    sentinel)
      each_image sentinel s2
      ;;
    mixed)
      bg_case mixed/redis-master-podium-replica s3 redis-ref:latest podium:latest
      bg_case mixed/podium-master-redis-replica s3 podium:latest redis-ref:latest
      ;;
    partition)
      i=0
      for img in $IMAGES; do
        for v in default minreplicas; do
          bg_case "partition/${img%%:*}-$v" s4 "$img" "$v" "$i"
          i=$((i + 1))
        done
      done
      ;;
    exporter)
      each_image exporter s5
      compares+=("exporter")
      ;;
    cluster)
      each_image cluster s6
      # One of each kind: the cut-off master Podium with a redis-server replica, and the reverse.
      read -r -a imgs <<<"$IMAGES"
      if [ ${#imgs[@]} = 2 ]; then
        bg_case "cluster/mixed-${imgs[0]%%:*}-master" s6_mixed "${imgs[0]}" "${imgs[1]}" 2
        bg_case "cluster/mixed-${imgs[1]%%:*}-master" s6_mixed "${imgs[1]}" "${imgs[0]}" 3
      fi
      ;;
    *) die "unknown scenario $sc" ;;
  esac
done
wait_cases
for c in "${compares[@]}"; do
  if [ "$c" = exporter ]; then
    run_case exporter/compare-names exporter_compare
  else
    # shellcheck disable=SC2086
    run_case "${c%% *}/compare-${c#* }" compare $c
  fi
done
summarize >"$OUTROOT/summary.txt" 2>&1 || true
cat "$OUTROOT/summary.txt"

echo "compose-test: total $(( $(date +%s) - t_all )) s (images included)" | tee -a "$TIMINGS"
passed=$(grep -l ': ok in' "$OUTROOT"/results/* 2>/dev/null | wc -l)
failed=$(grep -L ': ok in' "$OUTROOT"/results/* 2>/dev/null | wc -l)
cat "$OUTROOT"/results/*
# A failed case's last lines again, here at the end (CI keeps only the tail of the output).
for r in "$OUTROOT"/results/*; do
  grep -q ': ok in' "$r" && continue
  log=$OUTROOT/logs/$(basename "$r").log
  [ -s "$log" ] || continue
  echo "--- $(cat "$r"); the end of its log:"
  tail -8 "$log" | cut -c1-200
done
[ "$passed" -gt 0 ] || { echo "compose-test: no case ran" >&2; failed=$((failed + 1)); }
echo "compose: $passed passed, $failed failed"
[ "$failed" = 0 ]
