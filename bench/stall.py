#!/usr/bin/env python3
"""Does a long command stall the other clients? ZSCORE latency on other keys while a
ZUNIONSTORE of two large sorted sets runs, for Podium and for redis-server, same run.

  bench/stall.py --target 'target/release/podium --port {port}' [--reference CMD]
                 [--members 1000000] [--clients 10] [--unions 3] [--port 25100]

For each server in turn: start it fresh (persistence off), fill sorted sets `a` and `b`
with N members each (half of b's members are also in a; scores differ) and ten small sets
`other:0`.. (1,000 members each) in database 0 and the same ten in database 1. Then
`--clients` processes each send `ZSCORE other:<i> m:<j>` in a loop (one request at a time,
0.5 ms think time so that the clients themselves stay far from saturating the second core),
recording when each request started and how long it took, while one more connection runs
`ZUNIONSTORE dst 2 a b` `--unions` times back to back. Printed per server: how long a
union took, and for the ZSCORE requests that overlapped a union (started before it ended,
finished after it started): their count, p50, p99 and max latency, separately for the
clients reading database 0 and database 1, and for comparison the p50/p99 of the requests
outside the unions (what the machine gives when nothing long runs). A request is in database 1 (`--split`: the first
half of the clients) or in database 0 (the rest). The union's keys (a, b, dst) are all in
database 0, so the database-1 clients touch nothing it locks in any server; Podium locks
its keyspace in shards (`shards-per-db`, default 16), so a database-0 client whose key
happens to share a lock shard with a, b or dst waits for the union, as it would in Redis.
Clients are closed-loop: a stalled client issues no further request until it is answered,
so a stall counts once per client, not once per request it would have sent (the max and
the count show it). Servers are not pinned: the point is whether a second core serves
others while one runs the union. Needs redis-server (default reference).
"""
import argparse, multiprocessing as mp, os, shlex, signal, socket, statistics, subprocess, sys, tempfile, time


def resp(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def _line(self):
        while b"\r\n" not in self.buf:
            d = self.s.recv(1 << 16)
            if not d:
                raise ConnectionError("server closed the connection")
            self.buf += d
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def reply(self):
        line = self._line()
        t = line[:1]
        if t == b"$":
            n = int(line[1:])
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                d = self.s.recv(1 << 16)
                if not d:
                    raise ConnectionError("server closed the connection")
                self.buf += d
            v, self.buf = self.buf[:n], self.buf[n + 2:]
            return v
        if t == b"-":
            raise RuntimeError(line.decode())
        if t == b"*":
            return [self.reply() for _ in range(int(line[1:]))]
        return line[1:]

    def call(self, *args):
        self.s.sendall(resp(*args))
        return self.reply()


def wait_port(port, secs=30):
    end = time.time() + secs
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def fill(port, members):
    c = Conn(port)
    batch = 1000
    sent = 0
    for key, start in ((b"a", 0), (b"b", members // 2)):
        for lo in range(0, members, batch):
            args = [b"ZADD", key]
            for i in range(lo, min(lo + batch, members)):
                j = start + i
                args.append(b"%d" % ((j * 7919) % 1000003))
                args.append(b"m:%012d" % j)
            c.s.sendall(resp(*args))
            sent += 1
            if sent % 64 == 0:
                for _ in range(64):
                    c.reply()
                sent = 0
    for _ in range(sent):
        c.reply()
    for db in (0, 1):
        c.call("SELECT", db)
        for k in range(10):
            args = [b"ZADD", b"other:%d" % k]
            for i in range(1000):
                args += [b"%d" % i, b"m:%d" % i]
            c.call(*args)
    c.call("SELECT", 0)
    if c.call("ZCARD", "a") != str(members).encode():
        sys.exit("stall: fill of a failed")


def client(port, idx, db, stop, out):
    c = Conn(port)
    c.call("SELECT", db)
    key = b"other:%d" % (idx % 10)
    rows = []
    j = 0
    while not stop.is_set():
        t0 = time.perf_counter()
        c.call("ZSCORE", key, b"m:%d" % (j % 1000))
        t1 = time.perf_counter()
        rows.append((t0, t1 - t0))
        j += 1
        time.sleep(0.0005)
    out.put((db, rows))


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def run_one(name, cmd, port, args):
    d = tempfile.mkdtemp(prefix="stall-")
    log = open(os.path.join(d, "log"), "w")
    proc = subprocess.Popen(shlex.split(cmd.replace("{port}", str(port))), stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True, cwd=d)
    try:
        if not wait_port(port):
            sys.exit(f"stall: {name} did not listen on {port} (log {log.name})")
        t = time.time()
        fill(port, args.members)
        print(f"# {name}: filled in {time.time() - t:.1f}s", flush=True)
        stop = mp.Event()
        out = mp.Queue()
        procs = [mp.Process(target=client, args=(port, i, 1 if i < args.split else 0, stop, out))
                 for i in range(args.clients)]
        for p in procs:
            p.start()
        time.sleep(1.0)
        u = Conn(port)
        windows = []
        for _ in range(args.unions):
            t0 = time.perf_counter()
            n = u.call("ZUNIONSTORE", "dst", 2, "a", "b")
            t1 = time.perf_counter()
            windows.append((t0, t1))
            time.sleep(0.2)
        stop.set()
        results = [out.get() for _ in procs]
        for p in procs:
            p.join()
        durs = [b - a for a, b in windows]
        print(f"{name}: ZUNIONSTORE -> {int(n)} members, {statistics.mean(durs)*1000:.0f} ms "
              f"(min {min(durs)*1000:.0f}, max {max(durs)*1000:.0f}) over {len(durs)} runs")
        for db in (1, 0):
            lat = []
            quiet = []
            for rdb, rows in results:
                if rdb != db:
                    continue
                for (s, l) in rows:
                    if any(s < w1 and s + l > w0 for (w0, w1) in windows):
                        lat.append(l * 1000)
                    else:
                        quiet.append(l * 1000)
            ncl = sum(1 for i in range(args.clients) if (1 if i < args.split else 0) == db)
            if ncl == 0:
                continue
            print(f"{name}: db {db} ({ncl} clients): ZSCORE during the unions: {len(lat)} requests, "
                  f"p50 {pct(lat, 50):.3f} ms, p99 {pct(lat, 99):.3f} ms, max {max(lat, default=float('nan')):.3f} ms "
                  f"(outside the unions: {len(quiet)} requests, p50 {pct(quiet, 50):.3f} ms, "
                  f"p99 {pct(quiet, 99):.3f} ms)", flush=True)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", required=True)
    ap.add_argument("--reference", default='redis-server --port {port} --save "" --appendonly no')
    ap.add_argument("--members", type=int, default=1_000_000)
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--split", type=int, default=None, help="clients reading db 1 (default: half)")
    ap.add_argument("--unions", type=int, default=3)
    ap.add_argument("--port", type=int, default=25100)
    ap.add_argument("--only", choices=["target", "reference"], default=None)
    args = ap.parse_args()
    if args.split is None:
        args.split = args.clients // 2
    if args.only != "target":
        run_one("reference", args.reference, args.port, args)
    if args.only != "reference":
        run_one("target", args.target, args.port + 1, args)


if __name__ == "__main__":
    main()
