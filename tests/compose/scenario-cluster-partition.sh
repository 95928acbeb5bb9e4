# shellcheck shell=bash
# Scenario 6 (sourced by tests/compose/run.sh): a six-node cluster made by `redis-cli --cluster
# create --cluster-replicas 1`; the master of slot 0 is cut off from the other five nodes while
# a client keeps writing to every shard (WAIT 1 after each write). The cut is a packet filter
# (DROP both ways) in the master's own network namespace, entered from the host with nsenter:
# docker's network disconnect would also cut the client off, and a client left with the
# minority side is the case where Redis Cluster loses acknowledged writes. Measured: how long
# until the replica is promoted, until the old master refuses writes (CLUSTERDOWN), which
# acknowledged writes are lost (none acknowledged by WAIT may be), and how long the healed
# master takes to rejoin as a replica of the promoted one. Run with each image, and with two
# mixed clusters (three nodes of each image; the cut-off master of one kind, its replica of the
# other): the figures are reported side by side, not required to be equal.

# s6 IMAGE INDEX: six nodes of IMAGE.
s6() {
  s6_with "${1%%:*}" "$1" "$1" "$2"
}

# s6_mixed IMAGE_A IMAGE_B INDEX: a mixed cluster, the cut-off master of IMAGE_A and its
# replica of IMAGE_B (see the compose file).
s6_mixed() {
  s6_with "mixed-${1%%:*}-master" "$1" "$2" "$3"
}

# s6_with NAME IMAGE_A IMAGE_B INDEX
s6_with() {
  local name=$1 net=10.238.$((60 + $4))
  local out=$OUTROOT/cluster-$name f=$ROOT/tests/compose/6-cluster-partition/docker-compose.yml
  local p=podiumtest-cluster-$name
  rm -rf "$out"; mkdir -p "$out"
  export IMAGE_A=$2 IMAGE_B=$3 NET=$net COMPOSE_OUT=$out
  cleanup_on_exit "$f" "$p" "$out"
  command -v nsenter >/dev/null || { echo "nsenter (util-linux) is needed to cut a node off" >&2; return 1; }
  command -v iptables-restore >/dev/null || { echo "iptables is needed to cut a node off" >&2; return 1; }
  local nodes=() n
  for n in 11 12 13 14 15 16; do nodes+=("$net.$n"); done

  dcq "$f" "$p" up -d n1 n2 n3 n4 n5 n6
  for n in n1 n2 n3 n4 n5 n6; do wait_healthy "$f" "$p" "$n"; done
  local a
  a=$(app_up "$f" "$p")
  app() { docker exec "$a" "$@"; }
  app redis-cli --cluster create "${nodes[@]/%/:6379}" --cluster-replicas 1 --cluster-yes >"$out/create.log" 2>&1 ||
    { tail -20 "$out/create.log" >&2; return 1; }

  # Every node sees the whole cluster and every replica's link is up.
  local deadline=$(( $(date +%s) + 60 )) ready ip
  while :; do
    ready=0
    for ip in "${nodes[@]}"; do
      app redis-cli -h "$ip" cluster info | tr -d '\r' | grep -q '^cluster_state:ok' &&
        [ "$(app redis-cli -h "$ip" cluster nodes | grep -c ' connected')" = 6 ] && ready=$((ready + 1))
    done
    [ $ready = 6 ] && app redis-cli --cluster check "$net.11:6379" >"$out/check-before.log" 2>&1 && break
    [ "$(date +%s)" -lt "$deadline" ] || { echo "the cluster did not converge in 60 s" >&2; cat "$out/check-before.log" >&2; return 1; }
    sleep 0.5
  done
  # container_of IP: the id of the project's container with that address.
  container_of() {
    docker ps -q --filter "label=com.docker.compose.project=$p" | while read -r c; do
      docker inspect -f '{{.Id}} {{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$c"
    done | awk -v ip="$1" '$2 == ip {print $1}'
  }
  image_at() { docker inspect -f '{{.Config.Image}}' "$(container_of "$1")"; }
  local old new
  read -r old new < <(app python3 /app/cluster_partition_app.py target)
  echo "cut: master $old ($(image_at "$old"), slot 0), its replica $new ($(image_at "$new"))" | tee "$out/cut.txt"
  if [ "$2" != "$3" ] && [ "$(image_at "$old")" = "$(image_at "$new")" ]; then
    echo "a mixed cluster whose cut-off master and replica are of one kind: redis-cli assigned the replicas otherwise than the compose file expects" >&2
    return 1
  fi
  local deadline=$(( $(date +%s) + 30 ))
  until [ "$(app redis-cli -h "$new" role | sed -n 4p | tr -d '\r')" = connected ]; do
    [ "$(date +%s)" -lt "$deadline" ] || { echo "the replica $new never linked" >&2; return 1; }
    sleep 0.3
  done

  rm -f "$out/stop" "$out/partition-at" "$out/promoted" "$out/healed" "$out/rejoined"
  docker exec "$a" python3 /app/cluster_partition_app.py write >"$out/write.log" 2>&1 &
  local writer=$!
  docker exec "$a" python3 /app/cluster_partition_app.py watch "$old" "$new" >"$out/watch.log" 2>&1 &
  local watcher=$!
  sleep 3

  # The cut: the old master drops every packet to and from the other five nodes.
  local oid nid pid
  oid=$(container_of "$old")
  nid=$(container_of "$new")
  pid=$(docker inspect -f '{{.State.Pid}}' "$oid")
  # One iptables-restore: the whole cut at once, timed from when it is in place.
  cut_off() {
    local ip
    {
      echo '*filter'
      for ip in "${nodes[@]}"; do
        [ "$ip" = "$old" ] && continue
        echo "-A INPUT -s $ip -j DROP"
        echo "-A OUTPUT -d $ip -j DROP"
      done
      echo COMMIT
    } | nsenter -t "$pid" -n iptables-restore
  }
  cut_off
  date +%s.%N >"$out/partition-at.tmp"
  mv "$out/partition-at.tmp" "$out/partition-at"
  nsenter -t "$pid" -n iptables -S >"$out/cut-rules.txt"

  # The replica is promoted by the majority; a few seconds of writes to it, then heal.
  deadline=$(( $(date +%s) + 60 ))
  until [ -f "$out/promoted" ]; do
    [ "$(date +%s)" -lt "$deadline" ] || { echo "the replica $new was not promoted in 60 s" >&2; cat "$out/watch.log" >&2; return 1; }
    sleep 0.1
  done
  sleep 3
  nsenter -t "$pid" -n iptables -F
  date +%s.%N >"$out/healed.tmp"
  mv "$out/healed.tmp" "$out/healed"
  wait $watcher || { cat "$out/watch.log" >&2; return 1; }
  cat "$out/watch.log"
  [ -f "$out/rejoined" ] || { echo "the old master did not rejoin as a replica of $new" >&2; return 1; }
  sleep 2
  touch "$out/stop"
  wait $writer || { cat "$out/write.log"; return 1; }
  cat "$out/write.log"

  # Healed: the whole cluster agrees again, and the old master holds the new one's data.
  deadline=$(( $(date +%s) + 60 ))
  until app redis-cli --cluster check "$net.11:6379" >"$out/check-after.log" 2>&1 &&
    ! grep -q '^\[ERR\]\|^\[WARNING\]' "$out/check-after.log"; do
    [ "$(date +%s)" -lt "$deadline" ] || { echo "redis-cli --cluster check after healing:" >&2; cat "$out/check-after.log" >&2; return 1; }
    sleep 0.5
  done
  local nd od
  deadline=$(( $(date +%s) + 30 ))
  while :; do
    app redis-cli -h "$new" wait 1 1000 >/dev/null
    nd=$(docker exec "$nid" redis-cli debug digest | tr -d '\r')
    od=$(docker exec "$oid" redis-cli debug digest | tr -d '\r')
    [ -n "$nd" ] && [ "$nd" = "$od" ] && break
    [ "$(date +%s)" -lt "$deadline" ] || { echo "digests differ after healing: $nd / $od" >&2; return 1; }
    sleep 0.3
  done
  echo "healed: $old is a replica of $new, digest $nd on both" | tee -a "$out/cut.txt"
  app python3 /app/cluster_partition_app.py verify "$old" "$new" 2>&1 | tee "$out/verify.log"
  [ "${PIPESTATUS[0]}" = 0 ]
}
