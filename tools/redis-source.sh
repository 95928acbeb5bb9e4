#!/usr/bin/env bash
# Prints the path of Redis 7.0.15's source tree (the release Podium is compatible with),
# fetching it first if it is not there yet.
#
#   tools/redis-source.sh          the tree, e.g. /root/.cache/redis-suite/redis-7.0.15
#
# The tree is upstream's release tarball as Debian's `redis` source package ships it
# (bookworm: 7.0.15), fetched once with `apt-get source --download-only redis` into
# $REDIS_SUITE_CACHE (default ~/.cache/redis-suite). Only the .orig tarball is unpacked, so
# Debian's patches are not applied. The tarball's SHA-256 is checked against the one below,
# so the generated tables (tools/check-generated.sh) and Redis's Tcl suites
# (tests/redis-suite/run.sh) always read the same source: if Debian ever ships another
# release, this fails instead of using it.
# Exit status 2 (with the reason on stderr) when the tree cannot be had.
set -u

VERSION=7.0.15
# sha256sum of Debian's redis_7.0.15.orig.tar.gz, as the package's .dsc lists it.
SHA256=4b1dc4ee6d622a09fff9c6777191209750fb5e5a725ef78ea012d6eef4c22982

cache=${REDIS_SUITE_CACHE:-$HOME/.cache/redis-suite}
tree=$cache/redis-$VERSION

have_tree() {
  [ -f "$tree/src/version.h" ] && grep -q "REDIS_VERSION \"$VERSION\"" "$tree/src/version.h"
}

fail() { echo "redis-source.sh: $*" >&2; exit 2; }

if ! have_tree; then
  # apt-get source needs deb-src entries; Debian's images ship only deb ones.
  if ! grep -rqs '^Types:.*deb-src\|^deb-src' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    if [ -f /etc/apt/sources.list.d/debian.sources ]; then
      sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources \
        >/etc/apt/sources.list.d/podium-deb-src.sources
    elif [ -f /etc/apt/sources.list ]; then
      sed -n 's/^deb /deb-src /p' /etc/apt/sources.list >/etc/apt/sources.list.d/podium-deb-src.list
    fi
  fi
  apt-get update -qq >/dev/null 2>&1
  dl=$(mktemp -d)
  trap 'rm -rf "$dl"' EXIT
  (cd "$dl" && apt-get source --download-only redis >/dev/null 2>&1) \
    || fail "apt-get source --download-only redis failed"
  tarball=$dl/redis_$VERSION.orig.tar.gz
  [ -f "$tarball" ] || fail "Debian's redis source is not $VERSION (got: $(cd "$dl" && ls))"
  echo "$SHA256  $tarball" | sha256sum -c --quiet - >/dev/null 2>&1 \
    || fail "$(basename "$tarball") does not have the pinned SHA-256 $SHA256"
  mkdir -p "$cache" && tar xzf "$tarball" -C "$cache" || fail "cannot unpack into $cache"
  have_tree || fail "no Redis $VERSION tree in $tree after unpacking"
fi
echo "$tree"
