# shellcheck shell=bash
# Scenario 4 (sourced by tests/compose/run.sh): cut the master off its replica (docker network
# disconnect) while a client keeps writing to it; see what the replica serves
# (replica-serve-stale-data yes/no), what the master accepts (min-replicas-to-write in the
# `minreplicas` variant), then promote the replica, heal, and count the acknowledged writes the
# old master's side loses, with and without WAIT. Same figures expected of both images.

# s4 IMAGE VARIANT INDEX (VARIANT: default | minreplicas)
s4() {
  local img=$1 variant=$2 net=10.238.$((50 + $3))
  local out=$OUTROOT/partition-${img%%:*}-$variant f=$ROOT/tests/compose/4-partition/docker-compose.yml
  local p=podiumtest-partition-${img%%:*}-$variant
  rm -rf "$out"; mkdir -p "$out"
  MASTER_ARGS=
  [ "$variant" = minreplicas ] && MASTER_ARGS="--min-replicas-to-write 1 --min-replicas-max-lag 2"
  export REDIS_IMAGE=$img NET=$net MASTER_ARGS COMPOSE_OUT=$out
  cleanup_on_exit "$f" "$p" "$out"
  local_cli() { local svc=$1; shift; docker exec "$(cid "$p" "$svc")" redis-cli "$@" | tr -d '\r'; }
  field() { sed -n "s/^$1://p"; }
  # until_field SERVICE FIELD VALUE SECONDS: INFO replication's FIELD reaches VALUE.
  until_field() {
    local deadline=$(( $(date +%s) + $4 ))
    until [ "$(local_cli "$1" info replication | field "$2")" = "$3" ]; do
      [ "$(date +%s)" -lt $deadline ] || { echo "$1: $2 never became $3" >&2; local_cli "$1" info replication >&2; return 1; }
      sleep 0.2
    done
  }

  dcq "$f" "$p" up -d master replica
  wait_healthy "$f" "$p" master
  wait_healthy "$f" "$p" replica
  until_field replica master_link_status up 30
  local_cli master set probe before-the-cut >/dev/null

  rm -f "$out/stop"
  local a
  a=$(app_up "$f" "$p")
  docker exec "$a" python3 /app/partition_app.py write >"$out/write.log" 2>&1 &
  local writer=$!
  sleep 2

  local mid rnet cut
  mid=$(cid "$p" master)
  rnet=$(docker inspect -f '{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}' "$mid" | tr ' ' '\n' | grep '_repl$')
  cut=$(date +%s.%N)
  echo "$cut" >"$out/partition-at"
  docker network disconnect "$rnet" "$mid"

  # The replica notices (repl-timeout 5) and serves stale reads, or MASTERDOWN when told not to.
  until_field replica master_link_status down 20
  local t_down stale_yes stale_no
  t_down=$(awk -v a="$cut" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  stale_yes=$(local_cli replica get probe)
  local_cli replica config set replica-serve-stale-data no >/dev/null
  stale_no=$(local_cli replica get probe 2>&1 | cut -d' ' -f1)
  local_cli replica config set replica-serve-stale-data yes >/dev/null
  {
    echo "replica link down after: $t_down s"
    echo "replica GET with replica-serve-stale-data yes: $stale_yes"
    echo "replica GET with replica-serve-stale-data no: $stale_no"
  } | tee "$out/stale.txt"
  [ "$stale_yes" = before-the-cut ] || { echo "stale read expected" >&2; return 1; }
  [ "$stale_no" = MASTERDOWN ] || { echo "MASTERDOWN expected, got $stale_no" >&2; return 1; }

  # What a failover does meanwhile: the replica becomes a master.
  sleep 2
  local_cli replica replicaof no one >/dev/null
  sleep 1
  touch "$out/stop"
  wait $writer || { cat "$out/write.log"; return 1; }
  cat "$out/write.log"

  # Heal: the old master comes back as a replica of the new one and loses its side's writes.
  docker network connect --ip "$net.11" "$rnet" "$mid"
  local_cli master replicaof "$net.12" 6379 >/dev/null
  until_field master master_link_status up 30
  # In sync: the new master's WAIT sees the replica's ack, and both digests are equal.
  local deadline=$(( $(date +%s) + 30 )) md rd
  while :; do
    local_cli replica wait 1 1000 >/dev/null
    md=$(local_cli replica debug digest)
    rd=$(local_cli master debug digest)
    [ -n "$md" ] && [ "$md" = "$rd" ] && break
    [ "$(date +%s)" -lt $deadline ] || { echo "digests differ after healing: $md / $rd" >&2; return 1; }
    sleep 0.3
  done
  echo "healed, digest $md on both" | tee -a "$out/stale.txt"

  docker exec "$a" python3 /app/partition_app.py verify 2>&1 | tee "$out/verify.log"
  [ "${PIPESTATUS[0]}" = 0 ] || return 1
  if [ "$variant" = minreplicas ]; then
    grep -q '"noreplicas": [1-9]' "$out/partition-result.json" || { echo "min-replicas-to-write never refused a write" >&2; return 1; }
  else
    grep -q '"noreplicas": 0' "$out/partition-result.json" || { echo "NOREPLICAS without min-replicas-to-write" >&2; return 1; }
  fi
}
