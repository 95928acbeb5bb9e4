#!/usr/bin/env bash
# Podium's module layering: lists the dependencies between modules of src/ and reports the
# import cycles, between the top-level modules and between the files inside each folder.
#
#   tests/layering/import-graph.sh            edges "A -> B (N references)", then the cycles
#   tests/layering/import-graph.sh --check    also exit 1 when there is any cycle
#   tests/layering/import-graph.sh --check --allow "A B ..."
#                                             exit 1 when a cycle holds a module not listed: a
#                                             ratchet while a cycle is being broken (no module
#                                             may join it)
#   tests/layering/import-graph.sh --why A B  the lines of module A that reference module B
#
# Modules are named by their path: `commands` (a top-level module), `commands::scripting::api`
# (a file inside a folder). An edge joins two modules of one folder: `commands -> keyspace` is
# between top-level modules (the folder src/ itself), `persistence::snapshot ->
# persistence::rdb` between two files of src/persistence/. A reference deep inside one folder to
# a file deep inside another counts at the level where the two paths part.
#
# What counts as a reference (tests/layering/import-graph.awk has the details): every path that
# starts with `crate::`, `super::` or `self::`, in `use` lines (brace groups expanded, also over
# several lines) or inline, outside comments; a `crate::` inside a string literal does not count.
# A folder's own file (mod.rs, or NAME.rs beside NAME/) is its root, as lib.rs is the crate's:
# references from it to its children, and from the children to what it defines, are not edges;
# a name it only imports from one child, named by another child through it (`super::Name`),
# counts as a reference to the first child. main.rs is another crate and is left out.
#
# Re-exports are not dependencies: a line `pub use crate::...` or `pub(crate) use crate::...`
# only keeps an item's old path alive after a move (so code written against the old path still
# compiles); a path through one is followed to the module the item lives in now.
#
# PODIUM_SRC names another source tree to read (the layering test plants cycles in copies).
set -u
here=$(cd "$(dirname "$0")" && pwd)
cd "${PODIUM_SRC:-$here/../../src}" || exit 2

mode=list why_a="" why_b="" allow=""
case "${1-}" in
  --why) mode=why why_a=${2-} why_b=${3-} ;;
  --check) mode=check; if [ "${2-}" = --allow ]; then allow=" ${3-} "; fi ;;
  "") ;;
  *) echo "usage: $0 [--check [--allow \"A B ...\"] | --why A B]" >&2; exit 2 ;;
esac

# lib.rs first: the crate root's imports are read before any path through them is followed.
files=(lib.rs)
while IFS= read -r f; do files+=("${f#./}"); done < <(find . -name '*.rs' ! -path ./lib.rs ! -path ./main.rs | sort)
exec awk -v mode="$mode" -v why_a="$why_a" -v why_b="$why_b" -v allow="$allow" \
  -f "$here/import-graph.awk" "${files[@]}"
