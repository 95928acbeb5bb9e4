#!/usr/bin/env python3
"""Generate src/command_table.rs: Redis 7.0.15's command table as ACL sees it.

Reads Redis's src/commands/*.json (the source tree's command definitions) and writes, for
every command and subcommand, its full name, ACL categories (the declared ones plus those
Redis derives from the command flags in setImplicitACLCategories), whether it is flagged
no-auth, its arity, its command flags and tips as COMMAND INFO shows them (hidden flags left
out, movablekeys derived as Redis's populateCommandLegacyRangeSpec does), the legacy
(first, last, step) triple, and its key specs: where the keys are, whether each is read and/or
written (what ACL needs), and the spec's flags and notes (what COMMAND INFO and COMMAND
GETKEYSANDFLAGS show).

    python3 tools/gen_command_table.py "$(tools/redis-source.sh)/src/commands" \
        | rustfmt --edition 2021 > src/command_table.rs

tools/check-generated.sh --write does this (and the same for tools/gen_command_docs.py) from
the pinned Redis source; without --write it fails when the committed file differs.
"""
import glob
import json
import os
import sys

CATEGORIES = ["keyspace", "read", "write", "set", "sortedset", "list", "hash", "string",
              "bitmap", "hyperloglog", "geo", "stream", "pubsub", "admin", "fast", "slow",
              "blocking", "dangerous", "connection", "transaction", "scripting"]


def bit(name):
    return 1 << CATEGORIES.index(name)


def categories(c):
    cats = 0
    for a in c.get("acl_categories", []):
        cats |= bit(a.lower())
    flags = set(c.get("command_flags", []))
    if "WRITE" in flags:
        cats |= bit("write")
    if "READONLY" in flags and not cats & bit("scripting"):
        cats |= bit("read")
    if "ADMIN" in flags:
        cats |= bit("admin") | bit("dangerous")
    if "PUBSUB" in flags:
        cats |= bit("pubsub")
    if "FAST" in flags:
        cats |= bit("fast")
    if "BLOCKING" in flags:
        cats |= bit("blocking")
    if not cats & bit("fast"):
        cats |= bit("slow")
    return cats


KEY_FLAGS = ["RO", "RW", "OW", "RM", "ACCESS", "UPDATE", "INSERT", "DELETE", "NOT_KEY",
             "INCOMPLETE", "VARIABLE_FLAGS"]
KEY_FLAG_NAMES = ["RO", "RW", "OW", "RM", "access", "update", "insert", "delete", "not_key",
                  "incomplete", "variable_flags"]
# COMMAND INFO's flag names in Redis's reply order (may_replicate, sentinel, only_sentinel,
# protected and touches_arbitrary_keys are hidden on purpose; movablekeys is derived).
CMD_FLAGS = ["WRITE", "READONLY", "DENYOOM", "MODULE", "ADMIN", "PUBSUB", "NOSCRIPT",
             "BLOCKING", "LOADING", "STALE", "SKIP_MONITOR", "SKIP_SLOWLOG", "ASKING", "FAST",
             "NO_AUTH", "NO_MANDATORY_KEYS", "NO_ASYNC_LOADING", "NO_MULTI", "MOVABLE_KEYS",
             "ALLOW_BUSY"]


def rust_str(s):
    return '"%s"' % s.replace("\\", "\\\\").replace('"', '\\"')


def str_list(items):
    return "&[%s]" % ", ".join(rust_str(i) for i in items)


def legacy_range(c):
    """(first, last, step, movable) as Redis's populateCommandLegacyRangeSpec derives them."""
    specs = c.get("key_specs", [])
    if not specs:
        return 0, 0, 0, False

    def plain(ks):
        return "index" in ks["begin_search"] and "range" in ks["find_keys"]

    if len(specs) == 1 and plain(specs[0]):
        r = specs[0]["find_keys"]["range"]
        pos = specs[0]["begin_search"]["index"]["pos"]
        last = r["lastkey"] + pos if r["lastkey"] >= 0 else r["lastkey"]
        return pos, last, r["step"], "INCOMPLETE" in specs[0].get("flags", [])
    movable = False
    first, last, prev_last = None, 0, 0
    for ks in specs:
        if not plain(ks):
            movable = True
            continue
        pos = ks["begin_search"]["index"]["pos"]
        r = ks["find_keys"]["range"]
        if r["step"] != 1 or (prev_last and prev_last != pos - 1):
            movable = True
            continue
        if "INCOMPLETE" in ks.get("flags", []):
            movable = True
        first = pos if first is None else min(first, pos)
        abs_last = r["lastkey"] + pos if r["lastkey"] >= 0 else r["lastkey"]
        # Redis compares as unsigned: a negative lastkey wins.
        last = abs_last if (abs_last & 0xffffffff) > (last & 0xffffffff) else last
        prev_last = last
    if first is None:
        return 0, 0, 0, True
    return first, last, 1, movable


def cmd_flags(c):
    flags = set(c.get("command_flags", []))
    if legacy_range(c)[3]:
        flags.add("MOVABLE_KEYS")
    return ["movablekeys" if f == "MOVABLE_KEYS" else f.lower() for f in CMD_FLAGS if f in flags]


def key_spec(ks):
    flags = set(ks.get("flags", []))
    bs = ks["begin_search"]
    fk = ks["find_keys"]
    if "index" in bs:
        begin = "Begin::Index(%d)" % bs["index"]["pos"]
    elif "keyword" in bs:
        kw = bs["keyword"]
        begin = 'Begin::Keyword(b"%s", %d)' % (kw["keyword"], kw["startfrom"])
    else:
        begin = "Begin::Unknown"
    if "range" in fk:
        r = fk["range"]
        find = "Find::Range(%d, %d, %d)" % (r["lastkey"], r["step"], r["limit"])
    elif "keynum" in fk:
        k = fk["keynum"]
        find = "Find::Keynum(%d, %d, %d)" % (k["keynumidx"], k["firstkey"], k["step"])
    else:
        find = "Find::Unknown"
    read = "ACCESS" in flags
    write = bool(flags & {"INSERT", "DELETE", "UPDATE"})
    names = [n for f, n in zip(KEY_FLAGS, KEY_FLAG_NAMES) if f in flags]
    notes = ks.get("notes")
    return ("KeySpec { begin: %s, find: %s, read: %s, write: %s, not_key: %s, flags: %s, "
            "notes: %s }") % (
        begin, find, str(read).lower(), str(write).lower(), str("NOT_KEY" in flags).lower(),
        str_list(names), "None" if notes is None else "Some(%s)" % rust_str(notes))


# The release the tables describe; the JSON of any other would silently change them.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from redis_pin import check_version  # noqa: E402


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: %s REDIS_SRC/src/commands" % sys.argv[0])
    src = sys.argv[1]
    check_version(src)
    tops = {}
    subs = {}
    for path in sorted(glob.glob(os.path.join(src, "*.json"))):
        with open(path) as f:
            d = json.load(f)
        for name, c in d.items():
            if "container" in c:
                subs.setdefault(c["container"].lower(), []).append((name.lower(), c))
            else:
                tops[name.lower()] = c
    rows = []
    for name in sorted(tops):
        parent_id = len(rows)
        children = sorted(subs.get(name, []))
        rows.append((name, tops[name], None, len(children)))
        for sub, c in children:
            rows.append(("%s|%s" % (name, sub), c, parent_id, 0))
    out = []
    out.append("//! Redis 7.0.15's command table as ACL sees it: every command and subcommand with its")
    out.append("//! categories, arity and key specs. Generated by tools/gen_command_table.py from Redis's")
    out.append("//! src/commands/*.json; do not edit by hand (tools/check-generated.sh checks it).")
    out.append("")
    out.append("use crate::cmdspec::{AclCommand, Begin, Find, KeySpec};")
    out.append("")
    out.append("/// Category names, in Redis's order (bit i of `AclCommand::categories` is CATEGORIES[i]).")
    out.append("pub(crate) const CATEGORIES: &[&str] = &[%s];" % ", ".join('"%s"' % c for c in CATEGORIES))
    out.append("")
    out.append("/// Every command, each container followed by its subcommands; the index is the ACL id.")
    out.append("#[rustfmt::skip]")
    out.append("pub(crate) static COMMANDS: &[AclCommand] = &[")
    for name, c, parent, nsubs in rows:
        specs = ", ".join(key_spec(ks) for ks in c.get("key_specs", []))
        first, last, step, _ = legacy_range(c)
        tips = [t.lower() for t in c.get("command_tips", [])]
        out.append("    AclCommand {")
        out.append("        name: \"%s\"," % name)
        out.append("        parent: %s," % ("None" if parent is None else "Some(%d)" % parent))
        out.append("        subcommands: %d," % nsubs)
        out.append("        categories: 0x%x," % categories(c))
        out.append("        no_auth: %s," % str("NO_AUTH" in c.get("command_flags", [])).lower())
        out.append("        arity: %d," % c.get("arity", 0))
        out.append("        flags: %s," % str_list(cmd_flags(c)))
        out.append("        tips: %s," % str_list(tips))
        out.append("        legacy_range: (%d, %d, %d)," % (first, last, step))
        if specs:
            out.append("        keys: &[")
            for ks in c.get("key_specs", []):
                out.append("            %s," % key_spec(ks))
            out.append("        ],")
        else:
            out.append("        keys: &[],")
        out.append("    },")
    out.append("];")
    print("\n".join(out))


main()
