#!/usr/bin/env python3
"""Who is the bottleneck: the server's and the load generator's CPU per request, side by side.

vs-redis.py's ops/s ratio is decided by whichever side saturates first. This runs the same
workloads the same way (each server pinned to CPU 0 and filled with vs-redis.py's 1M-member
set, redis-benchmark pinned to CPU 1, 50 clients) and prints, per run, the server's CPU time
per request and how busy it was, and redis-benchmark's user and system time per request and
how busy it was. A load generator near 100% busy is the bottleneck: its ops/s then follow its
own cost per request, which the server changes only through what the kernel charges the
sender (waking a server that went idle is done inside the client's `sendto`).

  loadgen.py --server 'podium=target/release/podium --port {port} --save ""'
             --server 'valkey=<valkey-server> --port {port} --save "" --appendonly no'
             [--workloads around] [--pipeline 16] [--requests N] [--rounds 2] [--port 24800]

Workloads are vs-redis.py's (imported from it).
"""
import argparse, os, resource, shlex, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "shared", "bench"))
import importlib

vs = importlib.import_module("vs-redis")
TICK = os.sysconf("SC_CLK_TCK")


def server_cpu_s(pid):
    """User + system CPU seconds of every thread of `pid`."""
    total = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{t}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / TICK


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", action="append", required=True, help="NAME=command with {port}")
    ap.add_argument("--workloads", default="around")
    ap.add_argument("--pipeline", type=int, default=16)
    ap.add_argument("--members", type=int, default=1_000_000)
    ap.add_argument("--requests", type=int, default=0, help="default: 2M at P>1, 200k at P=1")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--port", type=int, default=24800)
    a = ap.parse_args()
    requests = a.requests or (2_000_000 if a.pipeline > 1 else 200_000)
    with tempfile.TemporaryDirectory() as tmp:
        proto = os.path.join(tmp, "fill.proto")
        vs.write_proto(proto, a.members)
        for spec in a.server:
            name, cmd = spec.split("=", 1)
            argv = ["taskset", "-c", "0"] + shlex.split(cmd.replace("{port}", str(a.port)))
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                if not vs.wait_port(a.port):
                    sys.exit(f"loadgen: {name} did not start on port {a.port}")
                vs.fill(a.port, a.members, proto)
                for w in a.workloads.split(","):
                    for _ in range(a.rounds):
                        bench = ["taskset", "-c", "1", "redis-benchmark", "-p", str(a.port), "-c", "50",
                                 "-n", str(requests), "-r", str(max(a.members, 100000)), "-P", str(a.pipeline),
                                 "-q"] + shlex.split(vs.WORKLOADS[w])
                        s0 = server_cpu_s(proc.pid)
                        c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                        t0 = time.time()
                        subprocess.run(bench, capture_output=True, check=True)
                        elapsed = time.time() - t0
                        c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                        s1 = server_cpu_s(proc.pid)
                        cu = c1.ru_utime - c0.ru_utime
                        cs = c1.ru_stime - c0.ru_stime
                        per = 1e6 / requests
                        print(f"{name:8} {w:9} P={a.pipeline:<3} server {(s1 - s0) * per:.3f} us/req "
                              f"(busy {(s1 - s0) / elapsed:4.0%})  load generator user {cu * per:.3f} "
                              f"sys {cs * per:.3f} us/req (busy {(cu + cs) / elapsed:4.0%})  "
                              f"{requests / elapsed:,.0f} ops/s", flush=True)
            finally:
                proc.kill()
                proc.wait()


if __name__ == "__main__":
    main()
