#!/usr/bin/env python3
"""SAVE and BGSAVE of a large sorted set: Podium against redis-server 7.0.

For each server (pinned to CPU 0 with `taskset`, in a fresh temporary directory): fill one
sorted set with `--members` members (ZADD batches of 1,000 through `redis-cli --pipe`), then
- SAVE: its wall time and the file's size;
- BGSAVE while a client on CPU 1 keeps running ZINCRBY on random members: the time until
  `rdb_bgsave_in_progress` is 0 again, INFO's `latest_fork_usec` and `rdb_last_cow_size` (the
  copy-on-write memory the save cost), the peak of server + child RSS above the server's RSS
  before the BGSAVE (the extra memory), and the client's p50/p99/max round trip during the
  BGSAVE against the same client's figures for as long again without one.

Usage (repository root, after `cargo build --release`; 10M members need ~1.2 GB for
redis-server and ~0.5 GB for Podium, plus the copy-on-write):
    python3 bench/snapshot-vs-redis.py --members 10000000
        [--target 'target/release/podium --port {port} --save ""']
        [--reference 'redis-server --port {port} --save ""'] [--port 23800]
"""

import argparse
import os
import random
import shlex
import socket
import statistics
import subprocess
import tempfile
import threading
import time


def resp(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=600)
        self.buf = b""

    def line(self):
        while b"\r\n" not in self.buf:
            chunk = self.s.recv(1 << 16)
            if not chunk:
                raise SystemExit("connection closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def reply(self):
        line = self.line()
        if line[:1] == b"$":
            n = int(line[1:])
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self.buf += self.s.recv(1 << 16)
            data, self.buf = self.buf[:n], self.buf[n + 2:]
            return data
        if line[:1] == b"-":
            raise SystemExit(line.decode())
        return line[1:]

    def cmd(self, *args):
        self.s.sendall(resp(*args))
        return self.reply()


def info(c, field):
    for line in c.cmd("INFO", "all").decode().split("\r\n"):
        if line.startswith(field + ":"):
            return line.split(":", 1)[1]
    return None


def rss_of_tree(pid):
    """RSS bytes of `pid` and its children (the BGSAVE child)."""
    total = 0
    pids = [pid]
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            pids += [int(p) for p in f.read().split()]
    except OSError:
        pass
    for p in pids:
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            pass
    return total


def fill(port, members):
    proto = bytearray()
    for start in range(0, members, 1000):
        args = [b"ZADD", b"lb"]
        for i in range(start, min(start + 1000, members)):
            args += [str(random.randrange(10**9)).encode(), b"m:%d" % i]
        proto += resp(*args)
    subprocess.run(["taskset", "-c", "1", "redis-cli", "-p", str(port), "--pipe"],
                   input=bytes(proto), check=True, stdout=subprocess.DEVNULL)


def probe(port, members, stop, out):
    c = Conn(port)
    while not stop.is_set():
        t = time.perf_counter()
        c.cmd("ZINCRBY", "lb", 1, "m:%d" % random.randrange(members))
        out.append(time.perf_counter() - t)


def figures(lat):
    lat = sorted(lat)
    if not lat:
        return "n/a"
    p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000
    return f"p50 {p(0.5):.3f} / p99 {p(0.99):.3f} / max {lat[-1] * 1000:.1f} ms ({len(lat)} calls)"


def run(name, cmd, port, members):
    d = tempfile.mkdtemp(prefix=f"snap-{name}-")
    argv = ["taskset", "-c", "0"] + shlex.split(cmd.replace("{port}", str(port))) + ["--dir", d]
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                c = Conn(port)
                c.cmd("PING")
                break
            except OSError:
                time.sleep(0.1)
        t = time.time()
        fill(port, members)
        print(f"{name}: filled {int(c.cmd('ZCARD', 'lb')):,} members in {time.time() - t:.1f} s, "
              f"used_memory {int(info(c, 'used_memory')):,}")
        t = time.perf_counter()
        c.cmd("SAVE")
        save_s = time.perf_counter() - t
        size = os.path.getsize(os.path.join(d, "dump.rdb"))
        print(f"{name}: SAVE {save_s:.2f} s, file {size:,} bytes")
        # BGSAVE under a writing client.
        base_rss = rss_of_tree(server.pid)
        lat, stop = [], threading.Event()
        th = threading.Thread(target=probe, args=(port, members, stop, lat))
        th.start()
        time.sleep(0.5)
        lat.clear()
        t = time.perf_counter()
        c.cmd("BGSAVE")
        peak = 0
        while info(c, "rdb_bgsave_in_progress") == "1":
            peak = max(peak, rss_of_tree(server.pid) - base_rss)
            time.sleep(0.05)
        bg_s = time.perf_counter() - t
        during = list(lat)
        lat.clear()
        time.sleep(bg_s)
        stop.set()
        th.join()
        print(f"{name}: BGSAVE {bg_s:.2f} s, latest_fork_usec {info(c, 'latest_fork_usec')}, "
              f"rdb_last_cow_size {int(info(c, 'rdb_last_cow_size')):,}, "
              f"extra RSS peak {peak:,} bytes, status {info(c, 'rdb_last_bgsave_status')}")
        print(f"{name}: ZINCRBY client during BGSAVE: {figures(during)}")
        print(f"{name}: ZINCRBY client without BGSAVE: {figures(lat)}")
    finally:
        server.terminate()
        server.wait(timeout=120)
        subprocess.run(["rm", "-rf", d])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--members", type=int, default=1_000_000)
    ap.add_argument("--target", default='target/release/podium --port {port} --save ""')
    ap.add_argument("--reference", default='redis-server --port {port} --save ""')
    ap.add_argument("--port", type=int, default=23800)
    args = ap.parse_args()
    random.seed(1)
    run("redis", args.reference, args.port, args.members)
    random.seed(1)
    run("podium", args.target, args.port + 1, args.members)


if __name__ == "__main__":
    main()
