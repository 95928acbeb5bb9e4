#!/usr/bin/env bash
# Make the image `debian:bookworm-slim` locally, from Debian's packages, for a machine whose
# Docker Engine cannot pull from a registry. Where pulling works this is not needed: the
# Dockerfiles in docker/ start `FROM debian:bookworm-slim` and get the official image.
#
#   docker/make-base-image.sh            import the image unless the tag exists already
#   docker/make-base-image.sh --force    rebuild the rootfs and re-import
#
# debootstrap --variant=minbase (the variant the official debian images use) into a temporary
# directory, then the official slim image's trimmings (no docs/man/locales through dpkg
# path-excludes, apt lists and caches removed, the docker apt.conf snippets), then
# `docker import` with the same CMD. The rootfs tarball is cached (BASE_CACHE, default
# /var/cache/podium-docker) so a second machine-local run imports in seconds.
set -euo pipefail

TAG=${BASE_TAG:-debian:bookworm-slim}
SUITE=bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
CACHE=${BASE_CACHE:-/var/cache/podium-docker}
TARBALL=$CACHE/$SUITE-slim-rootfs.tar
force=0
[ "${1:-}" = --force ] && force=1

die() { echo "make-base-image: $*" >&2; exit 1; }
command -v docker >/dev/null || die "docker is not installed"
docker info >/dev/null 2>&1 || die "the Docker Engine does not answer (docker info failed)"

if [ $force = 0 ] && docker image inspect "$TAG" >/dev/null 2>&1; then
  echo "make-base-image: $TAG exists ($(docker image inspect -f '{{.Id}}' "$TAG" | cut -c1-19)), nothing to do"
  exit 0
fi

if [ $force = 1 ] || [ ! -s "$TARBALL" ]; then
  [ "$(id -u)" = 0 ] || die "debootstrap needs root"
  if ! command -v debootstrap >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  fi
  mkdir -p "$CACHE"
  root=$(mktemp -d "$CACHE/rootfs.XXXXXX")
  trap 'rm -rf "$root"' EXIT
  echo "make-base-image: debootstrap --variant=minbase $SUITE from $MIRROR"
  start=$(date +%s)
  debootstrap --variant=minbase --merged-usr "$SUITE" "$root" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 ||
    { tail -30 "$CACHE/debootstrap.log" >&2; die "debootstrap failed (log: $CACHE/debootstrap.log)"; }

  # What the official slim image has on top of minbase (docker-library's debuerreotype
  # --slimify and its apt/dpkg configuration for containers).
  cat >"$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY_MIRROR
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  rm -f "$root/etc/apt/sources.list"
  cat >"$root/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
# slim: no documentation, manual pages or translations
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
EOF
  cat >"$root/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
  printf 'Acquire::Languages "none";\n' >"$root/etc/apt/apt.conf.d/docker-no-languages"
  printf 'Acquire::GzipIndexes "true";\n' >"$root/etc/apt/apt.conf.d/docker-gzip-indexes"
  printf 'Apt::AutoRemove::SuggestsImportant "false";\n' >"$root/etc/apt/apt.conf.d/docker-autoremove-suggests"
  # Apply the excludes to what debootstrap already unpacked.
  find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete 2>/dev/null || true
  find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete 2>/dev/null || true
  rm -rf "$root"/usr/share/{man,groff,info,lintian,linda}/* 2>/dev/null || true
  find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} + 2>/dev/null || true
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb \
    "$root"/var/log/*.log "$root"/var/log/apt/* "$root"/tmp/* "$root"/etc/machine-id "$root"/etc/hostname \
    "$root"/etc/resolv.conf
  : >"$root/etc/machine-id"

  tmp=$TARBALL.tmp
  tar --numeric-owner --xattrs --acls -C "$root" -cf "$tmp" .
  mv "$tmp" "$TARBALL"
  rm -rf "$root"
  trap - EXIT
  echo "make-base-image: rootfs built in $(( $(date +%s) - start )) s, cached at $TARBALL"
else
  echo "make-base-image: using cached rootfs $TARBALL"
fi

docker import \
  --change 'CMD ["bash"]' \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --message "debootstrap --variant=minbase $SUITE (podium docker/make-base-image.sh)" \
  "$TARBALL" "$TAG" >/dev/null
echo "make-base-image: imported $TAG ($(docker image inspect -f '{{.Size}}' "$TAG" | awk '{printf "%.0f MB", $1/1e6}'))"
