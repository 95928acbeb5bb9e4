#!/usr/bin/env bash
# Podium's module layering: lists the dependencies between top-level modules of src/ (each
# `crate::MODULE` path a file mentions, in `use` lines or inline) and reports the cycles.
#
#   tests/layering/import-graph.sh            edges "A -> B (N references)", then the cycles
#   tests/layering/import-graph.sh --check    also exit 1 when there is any cycle
#   tests/layering/import-graph.sh --check --allow "A B ..."
#                                             exit 1 when a cycle holds a module not listed: a
#                                             ratchet while the last cycle is being broken (no
#                                             module may join it)
#   tests/layering/import-graph.sh --why A B  the lines of module A that reference module B
#
# PODIUM_SRC names another source tree to read (the layering test seeds a cycle in a copy).
# A top-level module is src/NAME.rs or src/NAME/; lib.rs and main.rs are the root and left
# out. Comments (// and //!) are ignored; a `crate::` inside a string literal would count.
#
# Re-exports are not dependencies: a line `pub use crate::...` or `pub(crate) use crate::...`
# only keeps an item's old path alive after a move (so code written against the old path still
# compiles); the code of this crate names the new, lower path. Such lines are left out.
set -u
cd "${PODIUM_SRC:-$(dirname "$0")/../../src}" || exit 2

module_of() { local f=${1#./}; f=${f%%/*}; echo "${f%.rs}"; }

modules=" $(ls | sed -n 's/\.rs$//p; /\./!p' | grep -v '^lib$\|^main$' | tr '\n' ' ') "

refs() {   # "FROM TO FILE:LINE" for every crate:: reference to a module, outside comments
  find . -name '*.rs' ! -path ./lib.rs ! -path ./main.rs | sort | while read -r f; do
    from=$(module_of "$f")
    { grep -n 'crate::[a-z_][a-z0-9_]*' "$f" || true; } | { grep -v '^[0-9]*:\s*//' || true; } |
      { grep -v '^[0-9]*:\s*pub\(([a-z]*)\)\? use crate::' || true; } |
      while IFS= read -r line; do
        n=${line%%:*}
        code=${line#*:}; code=${code%%//*}
        for to in $(grep -o 'crate::[a-z_][a-z0-9_]*' <<<"$code" | sed 's/crate:://' | sort -u); do
          # Macros exported at the root (crate::try_reply!) are not modules.
          if [ "$to" != "$from" ] && [[ $modules == *" $to "* ]]; then echo "$from $to ${f#./}:$n"; fi
        done
      done
  done
}

if [ "${1-}" = --why ]; then
  refs | awk -v a="$2" -v b="$3" '$1 == a && $2 == b { print $3 }'
  exit 0
fi

allow=""
if [ "${1-}" = --check ] && [ "${2-}" = --allow ]; then allow=" ${3-} "; fi

refs | awk -v check="${1-}" -v allow="$allow" '
  { n[$1" "$2]++; node[$1] = 1; node[$2] = 1 }
  END {
    for (e in n) { split(e, p, " "); print p[1] " -> " p[2] " (" n[e] " references)" | "sort"; reach[p[1], p[2]] = 1 }
    close("sort")
    # Transitive closure (Floyd-Warshall on a handful of modules).
    for (k in node) for (i in node) if ((i, k) in reach) for (j in node) if ((k, j) in reach) reach[i, j] = 1
    cycles = 0
    for (i in node) {
      if (done[i] || !((i, i) in reach)) continue
      group = i; done[i] = 1
      for (j in node) if (j != i && ((i, j) in reach) && ((j, i) in reach)) { group = group " " j; done[j] = 1 }
      print "cycle: " group; cycles++
      n_members = split(group, members, " ")
      for (m = 1; m <= n_members; m++) if (index(allow, " " members[m] " ") == 0) outside = outside " " members[m]
    }
    if (cycles == 0) print "no cycles"
    if (check == "--check" && allow != "" && outside != "") { print "in a cycle and not allowed:" outside; exit 1 }
    if (check == "--check" && allow == "" && cycles > 0) exit 1
  }'
