# shellcheck shell=bash
# Scenario 0 (sourced by tests/compose/run.sh): the official image's command-line habits with
# `docker run`, each image; what CONFIG GET then says must be the same for both images.

# s0 IMAGE INDEX
s0() {
  local img=$1 out=$OUTROOT/habits-${1%%:*} n=0 c id args k deadline
  rm -rf "$out"; mkdir -p "$out"
  local habits=(
    ""
    "--appendonly yes"
    "--save 60 1"
    "--requirepass s3cret"
    "--maxmemory 256mb --maxmemory-policy allkeys-lru"
    "--protected-mode yes"
    "redis-server --appendonly yes --appendfsync always"
  )
  for args in "${habits[@]}"; do
    n=$((n + 1))
    c=podiumtest-habit-${img%%:*}-$n
    docker rm -fv "$c" >/dev/null 2>&1 || true
    # shellcheck disable=SC2086
    id=$(docker run -d --name "$c" "$img" $args)
    # shellcheck disable=SC2064 # expanded now, on purpose
    trap "docker rm -fv '$c' >/dev/null 2>&1 || true" EXIT
    auth=()
    [[ "$args" == *requirepass* ]] && auth=(-a s3cret --no-auth-warning)
    deadline=$(( $(date +%s) + 20 ))
    until [ "$(docker exec "$id" redis-cli "${auth[@]}" ping 2>/dev/null)" = PONG ]; do
      [ "$(date +%s)" -lt $deadline ] || { echo "'$args': no PONG"; docker logs "$id" | tail -5; return 1; }
      sleep 0.2
    done
    {
      echo "== ${args:-(no arguments)}"
      for k in protected-mode appendonly appendfsync save requirepass maxmemory maxmemory-policy port dir; do
        docker exec "$id" redis-cli "${auth[@]}" config get "$k" | tr -d '\r' | paste -sd' '
      done
      [ ${#auth[@]} = 0 ] || echo "without password: $(docker exec "$id" redis-cli ping 2>&1)"
      echo "process: $(docker exec "$id" sh -c 'grep ^Uid /proc/1/status | tr -s "\t " " "; stat -c "/data %U %a" /data')"
    } >>"$out/habits.txt"
    docker rm -fv "$id" >/dev/null
  done
  cat "$out/habits.txt"
}
