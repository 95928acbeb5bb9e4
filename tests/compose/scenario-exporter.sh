# shellcheck shell=bash
# Scenario 5 (sourced by tests/compose/run.sh): Prometheus's redis_exporter against each image
# (a master with a replica, after the leaderboard flow and the churn); the metric names exported
# for Podium must be those exported for redis-server, but for the names listed in
# tests/compose/5-exporter/known-missing.txt (what Podium does not report yet). A name missing
# that is not listed fails, and so does a listed name that is no longer missing (shrink the list).

# s5 IMAGE INDEX
s5() {
  local img=$1 out=$OUTROOT/exporter-${1%%:*} f=$ROOT/tests/compose/5-exporter/docker-compose.yml
  local p=podiumtest-exporter-${1%%:*}
  rm -rf "$out"; mkdir -p "$out"
  export REDIS_IMAGE=$img COMPOSE_OUT=$out
  cleanup_on_exit "$f" "$p" "$out"
  dcq "$f" "$p" up -d redis replica exporter
  wait_healthy "$f" "$p" redis
  wait_healthy "$f" "$p" replica
  local deadline=$(( $(date +%s) + 30 ))
  until docker exec "$(cid "$p" replica)" redis-cli info replication | tr -d '\r' | grep -q '^master_link_status:up'; do
    [ "$(date +%s)" -lt $deadline ] || { echo "the replica's link never came up" >&2; return 1; }
    sleep 0.3
  done
  local a
  a=$(app_up "$f" "$p")
  docker exec "$a" python3 /app/leaderboard.py seed
  docker exec "$a" python3 /app/leaderboard.py churn
  # Two scrapes (the second sees the counters the first one's commands moved).
  docker exec -i "$a" python3 - <<'PY' >"$out/metrics.txt"
import time, urllib.request
for attempt in range(2):
    deadline = time.time() + 20
    while True:
        try:
            body = urllib.request.urlopen("http://exporter:9121/metrics", timeout=5).read().decode()
            break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.3)
print(body, end="")
PY
  grep -v '^#' "$out/metrics.txt" | sed -E 's/[{ ].*//' | grep '^redis_' | sort -u >"$out/metric-names.txt"
  grep -q '^redis_up 1' "$out/metrics.txt" || { echo "the exporter says redis_up is not 1" >&2; return 1; }
  echo "$(wc -l <"$out/metric-names.txt") metric names"
}

# exporter_compare: names exported for redis-ref:latest and not for podium:latest.
exporter_compare() {
  local ref=$OUTROOT/exporter-redis-ref/metric-names.txt pod=$OUTROOT/exporter-podium/metric-names.txt
  local known=$ROOT/tests/compose/5-exporter/known-missing.txt
  if [ ! -s "$ref" ] || [ ! -s "$pod" ]; then echo "metric names missing for one of the images" >&2; return 1; fi
  comm -23 "$ref" "$pod" >"$OUTROOT/exporter-missing.txt"
  comm -13 "$ref" "$pod" >"$OUTROOT/exporter-extra.txt"
  echo "redis-server: $(wc -l <"$ref") names; podium: $(wc -l <"$pod"); missing for podium: $(wc -l <"$OUTROOT/exporter-missing.txt"); only podium: $(wc -l <"$OUTROOT/exporter-extra.txt")"
  sed 's/^/  missing: /' "$OUTROOT/exporter-missing.txt"
  sed 's/^/  only podium: /' "$OUTROOT/exporter-extra.txt"
  local new fixed
  new=$(comm -23 "$OUTROOT/exporter-missing.txt" <(grep -v '^#' "$known" | sort -u))
  fixed=$(comm -13 "$OUTROOT/exporter-missing.txt" <(grep -v '^#' "$known" | sort -u))
  [ -z "$new" ] || { echo "newly missing for podium (not in known-missing.txt): $new" >&2; return 1; }
  [ -z "$fixed" ] || { echo "exported now, remove from tests/compose/5-exporter/known-missing.txt: $fixed" >&2; return 1; }
}
