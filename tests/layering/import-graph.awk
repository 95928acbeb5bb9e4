# The reader behind import-graph.sh (see its header for what it reports). Input: the crate's
# source files (lib.rs first), as paths relative to src/. Written for POSIX awk (mawk runs it).
#
# Each file is a module: a/b.rs and a/b/mod.rs are `a::b`, lib.rs is the crate root; inline
# `mod name {` blocks (rustfmt-formatted: the block ends at a `}` with the same indentation) are
# modules of their own for resolving `super::`/`self::`, and count as their file otherwise.
#
# A reference is a path that starts with `crate::`, `super::` or `self::`, in code or in a `use`
# tree (expanded, also across lines), or a path in a `use` tree that starts with a child module
# of the file's module. It depends on the module the path lands in: the longest prefix that is
# a module, followed through that module's own imports when the next name is one (so
# `super::Name`, where the parent imports `Name` from a sibling, depends on that sibling).
#
# An edge joins the two children of the innermost module that holds both ends: `a::b::c` naming
# `a::d::e` is the edge `a::b -> a::d` inside folder `a`. A reference from or to a folder's own
# file (its mod.rs, or a.rs beside a/) is no edge: that file is the folder's root, as lib.rs is
# the crate's: it declares and wires the children, and they may name what it defines.
#
# Re-exports (`pub use`, `pub(crate) use` ...) are not edges either: they keep an old path alive
# after a move, and a path through one is followed to where the item now lives.

function parent(m,    i) {
  i = last_sep(m)
  return i ? substr(m, 1, i - 1) : ""
}

function last_sep(m,    i, j) {   # index of the last "::" in m, 0 if none
  j = 0
  for (i = 1; i < length(m); i++) if (substr(m, i, 2) == "::") j = i
  return j
}

function join(a, b) { return a == "" ? b : (b == "" ? a : a "::" b) }

# The absolute path (without the crate's name) that `raw`, written inside module `ctx`, names;
# "" when it names something outside the crate (std::, an extern crate, a local name).
function absolute(ctx, raw,    n, seg, i, base, child) {
  n = split(raw, seg, "::")
  i = 1
  if (seg[1] == "crate" || seg[1] == "$crate") { base = ""; i = 2 }
  else if (seg[1] == "self") { base = ctx; i = 2 }
  else if (seg[1] == "super") {
    base = ctx
    while (i <= n && seg[i] == "super") { base = parent(base); i++ }
  } else {
    child = join(ctx, seg[1])
    if (child in known) base = ctx
    else return ""
  }
  for (; i <= n; i++) base = join(base, seg[i])
  return base "\t"   # the tab marks "inside the crate", so that the root ("") is not "outside"
}

# The module a path lands in, following imports; returns it as its file's module.
function resolve(path,    hops, n, seg, i, m, best, bi, rest, key, target) {
  for (hops = 0; hops < 16; hops++) {
    n = split(path, seg, "::")
    if (path == "") n = 0
    best = ""; bi = 0; m = ""
    for (i = 1; i <= n; i++) {
      m = join(m, seg[i])
      if (m in known) { best = m; bi = i }
    }
    if (bi >= n) break
    key = best SUBSEP seg[bi + 1]
    if (!(key in import_ctx)) break
    target = absolute(import_ctx[key], import_raw[key])
    if (target == "") break
    target = substr(target, 1, length(target) - 1)
    rest = ""
    for (i = bi + 2; i <= n; i++) rest = join(rest, seg[i])
    path = join(target, rest)
  }
  return (best in file_of) ? file_of[best] : best
}

function module_of_file(f) {
  sub(/\.rs$/, "", f)
  sub(/(^|\/)(mod|lib)$/, "", f)
  gsub(/\//, "::", f)
  return f
}

function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }

# One leaf of a use tree: "path" or "path as alias".
function use_leaf(text, is_pub,    alias, parts, n, name) {
  text = trim(text)
  if (text == "") return
  alias = ""
  if (text ~ / as /) { n = split(text, parts, / as /); text = trim(parts[1]); alias = trim(parts[2]) }
  sub(/::self$/, "", text)
  if (text ~ /::\*$/ || text == "*") { sub(/::\*$/, "", text); add_ref(text, is_pub); return }
  n = split(text, parts, "::")
  name = alias != "" ? alias : parts[n]
  if (name != "_" && name != "self" && name != "super" && name != "crate") {
    import_ctx[ctx_mod SUBSEP name] = ctx_mod
    import_raw[ctx_mod SUBSEP name] = text
  }
  add_ref(text, is_pub)
}

function add_ref(raw, is_pub) {
  if (is_pub) return
  nrefs++
  ref_ctx[nrefs] = ctx_mod; ref_raw[nrefs] = raw; ref_from[nrefs] = file_mod
  ref_at[nrefs] = FILENAME ":" use_line
}

# Expands `use a::{b, c::{d, e as f}};` (text without `use` and `;`) into its leaves.
function use_tree(text, is_pub,    depth, prefix, cur, i, c) {
  gsub(/[ \t\n]+/, " ", text)
  depth = 0; prefix[0] = ""; cur = ""
  for (i = 1; i <= length(text); i++) {
    c = substr(text, i, 1)
    if (c == "{") { depth++; prefix[depth] = prefix[depth - 1] trim(cur); cur = "" }
    else if (c == ",") { if (trim(cur) != "") use_leaf(prefix[depth] trim(cur), is_pub); cur = "" }
    else if (c == "}") { if (trim(cur) != "") use_leaf(prefix[depth] trim(cur), is_pub); cur = ""; depth-- }
    else cur = cur c
  }
  if (trim(cur) != "") use_leaf(prefix[depth] trim(cur), is_pub)
}

FNR == 1 {
  file_mod = module_of_file(FILENAME); ctx_mod = file_mod; known[file_mod] = 1
  nmods = 0; in_use = 0
}

{
  line = $0
  # Character and string literals, then line comments (doc comments included).
  gsub(/'([^'\\]|\\.)'/, "' '", line)
  gsub(/"([^"\\]|\\.)*"/, "\"\"", line)
  sub(/\/\/.*/, "", line)

  if (nmods > 0 && $0 == mod_indent[nmods] "}") { nmods--; ctx_mod = nmods ? mod_path[nmods] : file_mod; next }
  if (line ~ /^[ \t]*(pub(\([a-z]+\))? )?mod [a-z_][a-z0-9_]* *\{ *$/) {
    name = line; sub(/^[ \t]*(pub(\([a-z]+\))? )?mod /, "", name); sub(/ *\{ *$/, "", name)
    indent = $0; sub(/[^ \t].*/, "", indent)
    nmods++; mod_indent[nmods] = indent; mod_path[nmods] = join(ctx_mod, name)
    ctx_mod = mod_path[nmods]; known[ctx_mod] = 1; file_of[ctx_mod] = file_mod
    next
  }

  if (!in_use && line ~ /^[ \t]*(pub(\([a-z]+\))? )?use /) {
    in_use = 1; use_pub = line ~ /^[ \t]*pub/; use_text = ""; use_line = FNR
    sub(/^[ \t]*(pub(\([a-z]+\))? )?use /, "", line)
  }
  if (in_use) {
    if (index(line, ";")) {
      use_text = use_text " " substr(line, 1, index(line, ";") - 1)
      in_use = 0
      use_tree(use_text, use_pub)
    } else use_text = use_text " " line
    next
  }

  # Paths in code: crate::..., super::..., self::... (not part of a longer name).
  use_line = FNR
  rest = line
  while (match(rest, /\$?(crate|super|self)(::[A-Za-z_][A-Za-z0-9_]*)+/)) {
    before = RSTART > 1 ? substr(rest, RSTART - 1, 1) : ""
    if (before !~ /[A-Za-z0-9_]/) add_ref(substr(rest, RSTART, RLENGTH), 0)
    rest = substr(rest, RSTART + RLENGTH)
  }
}

function insert_sorted(list, item,    n, parts, i, out, placed) {   # space-separated, sorted
  n = split(list, parts, " ")
  out = ""; placed = 0
  for (i = 1; i <= n; i++) {
    if (!placed && item < parts[i]) { out = out " " item; placed = 1 }
    out = out " " parts[i]
  }
  if (!placed) out = out " " item
  return substr(out, 2)
}

# Tarjan's strongly connected components over the edges.
function visit(v,    i, w, group, m) {
  index_of[v] = low[v] = ++counter
  stack[++sp] = v; on_stack[v] = 1
  for (i = 1; i <= out_n[v]; i++) {
    w = out_to[v, i]
    if (!(w in index_of)) { visit(w); if (low[w] < low[v]) low[v] = low[w] }
    else if (on_stack[w] && index_of[w] < low[v]) low[v] = index_of[w]
  }
  if (low[v] == index_of[v]) {
    group = ""; m = 0
    do { w = stack[sp--]; on_stack[w] = 0; group = insert_sorted(group, w); m++ } while (w != v)
    if (m > 1) groups[++ngroups] = group
  }
}

END {
  for (r = 1; r <= nrefs; r++) {
    to = absolute(ref_ctx[r], ref_raw[r])
    if (to == "") continue
    to = resolve(substr(to, 1, length(to) - 1))
    from = ref_from[r]
    nf = split(from, fs, "::"); if (from == "") nf = 0
    nt = split(to, ts, "::"); if (to == "") nt = 0
    c = 0
    while (c < nf && c < nt && fs[c + 1] == ts[c + 1]) c++
    if (c >= nf || c >= nt) continue   # inside one module, or to or from a folder's root
    a = ""; b = ""
    for (i = 1; i <= c + 1; i++) { a = join(a, fs[i]); b = join(b, ts[i]) }
    if (!((a, b) in count)) { edges[++nedges] = a SUBSEP b; out_to[a, ++out_n[a]] = b; node[a] = 1; node[b] = 1 }
    count[a, b]++
    if (!((a, b) in first_at)) first_at[a, b] = ref_at[r]
    if (mode == "why" && a == why_a && b == why_b) print ref_at[r]
  }
  if (mode == "why") exit 0

  for (e = 1; e <= nedges; e++) {
    split(edges[e], p, SUBSEP)
    print p[1] " -> " p[2] " (" count[p[1], p[2]] " references)" | "sort"
  }
  close("sort")

  for (v in node) if (!(v in index_of)) visit(v)
  outside = ""
  for (g = 1; g <= ngroups; g++) {
    print "cycle: " groups[g]
    n = split(groups[g], members, " ")
    for (i = 1; i <= n; i++) {
      for (j = 1; j <= n; j++)
        if ((members[i], members[j]) in count)
          print "  " members[i] " -> " members[j] " (" count[members[i], members[j]] ", first at " first_at[members[i], members[j]] ")"
      if (index(allow, " " members[i] " ") == 0) outside = outside " " members[i]
    }
  }
  if (ngroups == 0) print "no cycles"
  if (mode == "check" && allow != "" && outside != "") { print "in a cycle and not allowed:" outside; exit 1 }
  if (mode == "check" && allow == "" && ngroups > 0) exit 1
}
