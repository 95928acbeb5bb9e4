#!/usr/bin/env bash
# Checks that the tables generated from Redis's source are what their generators make today
# from the pinned Redis 7.0.15 tree (tools/redis-source.sh), so a hand edit, a generator change
# without a regeneration, or another Redis release cannot slip in.
#
#   tools/check-generated.sh          regenerate into a temporary folder; exit 1 with the diff
#                                     when a committed file differs
#   tools/check-generated.sh --write  regenerate in place (after changing a generator)
#
# Tables: src/command_table.rs (tools/gen_command_table.py) and src/commands/command_docs.rs
# (tools/gen_command_docs.py), each passed through rustfmt as `cargo fmt` would format it.
# Exit status 2 when the Redis source, python3 or rustfmt is missing.
set -u
cd "$(dirname "$0")/.." || exit 2

write=no
case "${1-}" in
  "") ;;
  --write) write=yes ;;
  *) echo "check-generated.sh: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
esac

command -v python3 >/dev/null || { echo "check-generated.sh: python3 is missing" >&2; exit 2; }
command -v rustfmt >/dev/null || { echo "check-generated.sh: rustfmt is missing" >&2; exit 2; }
tree=$(bash tools/redis-source.sh) || exit 2
edition=$(sed -n 's/^edition *= *"\([0-9]*\)".*/\1/p' Cargo.toml)

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

status=0
for pair in gen_command_table.py:src/command_table.rs gen_command_docs.py:src/commands/command_docs.rs; do
  gen=tools/${pair%%:*} file=${pair#*:}
  new=$out/$(basename "$file")
  # rustfmt reads the text on stdin from here, so the project's own rustfmt settings (if any
  # are ever added) apply as they do to `cargo fmt`.
  python3 "$gen" "$tree/src/commands" >"$new.raw" || { echo "check-generated.sh: $gen failed" >&2; exit 2; }
  rustfmt --edition "$edition" <"$new.raw" >"$new" || { echo "check-generated.sh: rustfmt failed on $gen's output" >&2; exit 2; }
  if [ $write = yes ]; then
    cp "$new" "$file"
  elif ! diff -u --label "$file (committed)" --label "$file ($gen from Redis 7.0.15)" \
      "$file" "$new" >"$out/diff"; then
    # A whole table's diff would bury the rest of CI's output; the start shows what changed.
    head -n 200 "$out/diff"
    [ "$(wc -l <"$out/diff")" -le 200 ] || echo "... (diff cut at 200 of $(wc -l <"$out/diff") lines)"
    echo "check-generated.sh: $file differs from what $gen generates; run tools/check-generated.sh --write if the generator's output is right" >&2
    status=1
  fi
done
[ $status = 0 ] && [ $write = no ] && echo "check-generated.sh: src/command_table.rs and src/commands/command_docs.rs are up to date"
exit $status
