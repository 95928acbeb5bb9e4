# shellcheck shell=bash
# Scenario 3 (sourced by tests/compose/run.sh): a master of one image and a replica of the
# other. Data written before the replica attaches crosses as a full sync (RDB), the rest as the
# replication stream; once the replica's offset is the master's, both must have the same
# DEBUG DIGEST, and the app's read-back from each (raw replies) must be the same.

# s3 MASTER_IMAGE REPLICA_IMAGE
s3() {
  local mimg=$1 rimg=$2
  local name=${mimg%%:*}-master-${rimg%%:*}-replica
  local out=$OUTROOT/mixed-$name f=$ROOT/tests/compose/3-mixed/docker-compose.yml
  local p=podiumtest-mixed-$name
  rm -rf "$out"; mkdir -p "$out"
  export MASTER_IMAGE=$mimg REPLICA_IMAGE=$rimg COMPOSE_OUT=$out
  cleanup_on_exit "$f" "$p" "$out"
  local a
  app() { docker exec "$@"; }
  local_cli() { local svc=$1; shift; docker exec "$(cid "$p" "$svc")" redis-cli "$@" | tr -d '\r'; }
  field() { sed -n "s/^$1://p"; }

  dcq "$f" "$p" up -d master
  wait_healthy "$f" "$p" master
  a=$(app_up "$f" "$p")
  app "$a" python3 /app/leaderboard.py seed
  app "$a" python3 /app/leaderboard.py churn
  dcq "$f" "$p" up -d replica
  wait_healthy "$f" "$p" replica
  local deadline=$(( $(date +%s) + 60 ))
  until [ "$(local_cli replica info replication | field master_link_status)" = up ]; do
    [ "$(date +%s)" -lt $deadline ] || { echo "the replica's link never came up" >&2; local_cli replica info replication >&2; return 1; }
    sleep 0.3
  done
  # Now through the replication stream.
  app "$a" python3 /app/leaderboard.py churn

  local mo ro
  deadline=$(( $(date +%s) + 30 ))
  while :; do
    mo=$(local_cli master info replication | field master_repl_offset)
    ro=$(local_cli replica info replication | field slave_repl_offset)
    [ -n "$mo" ] && [ "$mo" = "$ro" ] && break
    [ "$(date +%s)" -lt $deadline ] || { echo "offsets never met: master $mo, replica $ro" >&2; return 1; }
    sleep 0.3
  done
  local md rd mk rk
  md=$(local_cli master debug digest)
  rd=$(local_cli replica debug digest)
  mk=$(local_cli master dbsize)
  rk=$(local_cli replica dbsize)
  echo "offset $mo; master ($mimg) digest $md, $mk keys; replica ($rimg) digest $rd, $rk keys" | tee "$out/digests.txt"
  if [ "$md" != "$rd" ] || [ "$mk" != "$rk" ]; then echo "master and replica differ" >&2; return 1; fi
  case "$md" in *ERR*|"") echo "no digest: $md" >&2; return 1 ;; esac

  app "$a" python3 /app/leaderboard.py verify master
  app -e REDIS_HOST=replica "$a" python3 /app/leaderboard.py verify replica
  diff -u "$out/summary-master.json" "$out/summary-replica.json" >&2 || { echo "read-backs differ" >&2; return 1; }
}
