#!/bin/sh
# Entrypoint of the podium (and redis-ref) image. It follows the rules of the official redis
# image's entrypoint so that compose files written for `image: redis:7` work unchanged:
#   - `docker run IMAGE --appendonly yes` and `docker run IMAGE /path/redis.conf` run
#     redis-server with those arguments (first argument starting with `-` or ending in `.conf`);
#   - started as root for redis-server, it gives /data (the working directory) to the user
#     `redis` and re-executes itself as that user (`--user` in compose skips this);
#   - umask 0077 unless the caller set something else than the default 0022;
#   - protected mode is off by default: clients on a compose network do not come from
#     loopback. A config file given as the first argument that sets protected-mode itself, or
#     a later `--protected-mode yes`, still wins.
set -e

case "$1" in
  -*|*.conf) set -- redis-server "$@" ;;
esac

if [ "$1" = redis-server ] && [ "$(id -u)" = 0 ]; then
  # Only what is not the user's already: a large volume is not rewalked by chown -R.
  find . \! -user redis -exec chown redis '{}' +
  exec setpriv --reuid=redis --regid=redis --init-groups -- "$0" "$@"
fi

if [ "$(umask)" = 0022 ]; then
  umask 0077
fi

if [ "$1" = redis-server ]; then
  shift
  conf=
  # A first argument that is not an option is the config file (`-` is stdin, as redis-server).
  if [ -n "${1:-}" ] && { [ "${1#-}" = "$1" ] || [ "$1" = - ]; }; then
    conf=$1
    shift
  fi
  if [ -n "$conf" ] && [ -f "$conf" ] && grep -Eiq '^[[:space:]]*protected-mode[[:space:]]' "$conf"; then
    # The file decides.
    set -- redis-server "$conf" "$@"
  elif [ -n "$conf" ]; then
    # Given after the file and before the user's options: a later --protected-mode wins.
    set -- redis-server "$conf" --protected-mode no "$@"
  else
    set -- redis-server --protected-mode no "$@"
  fi
fi

exec "$@"
