#!/usr/bin/env python3
"""PUBLISH throughput to 1, 100 and 10,000 subscribers: Podium against redis-server 7.0.

Each server runs pinned to one core (CPU 0 by default, `taskset`); the load generator
(`redis-benchmark ... PUBLISH chan <payload>`) and the subscribers (one process holding every
subscriber socket, reading as fast as it can) share the other core. For each subscriber count
and pipeline depth the script prints the PUBLISH rate of both servers, their ratio, and the
slowest subscriber's lag: the time from the end of the benchmark (the last PUBLISH answered)
until every subscriber has received a final marker message published right after it, i.e.
how far behind the publisher the slowest subscriber was left.

Usage (from the repository root, after `cargo build --release`):
    python3 bench/publish-vs-redis.py [--subscribers 1,100,10000] [--pipelines 1,16]
        [--target 'target/release/podium --port {port} --save ""']
        [--reference 'redis-server --port {port} --save ""'] [--port 23700]
        [--server-cpu 0] [--client-cpu 1] [--deliveries 4000000]

`--deliveries` bounds the messages one run delivers in all (publishes x subscribers): the
number of PUBLISH requests of a run is deliveries / subscribers (at least 200, at most
200,000), so that the subscribers, which are the costliest part to run, take similar time at
every count. Needs redis-server, redis-benchmark and taskset; no Python package.
"""

import argparse
import os
import re
import resource
import selectors
import shlex
import socket
import subprocess
import sys
import time

CHANNEL = b"bench-chan"
END = b"END"


def resp(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def command(port, *args):
    """Send one command on a fresh connection; the raw reply."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(resp(*args))
        data = b""
        while not data.endswith(b"\r\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        return data


def wait_port(port, proc, seconds=30):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            if command(port, "PING").startswith(b"+PONG"):
                return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"server on {port} did not answer")


def subscriber_main(port, count):
    """Child mode: open `count` subscriber sockets, report ready, read until every socket has
    seen the END message, print the monotonic time the last one arrived and the bytes read."""
    sel = selectors.DefaultSelector()
    socks = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(resp("SUBSCRIBE", CHANNEL))
        socks.append(s)
    # Confirmations: ":1\r\n" ends each.
    for s in socks:
        data = b""
        while not data.endswith(b":1\r\n"):
            data += s.recv(4096)
        s.setblocking(False)
    print("ready", flush=True)
    state = {}
    for s in socks:
        sel.register(s, selectors.EVENT_READ)
        state[s.fileno()] = b""
    remaining = count
    total = 0
    last = 0
    marker = b"$%d\r\n%s\r\n" % (len(END), END)
    while remaining:
        for key, _ in sel.select():
            s = key.fileobj
            try:
                chunk = s.recv(1 << 20)
            except BlockingIOError:
                continue
            if not chunk:
                raise SystemExit("a subscriber was disconnected")
            total += len(chunk)
            tail = state[key.fd] + chunk
            if marker in tail:
                last = time.monotonic_ns()
                sel.unregister(s)
                remaining -= 1
            state[key.fd] = tail[-16:]
    print(f"done {last} {total}", flush=True)


def run_one(server_cmd, port, server_cpu, client_cpu, subscribers, pipeline, requests, payload):
    server = subprocess.Popen(
        ["taskset", "-c", str(server_cpu)] + shlex.split(server_cmd.replace("{port}", str(port))),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_port(port, server)
        sub = subprocess.Popen(
            ["taskset", "-c", str(client_cpu), sys.executable, __file__, "--subscriber-mode",
             str(port), str(subscribers)],
            stdout=subprocess.PIPE,
            text=True,
        )
        if sub.stdout.readline().strip() != "ready":
            raise SystemExit("subscribers did not start")
        numsub = command(port, "PUBSUB", "NUMSUB", CHANNEL)
        got = int(numsub.split(b"\r\n")[-2][1:])
        if got != subscribers:
            raise SystemExit(f"PUBSUB NUMSUB says {got}, expected {subscribers}")
        bench = subprocess.run(
            ["taskset", "-c", str(client_cpu), "redis-benchmark", "-p", str(port), "-c", "50",
             "-n", str(requests), "-P", str(pipeline), "-q", "PUBLISH", CHANNEL.decode(), payload],
            capture_output=True,
            text=True,
            check=True,
        )
        ended = time.monotonic_ns()
        receivers = command(port, "PUBLISH", CHANNEL, END)
        line = sub.stdout.readline().split()
        sub.wait(timeout=600)
        rate = float(re.findall(r"([\d.]+) requests per second", bench.stdout)[-1])
        lag_ms = (int(line[1]) - ended) / 1e6
        return rate, lag_ms, int(receivers[1:].strip()), int(line[2])
    finally:
        server.terminate()
        server.wait(timeout=30)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--subscriber-mode":
        subscriber_main(int(sys.argv[2]), int(sys.argv[3]))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default='target/release/podium --port {port} --save "" --maxclients 10100')
    ap.add_argument("--reference", default='redis-server --port {port} --save "" --maxclients 10100')
    ap.add_argument("--subscribers", default="1,100,10000")
    ap.add_argument("--pipelines", default="1,16")
    ap.add_argument("--port", type=int, default=23700)
    ap.add_argument("--server-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    ap.add_argument("--deliveries", type=int, default=4_000_000)
    ap.add_argument("--payload-size", type=int, default=32)
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    payload = "x" * args.payload_size
    print(f"# PUBLISH {args.payload_size}-byte messages, 50 publishing clients; servers on CPU "
          f"{args.server_cpu}, redis-benchmark and subscribers on CPU {args.client_cpu}")
    print("| subscribers | P | publishes | redis ops/s | podium ops/s | ratio | redis lag ms | podium lag ms |")
    print("|---|---|---|---|---|---|---|---|")
    for n in [int(x) for x in args.subscribers.split(",")]:
        requests = max(200, min(200_000, args.deliveries // n))
        for p in [int(x) for x in args.pipelines.split(",")]:
            r = run_one(args.reference, args.port, args.server_cpu, args.client_cpu, n, p, requests, payload)
            t = run_one(args.target, args.port + 1, args.server_cpu, args.client_cpu, n, p, requests, payload)
            for name, (_, _, receivers, _) in (("redis", r), ("podium", t)):
                if receivers != n:
                    raise SystemExit(f"{name}: the END message reached {receivers} of {n}")
            print(f"| {n:,} | {p} | {requests:,} | {r[0]:,.0f} | {t[0]:,.0f} | {t[0] / r[0]:.2f} "
                  f"| {r[1]:.1f} | {t[1]:.1f} |", flush=True)


if __name__ == "__main__":
    main()
