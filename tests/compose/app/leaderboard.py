#!/usr/bin/env python3
"""The compose tests' leaderboard app (redis-py from Debian's python3-redis).

    leaderboard.py seed     a deterministic leaderboard flow (ZINCRBY, ZREVRANGE WITHSCORES,
                            ZREVRANK, HSET profiles, EXPIRE, MULTI/EXEC, WATCH); writes the
                            model of what was acknowledged to /out/model.json
    leaderboard.py stream   MULTI/EXEC writes in a loop until /out/stop exists (the driver
                            restarts the server meanwhile); every acknowledged and every
                            uncertain (no reply) write goes to /out/stream.json
    leaderboard.py churn    a deterministic mix of every type's writes (strings, hashes,
                            lists, sets, sorted sets, streams, expiries, EVAL, MULTI, RENAME,
                            DEL), for the replication scenarios
    leaderboard.py verify NAME
                            the server's data against both: every acknowledged write is there,
                            every uncertain one is all there or all absent, nothing else; then
                            /out/summary-NAME.json, the raw replies the driver compares
                            between images

Exit status 0 only when every check passed; each failure is printed.
"""

import json
import os
import random
import time

import redis

HOST = os.environ.get("REDIS_HOST", "redis")
PORT = int(os.environ.get("REDIS_PORT", "6379"))
PASSWORD = os.environ.get("REDIS_PASSWORD") or None
OUT = os.environ.get("OUT_DIR", "/out")
PLAYERS = [f"player:{i:03d}" for i in range(40)]
COUNTRIES = ["fr", "de", "jp", "br", "us", "in"]

from apputil import failures, main as run_main, write_event


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def connect(decode=True):
    r = redis.Redis(host=HOST, port=PORT, password=PASSWORD, decode_responses=decode,
                    socket_timeout=5, socket_connect_timeout=2)
    deadline = time.time() + 60
    while True:
        try:
            r.ping()
            return r
        except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError) as e:
            if time.time() > deadline:
                raise SystemExit(f"cannot reach {HOST}:{PORT}: {e}")
            time.sleep(0.2)


def raw_client():
    """A client without redis-py's reply parsing: replies as the server sent them."""
    r = connect()
    r.response_callbacks = {}
    return r


def save(name, obj):
    with open(os.path.join(OUT, name), "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)


def load(name):
    with open(os.path.join(OUT, name)) as f:
        return json.load(f)


def seed():
    r = connect()
    r.flushall()
    rng = random.Random(38)
    scores = {}
    model = {"scores": {}, "profiles": {}, "history": {}, "sessions": [], "gone": []}

    # Profiles and sessions.
    for i, p in enumerate(PLAYERS):
        prof = {"name": f"Player {i}", "country": COUNTRIES[i % len(COUNTRIES)], "level": str(1 + i % 9),
                "games": "0"}
        check(r.hset(f"profile:{p}", mapping=prof) == 4, f"HSET profile:{p} did not add 4 fields")
        model["profiles"][p] = prof
        r.set(f"session:{p}", f"token-{i}")
        check(r.expire(f"session:{p}", 3600) is True, f"EXPIRE session:{p}")
        model["sessions"].append(f"session:{p}")
    # Keys that must be gone when verify runs (expired, lazily or actively).
    for i in range(5):
        r.set(f"otp:{i}", "x", px=200)
        model["gone"].append(f"otp:{i}")

    # Matches: ZINCRBY for each player, some with halves, some negative (penalties).
    for _ in range(600):
        p = rng.choice(PLAYERS)
        inc = rng.choice([1, 2, 3, 5, 10, 0.5, -1, 2.25])
        got = r.zincrby("lb:season", inc, p)
        scores[p] = scores.get(p, 0) + inc
        check(float(got) == float(scores[p]), f"ZINCRBY {p} -> {got}, expected {scores[p]}")

    # A finished match as one transaction: score, games played, history, capped history.
    exec_replies = []
    for m in range(30):
        p = PLAYERS[m % len(PLAYERS)]
        pipe = r.pipeline(transaction=True)
        pipe.zincrby("lb:season", 7, p)
        pipe.hincrby(f"profile:{p}", "games", 1)
        pipe.lpush(f"history:{p}", f"match-{m}")
        pipe.ltrim(f"history:{p}", 0, 4)
        pipe.zrevrank("lb:season", p)
        reply = pipe.execute()
        scores[p] = scores.get(p, 0) + 7
        model["profiles"][p]["games"] = str(int(model["profiles"][p]["games"]) + 1)
        model["history"].setdefault(p, []).insert(0, f"match-{m}")
        model["history"][p] = model["history"][p][:5]
        check(float(reply[0]) == float(scores[p]), f"MULTI ZINCRBY {p}: {reply[0]} != {scores[p]}")
        check(reply[2] >= 1 and reply[3] is True, f"MULTI LPUSH/LTRIM {p}: {reply}")
        exec_replies.append([str(x) for x in reply])

    # Optimistic update with WATCH: double the top player's score if it is still the top.
    with r.pipeline() as pipe:
        pipe.watch("lb:season")
        top, top_score = pipe.zrevrange("lb:season", 0, 0, withscores=True)[0]
        pipe.multi()
        pipe.zadd("lb:season", {top: top_score * 2}, xx=True)
        res = pipe.execute()
        check(res == [0], f"WATCH/MULTI ZADD XX reply {res}")
        scores[top] = top_score * 2

    # The reads a leaderboard page makes.
    ranked = sorted(scores.items(), key=lambda kv: (-kv[1], tuple(-ord(c) for c in kv[0])))
    top10 = r.zrevrange("lb:season", 0, 9, withscores=True)
    check([m for m, _ in top10] == [m for m, _ in ranked[:10]],
          f"ZREVRANGE top 10 {top10} != {ranked[:10]}")
    for p in PLAYERS:
        if p in scores:
            rank = r.zrevrank("lb:season", p)
            check(rank == [m for m, _ in ranked].index(p), f"ZREVRANK {p} = {rank}")
    model["scores"] = scores
    model["exec_replies"] = exec_replies
    save("model.json", model)
    print(f"seed: {len(scores)} players, {len(exec_replies)} transactions", flush=True)


def stream():
    """MULTI/EXEC pairs until /out/stop appears; an error means "unknown", not "lost"."""
    r = connect()
    acked, uncertain, errors = [], [], 0
    first_error = last_ack_after_error = None
    i = 0
    deadline = time.time() + 120
    while not os.path.exists(os.path.join(OUT, "stop")) and time.time() < deadline:
        i += 1
        try:
            write_event(r, i)
            acked.append(i)
            if first_error is not None:
                last_ack_after_error = i
        except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError, redis.ResponseError) as e:
            errors += 1
            if first_error is None:
                first_error = i
                print(f"stream: first error at e{i}: {type(e).__name__}: {e}", flush=True)
            uncertain.append(i)
            time.sleep(0.05)
        time.sleep(0.005)
    save("stream.json", {"acked": acked, "uncertain": uncertain, "last": i})
    print(f"stream: {len(acked)} acknowledged, {len(uncertain)} without reply, "
          f"writes acknowledged after the first error: {bool(last_ack_after_error)}", flush=True)
    check(first_error is not None, "the stream saw no error: the server was not restarted during it")
    check(last_ack_after_error is not None, "no write was acknowledged after the restart")


def churn():
    r = connect()
    rng = random.Random(3838)
    script = "redis.call('ZINCRBY', KEYS[1], ARGV[1], ARGV[2]); return redis.call('ZSCORE', KEYS[1], ARGV[2])"
    for batch in range(20):
        pipe = r.pipeline(transaction=batch % 4 == 0)
        for _ in range(150):
            k = rng.randrange(30)
            op = rng.randrange(16)
            if op == 0:
                pipe.set(f"churn:s{k}", rng.randrange(10**6))
            elif op == 1:
                pipe.incrbyfloat(f"churn:f{k}", rng.choice([0.1, 1.5, -2.25, 1e10]))
            elif op == 2:
                pipe.append(f"churn:a{k}", rng.choice(["x", "yz", "\u00e9"]))
            elif op == 3:
                pipe.hset(f"churn:h{k}", f"f{rng.randrange(50)}", rng.randrange(1000))
            elif op == 4:
                pipe.hincrbyfloat(f"churn:h{k}", "total", 0.5)
            elif op == 5:
                pipe.rpush(f"churn:l{k}", *[rng.randrange(100) for _ in range(rng.randrange(1, 5))])
            elif op == 6:
                pipe.lpop(f"churn:l{k}")
            elif op == 7:
                pipe.sadd(f"churn:set{k}", *[rng.randrange(200) for _ in range(3)])
            elif op == 8:
                pipe.srem(f"churn:set{k}", rng.randrange(200))
            elif op == 9:
                pipe.zadd(f"churn:z{k % 5}", {f"m{rng.randrange(300)}": rng.randrange(-50, 50) / 4})
            elif op == 10:
                pipe.zunionstore(f"churn:zu{k % 3}", [f"churn:z{k % 5}", f"churn:z{(k + 1) % 5}"],
                                 aggregate=rng.choice(["SUM", "MAX"]))
            elif op == 11:
                pipe.xadd(f"churn:x{k % 3}", {"v": rng.randrange(1000)}, maxlen=50, approximate=False)
            elif op == 12:
                pipe.expire(f"churn:s{k}", 3600 + rng.randrange(3600))
            elif op == 13:
                pipe.eval(script, 1, f"churn:z{k % 5}", rng.randrange(1, 9), f"m{rng.randrange(300)}")
            elif op == 14:
                pipe.delete(f"churn:a{k}")
            else:
                pipe.zpopmin(f"churn:z{k % 5}")
        pipe.execute()
    # A big sorted set and hash (non-compact encodings) and a rename.
    r.zadd("churn:bigz", {f"member:{i}": i * 0.75 for i in range(2000)})
    r.hset("churn:bigh", mapping={f"field:{i}": "v" * (i % 90) for i in range(1000)})
    r.rename("churn:bigh", "churn:bigh2")
    print(f"churn: {r.dbsize()} keys", flush=True)


def verify(name):
    r = connect()
    model = load("model.json")
    # Seed data.
    got_scores = dict(r.zrange("lb:season", 0, -1, withscores=True))
    check(got_scores == {k: float(v) for k, v in model["scores"].items()},
          f"lb:season differs: {len(got_scores)} members vs {len(model['scores'])} expected; "
          f"first differences {[(k, got_scores.get(k), v) for k, v in model['scores'].items() if got_scores.get(k) != float(v)][:5]}")
    for p, prof in model["profiles"].items():
        check(r.hgetall(f"profile:{p}") == prof, f"profile:{p} = {r.hgetall(f'profile:{p}')}, expected {prof}")
    for p, hist in model["history"].items():
        check(r.lrange(f"history:{p}", 0, -1) == hist, f"history:{p} differs")
    for k in model["sessions"]:
        ttl = r.ttl(k)
        check(0 < ttl <= 3600, f"TTL {k} = {ttl}, expected 1..3600")
    for k in model["gone"]:
        check(r.exists(k) == 0, f"{k} should have expired")

    # The stream written across the restart.
    lost = 0
    if os.path.exists(os.path.join(OUT, "stream.json")):
        st = load("stream.json")
        members = dict(r.zrange("lb:events", 0, -1, withscores=True))
        fields = r.hgetall("events")
        unc = set(st["uncertain"])
        for i in st["acked"]:
            if members.get(f"e{i}") != float(i) or fields.get(f"e{i}") != str(i):
                lost += 1
                if lost <= 5:
                    print(f"FAIL: acknowledged e{i} is lost", flush=True)
        check(lost == 0, f"{lost} acknowledged writes lost of {len(st['acked'])}")
        for i in unc:
            check((f"e{i}" in members) == (f"e{i}" in fields), f"transaction e{i} half applied")
        known = {f"e{i}" for i in st["acked"]} | {f"e{i}" for i in unc}
        phantoms = sorted(set(members) - known)
        check(not phantoms, f"members never written: {phantoms[:5]}")
        print(f"verify {name}: stream {len(st['acked'])} acknowledged, {lost} lost, "
              f"{sum(1 for i in unc if f'e{i}' in members)}/{len(unc)} unanswered ones applied", flush=True)

    # What the driver compares between images: replies exactly as sent.
    raw = raw_client()
    summary = {
        "zrevrange": raw.execute_command("ZREVRANGE", "lb:season", 0, -1, "WITHSCORES"),
        "zrevrank": [raw.execute_command("ZREVRANK", "lb:season", p) for p in PLAYERS],
        "zscore": [raw.execute_command("ZSCORE", "lb:season", p) for p in PLAYERS],
        "profiles": {p: sorted(raw.execute_command("HGETALL", f"profile:{p}")) for p in PLAYERS},
        "history": {p: raw.execute_command("LRANGE", f"history:{p}", 0, -1) for p in PLAYERS},
        "exec_replies": model["exec_replies"],
        "types": {k: raw.execute_command("TYPE", k) for k in ["lb:season", "profile:player:000",
                                                               "history:player:000", "session:player:000",
                                                               "otp:0"]},
        "dbsize_without_stream": int(raw.execute_command("DBSIZE")) - raw.execute_command("EXISTS", "lb:events", "events"),
        "failures": len(failures),
        "lost": lost,
    }
    save(f"summary-{name}.json", summary)


if __name__ == "__main__":
    run_main(
        {
            "seed": seed,
            "stream": stream,
            "churn": churn,
            "verify": lambda name="final": verify(name),
        },
        __doc__,
    )
