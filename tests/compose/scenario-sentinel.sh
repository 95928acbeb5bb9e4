# shellcheck shell=bash
# Scenario 2 (sourced by tests/compose/run.sh): Sentinel HA with REDIS_IMAGE as master and
# replicas, Debian's redis-sentinel as the three sentinels. Kill the master's container; a
# replica is promoted (timed from the kill to the sentinels naming the new master), the app
# carries on through the sentinels, the old master is started again and rejoins as a replica;
# the three nodes then hold the same data (DEBUG DIGEST over loopback inside each container).

# s2 IMAGE INDEX: the INDEXth image gets the network 10.238.(38+INDEX).0/24.
s2() {
  local img=$1 net=10.238.$((38 + $2))
  local out=$OUTROOT/sentinel-${img%%:*} f=$ROOT/tests/compose/2-sentinel/docker-compose.yml
  local p=podiumtest-sentinel-${img%%:*}
  rm -rf "$out"; mkdir -p "$out"
  export REDIS_IMAGE=$img NET=$net COMPOSE_OUT=$out
  cleanup_on_exit "$f" "$p" "$out"
  dcq "$f" "$p" up -d redis-1 redis-2 redis-3 sentinel-1 sentinel-2 sentinel-3
  local n
  for n in 1 2 3; do wait_healthy "$f" "$p" "redis-$n"; done
  local s1id
  s1id=$(cid "$p" sentinel-1)
  # cli HOST PORT ARGS...: redis-cli from sentinel-1's container, on the scenario's network.
  cli() { local h=$1 port=$2; shift 2; docker exec "$s1id" redis-cli -h "$h" -p "$port" "$@"; }
  # local_cli SERVICE ARGS...: redis-cli inside a node's container, over loopback.
  local_cli() { local svc=$1; shift; docker exec "$(cid "$p" "$svc")" redis-cli "$@"; }

  # Ready: both replicas linked, the sentinels know them and each other.
  local deadline=$(( $(date +%s) + 60 )) info
  until info=$(cli "$net.21" 26379 sentinel master mymaster 2>/dev/null | paste -sd' ') &&
        [[ " $info " == *" num-slaves 2 "* ]] && [[ " $info " == *" num-other-sentinels 2 "* ]]; do
    if [ "$(date +%s)" -ge $deadline ]; then
      echo "sentinels not ready: $info" >&2
      cli "$net.11" 6379 info replication >&2 || true
      return 1
    fi
    sleep 0.5
  done
  echo "ready: $info" >"$out/sentinel-ready.txt"

  rm -f "$out/stop"
  local a
  a=$(app_up "$f" "$p")
  docker exec "$a" python3 /app/sentinel_app.py write >"$out/write.log" 2>&1 &
  local writer=$!
  sleep 3

  # Kill the master; time until the sentinels name another one, and until it says so itself.
  local t0 newm='' role
  t0=$(date +%s.%N)
  docker kill "$(cid "$p" redis-1)" >/dev/null
  deadline=$(( $(date +%s) + 60 ))
  while :; do
    newm=$(cli "$net.21" 26379 sentinel get-master-addr-by-name mymaster 2>/dev/null | head -1 || true)
    [ -n "$newm" ] && [ "$newm" != "$net.11" ] && break
    [ "$(date +%s)" -lt $deadline ] || { echo "no promotion within 60 s" >&2; return 1; }
    sleep 0.1
  done
  local t_promo
  t_promo=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  until role=$(cli "$newm" 6379 role 2>/dev/null | head -1) && [ "$role" = master ]; do
    [ "$(date +%s)" -lt $deadline ] || { echo "$newm never became master (role: $role)" >&2; return 1; }
    sleep 0.1
  done
  echo "kill master -> sentinels name $newm: $t_promo s" | tee "$out/promotion.txt"

  sleep 3
  touch "$out/stop"
  wait $writer || { cat "$out/write.log"; return 1; }
  cat "$out/write.log"

  # The old master comes back and must end up a replica of the new one, in sync.
  t0=$(date +%s.%N)
  dcq "$f" "$p" start redis-1
  deadline=$(( $(date +%s) + 90 ))
  local repl=
  until repl=$(cli "$net.11" 6379 info replication 2>/dev/null | tr -d '\r' | paste -sd' ') &&
        [[ " $repl " == *" role:slave "* ]] && [[ " $repl " == *" master_host:$newm "* ]] &&
        [[ " $repl " == *" master_link_status:up "* ]]; do
    [ "$(date +%s)" -lt $deadline ] || { echo "the old master did not rejoin as a replica of $newm: $repl" >&2; return 1; }
    sleep 0.3
  done
  local t_rejoin
  t_rejoin=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  echo "start old master -> replica of $newm, link up: $t_rejoin s" | tee "$out/rejoin.txt"

  docker exec "$a" python3 /app/sentinel_app.py verify 2>&1 | tee "$out/verify.log"
  [ "${PIPESTATUS[0]}" = 0 ] || return 1

  # Same data everywhere once the replicas have caught up.
  local digests d svc
  deadline=$(( $(date +%s) + 30 ))
  while :; do
    digests=
    for svc in redis-1 redis-2 redis-3; do
      d=$(local_cli "$svc" debug digest 2>&1 | tr -d '\r')
      digests="$digests $svc=$d"
    done
    [ "$(echo "$digests" | tr ' ' '\n' | sed -n 's/.*=//p' | sort -u | wc -l)" = 1 ] &&
      [[ "$digests" != *ERR* ]] && break
    [ "$(date +%s)" -lt $deadline ] || { echo "digests differ:$digests" >&2; return 1; }
    sleep 0.5
  done
  echo "digests:$digests" | tee "$out/digests.txt"
  printf '{"image": "%s", "promotion_s": %s, "rejoin_s": %s, "verify": %s}\n' "$img" "$t_promo" "$t_rejoin" \
    "$(cat "$out/sentinel-verify.json")" | tee "$out/result.json"
}
