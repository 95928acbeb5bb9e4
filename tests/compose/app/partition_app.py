#!/usr/bin/env python3
"""The partition scenario's app: a client that stays with the master when the master is cut
off from its replica (tests/compose/scenario-partition.sh).

    partition_app.py write    ZADD then WAIT 1 50 to MASTER_HOST in a loop until /out/stop;
                              each write recorded with its time, the WAIT count, or the error
                              (NOREPLICAS when min-replicas-to-write refuses it)
    partition_app.py verify   on REPLICA_HOST (the replica, promoted by the driver): which
                              acknowledged writes are lost, with and without a replica's WAIT
                              ack, relative to the partition's time in /out/partition-at;
                              /out/partition-result.json. Fails only if a write acknowledged by
                              WAIT is lost, a write never acknowledged appears, or a write made
                              while min-replicas-to-write refused is there.
"""

import json
import os
import time

import redis

OUT = os.environ.get("OUT_DIR", "/out")
from apputil import failures, main as run_main


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def client(host):
    r = redis.Redis(host=host, port=6379, decode_responses=True, socket_timeout=2, socket_connect_timeout=2)
    deadline = time.time() + 30
    while True:
        try:
            r.ping()
            return r
        except (redis.ConnectionError, redis.TimeoutError) as e:
            if time.time() > deadline:
                raise SystemExit(f"cannot reach {host}: {e}")
            time.sleep(0.2)


def write():
    r = client(os.environ["MASTER_HOST"])
    log = []  # [i, time, wait count or -1, error kind or ""]
    i = 0
    limit = time.time() + 120
    while not os.path.exists(os.path.join(OUT, "stop")) and time.time() < limit:
        i += 1
        t = time.time()
        try:
            r.zadd("lb:events", {f"e{i}": i})
            n = int(r.execute_command("WAIT", 1, 50))
            log.append([i, t, n, ""])
        except redis.ResponseError as e:
            log.append([i, t, -1, str(e).split()[0]])
        except (redis.ConnectionError, redis.TimeoutError) as e:
            log.append([i, t, -1, "connection"])
        time.sleep(0.01)
    json.dump(log, open(os.path.join(OUT, "partition-writes.json"), "w"))
    print(f"write: {len(log)} writes, {sum(1 for x in log if not x[3])} acknowledged", flush=True)


def verify():
    r = client(os.environ["REPLICA_HOST"])
    log = json.load(open(os.path.join(OUT, "partition-writes.json")))
    cut = float(open(os.path.join(OUT, "partition-at")).read())
    members = set(r.zrange("lb:events", 0, -1))
    acked = [x for x in log if not x[3]]
    refused = [x for x in log if x[3]]
    lost = [x for x in acked if f"e{x[0]}" not in members]
    lost_waited = [x for x in lost if x[2] >= 1]
    check(not lost_waited, f"writes acknowledged by WAIT lost: {[x[0] for x in lost_waited][:10]}")
    phantoms = [x for x in refused if f"e{x[0]}" in members]
    check(not phantoms, f"refused writes present: {[(x[0], x[3]) for x in phantoms][:10]}")
    norep = [x for x in refused if x[3] == "NOREPLICAS"]
    after = [x for x in acked if x[1] >= cut]
    res = {
        "writes": len(log),
        "acked": len(acked),
        "acked_after_cut": len(after),
        "acked_after_cut_waited": sum(1 for x in after if x[2] >= 1),
        "lost": len(lost),
        "lost_waited": len(lost_waited),
        "noreplicas": len(norep),
        "first_noreplicas_s": round(norep[0][1] - cut, 1) if norep else None,
        "last_ack_after_cut_s": round(after[-1][1] - cut, 1) if after else None,
        "other_errors": sorted({x[3] for x in refused if x[3] != "NOREPLICAS"}),
    }
    json.dump(res, open(os.path.join(OUT, "partition-result.json"), "w"), sort_keys=True)
    print(f"verify: {res}", flush=True)


if __name__ == "__main__":
    run_main({"write": write, "verify": verify}, __doc__)
