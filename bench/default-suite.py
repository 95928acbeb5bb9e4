#!/usr/bin/env python3
"""redis-benchmark's own default suite against redis-server and a target, side by side.

What a user runs first against a Redis replacement is `redis-benchmark` as it comes: its
default suite (PING_INLINE, PING_MBULK, SET, GET, INCR, LPUSH, RPUSH, LPOP, RPOP, SADD, HSET,
SPOP, ZADD, ZPOPMIN, LPUSH again for the ranges, LRANGE_100/300/500/600, MSET). This runs it line by
line (`-t NAME`, or for the ranges the LRANGE command itself, in the suite's order, with the
suite's unmeasured LPUSH refill before the ranges) against both servers, each round with both servers fresh and each
line run on redis-server then on the target (the order swapped on even rounds). Each server
is pinned to CPU 0 and redis-benchmark to CPU 1, so both servers get one core.

Per line and pipeline depth it prints the median over rounds of:
- ops/s of each server and their ratio (target / redis, > 1: target faster);
- server CPU per request (user + system of all threads, from /proc) and the ratio
  redis / target (> 1: target spends less);
- each server's busy share (CPU seconds over wall seconds of the line): a server below 1.0
  while redis-benchmark waits for it sat idle with work outstanding.
Where redis-benchmark's one thread is the bottleneck for both servers (P=1), ops/s sit near
1.0 whatever the server does and the CPU ratio is the figure the server decides.

  default-suite.py --target 'target/release/podium --port {port} --bind 127.0.0.1'
                   [--rounds 3] [--pipelines 1,16] [--requests 200000] [--clients 50]
                   [--tests set,get,lrange_300] [--redis 'redis-server --port {port} ...']
                   [--tls DIR]

--tls DIR runs every line over TLS: both servers also listen on a TLS port (their port + 100)
with the certificates in DIR (made there with the openssl tool when DIR has none: a CA, a
server and a client pair), and redis-benchmark connects to it with --tls and the client pair.

Needs redis-server, redis-benchmark, redis-cli (Debian: apt-get install redis-server
redis-tools) and taskset. Reuses ../../shared/bench/vs-redis.py's server handling.
"""
import argparse, csv, importlib, os, statistics, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "shared", "bench"))
vs = importlib.import_module("vs-redis")

# redis-benchmark 7.0's default suite, in its order, by the names `-t` takes.
SUITE = ["ping_inline", "ping_mbulk", "set", "get", "incr", "lpush", "rpush", "lpop", "rpop",
         "sadd", "hset", "spop", "zadd", "zpopmin", "lrange_100", "lrange_300", "lrange_500",
         "lrange_600", "mset"]
REDIS = "redis-server --port {port} --bind 127.0.0.1 --save '' --appendonly no"


# The range lines as the commands they send: `-t lrange_300` alone would first refill the list
# (redis-benchmark's "LPUSH (needed to benchmark LRANGE)") inside the measured run.
RANGES = {"lrange_100": "lrange mylist 0 99", "lrange_300": "lrange mylist 0 299",
          "lrange_500": "lrange mylist 0 499", "lrange_600": "lrange mylist 0 599"}


# Lines beyond the default suite, by name (`--tests zincrby`): a leaderboard's write, over
# 100k members (`-r`).
EXTRA = {"zincrby": "zincrby lb 1 member:__rand_int__"}

TLS_PORT_OFFSET = 100


def make_certs(d):
    """A CA, a server pair and a client pair in `d` (kept if already there)."""
    if os.path.exists(os.path.join(d, "client.key")):
        return
    os.makedirs(d, exist_ok=True)
    def ossl(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)
    ossl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
         "-days", "30", "-subj", "/CN=bench-ca")
    for name in ("server", "client"):
        ossl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
             "-subj", f"/CN=bench-{name}")
        ossl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", f"{name}.crt", "-days", "30")


def tls_server_args(d):
    d = os.path.abspath(d)
    return (f" --tls-port {{tlsport}} --tls-cert-file {d}/server.crt --tls-key-file {d}/server.key"
            f" --tls-ca-cert-file {d}/ca.crt")


TLS_DIR = None


def run_line(srv, test, pipeline, requests, clients):
    """One redis-benchmark line; returns (ops/s, cpu us/request, busy share) or None."""
    port = srv.port + TLS_PORT_OFFSET if TLS_DIR else srv.port
    argv = ["taskset", "-c", "1", "redis-benchmark", "-p", str(port), "-c", str(clients),
            "-n", str(requests), "-P", str(pipeline), "--csv"]
    if TLS_DIR:
        d = os.path.abspath(TLS_DIR)
        argv += ["--tls", "--cacert", f"{d}/ca.crt", "--cert", f"{d}/client.crt", "--key", f"{d}/client.key"]
    if test in RANGES:
        argv += RANGES[test].split()
    elif test in EXTRA:
        argv += ["-r", "100000"] + EXTRA[test].split()
    else:
        argv += ["-t", test]
    c0, t0 = vs.cpu_s(srv.proc.pid), time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    c1, t1 = vs.cpu_s(srv.proc.pid), time.monotonic()
    rows = [l for l in r.stdout.splitlines() if l.startswith('"') and not l.startswith('"test"')]
    if r.returncode != 0 or not rows:
        print(f"  {srv.name} {test}: failed: {(r.stdout + r.stderr).strip()[-200:]}", file=sys.stderr)
        return None
    rps = float(next(csv.reader([rows[-1]]))[1])
    # The line's wall time as the server saw it is requests / rps; the process timing above
    # also covers redis-benchmark's start and its connections, so it is the upper bound.
    busy_wall = requests / rps if rps > 0 else t1 - t0
    cpu = c1 - c0
    return rps, cpu * 1e6 / requests, min(cpu / busy_wall, 9.99) if busy_wall > 0 else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", required=True, help="command with {port}")
    ap.add_argument("--redis", default=REDIS, help="the reference's command with {port}")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pipelines", default="1,16")
    ap.add_argument("--requests", type=int, default=200_000)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--tests", default=",".join(SUITE))
    ap.add_argument("--port", type=int, default=24800)
    ap.add_argument("--tls", metavar="DIR", help="run over TLS with the certificates in DIR")
    a = ap.parse_args()
    global TLS_DIR
    if a.tls:
        make_certs(a.tls)
        TLS_DIR = a.tls
        a.redis += tls_server_args(a.tls)
        a.target += tls_server_args(a.tls)
    tests = a.tests.split(",")
    pipelines = [int(p) for p in a.pipelines.split(",")]
    # results[(pipeline, test)][name] = list of (rps, cpu, busy)
    results = {}
    for rnd in range(1, a.rounds + 1):
        for p in pipelines:
            def cmd(c, port):
                return c.replace("{tlsport}", str(port + TLS_PORT_OFFSET))
            servers = [vs.Server("redis", cmd(a.redis, a.port), a.port, True),
                       vs.Server("target", cmd(a.target, a.port + 1), a.port + 1, True)]
            try:
                order = servers if rnd % 2 else servers[::-1]
                filled = False
                for test in tests:
                    if test in RANGES and not filled:
                        # The suite's refill before its range lines (LPOP and RPOP emptied it).
                        for srv in order:
                            run_line(srv, "lpush", p, a.requests, a.clients)
                        filled = True
                    for srv in order:
                        got = run_line(srv, test, p, a.requests, a.clients)
                        if got:
                            results.setdefault((p, test), {}).setdefault(srv.name, []).append(got)
            finally:
                for s in servers:
                    s.stop()
            print(f"round {rnd} P={p} done", file=sys.stderr)
    print(f"redis-benchmark default suite{' over TLS' if a.tls else ''}, -n {a.requests} -c {a.clients}, "
          f"one core per server, median of {a.rounds} rounds")
    print(f"{'P':>3} {'line':<12} {'redis ops/s':>12} {'target ops/s':>13} {'ratio':>6} "
          f"{'redis us':>9} {'target us':>10} {'cpu ratio':>9} {'busy r/t':>10}")
    for p in pipelines:
        for test in tests:
            got = results.get((p, test), {})
            if "redis" not in got or "target" not in got:
                print(f"{p:>3} {test:<12} (failed)")
                continue
            med = {n: [statistics.median(x[i] for x in got[n]) for i in range(3)] for n in got}
            r, t = med["redis"], med["target"]
            print(f"{p:>3} {test:<12} {r[0]:>12.0f} {t[0]:>13.0f} {t[0] / r[0]:>6.2f} {r[1]:>9.2f} "
                  f"{t[1]:>10.2f} {r[1] / t[1] if t[1] else 0:>9.2f} {r[2]:>5.2f}/{t[2]:.2f}")


if __name__ == "__main__":
    main()
