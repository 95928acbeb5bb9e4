#!/usr/bin/env python3
"""The cluster partition scenario's app (tests/compose/scenario-cluster-partition.sh): a client
of a six-node cluster whose master is cut off from the other nodes, but not from this client.

    cluster_partition_app.py target   the master that serves slot 0 and its replica, printed as
                                      "MASTER_IP REPLICA_IP" (CLUSTER NODES of the first node)
    cluster_partition_app.py write    until /out/stop: ZADD to boards on every shard, each write
                                      sent to the slot's owner as last seen in CLUSTER SLOTS and
                                      followed by WAIT 1 100 on the same connection; the owner is
                                      looked up again after any error; every write is recorded
                                      with its time, the node it went to, WAIT's count or error
    cluster_partition_app.py watch OLD NEW
                                      every 20 ms, from the cut (/out/partition-at) on: when NEW
                                      says it is a master (/out/promoted), when OLD says
                                      cluster_state:fail, and after /out/healed, when OLD is a
                                      replica of NEW with its link up (/out/rejoined)
    cluster_partition_app.py verify OLD NEW
                                      reads every board from its owner; /out/cluster-result.json.
                                      Fails if a write WAIT acknowledged is lost, a write refused
                                      with a cluster error is present, or OLD never said
                                      cluster_state:fail or took a write after it said so

Nodes come from NODES (their addresses, port 6379).
"""

import json
import os
import time

import redis

from apputil import failures, main as run_main

OUT = os.environ.get("OUT_DIR", "/out")
NODES = os.environ.get("NODES", "").split()
# Board keys: enough hash tags that every shard serves some of them.
BOARDS = [f"lb:{{b{i}}}" for i in range(24)]
# Replies that say the write was not applied.
REFUSALS = {"MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN", "READONLY", "MASTERDOWN"}


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


_conns = {}


def conn(addr):
    c = _conns.get(addr)
    if c is None:
        c = redis.Redis(host=addr, port=6379, decode_responses=True, socket_timeout=1, socket_connect_timeout=1)
        _conns[addr] = c
    return c


def drop(addr):
    c = _conns.pop(addr, None)
    if c is not None:
        c.close()


def error_kind(e):
    """The reply's error code: redis-py turns the cluster codes into classes and strips them."""
    by_class = {
        "MovedError": "MOVED",
        "AskError": "ASK",
        "TryAgainError": "TRYAGAIN",
        "ClusterDownError": "CLUSTERDOWN",
        "ReadOnlyError": "READONLY",
        "MasterDownError": "MASTERDOWN",
    }
    kind = by_class.get(type(e).__name__)
    if kind:
        return kind
    words = str(e).split()
    return words[0] if words else type(e).__name__


def cluster_state(addr):
    """CLUSTER INFO's cluster_state (ok or fail)."""
    for line in str(conn(addr).execute_command("CLUSTER", "INFO")).splitlines():
        if line.startswith("cluster_state:"):
            return line.split(":", 1)[1].strip()
    return None


def slot_owners(addr):
    """slot range -> master address, from CLUSTER SLOTS (redis-py may or may not parse it)."""
    raw = conn(addr).execute_command("CLUSTER", "SLOTS")
    ranges = []
    if isinstance(raw, dict):
        for (start, end), v in raw.items():
            ranges.append((int(start), int(end), v["primary"][0]))
    else:
        for entry in raw:
            ranges.append((int(entry[0]), int(entry[1]), entry[2][0]))
    return ranges


class Router:
    """Which node serves each board, as the cluster last told us."""

    def __init__(self):
        self.slot = {}
        self.owner = {}
        self.turn = 0
        first = NODES[0]
        for k in BOARDS:
            self.slot[k] = int(conn(first).execute_command("CLUSTER", "KEYSLOT", k))
        self.refresh()

    def refresh(self):
        """Ask the nodes in turn (a different one first each time) for the slots, preferring one
        that says cluster_state:ok; keep the old map if none answers."""
        order = NODES[self.turn % len(NODES):] + NODES[: self.turn % len(NODES)]
        self.turn += 1
        fallback = None
        for addr in order:
            try:
                state = cluster_state(addr)
                ranges = slot_owners(addr)
            except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
                drop(addr)
                continue
            if state == "ok":
                self.apply(ranges)
                return
            fallback = fallback or ranges
        if fallback:
            self.apply(fallback)

    def apply(self, ranges):
        for k, s in self.slot.items():
            for start, end, addr in ranges:
                if start <= s <= end:
                    self.owner[k] = addr


def write():
    router = Router()
    log = []  # [i, time, key, node, WAIT count (-1: no answer), error kind or ""]
    i = 0
    limit = time.time() + 180
    while not os.path.exists(os.path.join(OUT, "stop")) and time.time() < limit:
        i += 1
        key = BOARDS[i % len(BOARDS)]
        addr = router.owner.get(key)
        t = time.time()
        try:
            conn(addr).zadd(key, {f"e{i}": i})
        except redis.ResponseError as e:
            log.append([i, t, key, addr, -1, error_kind(e)])
            router.refresh()
            continue
        except (redis.ConnectionError, redis.TimeoutError):
            log.append([i, t, key, addr, -1, "connection"])
            drop(addr)
            router.refresh()
            continue
        try:
            n = int(conn(addr).execute_command("WAIT", 1, 100))
        except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
            n = -1
            drop(addr)
        log.append([i, t, key, addr, n, ""])
        time.sleep(0.005)
    json.dump(log, open(os.path.join(OUT, "cluster-writes.json"), "w"))
    print(f"write: {len(log)} writes, {sum(1 for x in log if not x[5])} acknowledged", flush=True)


def target():
    """The master of slot 0 and its replica, from CLUSTER NODES."""
    text = conn(NODES[0]).execute_command("CLUSTER", "NODES")
    nodes = [line.split() for line in str(text).splitlines() if line.strip()]
    master = None
    for n in nodes:
        if "master" in n[2].split(","):
            for r in n[8:]:
                lo, _, hi = r.partition("-")
                if lo.isdigit() and int(lo) == 0:
                    master = n
    if master is None:
        raise SystemExit("no master serves slot 0")
    replicas = [n for n in nodes if n[3] == master[0]]
    if not replicas:
        raise SystemExit("the master of slot 0 has no replica")
    host = lambda n: n[1].split(":")[0]  # noqa: E731 (ip:port@bus[,hostname])
    print(host(master), host(replicas[0]))


def wait_for_file(name, limit):
    deadline = time.time() + limit
    path = os.path.join(OUT, name)
    while not os.path.exists(path):
        if time.time() > deadline:
            raise SystemExit(f"watch: no {name} after {limit} s")
        time.sleep(0.02)
    return float(open(path).read() or 0)


def watch(old, new):
    cut = wait_for_file("partition-at", 120)
    times = {}
    deadline = cut + 60
    while "promoted_s" not in times or "old_refuses_s" not in times:
        now = time.time()
        if now > deadline:
            print(f"watch: after 60 s: {times}", flush=True)
            break
        try:
            if "promoted_s" not in times and conn(new).execute_command("ROLE")[0] == "master":
                times["promoted_s"] = round(time.time() - cut, 2)
                open(os.path.join(OUT, "promoted"), "w").write(str(time.time()))
        except (redis.ConnectionError, redis.TimeoutError):
            drop(new)
        try:
            if "old_refuses_s" not in times and cluster_state(old) == "fail":
                times["old_refuses_s"] = round(time.time() - cut, 2)
        except (redis.ConnectionError, redis.TimeoutError):
            drop(old)
        time.sleep(0.02)
    healed = wait_for_file("healed", 120)
    deadline = healed + 60
    while True:
        try:
            role = conn(old).execute_command("ROLE")
            if role[0] == "slave" and role[1] == new and role[3] == "connected":
                times["rejoined_after_heal_s"] = round(time.time() - healed, 2)
                break
        except (redis.ConnectionError, redis.TimeoutError):
            drop(old)
        if time.time() > deadline:
            print(f"watch: the old master did not rejoin as a replica in 60 s: {role}", flush=True)
            break
        time.sleep(0.02)
    json.dump(times, open(os.path.join(OUT, "cluster-times.json"), "w"), sort_keys=True)
    if "rejoined_after_heal_s" in times:
        open(os.path.join(OUT, "rejoined"), "w").write(str(time.time()))
    print(f"watch: {times}", flush=True)


def verify(old, new):
    router = Router()
    log = json.load(open(os.path.join(OUT, "cluster-writes.json")))
    cut = float(open(os.path.join(OUT, "partition-at")).read())
    times = json.load(open(os.path.join(OUT, "cluster-times.json")))
    members = set()
    for k in BOARDS:
        members.update(conn(router.owner[k]).zrange(k, 0, -1))
    acked = [x for x in log if not x[5]]
    lost = [x for x in acked if f"e{x[0]}" not in members]
    lost_waited = [x for x in lost if x[4] >= 1]
    check(not lost_waited, f"writes acknowledged by WAIT lost: {[x[0] for x in lost_waited][:10]}")
    refused = [x for x in log if x[5] in REFUSALS]
    phantoms = [x for x in refused if f"e{x[0]}" in members]
    check(not phantoms, f"refused writes present: {[(x[0], x[5]) for x in phantoms][:10]}")
    old_after = [x for x in acked if x[3] == old and x[1] >= cut]
    old_down = [x for x in log if x[3] == old and x[5] == "CLUSTERDOWN" and x[1] >= cut]
    # Once the cut-off master says cluster_state:fail it must take no write. (Whether this
    # client meets its CLUSTERDOWN depends on when it learns of the promotion: after errors
    # from the majority's masters, down until the failover covers the slots again, it may
    # look the owner up anew before the old master turns, and never write to it again.)
    refuses_at = times.get("old_refuses_s")
    check(refuses_at is not None, "the cut-off master never said cluster_state:fail")
    if refuses_at is not None and old_after:
        last = old_after[-1][1] - cut
        check(last <= refuses_at, f"the cut-off master acknowledged a write at {last:.2f} s, after it said cluster_state:fail at {refuses_at} s")
    on_new = [x for x in acked if x[3] == new]
    res = {
        "writes": len(log),
        "acked": len(acked),
        "acked_waited": sum(1 for x in acked if x[4] >= 1),
        "lost": len(lost),
        "lost_waited": len(lost_waited),
        "lost_all_on_old_master": all(x[3] == old for x in lost),
        "acked_by_old_master_after_cut": len(old_after),
        "last_ack_by_old_master_s": round(old_after[-1][1] - cut, 2) if old_after else None,
        "first_clusterdown_s": round(old_down[0][1] - cut, 2) if old_down else None,
        "first_ack_by_new_master_s": round(on_new[0][1] - cut, 2) if on_new else None,
        "refused": {k: sum(1 for x in refused if x[5] == k) for k in sorted({x[5] for x in refused})},
        "other_errors": sorted({x[5] for x in log if x[5] and x[5] not in REFUSALS}),
    }
    res.update(times)
    check(res["lost_all_on_old_master"], "an acknowledged write lost on a node that was not cut off")
    json.dump(res, open(os.path.join(OUT, "cluster-result.json"), "w"), sort_keys=True)
    print(f"verify: {res}", flush=True)


if __name__ == "__main__":
    run_main({"target": target, "write": write, "watch": watch, "verify": verify}, __doc__)
