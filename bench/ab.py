#!/usr/bin/env python3
"""A/B of two builds' server CPU per request, with each round's processes fresh and their order
swapped: the fair way to compare two binaries on one machine.

Two servers pinned to the same core and measured one after the other differ by more than
most changes are worth from the process alone: in one run here (2026-11-27) the same binary
spent 12% less CPU per GET when started second on the other port, in both orders. So each
round starts A and B anew (A first on odd rounds, B first on even ones, ports swapped too),
fills `lb` as vs-redis.py does (and, for get, sets the keys GET reads), runs each workload on
each server with redis-benchmark pinned to CPU 1, and reads each server's CPU time from /proc.
Prints every round, then the mean per build and the ratio A/B (> 1: B spends less).

  ab.py --a 'old=target/old/podium --port {port}' --b 'new=target/release/podium --port {port}'
        [--rounds 4] [--workloads get,around,top100] [--pipeline 16] [--members 1000000]
        [--requests 2000000] [--port 24700]

Workloads are vs-redis.py's (imported from it).
"""
import argparse, os, statistics, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "shared", "bench"))
import importlib

vs = importlib.import_module("vs-redis")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="NAME=command with {port}")
    ap.add_argument("--b", required=True, help="NAME=command with {port}")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--workloads", default="get,around")
    ap.add_argument("--pipeline", type=int, default=16)
    ap.add_argument("--members", type=int, default=1_000_000)
    ap.add_argument("--requests", type=int, default=2_000_000)
    ap.add_argument("--port", type=int, default=24700)
    a = ap.parse_args()
    builds = [tuple(s.split("=", 1)) for s in (a.a, a.b)]
    workloads = a.workloads.split(",")
    proto = tempfile.NamedTemporaryFile(prefix="ab-fill-", delete=False).name
    vs.write_proto(proto, a.members)
    cpu = {(name, w): [] for name, _ in builds for w in workloads}
    try:
        for r in range(a.rounds):
            order = builds if r % 2 == 0 else builds[::-1]
            servers = []
            try:
                for i, (name, cmd) in enumerate(order):
                    s = vs.Server(name, cmd, a.port + i, True)
                    servers.append(s)
                    vs.fill(s.port, a.members, proto)
                    if "get" in workloads:
                        vs.bench(s.port, "set", 16, a.members, 500_000, 50, True)
                for w in workloads:
                    for s in servers:
                        rps, p99, us = vs.bench(s.port, w, a.pipeline, a.members, a.requests, 50, True, s.proc.pid)
                        if rps is None:
                            sys.exit(f"ab: {s.name} {w}: {p99}")
                        cpu[(s.name, w)].append(us)
                        print(f"round {r + 1} {w:8s} {s.name:10s} {us:7.3f} us/request  {rps:12,.0f}/s", flush=True)
            finally:
                for s in servers:
                    s.stop()
        (na, _), (nb, _) = builds
        for w in workloads:
            ma, mb = statistics.mean(cpu[(na, w)]), statistics.mean(cpu[(nb, w)])
            print(f"MEAN {w:8s} {na} {ma:.3f}  {nb} {mb:.3f}  A/B {ma / mb:.3f}")
    finally:
        os.unlink(proto)


if __name__ == "__main__":
    main()
