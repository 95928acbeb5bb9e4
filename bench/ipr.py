#!/usr/bin/env python3
"""Instructions per request of a server process, a load-independent cost measure.

Starts each server given under valgrind's callgrind with instrumentation off (pinned to CPU 0,
as vs-redis.py pins servers), fills one sorted set `lb` with N members exactly as vs-redis.py
does, then for each workload and pipeline depth switches instrumentation on
(`callgrind_control -i on`), runs redis-benchmark (pinned to CPU 1), dumps the counts and prints
instructions per request (all the server's threads, user space only: system calls count as
the instructions that issue them). Wall-clock rates move with the machine's load; instruction
counts hardly do, so this compares builds (or servers) on a busy machine. (Hardware counters,
`perf stat -e instructions`, are not available on this VM.) Each dump is kept in --keep DIR
(callgrind_annotate reads it: where the instructions go). --cache-sim adds simulated
last-level cache misses per request (slower).

  ipr.py --server 'NAME=target/release/podium --port {port}' [--server 'old=... --port {port}']
         [--members 1000000] [--workloads around,top100] [--pipelines 1,16] [--requests 20000]
         [--rounds 1] [--port 24500] [--keep DIR] [--cache-sim]

Workloads are vs-redis.py's (imported from it). Each server gets its own port (--port, +1, ...).
"""
import argparse, os, shlex, shutil, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "shared", "bench"))
sys.path.insert(0, HERE)
import importlib

vs = importlib.import_module("vs-redis")


def callgrind_bench(s, workload, pipeline, members, requests, clients, keep, cache_sim):
    pid = s.proc.pid
    subprocess.run(["callgrind_control", "-z", str(pid)], capture_output=True)
    subprocess.run(["callgrind_control", "-i", "on", str(pid)], capture_output=True)
    argv = ["taskset", "-c", "1", "redis-benchmark", "-p", str(s.port), "-c", str(clients), "-n", str(requests),
            "-r", str(max(members, 100000)), "-P", str(pipeline), "--csv"] + shlex.split(vs.WORKLOADS[workload])
    r = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
    subprocess.run(["callgrind_control", "-i", "off", str(pid)], capture_output=True)
    before = set(os.listdir(s.cgdir))
    subprocess.run(["callgrind_control", "-d", f"{workload}-P{pipeline}", str(pid)], capture_output=True)
    time.sleep(0.5)
    # Only the server's own dumps: a forked child (a BGSAVE from the default save points) leaves
    # its own file, named by its pid.
    new = sorted(f for f in set(os.listdir(s.cgdir)) - before if f.startswith(f"callgrind.out.{pid}."))
    totals = {}
    for f in new:
        path = os.path.join(s.cgdir, f)
        events = None
        for line in open(path, errors="replace"):
            if line.startswith("events:"):
                events = line.split()[1:]
            elif line.startswith("totals:"):
                for e, v in zip(events or ["Ir"], line.split()[1:]):
                    totals[e] = totals.get(e, 0) + int(v)
                break
        if keep:
            os.replace(path, os.path.join(keep, f"{s.name}-{workload}-P{pipeline}-{f}"))
    if "rror" in r.stdout + r.stderr:
        print(f"# {s.name} {workload}: redis-benchmark reported errors: {(r.stdout + r.stderr)[-200:]}")
    ir = totals.get("Ir", 0) / requests
    miss = (totals.get("DLmr", 0) + totals.get("DLmw", 0) + totals.get("ILmr", 0)) / requests if cache_sim else None
    return ir, miss


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", action="append", required=True, help="NAME=command with {port}")
    ap.add_argument("--members", type=int, default=1_000_000)
    ap.add_argument("--workloads", default="around")
    ap.add_argument("--pipelines", default="16")
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--keep", help="directory to keep the callgrind dumps in")
    ap.add_argument("--cache-sim", action="store_true")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--port", type=int, default=24500)
    a = ap.parse_args()
    proto = tempfile.NamedTemporaryFile(prefix="ipr-fill-", delete=False).name
    vs.write_proto(proto, a.members)
    servers = []
    try:
        for i, spec in enumerate(a.server):
            name, cmd = spec.split("=", 1)
            cgdir = tempfile.mkdtemp(prefix=f"ipr-{name}-")
            cache = "--cache-sim=yes" if a.cache_sim else "--cache-sim=no"
            vg = (f"valgrind --tool=callgrind --instr-atstart=no {cache} "
                  f"--callgrind-out-file={cgdir}/callgrind.out.%p ")
            s = vs.Server(name, vg + cmd, a.port + i, True)
            s.cgdir = cgdir
            servers.append(s)
            if a.members:
                r0 = vs.rss(s.proc.pid)
                vs.fill(s.port, a.members, proto)
                r1 = vs.rss(s.proc.pid)
                print(f"# {name}: RSS {(r1 - r0) / a.members:.1f} B/member")
            if "evalsha" in a.workloads.split(","):
                # EVALSHA runs the script vs-redis.py loads on each server first
                subprocess.run(["redis-cli", "-p", str(s.port), "script", "load", vs.SCRIPT],
                               capture_output=True, check=True)
        if a.keep:
            os.makedirs(a.keep, exist_ok=True)
        print(f"{'server':8s} {'workload':9s} {'P':>3s} {'instr/req':>10s} {'LL miss/req':>11s}")
        for w in a.workloads.split(","):
            for p in [int(x) for x in a.pipelines.split(",")]:
                for _ in range(a.rounds):
                    for s in servers:
                        ins, miss = callgrind_bench(s, w, p, a.members, a.requests, a.clients, a.keep, a.cache_sim)
                        ms = f"{miss:11.2f}" if miss is not None else f"{'-':>11s}"
                        print(f"{s.name:8s} {w:9s} {p:3d} {ins:10.0f} {ms}", flush=True)
    finally:
        for s in servers:
            s.stop()
            shutil.rmtree(getattr(s, "cgdir", ""), ignore_errors=True)
        os.unlink(proto)


if __name__ == "__main__":
    main()
