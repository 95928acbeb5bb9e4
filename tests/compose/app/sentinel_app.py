#!/usr/bin/env python3
"""The Sentinel scenario's app: it finds the master through the sentinels (redis-py Sentinel).

    sentinel_app.py write    ZADD + HSET in MULTI/EXEC, then WAIT 1 100, in a loop until
                             /out/stop exists; the driver kills the master meanwhile. Every
                             write is recorded as acknowledged (with the WAIT count) or
                             unanswered in /out/sentinel-writes.json, with the app's downtime.
    sentinel_app.py verify   through the sentinels again: every write acknowledged with
                             WAIT >= 1 is on the new master, none is half applied, none was
                             invented; how many acknowledged without a replica's ack were lost
                             is counted (asynchronous replication loses those on failover,
                             for redis-server too) and written to /out/sentinel-verify.json.
"""

import json
import os
import time

import redis
from redis.sentinel import Sentinel

OUT = os.environ.get("OUT_DIR", "/out")
SENTINELS = [(h, int(p)) for h, p in (s.split(":") for s in os.environ["SENTINELS"].split(","))]

from apputil import failures, main as run_main, write_event


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def master():
    s = Sentinel(SENTINELS, socket_timeout=0.5, socket_connect_timeout=0.5)
    return s, s.master_for("mymaster", socket_timeout=1, socket_connect_timeout=1, decode_responses=True)


def write():
    s, m = master()
    deadline = time.time() + 60
    while True:
        try:
            m.ping()
            break
        except (redis.ConnectionError, redis.TimeoutError) as e:
            if time.time() > deadline:
                raise SystemExit(f"no master through the sentinels: {e}")
            time.sleep(0.2)
    acked, unanswered = [], []
    first_error = None
    last_ok_before = first_ok_after = None
    masters_seen = []
    need_addr = True
    i = 0
    limit = time.time() + 120
    while not os.path.exists(os.path.join(OUT, "stop")) and time.time() < limit:
        i += 1
        try:
            write_event(m, i)
            now = time.time()
            try:
                replicas = int(m.execute_command("WAIT", 1, 100))
            except (redis.ConnectionError, redis.TimeoutError):
                replicas = -1
            acked.append([i, replicas])
            if need_addr or i % 50 == 0:
                addr = list(s.discover_master("mymaster"))
                if not masters_seen or masters_seen[-1] != addr:
                    masters_seen.append(addr)
                need_addr = False
            if first_error is None:
                last_ok_before = now
            elif first_ok_after is None:
                first_ok_after = now
        except (redis.ConnectionError, redis.TimeoutError, redis.ReadOnlyError, redis.ResponseError) as e:
            if first_error is None:
                first_error = time.time()
                print(f"write: first error at e{i}: {type(e).__name__}: {e}", flush=True)
            unanswered.append(i)
            need_addr = True
            time.sleep(0.1)
        time.sleep(0.01)
    downtime = (first_ok_after - last_ok_before) if (first_ok_after and last_ok_before) else None
    with open(os.path.join(OUT, "sentinel-writes.json"), "w") as f:
        json.dump({"acked": acked, "unanswered": unanswered, "downtime": downtime,
                   "masters_seen": masters_seen}, f)
    print(f"write: {len(acked)} acknowledged ({sum(1 for _, r in acked if r >= 1)} with WAIT >= 1), "
          f"{len(unanswered)} unanswered, app downtime {downtime if downtime is None else round(downtime, 2)} s, "
          f"masters {masters_seen}", flush=True)
    check(first_error is not None, "the app saw no error: the master was not killed during the run")
    check(first_ok_after is not None, "the app wrote nothing after the failover")
    check(len(masters_seen) >= 2, f"the app never moved to a new master: {masters_seen}")


def verify():
    _, m = master()
    st = json.load(open(os.path.join(OUT, "sentinel-writes.json")))
    members = dict(m.zrange("lb:events", 0, -1, withscores=True))
    fields = m.hgetall("events")
    lost_waited = [i for i, r in st["acked"] if r >= 1 and f"e{i}" not in members]
    lost_async = [i for i, r in st["acked"] if r < 1 and f"e{i}" not in members]
    check(not lost_waited, f"writes acknowledged by WAIT and lost: {lost_waited[:10]}")
    for name in members:
        check((name in fields) == (name in members), f"{name} half applied")
    for name in fields:
        check(name in members, f"{name} half applied")
    known = {f"e{i}" for i, _ in st["acked"]} | {f"e{i}" for i in st["unanswered"]}
    phantoms = sorted(set(members) - known)
    check(not phantoms, f"members never written: {phantoms[:5]}")
    result = {"acked": len(st["acked"]), "acked_waited": sum(1 for _, r in st["acked"] if r >= 1),
              "lost_waited": len(lost_waited), "lost_async": len(lost_async),
              "unanswered": len(st["unanswered"]),
              "unanswered_applied": sum(1 for i in st["unanswered"] if f"e{i}" in members),
              "downtime": st["downtime"]}
    with open(os.path.join(OUT, "sentinel-verify.json"), "w") as f:
        json.dump(result, f)
    print(f"verify: {result}", flush=True)


if __name__ == "__main__":
    run_main({"write": write, "verify": verify}, __doc__)
