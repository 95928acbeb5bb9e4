//! A mixed Redis Cluster (issue 37): three redis-server 7.0 masters and three Podium masters
//! made into one cluster by `redis-cli --cluster create`, driven by Redis's own tools and by
//! redis-py's cluster client (`redis.cluster.RedisCluster`, Debian's python3-redis).
//!
//! Checks that `redis-cli --cluster check` finds nothing to report; that
//! `redis-cli --cluster reshard` moves 1,000 slots from a redis-server master to a Podium master
//! and back (MIGRATE, RESTORE and ASK between the two kinds) while redis-py writes, with every
//! acknowledged write found afterwards; that failover works both ways (a Podium replica takes
//! over from a dead redis-server master, a redis-server replica from a dead Podium master) with
//! the data intact; and a leaderboard flow over RedisCluster whose boards and profiles sit on
//! slots of both kinds, its output checked exactly (the expected text is what the same script
//! printed against a cluster of six redis-server 7.0 masters).
//!
//! tests/cluster.rs owns Podium-only clusters and the small mixed ones; this file owns the
//! six-master mixed cluster and the tools' workflows on it. Its nodes listen on fixed ports in
//! 28901-28999 (bus ports 29901-29999), each test its own block of ten, for the reason
//! cluster.rs gives: the addresses are in every node's table. redis-server, redis-cli and a
//! python3 with redis-py are required as `common::require_tool` says: missing, the test fails
//! unless `PODIUM_ALLOW_SKIP=1`.

use crate::cluster::{cluster_ok, cmd, con, myid, nodes_view, role, start, text, wait_for, Node};
use crate::common;

use common::require_tool;
use std::collections::HashMap;
use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The variable naming another program to run in the Podium nodes' places (read only by this
/// file): `PODIUM_MIXED_TEST_BIN=/usr/bin/redis-server` runs these tests on a cluster of
/// redis-server alone, which is how they and LEADERBOARD_WANT were validated.
const BIN_VAR: &str = "PODIUM_MIXED_TEST_BIN";

fn podium_bin() -> String {
    std::env::var(BIN_VAR).unwrap_or_else(|_| env!("CARGO_BIN_EXE_podium").to_string())
}

fn value_text(v: redis::Value) -> String {
    match v {
        redis::Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
        redis::Value::VerbatimString { text, .. } => text,
        redis::Value::SimpleString(s) => s,
        redis::Value::Int(i) => i.to_string(),
        v => format!("{v:?}"),
    }
}

/// `args` sent to `port`, following a MOVED redirection: a key's command on whichever master
/// serves its slot now. The port that answered, and the reply.
fn routed(port: u16, args: &[&str]) -> (u16, redis::RedisResult<redis::Value>) {
    match cmd(port, args) {
        Err(e) if e.code() == Some("MOVED") => {
            // The detail is "<slot> <ip>:<port>".
            let to: u16 = e
                .detail()
                .and_then(|d| d.split(' ').nth(1))
                .and_then(|a| a.rsplit(':').next())
                .and_then(|p| p.parse().ok())
                .unwrap_or_else(|| panic!("a MOVED address: {e:?}"));
            (to, cmd(to, args))
        }
        r => (port, r),
    }
}

/// The slots `port` says the node `id` serves, as CLUSTER NODES lists them ("0-999 2731-5460").
fn slots_of(port: u16, id: &str) -> String {
    text(port, &["CLUSTER", "NODES"])
        .lines()
        .find(|l| l.starts_with(id))
        .map(|l| l.split(' ').skip(8).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| panic!("{port} does not know {id}"))
}

/// Whether every node in `ports` sees the same `n` nodes with the same roles and slots.
fn agree(ports: &[u16], n: usize) -> bool {
    let first = nodes_view(ports[0]);
    first.len() == n && ports.iter().all(|&p| nodes_view(p) == first)
}

/// What a tool run to its end left: whether it exited with 0, and its output.
struct Ran {
    what: String,
    ok: bool,
    stdout: String,
    stderr: String,
}

impl std::fmt::Display for Ran {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "{} (ok: {})\n--- stdout\n{}--- stderr\n{}",
            self.what, self.ok, self.stdout, self.stderr
        )
    }
}

/// A thread reading `r` to its end, as text (so a full pipe never stalls the tool).
fn collect<R: Read + Send + 'static>(r: Option<R>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut r) = r {
            let _ = r.read_to_string(&mut s);
        }
        s
    })
}

/// Run `cmd` to its end; past `secs` it is killed and the test fails, with what it printed.
fn run(mut cmd: Command, secs: u64) -> Ran {
    let what = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
    let out = collect(child.stdout.take());
    let err = collect(child.stderr.take());
    let deadline = Instant::now() + Duration::from_secs(secs);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let ran = Ran {
        what,
        ok: status.is_some_and(|s| s.success()),
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
    };
    assert!(status.is_some(), "ran over {secs} s: {ran}");
    ran
}

fn redis_cli() -> String {
    require_tool("redis-cli").expect("redis-cli")
}

/// `redis-cli --cluster check` through `port` reports every slot covered and nothing wrong.
fn assert_cluster_check(port: u16) {
    let mut c = Command::new(redis_cli());
    c.args(["--cluster", "check", &format!("127.0.0.1:{port}")]);
    let ran = run(c, 60);
    assert!(
        ran.ok
            && ran.stdout.contains("[OK] All 16384 slots covered")
            && !ran.stdout.contains("[ERR]")
            && !ran.stdout.contains("[WARNING]"),
        "{ran}"
    );
}

/// The six masters of a mixed cluster on ports `base + 1 ..= base + 6`, given to redis-cli
/// alternately (redis-server, Podium, ...) so each kind has every other range:
/// `redis[0]` 0-2730, `podium[0]` 2731-5460, `redis[1]` 5461-8191, `podium[1]` 8192-10922,
/// `redis[2]` 10923-13652, `podium[2]` 13653-16383.
struct Mixed {
    redis: Vec<Node>,
    podium: Vec<Node>,
}

/// The ranges redis-cli gives six masters, in the order they were named.
const RANGES: [&str; 6] = [
    "0-2730",
    "2731-5460",
    "5461-8191",
    "8192-10922",
    "10923-13652",
    "13653-16383",
];

impl Mixed {
    /// Started and made one cluster by `redis-cli --cluster create`, once every master sees
    /// the same six masters with the ranges above and cluster_state:ok.
    fn create(redis_server: &str, base: u16, dir: &Path) -> Mixed {
        let mut redis = Vec::new();
        let mut podium = Vec::new();
        for i in 0..3u16 {
            let (r, p) = (base + 1 + 2 * i, base + 2 + 2 * i);
            redis.push(start(redis_server, r, &dir.join(format!("redis-{r}"))));
            podium.push(start(&podium_bin(), p, &dir.join(format!("podium-{p}"))));
        }
        let m = Mixed { redis, podium };
        let ports = m.ports();
        let mut c = Command::new(redis_cli());
        c.args(["--cluster", "create"])
            .args(ports.iter().map(|p| format!("127.0.0.1:{p}")))
            .args(["--cluster-replicas", "0", "--cluster-yes"]);
        let ran = run(c, 60);
        assert!(ran.stdout.contains("[OK] All 16384 slots covered"), "{ran}");
        wait_for("every master to agree and be ok", 60, || {
            agree(&ports, 6) && ports.iter().all(|&p| cluster_ok(p))
        });
        for (&p, range) in ports.iter().zip(RANGES) {
            assert_eq!(slots_of(ports[0], &myid(p)), range, "the slots of {p}");
        }
        m
    }

    /// The masters' ports in the order given to redis-cli.
    fn ports(&self) -> Vec<u16> {
        self.redis
            .iter()
            .zip(&self.podium)
            .flat_map(|(r, p)| [r.port, p.port])
            .collect()
    }
}

/// Writes through redis-py's RedisCluster until the file `stop` exists: per round, SET of a
/// key never written before (every other one a key of the slots that move, `lo`..=`hi`) and a
/// ZINCRBY on one of five boards (three in the moving slots, two elsewhere). Every 50 rounds
/// the round count goes to `progress`. At the end `out` lists what was acknowledged (and,
/// apart, what failed with an outcome unknown): "set <key> <value>", "unsure-set <key>",
/// "zset <board> <member> <acknowledged total> <unsure total>", "errors <n>".
const WRITER: &str = r#"
import os, sys
from redis.cluster import RedisCluster
from redis.crc import key_slot
port, stop, progress, out = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
lo, hi = int(sys.argv[5]), int(sys.argv[6])
moving = lambda k: lo <= key_slot(k.encode()) <= hi
rc = RedisCluster(host="127.0.0.1", port=port, socket_timeout=10)
names = ["lb:{board%d}" % i for i in range(1000)]
boards = [b for b in names if moving(b)][:3] + [b for b in names if not moving(b)][:2]
sets, unsure_sets, scores, unsure, errors = {}, set(), {}, {}, 0
n = h = 0
while not os.path.exists(stop):
    if n % 2:
        h += 1
        while not moving("h:%d" % h):
            h += 1
        key = "h:%d" % h
    else:
        key = "k:%d" % n
    try:
        rc.set(key, n)
        sets[key] = n
    except Exception as e:
        errors += 1
        unsure_sets.add(key)
        print("SET", key, repr(e), file=sys.stderr)
    z = (boards[n % len(boards)], "p%d" % (n % 20))
    inc = 1 + n % 3
    try:
        rc.zincrby(z[0], inc, z[1])
        scores[z] = scores.get(z, 0) + inc
    except Exception as e:
        errors += 1
        unsure[z] = unsure.get(z, 0) + inc
        print("ZINCRBY", z, repr(e), file=sys.stderr)
    n += 1
    if n % 50 == 0:
        with open(progress + ".tmp", "w") as f:
            f.write(str(n))
        os.replace(progress + ".tmp", progress)
with open(out + ".tmp", "w") as f:
    f.write("errors %d\n" % errors)
    for k, v in sets.items():
        f.write("set %s %d\n" % (k, v))
    for k in unsure_sets:
        f.write("unsure-set %s\n" % k)
    for z in set(scores) | set(unsure):
        f.write("zset %s %s %d %d\n" % (z[0], z[1], scores.get(z, 0), unsure.get(z, 0)))
os.replace(out + ".tmp", out)
"#;

/// A background process, killed on drop (so a failing test leaves no writer behind).
struct Background(Child);

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What the writer left in `progress`: rounds done so far.
fn progress(path: &Path) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// A master's keys: strings by value, sorted sets by member and score.
type Keys = (
    HashMap<String, String>,
    HashMap<String, HashMap<String, f64>>,
);

/// Every key on the master at `port` (SCAN, which walks only the node's own keys).
fn keys_on(port: u16) -> Keys {
    let mut c = con(port);
    let (mut strings, mut zsets) = (HashMap::new(), HashMap::new());
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(1000)
            .query(&mut c)
            .expect("SCAN");
        for key in keys {
            let kind: String = redis::cmd("TYPE").arg(&key).query(&mut c).expect("TYPE");
            match kind.as_str() {
                "string" => {
                    let v: String = redis::cmd("GET").arg(&key).query(&mut c).expect("GET");
                    strings.insert(key, v);
                }
                "zset" => {
                    let v: Vec<(String, f64)> = redis::cmd("ZRANGE")
                        .arg(&key)
                        .arg(0)
                        .arg(-1)
                        .arg("WITHSCORES")
                        .query(&mut c)
                        .expect("ZRANGE");
                    zsets.insert(key, v.into_iter().collect());
                }
                other => panic!("{key} on {port} is a {other}"),
            }
        }
        if next == 0 {
            return (strings, zsets);
        }
        cursor = next;
    }
}

/// `redis-cli --cluster reshard` of `slots` slots from the master at `from` to the one at `to`,
/// through `via`; the writer's rounds done while it ran, and how long it took.
fn reshard(via: u16, from: u16, to: u16, slots: u32, progress_file: &Path) -> (u64, Duration) {
    let (before, started) = (progress(progress_file), Instant::now());
    let mut c = Command::new(redis_cli());
    c.args(["--cluster", "reshard", &format!("127.0.0.1:{via}")])
        .args(["--cluster-from", &myid(from), "--cluster-to", &myid(to)])
        .args(["--cluster-slots", &slots.to_string(), "--cluster-yes"]);
    let ran = run(c, 120);
    assert!(ran.ok, "{ran}");
    (progress(progress_file) - before, started.elapsed())
}

/// The 1,000 slots redis-cli moves: the lowest of the source (redis-cli takes a source's slots
/// in order), here the first of `redis[0]`'s range.
const MOVING: (u16, u16) = (0, 999);

/// redis-server, and a python3 whose redis-py has RedisCluster (`None`: skipped, see
/// `common::require_tool`).
fn server_and_python() -> Option<(String, String)> {
    let redis_server = require_tool("redis-server")?;
    let python = common::python_with(
        "redis.cluster",
        "drives a mixed cluster with redis-py's RedisCluster",
    )?;
    Some((redis_server, python))
}

/// Three redis-server and three Podium masters made one cluster by redis-cli, checked OK; then
/// 1,000 slots resharded from a redis-server master to a Podium master and back while redis-py
/// writes, each move with writes under way; afterwards every acknowledged write is on the one
/// master serving its key, with its value, no key is on two masters, and no client saw an
/// error.
#[test]
fn a_mixed_cluster_reshards_both_ways_under_writes_and_loses_nothing() {
    let Some((redis_server, python)) = server_and_python() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let m = Mixed::create(&redis_server, 28900, dir.path());
    let ports = m.ports();
    assert_cluster_check(ports[1]);
    let (r, p) = (m.redis[0].port, m.podium[0].port);

    let (stop, progress_file, out) = (
        dir.path().join("stop"),
        dir.path().join("progress"),
        dir.path().join("acked"),
    );
    let mut writer = Background(
        Command::new(&python)
            .args(["-c", WRITER, &ports[0].to_string()])
            .args([&stop, &progress_file, &out])
            .args([MOVING.0.to_string(), MOVING.1.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(dir.path().join("writer.err")).expect("writer.err"),
            ))
            .spawn()
            .expect("spawn the writer"),
    );
    let writer_err = || std::fs::read_to_string(dir.path().join("writer.err")).unwrap_or_default();
    // The writer's rounds so far; a writer that died fails the test with its traceback.
    let mut rounds = || {
        if let Ok(Some(status)) = writer.0.try_wait() {
            panic!("the writer exited ({status}): {}", writer_err());
        }
        progress(&progress_file)
    };
    wait_for("the writer to get going", 30, || rounds() >= 200);

    // To the Podium master and back, each time once every node has the new owners.
    let (during, to_podium) = reshard(ports[2], r, p, 1000, &progress_file);
    wait_for("every master to agree on the first move", 30, || {
        agree(&ports, 6)
    });
    assert_eq!(
        slots_of(ports[0], &myid(p)),
        format!("{}-{} 2731-5460", MOVING.0, MOVING.1)
    );
    assert_eq!(slots_of(ports[0], &myid(r)), "1000-2730");
    assert!(during > 0, "no write while the slots moved to Podium");
    assert_cluster_check(ports[3]);
    let (back, to_redis) = reshard(ports[4], p, r, 1000, &progress_file);
    wait_for("every master to agree on the move back", 30, || {
        agree(&ports, 6)
    });
    assert_eq!(slots_of(ports[0], &myid(r)), "0-2730");
    assert_eq!(slots_of(ports[0], &myid(p)), "2731-5460");
    assert!(back > 0, "no write while the slots moved back");
    assert_cluster_check(ports[5]);

    // A few more rounds on the settled cluster, then the writer's account.
    let settled = rounds();
    wait_for("writes after the moves", 30, || rounds() >= settled + 200);
    std::fs::write(&stop, "").expect("stop file");
    wait_for("the writer to finish", 60, || {
        matches!(writer.0.try_wait(), Ok(Some(_)))
    });
    let acked = std::fs::read_to_string(&out)
        .unwrap_or_else(|e| panic!("the writer's account: {e}\n{}", writer_err()));
    eprintln!(
        "writer: {} rounds, {during} during the move to Podium ({to_podium:?}), {back} during \
         the move back ({to_redis:?})",
        progress(&progress_file)
    );

    // Everything the six masters hold, each key on one master only.
    let mut strings: HashMap<String, (u16, String)> = HashMap::new();
    let mut zsets: HashMap<String, (u16, HashMap<String, f64>)> = HashMap::new();
    for &port in &ports {
        let (s, z) = keys_on(port);
        for (k, v) in s {
            if let Some((other, _)) = strings.insert(k.clone(), (port, v)) {
                panic!("{k} is on both {other} and {port}");
            }
        }
        for (k, v) in z {
            if let Some((other, _)) = zsets.insert(k.clone(), (port, v)) {
                panic!("{k} is on both {other} and {port}");
            }
        }
    }
    let (mut errors, mut sets, mut moving_sets, mut members) = (None, 0, 0, 0);
    let mut unsure_sets = Vec::new();
    for line in acked.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        match f[0] {
            "errors" => errors = Some(f[1].to_string()),
            "set" => {
                sets += 1;
                moving_sets += usize::from(f[1].starts_with("h:"));
                let found = strings.get(f[1]).map(|(_, v)| v.as_str());
                assert_eq!(found, Some(f[2]), "acknowledged SET {} {}", f[1], f[2]);
            }
            "unsure-set" => unsure_sets.push(f[1].to_string()),
            "zset" => {
                members += 1;
                let (acked, unsure): (f64, f64) = (f[3].parse().unwrap(), f[4].parse().unwrap());
                let score = zsets
                    .get(f[1])
                    .and_then(|(_, z)| z.get(f[2]))
                    .copied()
                    .unwrap_or(0.0);
                assert!(
                    score >= acked && score <= acked + unsure,
                    "{} {}: score {score}, acknowledged increments {acked} (+{unsure} unsure)",
                    f[1],
                    f[2]
                );
            }
            other => panic!("the writer's account has a line {other}"),
        }
    }
    // Nothing present that the writer did not write (every acknowledged key was found above).
    let unsure_found = unsure_sets
        .iter()
        .filter(|k| strings.contains_key(*k))
        .count();
    assert_eq!(strings.len(), sets + unsure_found, "keys found vs written");
    let found_members: usize = zsets.values().map(|(_, z)| z.len()).sum();
    assert_eq!(found_members, members, "board members found vs written");
    assert_eq!(zsets.len(), 5, "the five boards");
    // The writes did land in the slots that moved.
    assert!(
        moving_sets >= 100,
        "only {moving_sets} writes in the moving slots"
    );
    assert_eq!(
        errors.as_deref(),
        Some("0"),
        "redis-py saw errors while slots moved:\n{}",
        writer_err()
    );
}

/// A hash tag in the first master's range (`redis[0]`, 0-2730) and one in the second's
/// (`podium[0]`, 2731-5460): "season" is slot 2485, "monthly" slot 3784.
const REDIS_TAG: &str = "season";
const PODIUM_TAG: &str = "monthly";

/// Failover both ways in a mixed cluster: a Podium replica follows a redis-server master and a
/// redis-server replica a Podium master (CLUSTER MEET, CLUSTER REPLICATE), each fed by a full
/// sync and then the stream; the redis-server master is killed and its Podium replica is
/// promoted and serves the slots, then the Podium master is killed and its redis-server replica
/// is promoted; cluster_state is ok everywhere after each, and every key written before is
/// there with its value.
#[test]
fn failover_both_ways_between_podium_and_redis_server_keeps_the_data() {
    let Some(redis_server) = require_tool("redis-server") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let mut m = Mixed::create(&redis_server, 28910, dir.path());
    let (r, p) = (m.redis[0].port, m.podium[0].port);
    let (r_id, p_id) = (myid(r), myid(p));
    assert_eq!(text(r, &["CLUSTER", "KEYSLOT", REDIS_TAG]), "2485");
    assert_eq!(text(r, &["CLUSTER", "KEYSLOT", PODIUM_TAG]), "3784");

    // Strings across all slots, and a board on each of the two masters that will fail; half
    // before the replicas join (they get it by full sync), half after (by the stream).
    let mut strings: Vec<(String, String)> = Vec::new();
    let boards = [
        format!("lb:{{{REDIS_TAG}}}"),
        format!("lb:{{{PODIUM_TAG}}}"),
    ];
    let write = |from: usize, to: usize, strings: &mut Vec<(String, String)>| {
        for i in from..to {
            let (key, value) = (format!("s:{i}"), format!("v{i}"));
            routed(r, &["SET", &key, &value]).1.expect("SET");
            strings.push((key, value));
            for b in &boards {
                let member = format!("p{}", i % 10);
                routed(r, &["ZINCRBY", b, &(i % 7 + 1).to_string(), &member])
                    .1
                    .expect("ZINCRBY");
            }
        }
    };
    write(0, 150, &mut strings);

    let podium_replica = start(&podium_bin(), 28917, &dir.path().join("podium-replica"));
    let redis_replica = start(&redis_server, 28918, &dir.path().join("redis-replica"));
    for n in [&podium_replica, &redis_replica] {
        cmd(n.port, &["CLUSTER", "MEET", "127.0.0.1", "28911", "29911"]).unwrap();
    }
    wait_for("the new nodes to know every master", 30, || {
        nodes_view(podium_replica.port).len() == 8 && nodes_view(redis_replica.port).len() == 8
    });
    // Podium follows redis-server, redis-server follows Podium.
    cmd(podium_replica.port, &["CLUSTER", "REPLICATE", &r_id]).unwrap();
    cmd(redis_replica.port, &["CLUSTER", "REPLICATE", &p_id]).unwrap();
    let mut all: Vec<u16> = m.ports();
    all.extend([podium_replica.port, redis_replica.port]);
    wait_for("both links up and every node to agree", 60, || {
        role(podium_replica.port) == format!("slave {r} connected")
            && role(redis_replica.port) == format!("slave {p} connected")
            && agree(&all, 8)
            && all.iter().all(|&n| cluster_ok(n))
    });
    write(150, 300, &mut strings);
    // Each replica has its master's keys, with the same values.
    for (master, replica) in [(r, podium_replica.port), (p, redis_replica.port)] {
        wait_for("the replica to have its master's keys", 30, || {
            text(replica, &["DBSIZE"]) == text(master, &["DBSIZE"])
        });
        let (want_s, want_z) = keys_on(master);
        let mut c = con(replica);
        redis::cmd("READONLY").query::<()>(&mut c).unwrap();
        assert!(!want_s.is_empty() && want_z.len() == 1, "{master}");
        for (k, v) in want_s {
            let got: Option<String> = redis::cmd("GET").arg(&k).query(&mut c).unwrap();
            assert_eq!(got, Some(v), "{k} on the replica {replica}");
        }
        for (k, z) in want_z {
            let got: Vec<(String, f64)> = redis::cmd("ZRANGE")
                .arg(&k)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query(&mut c)
                .unwrap();
            assert_eq!(got.into_iter().collect::<HashMap<_, _>>(), z, "{k}");
        }
    }
    let boards_before: Vec<String> = boards
        .iter()
        .map(|b| format!("{:?}", routed(r, &["ZRANGE", b, "0", "-1", "WITHSCORES"]).1))
        .collect();

    // Every key readable through `via`, with its value, the boards as they were.
    let check_data = |via: u16| {
        for (k, v) in &strings {
            let (_, got) = routed(via, &["GET", k]);
            assert_eq!(value_text(got.expect("GET")), *v, "{k} through {via}");
        }
        for (b, before) in boards.iter().zip(&boards_before) {
            let (_, got) = routed(via, &["ZRANGE", b, "0", "-1", "WITHSCORES"]);
            assert_eq!(format!("{got:?}"), *before, "{b} through {via}");
        }
    };

    // The redis-server master dies: its Podium replica takes over.
    drop(m.redis.remove(0));
    let alive: Vec<u16> = all.iter().copied().filter(|&n| n != r).collect();
    let failed = |id: &str, alive: &[u16]| {
        alive.iter().all(|&n| {
            cluster_ok(n)
                && text(n, &["CLUSTER", "NODES"])
                    .lines()
                    .any(|l| l.starts_with(id) && l.contains("fail") && !l.contains("fail?"))
        })
    };
    wait_for(
        "the Podium replica to be promoted, ok everywhere",
        60,
        || role(podium_replica.port).starts_with("master") && failed(&r_id, &alive),
    );
    wait_for(
        "every node to give the slots to the Podium replica",
        30,
        || {
            alive
                .iter()
                .all(|&n| slots_of(n, &myid(podium_replica.port)) == RANGES[0])
        },
    );
    let (served_by, got) = routed(m.podium[1].port, &["GET", &format!("{{{REDIS_TAG}}}x")]);
    assert_eq!(
        (served_by, got),
        (podium_replica.port, Ok(redis::Value::Nil))
    );
    check_data(m.redis[1].port);
    assert_cluster_check(m.podium[1].port);
    // It takes writes for them too.
    assert_eq!(
        routed(
            m.podium[2].port,
            &["SET", &format!("{{{REDIS_TAG}}}after"), "1"]
        ),
        (podium_replica.port, Ok(redis::Value::Okay))
    );

    // The Podium master dies: its redis-server replica takes over.
    drop(m.podium.remove(0));
    let alive: Vec<u16> = alive.into_iter().filter(|&n| n != p).collect();
    wait_for(
        "the redis-server replica to be promoted, ok everywhere",
        60,
        || role(redis_replica.port).starts_with("master") && failed(&p_id, &alive),
    );
    wait_for(
        "every node to give the slots to the redis-server replica",
        30,
        || {
            alive
                .iter()
                .all(|&n| slots_of(n, &myid(redis_replica.port)) == RANGES[1])
        },
    );
    check_data(podium_replica.port);
    check_data(m.podium[1].port);
    assert_cluster_check(redis_replica.port);
    let (served_by, got) = routed(
        podium_replica.port,
        &["SET", &format!("{{{PODIUM_TAG}}}x"), "1"],
    );
    assert_eq!(
        (served_by, got),
        (redis_replica.port, Ok(redis::Value::Okay))
    );
}

/// A leaderboard flow through redis-py's RedisCluster: profiles as hashes (one slot each),
/// matches scored into a global board (ZINCRBY) and a weekly best-score board (ZADD GT) with an
/// expiry, friends' boards built with cluster pipelines, ranks, tops with scores, and one
/// request's reads in a pipeline that spans nodes of both kinds.
const LEADERBOARD: &str = r#"
import sys
from redis.cluster import RedisCluster
rc = RedisCluster(host="127.0.0.1", port=int(sys.argv[1]), decode_responses=True,
                  socket_timeout=10)
players = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"]
countries = ["US", "DE", "JP", "BR", "IN", "FR", "KR", "GB"]
friends = {"alice": ["bob", "carol", "dave"], "bob": ["alice", "erin", "frank"],
           "carol": ["alice", "grace", "heidi"]}
for i, p in enumerate(players):
    rc.hset("profile:{%s}" % p, mapping={"name": p.title(), "country": countries[i], "level": i * 3})
for i in range(96):
    p, pts = players[(3 * i + i // 8) % 8], (5 * i * i + i) % 13 + 1
    rc.zincrby("lb:{global}", pts, p)
    rc.zadd("lb:{weekly}", {p: pts * (1 + i % 4)}, gt=True)
print("top", rc.zrevrange("lb:{global}", 0, 9, withscores=True))
print("weekly", rc.zrevrange("lb:{weekly}", 0, 9, withscores=True))
print("ranks", [rc.zrevrank("lb:{global}", p) for p in players])
print("gt", rc.zadd("lb:{weekly}", {"alice": 1}, gt=True),
      rc.zadd("lb:{weekly}", {"alice": 50}, gt=True, ch=True),
      rc.zadd("lb:{weekly}", {"zoe": 3}, gt=True), rc.zscore("lb:{weekly}", "alice"))
print("expire", rc.expire("lb:{weekly}", 3600), 3590 <= rc.ttl("lb:{weekly}") <= 3600)
pipe = rc.pipeline()
for me, fs in friends.items():
    for f in [me] + fs:
        pipe.zscore("lb:{global}", f)
scores = iter(pipe.execute())
pipe = rc.pipeline()
for me, fs in friends.items():
    board = "lb:{friends:%s}" % me
    pipe.zadd(board, {f: next(scores) for f in [me] + fs})
    pipe.expire(board, 600)
print("friends-built", pipe.execute())
for me in friends:
    board = "lb:{friends:%s}" % me
    print("friends", me, rc.zrevrange(board, 0, 9, withscores=True), rc.zrevrank(board, me))
print("incr", rc.zincrby("lb:{global}", 40, "heidi"), rc.zrevrank("lb:{global}", "heidi"))
top3 = [m for m, _ in rc.zrevrange("lb:{global}", 0, 2, withscores=True)]
pipe = rc.pipeline()
pipe.zrevrank("lb:{global}", "carol")
pipe.zscore("lb:{global}", "carol")
pipe.zrevrank("lb:{weekly}", "carol")
pipe.zrevrank("lb:{friends:carol}", "carol")
for m in top3:
    pipe.hget("profile:{%s}" % m, "country")
print("request", top3, pipe.execute())
print("profile", sorted(rc.hgetall("profile:{carol}").items()))
"#;

/// What LEADERBOARD printed against six redis-server 7.0 masters.
const LEADERBOARD_WANT: &str = "\
top [('grace', 92.0), ('frank', 87.0), ('heidi', 81.0), ('erin', 79.0), ('carol', 66.0), ('dave', 62.0), ('alice', 58.0), ('bob', 56.0)]
weekly [('heidi', 48.0), ('frank', 48.0), ('grace', 40.0), ('dave', 40.0), ('bob', 40.0), ('erin', 36.0), ('alice', 30.0), ('carol', 24.0)]
ranks [6, 7, 4, 5, 3, 1, 0, 2]
gt 0 1 1 50.0
expire True True
friends-built [4, True, 4, True, 4, True]
friends alice [('carol', 66.0), ('dave', 62.0), ('alice', 58.0), ('bob', 56.0)] 2
friends bob [('frank', 87.0), ('erin', 79.0), ('alice', 58.0), ('bob', 56.0)] 3
friends carol [('grace', 92.0), ('heidi', 81.0), ('carol', 66.0), ('alice', 58.0)] 2
incr 121.0 0
request ['heidi', 'grace', 'frank'] [4, 66.0, 7, 2, 'GB', 'KR', 'FR']
profile [('country', 'JP'), ('level', '6'), ('name', 'Carol')]
";

/// The leaderboard flow above on a mixed cluster, its output checked exactly; its boards and
/// profiles are served by masters of both kinds.
#[test]
fn a_leaderboard_flow_through_redis_py_spans_both_kinds_of_master() {
    let Some((redis_server, python)) = server_and_python() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let m = Mixed::create(&redis_server, 28920, dir.path());
    let ports = m.ports();
    // Which kind serves each key the flow writes: both must.
    let podium_ports: Vec<u16> = m.podium.iter().map(|n| n.port).collect();
    let mut kinds = Vec::new();
    for key in [
        "lb:{global}",
        "lb:{weekly}",
        "lb:{friends:alice}",
        "lb:{friends:bob}",
        "lb:{friends:carol}",
        "profile:{bob}",
        "profile:{carol}",
    ] {
        let (served_by, _) = routed(ports[0], &["EXISTS", key]);
        kinds.push(podium_ports.contains(&served_by));
    }
    assert!(kinds.contains(&true) && kinds.contains(&false), "{kinds:?}");
    let mut c = Command::new(&python);
    c.args(["-c", LEADERBOARD, &ports[1].to_string()]);
    let ran = run(c, 60);
    assert!(ran.ok, "{ran}");
    assert_eq!(ran.stdout, LEADERBOARD_WANT, "{ran}");
}
