//! The append-only file, end to end: crash recovery under `appendfsync always` (SIGKILL at
//! random moments), truncated and corrupted files, rewrites under load, CONFIG SET appendonly,
//! INFO persistence, and compatibility with redis-server 7.0 in both directions.

use crate::common;

use common::{require_tool, Launch, Podium};
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Start a server program on `dir` (its output goes to `<dir>.<port>.log`) and wait until it
/// has loaded its AOF; Err(log) if it exits before that.
fn start_prog(prog: &str, dir: &Path, extra: &[&str]) -> Result<Podium, String> {
    let mut args = vec!["--dir", dir.to_str().expect("UTF-8 dir")];
    // Any program but Podium is a redis-server here (`require_tool` gives its path).
    if prog != env!("CARGO_BIN_EXE_podium") {
        args.extend(["--save", "", "--aof-use-rdb-preamble", "no"]);
    }
    args.extend_from_slice(extra);
    // Podium binds before it loads the AOF: being ours is not enough, wait for it to load.
    Launch::prog(prog)
        .args(&args)
        .log(dir)
        .wait_loaded()
        .timeout(Duration::from_secs(20))
        .try_start()
}

fn start(dir: &Path, extra: &[&str]) -> Result<Podium, String> {
    start_prog(env!("CARGO_BIN_EXE_podium"), dir, extra)
}

fn aof_dir(dir: &Path) -> PathBuf {
    dir.join("appendonlydir")
}

fn incr_file(dir: &Path) -> PathBuf {
    let m = std::fs::read_to_string(aof_dir(dir).join("appendonly.aof.manifest")).unwrap();
    let name = m
        .lines()
        .rfind(|l| l.ends_with("type i"))
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .to_string();
    aof_dir(dir).join(name)
}

fn info_field(c: &mut redis::Connection, name: &str) -> String {
    let info: String = redis::cmd("INFO").arg("persistence").query(c).unwrap();
    info.lines()
        .find_map(|l| {
            l.strip_prefix(&format!("{name}:"))
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_else(|| panic!("no {name} in INFO: {info}"))
}

fn wait_rewrite_done(c: &mut redis::Connection) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while info_field(c, "aof_rewrite_in_progress") != "0"
        || info_field(c, "aof_rewrite_scheduled") != "0"
    {
        assert!(Instant::now() < deadline, "rewrite did not finish");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn resp(parts: &[&str]) -> Vec<u8> {
    let mut v = format!("*{}\r\n", parts.len()).into_bytes();
    for p in parts {
        v.extend_from_slice(format!("${}\r\n{}\r\n", p.len(), p).as_bytes());
    }
    v
}

fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("podium-aof-")
        .tempdir()
        .unwrap()
}

// ---------------------------------------------------------------------------------------------
// Crash recovery.

/// One client's view of its keys: zsets `z{c}:{i}` (member -> integer score) and hashes
/// `h{c}:{i}` (field -> value), each with a has-TTL flag.
#[derive(Clone, Debug, Default, PartialEq)]
struct KeyState {
    vals: BTreeMap<String, String>,
    ttl: bool,
}

#[derive(Clone, Debug)]
enum Op {
    ZIncr(String, String, i64),
    ZAdd(String, String, i64),
    HSet(String, String, String),
    Expire(String),
}

fn apply(model: &mut BTreeMap<String, KeyState>, op: &Op) {
    match op {
        Op::ZIncr(k, m, by) => {
            let e = model.entry(k.clone()).or_default();
            let cur: i64 = e.vals.get(m).map(|s| s.parse().unwrap()).unwrap_or(0);
            e.vals.insert(m.clone(), (cur + by).to_string());
        }
        Op::ZAdd(k, m, s) => {
            model
                .entry(k.clone())
                .or_default()
                .vals
                .insert(m.clone(), s.to_string());
        }
        Op::HSet(k, f, v) => {
            model
                .entry(k.clone())
                .or_default()
                .vals
                .insert(f.clone(), v.clone());
        }
        Op::Expire(k) => {
            if let Some(e) = model.get_mut(k) {
                e.ttl = true;
            }
        }
    }
}

const MEMBERS: [&str; 4] = ["m0", "m1", "m2", "m3"];

fn keys_of(client: usize) -> Vec<String> {
    (0..2)
        .flat_map(|i| [format!("z{client}:{i}"), format!("h{client}:{i}")])
        .collect()
}

fn read_key(c: &mut redis::Connection, key: &str) -> KeyState {
    let mut st = KeyState::default();
    for m in MEMBERS {
        if key.starts_with('z') {
            let s: Option<f64> = redis::cmd("ZSCORE").arg(key).arg(m).query(c).unwrap();
            if let Some(s) = s {
                st.vals.insert(m.to_string(), (s as i64).to_string());
            }
        } else {
            let v: Option<String> = redis::cmd("HGET").arg(key).arg(m).query(c).unwrap();
            if let Some(v) = v {
                st.vals.insert(m.to_string(), v);
            }
        }
    }
    let pttl: i64 = redis::cmd("PTTL").arg(key).query(c).unwrap();
    st.ttl = pttl > 0;
    st
}

fn client_loop(
    port: u16,
    client: usize,
    seed: u64,
    stop: Arc<AtomicBool>,
) -> (Vec<Op>, Option<Op>) {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let mut done = Vec::new();
    let Ok(cl) = redis::Client::open(format!("redis://127.0.0.1:{port}/")) else {
        return (done, None);
    };
    let Ok(mut c) = cl.get_connection_with_timeout(Duration::from_secs(5)) else {
        return (done, None);
    };
    let keys = keys_of(client);
    while !stop.load(Ordering::Relaxed) {
        let key = keys[rng.gen_range(0..keys.len())].clone();
        let m = MEMBERS[rng.gen_range(0..MEMBERS.len())].to_string();
        let op = if rng.gen_ratio(1, 10) {
            Op::Expire(key)
        } else if key.starts_with('z') {
            if rng.gen_ratio(1, 4) {
                Op::ZAdd(key, m, rng.gen_range(-100..100))
            } else {
                Op::ZIncr(key, m, rng.gen_range(1..10))
            }
        } else {
            Op::HSet(key, m, format!("v{}", rng.gen::<u32>()))
        };
        let r: redis::RedisResult<redis::Value> = match &op {
            Op::ZIncr(k, m, by) => redis::cmd("ZINCRBY").arg(k).arg(by).arg(m).query(&mut c),
            Op::ZAdd(k, m, s) => redis::cmd("ZADD").arg(k).arg(s).arg(m).query(&mut c),
            Op::HSet(k, f, v) => redis::cmd("HSET").arg(k).arg(f).arg(v).query(&mut c),
            Op::Expire(k) => redis::cmd("EXPIRE").arg(k).arg(100_000).query(&mut c),
        };
        match r {
            Ok(redis::Value::ServerError(e)) => panic!("server error for {op:?}: {e:?}"),
            Ok(_) => done.push(op),
            // The server died: this op may or may not have been applied.
            Err(_) => return (done, Some(op)),
        }
    }
    (done, None)
}

#[test]
fn crash_recovery_sigkill_under_appendfsync_always() {
    let tmp = tempdir();
    let dir = tmp.path().join("data");
    std::fs::create_dir_all(&dir).unwrap();
    const CLIENTS: usize = 3;
    let mut model: BTreeMap<String, KeyState> = BTreeMap::new();
    let mut pending: Vec<Option<Op>> = vec![None; CLIENTS];
    let mut rng = rand::rngs::SmallRng::seed_from_u64(0x5eed);
    let mut total_ops = 0;
    const ROUNDS: usize = 22;
    for round in 0..=ROUNDS {
        let srv = start(&dir, &["--appendonly", "yes", "--appendfsync", "always"]).unwrap();
        let mut c = srv.con();
        // Every acknowledged write is there; an op in flight at the kill is there or not.
        for (cl, p) in pending.iter_mut().enumerate() {
            for key in keys_of(cl) {
                let actual = read_key(&mut c, &key);
                let expect = model.get(&key).cloned().unwrap_or_default();
                let mut with = model.clone();
                if let Some(op) = p.as_ref() {
                    apply(&mut with, op);
                }
                let expect_with = with.get(&key).cloned().unwrap_or_default();
                assert!(
                    actual == expect || actual == expect_with,
                    "round {round}, key {key}: got {actual:?}, expected {expect:?} (or {expect_with:?} with {p:?})"
                );
                if actual.vals.is_empty() {
                    model.remove(&key);
                } else {
                    model.insert(key, actual);
                }
            }
            *p = None;
        }
        if round == ROUNDS {
            srv.stop();
            break;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let handles: Vec<_> = (0..CLIENTS)
            .map(|cl| {
                let stop = stop.clone();
                let port = srv.port;
                let seed = rng.gen();
                std::thread::spawn(move || client_loop(port, cl, seed, stop))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(rng.gen_range(5..60)));
        if round % 3 == 1 {
            // A rewrite in flight when the kill comes (or just finished) must not lose anything.
            let _: redis::RedisResult<String> = redis::cmd("BGREWRITEAOF").query(&mut c);
            std::thread::sleep(Duration::from_millis(rng.gen_range(0..20)));
        }
        srv.kill9();
        stop.store(true, Ordering::Relaxed);
        for (cl, h) in handles.into_iter().enumerate() {
            let (done, p) = h.join().unwrap();
            total_ops += done.len();
            for op in &done {
                apply(&mut model, op);
            }
            pending[cl] = p;
        }
    }
    assert!(
        total_ops > 100,
        "too few writes to mean anything: {total_ops}"
    );
    assert!(model.values().any(|k| k.ttl), "no TTL ever set");
}

/// Counters incremented while rewrites run: the base (a snapshot) plus the new incremental
/// file must count every increment exactly once.
#[test]
fn rewrite_under_load_counts_every_increment_once() {
    let tmp = tempdir();
    let dir = tmp.path().join("data");
    std::fs::create_dir_all(&dir).unwrap();
    let srv = start(&dir, &["--appendonly", "yes", "--appendfsync", "always"]).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..3)
        .map(|t| {
            let stop = stop.clone();
            let port = srv.port;
            std::thread::spawn(move || {
                let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                    .unwrap()
                    .get_connection()
                    .unwrap();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let _: f64 = redis::cmd("ZINCRBY")
                        .arg("lb")
                        .arg(1)
                        .arg(format!("m{t}"))
                        .query(&mut c)
                        .unwrap();
                    let _: i64 = redis::cmd("HSET")
                        .arg(format!("h{}", n % 50))
                        .arg("f")
                        .arg(n)
                        .query(&mut c)
                        .unwrap();
                    n += 1;
                }
                n
            })
        })
        .collect();
    let mut c = srv.con();
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(30));
        let r: String = redis::cmd("BGREWRITEAOF").query(&mut c).unwrap();
        assert_eq!(r, "Background append only file rewriting started");
        wait_rewrite_done(&mut c);
    }
    stop.store(true, Ordering::Relaxed);
    let counts: Vec<u64> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(info_field(&mut c, "aof_rewrites"), "5");
    assert_eq!(info_field(&mut c, "aof_last_bgrewrite_status"), "ok");
    drop(c);
    srv.kill9();
    // Only the files of the current manifest remain.
    let mut files: Vec<String> = std::fs::read_dir(aof_dir(&dir))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "appendonly.aof.6.base.rdb",
            "appendonly.aof.6.incr.aof",
            "appendonly.aof.manifest"
        ]
    );
    let srv = start(&dir, &["--appendonly", "yes"]).unwrap();
    let mut c = srv.con();
    for (t, n) in counts.iter().enumerate() {
        let s: f64 = redis::cmd("ZSCORE")
            .arg("lb")
            .arg(format!("m{t}"))
            .query(&mut c)
            .unwrap();
        assert_eq!(s as u64, *n, "member m{t}");
    }
    srv.stop();
}

// ---------------------------------------------------------------------------------------------
// Damaged files.

/// Write a small AOF with Podium; returns (the incremental file's bytes, offset of the last
/// command).
fn write_sample(dir: &Path) -> (Vec<u8>, usize) {
    let srv = start(dir, &["--appendonly", "yes"]).unwrap();
    let mut c = srv.con();
    let _: () = redis::cmd("SET").arg("k1").arg("v1").query(&mut c).unwrap();
    let _: i64 = redis::cmd("ZADD")
        .arg("z")
        .arg(1.5)
        .arg("a")
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("last")
        .arg("the last value")
        .query(&mut c)
        .unwrap();
    drop(c);
    srv.stop();
    let data = std::fs::read(incr_file(dir)).unwrap();
    let needle = resp(&["SET", "last", "the last value"]);
    let at = data
        .windows(needle.len())
        .rposition(|w| w == needle)
        .expect("last command in the file");
    assert_eq!(at + needle.len(), data.len());
    (data, at)
}

#[test]
fn truncated_last_command_loads_at_every_offset() {
    let tmp = tempdir();
    let dir = tmp.path().join("data");
    std::fs::create_dir_all(&dir).unwrap();
    let (data, at) = write_sample(&dir);
    let path = incr_file(&dir);
    for cut in at..data.len() {
        std::fs::write(&path, &data[..cut]).unwrap();
        let srv =
            start(&dir, &["--appendonly", "yes"]).unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        let mut c = srv.con();
        let v: Option<String> = redis::cmd("GET").arg("k1").query(&mut c).unwrap();
        assert_eq!(v.as_deref(), Some("v1"), "cut at {cut}");
        let v: Option<String> = redis::cmd("GET").arg("last").query(&mut c).unwrap();
        assert_eq!(v, None, "cut at {cut}");
        drop(c);
        srv.kill9();
        // The partial command was cut off the file.
        assert_eq!(
            std::fs::metadata(&path).unwrap().len() as usize,
            at,
            "cut at {cut}"
        );
    }
    // With aof-load-truncated no, a truncated file is refused.
    std::fs::write(&path, &data[..data.len() - 3]).unwrap();
    let err = start(&dir, &["--appendonly", "yes", "--aof-load-truncated", "no"])
        .err()
        .expect("must refuse");
    assert!(
        err.contains("Unexpected end of file") && err.contains("appendonly.aof.1.incr.aof"),
        "{err}"
    );
    // And the intact file still loads everything.
    std::fs::write(&path, &data).unwrap();
    let srv = start(&dir, &["--appendonly", "yes"]).unwrap();
    let v: Option<String> = redis::cmd("GET").arg("last").query(&mut srv.con()).unwrap();
    assert_eq!(v.as_deref(), Some("the last value"));
    srv.stop();
}

#[test]
fn corrupted_byte_mid_file_refuses_to_start() {
    let tmp = tempdir();
    let dir = tmp.path().join("data");
    std::fs::create_dir_all(&dir).unwrap();
    let (data, _) = write_sample(&dir);
    let path = incr_file(&dir);
    // The ZADD in the middle: damage its structure in three ways.
    let zadd = resp(&["ZADD", "z", "1.5", "a"]);
    let z = data.windows(zadd.len()).position(|w| w == zadd).unwrap();
    for (off, byte) in [(0usize, b'?'), (4, b'#'), (5, b'9')] {
        let mut bad = data.clone();
        bad[z + off] = byte;
        std::fs::write(&path, &bad).unwrap();
        let err = start(&dir, &["--appendonly", "yes"])
            .err()
            .unwrap_or_else(|| panic!("flip at {} loaded", z + off));
        assert!(
            err.contains("Bad file format")
                && err.contains("appendonly.aof.1.incr.aof")
                && err.contains("offset"),
            "{err}"
        );
    }
    // An unknown command is refused too, naming it.
    let mut bad = data.clone();
    bad.splice(z..z, resp(&["NOSUCHCMD", "x"]));
    std::fs::write(&path, &bad).unwrap();
    let err = start(&dir, &["--appendonly", "yes"])
        .err()
        .expect("must refuse");
    assert!(err.contains("Unknown command 'NOSUCHCMD'"), "{err}");
}

#[test]
fn transactions_replay_as_a_unit_and_an_unfinished_one_is_dropped() {
    let tmp = tempdir();
    let dir = tmp.path().join("data");
    let ad = aof_dir(&dir);
    std::fs::create_dir_all(&ad).unwrap();
    std::fs::write(
        ad.join("appendonly.aof.manifest"),
        "file appendonly.aof.1.base.aof seq 1 type b\nfile appendonly.aof.1.incr.aof seq 1 type i\n",
    )
    .unwrap();
    let mut base = resp(&["SELECT", "0"]);
    base.extend(resp(&["SET", "b", "base"]));
    std::fs::write(ad.join("appendonly.aof.1.base.aof"), &base).unwrap();
    let mut incr = resp(&["SELECT", "2"]);
    incr.extend(resp(&["MULTI"]));
    incr.extend(resp(&["SET", "t1", "x"]));
    incr.extend(resp(&["ZADD", "t2", "3", "m"]));
    incr.extend(resp(&["EXEC"]));
    let good = incr.len();
    incr.extend(resp(&["MULTI"]));
    incr.extend(resp(&["SET", "t3", "never"]));
    std::fs::write(ad.join("appendonly.aof.1.incr.aof"), &incr).unwrap();
    let srv = start(&dir, &["--appendonly", "yes"]).unwrap();
    let mut c = srv.con();
    let v: Option<String> = redis::cmd("GET").arg("b").query(&mut c).unwrap();
    assert_eq!(v.as_deref(), Some("base"));
    let _: () = redis::cmd("SELECT").arg(2).query(&mut c).unwrap();
    let v: Option<String> = redis::cmd("GET").arg("t1").query(&mut c).unwrap();
    assert_eq!(v.as_deref(), Some("x"));
    let s: Option<f64> = redis::cmd("ZSCORE")
        .arg("t2")
        .arg("m")
        .query(&mut c)
        .unwrap();
    assert_eq!(s, Some(3.0));
    let v: Option<String> = redis::cmd("GET").arg("t3").query(&mut c).unwrap();
    assert_eq!(v, None);
    drop(c);
    srv.stop();
    assert_eq!(
        std::fs::metadata(ad.join("appendonly.aof.1.incr.aof"))
            .unwrap()
            .len() as usize,
        good
    );
}

// ---------------------------------------------------------------------------------------------
// Runtime control and INFO.

#[test]
fn config_set_appendonly_at_runtime_and_info() {
    let tmp = tempdir();
    let dir = tmp.path().join("data");
    std::fs::create_dir_all(&dir).unwrap();
    // `always`: the SIGKILL below must not lose the last acknowledged write.
    let srv = start(&dir, &["--appendfsync", "always"]).unwrap();
    let mut c = srv.con();
    assert_eq!(info_field(&mut c, "aof_enabled"), "0");
    for f in [
        "rdb_changes_since_last_save",
        "rdb_bgsave_in_progress",
        "rdb_last_save_time",
        "rdb_last_bgsave_status",
    ] {
        info_field(&mut c, f);
    }
    for i in 0..100 {
        let _: f64 = redis::cmd("ZINCRBY")
            .arg("lb")
            .arg(i)
            .arg(format!("m{}", i % 7))
            .query(&mut c)
            .unwrap();
    }
    let _: () = redis::cmd("SET").arg("ttl").arg("v").query(&mut c).unwrap();
    let _: i64 = redis::cmd("EXPIRE")
        .arg("ttl")
        .arg(1000)
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendonly")
        .arg("yes")
        .query(&mut c)
        .unwrap();
    wait_rewrite_done(&mut c);
    assert_eq!(info_field(&mut c, "aof_enabled"), "1");
    let _: f64 = redis::cmd("ZINCRBY")
        .arg("lb")
        .arg(1000)
        .arg("m0")
        .query(&mut c)
        .unwrap();
    for f in [
        "aof_rewrite_in_progress",
        "aof_rewrite_scheduled",
        "aof_last_rewrite_time_sec",
        "aof_current_rewrite_time_sec",
        "aof_last_bgrewrite_status",
        "aof_rewrites",
        "aof_last_write_status",
        "aof_last_cow_size",
        "module_fork_in_progress",
        "module_fork_last_cow_size",
        "aof_current_size",
        "aof_base_size",
        "aof_pending_rewrite",
        "aof_buffer_length",
        "aof_pending_bio_fsync",
        "aof_delayed_fsync",
        "loading",
    ] {
        info_field(&mut c, f);
    }
    assert_eq!(info_field(&mut c, "aof_last_write_status"), "ok");
    assert!(info_field(&mut c, "aof_base_size").parse::<u64>().unwrap() > 0);
    let before: Vec<(String, f64)> = (0..7)
        .map(|i| {
            let m = format!("m{i}");
            let s: f64 = redis::cmd("ZSCORE")
                .arg("lb")
                .arg(&m)
                .query(&mut c)
                .unwrap();
            (m, s)
        })
        .collect();
    drop(c);
    srv.kill9();
    let srv = start(&dir, &["--appendonly", "yes"]).unwrap();
    let mut c = srv.con();
    for (m, s) in &before {
        let got: f64 = redis::cmd("ZSCORE").arg("lb").arg(m).query(&mut c).unwrap();
        assert_eq!(got, *s, "{m}");
    }
    let pttl: i64 = redis::cmd("PTTL").arg("ttl").query(&mut c).unwrap();
    assert!(pttl > 900_000, "{pttl}");
    // Turning it off stops logging: writes after that are not replayed.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendonly")
        .arg("no")
        .query(&mut c)
        .unwrap();
    assert_eq!(info_field(&mut c, "aof_enabled"), "0");
    let _: () = redis::cmd("SET")
        .arg("after-off")
        .arg("1")
        .query(&mut c)
        .unwrap();
    drop(c);
    srv.stop();
    let srv = start(&dir, &["--appendonly", "yes"]).unwrap();
    let mut c = srv.con();
    let v: Option<String> = redis::cmd("GET").arg("after-off").query(&mut c).unwrap();
    assert_eq!(v, None);
    let got: f64 = redis::cmd("ZSCORE")
        .arg("lb")
        .arg("m0")
        .query(&mut c)
        .unwrap();
    assert_eq!(got, before[0].1);
    srv.stop();
}

// ---------------------------------------------------------------------------------------------
// redis-server 7.0 compatibility.

fn fill(c: &mut redis::Connection) {
    let _: () = redis::cmd("SET")
        .arg("s")
        .arg("string value")
        .query(c)
        .unwrap();
    let _: i64 = redis::cmd("ZADD")
        .arg("z")
        .arg(1.5)
        .arg("a")
        .arg(-2)
        .arg("b")
        .arg("inf")
        .arg("c")
        .query(c)
        .unwrap();
    let _: f64 = redis::cmd("ZINCRBY")
        .arg("z")
        .arg(0.25)
        .arg("a")
        .query(c)
        .unwrap();
    let _: i64 = redis::cmd("HSET")
        .arg("h")
        .arg("f1")
        .arg("v1")
        .arg("f2")
        .arg("v2")
        .query(c)
        .unwrap();
    let _: i64 = redis::cmd("EXPIRE").arg("h").arg(5000).query(c).unwrap();
    let _: () = redis::cmd("SELECT").arg(5).query(c).unwrap();
    let _: () = redis::cmd("SET").arg("in5").arg("five").query(c).unwrap();
    let _: () = redis::cmd("SELECT").arg(0).query(c).unwrap();
}

fn check(c: &mut redis::Connection, who: &str) {
    let v: Option<String> = redis::cmd("GET").arg("s").query(c).unwrap();
    assert_eq!(v.as_deref(), Some("string value"), "{who}");
    for (m, s) in [("a", 1.75), ("b", -2.0), ("c", f64::INFINITY)] {
        let got: Option<f64> = redis::cmd("ZSCORE").arg("z").arg(m).query(c).unwrap();
        assert_eq!(got, Some(s), "{who}: z {m}");
    }
    let v: Option<String> = redis::cmd("HGET").arg("h").arg("f2").query(c).unwrap();
    assert_eq!(v.as_deref(), Some("v2"), "{who}");
    let pttl: i64 = redis::cmd("PTTL").arg("h").query(c).unwrap();
    assert!(pttl > 4_000_000, "{who}: pttl {pttl}");
    let _: () = redis::cmd("SELECT").arg(5).query(c).unwrap();
    let v: Option<String> = redis::cmd("GET").arg("in5").query(c).unwrap();
    assert_eq!(v.as_deref(), Some("five"), "{who}");
    let _: () = redis::cmd("SELECT").arg(0).query(c).unwrap();
}

fn check_aof_tool(dir: &Path) {
    let Some(check_aof) = require_tool("redis-check-aof") else {
        return;
    };
    let out = Command::new(check_aof)
        .arg(aof_dir(dir).join("appendonly.aof.manifest"))
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && text.contains("All AOF files and manifest are valid"),
        "{text}"
    );
}

#[test]
fn redis_server_loads_what_podium_wrote_and_vice_versa() {
    let Some(redis_server) = require_tool("redis-server") else {
        return;
    };
    // Podium writes (incremental file, then a rewrite, then more incremental) -> Redis loads.
    let tmp = tempdir();
    let dir = tmp.path().join("p");
    std::fs::create_dir_all(&dir).unwrap();
    let srv = start(&dir, &["--appendonly", "yes"]).unwrap();
    let mut c = srv.con();
    fill(&mut c);
    let _: String = redis::cmd("BGREWRITEAOF").query(&mut c).unwrap();
    wait_rewrite_done(&mut c);
    let _: () = redis::cmd("SET")
        .arg("after")
        .arg("rewrite")
        .query(&mut c)
        .unwrap();
    drop(c);
    srv.stop();
    check_aof_tool(&dir);
    let redis = start_prog(&redis_server, &dir, &["--appendonly", "yes"]).unwrap();
    let mut c = redis.con();
    check(&mut c, "redis loading podium's AOF");
    let v: Option<String> = redis::cmd("GET").arg("after").query(&mut c).unwrap();
    assert_eq!(v.as_deref(), Some("rewrite"));
    drop(c);
    redis.stop();

    // Redis writes -> Podium loads.
    let dir = tmp.path().join("r");
    std::fs::create_dir_all(&dir).unwrap();
    let redis = start_prog(
        &redis_server,
        &dir,
        &["--appendonly", "yes", "--appendfsync", "always"],
    )
    .unwrap();
    let mut c = redis.con();
    fill(&mut c);
    let _: String = redis::cmd("BGREWRITEAOF").query(&mut c).unwrap();
    wait_rewrite_done(&mut c);
    let _: () = redis::cmd("SET")
        .arg("after")
        .arg("rewrite")
        .query(&mut c)
        .unwrap();
    drop(c);
    redis.stop();
    let srv = start(&dir, &["--appendonly", "yes"]).unwrap();
    let mut c = srv.con();
    check(&mut c, "podium loading redis's AOF");
    let v: Option<String> = redis::cmd("GET").arg("after").query(&mut c).unwrap();
    assert_eq!(v.as_deref(), Some("rewrite"));
    drop(c);
    srv.stop();
}

#[test]
fn automatic_rewrite_when_the_aof_doubles() {
    let tmp = tempdir();
    let dir = tmp.path().join("data");
    std::fs::create_dir_all(&dir).unwrap();
    let srv = start(
        &dir,
        &[
            "--appendonly",
            "yes",
            "--auto-aof-rewrite-percentage",
            "100",
            "--auto-aof-rewrite-min-size",
            "4096",
        ],
    )
    .unwrap();
    let mut c = srv.con();
    // Many updates of few members: the rewritten AOF is much smaller than the log.
    for i in 0..2000 {
        let _: f64 = redis::cmd("ZINCRBY")
            .arg("lb")
            .arg(1)
            .arg(format!("m{}", i % 10))
            .query(&mut c)
            .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while info_field(&mut c, "aof_rewrites") == "0" {
        assert!(Instant::now() < deadline, "no automatic rewrite");
        std::thread::sleep(Duration::from_millis(20));
    }
    wait_rewrite_done(&mut c);
    // The base written by the rewrite is compact: one ZADD of 10 members, not 2000 commands.
    let base: u64 = info_field(&mut c, "aof_base_size").parse().unwrap();
    assert!(base > 0 && base < 1000, "base not compacted: {base} bytes");
    drop(c);
    srv.kill9();
    let srv = start(&dir, &["--appendonly", "yes"]).unwrap();
    let mut c = srv.con();
    for m in 0..10 {
        let s: f64 = redis::cmd("ZSCORE")
            .arg("lb")
            .arg(format!("m{m}"))
            .query(&mut c)
            .unwrap();
        assert_eq!(s, 200.0);
    }
    srv.stop();
}

/// The child processes of `pid` (every thread's `children` list in /proc).
fn children_of(pid: u32) -> Vec<i32> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in rd.flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
                out.extend(s.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
            }
        }
    }
    out
}

fn manifest_text(dir: &Path) -> String {
    std::fs::read_to_string(aof_dir(dir).join("appendonly.aof.manifest")).unwrap()
}

/// A rewrite runs in a forked child, as Redis's: an operator (or the OOM killer) killing it
/// costs a new incremental file and nothing else, the server counts the failure, removes the
/// child's temporary file, and the next rewrite folds everything into one base.
#[test]
fn a_killed_rewrite_child_loses_nothing() {
    let tmp = tempdir();
    let dir = tmp.path().join("data");
    std::fs::create_dir_all(&dir).unwrap();
    let srv = start(
        &dir,
        &["--appendonly", "yes", "--auto-aof-rewrite-percentage", "0"],
    )
    .unwrap();
    let mut c = srv.con();
    for i in 0..50 {
        let _: f64 = redis::cmd("ZINCRBY")
            .arg("lb")
            .arg(i)
            .arg(format!("m{i}"))
            .query(&mut c)
            .unwrap();
    }
    // A child that takes 50 ms per key, to be killed mid-way.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("rdb-key-save-delay")
        .arg(50_000)
        .query(&mut c)
        .unwrap();
    let _: String = redis::cmd("BGREWRITEAOF").query(&mut c).unwrap();
    assert_eq!(info_field(&mut c, "aof_rewrite_in_progress"), "1");
    let err = redis::cmd("BGREWRITEAOF")
        .query::<String>(&mut c)
        .unwrap_err();
    assert!(err.to_string().contains("already in progress"), "{err}");
    let kids = children_of(srv.pid());
    assert_eq!(kids.len(), 1, "one rewrite child: {kids:?}");
    // Writes go on while it runs; they land in the new incremental file.
    for i in 50..80 {
        let _: f64 = redis::cmd("ZINCRBY")
            .arg("lb")
            .arg(i)
            .arg(format!("m{i}"))
            .query(&mut c)
            .unwrap();
    }
    // SAFETY: kill(2) of the server's child, found above.
    unsafe {
        libc::kill(kids[0], libc::SIGKILL);
    }
    wait_rewrite_done(&mut c);
    assert_eq!(info_field(&mut c, "aof_last_bgrewrite_status"), "err");
    assert_eq!(info_field(&mut c, "aof_rewrites_consecutive_failures"), "1");
    assert_eq!(
        manifest_text(&dir),
        "file appendonly.aof.1.base.rdb seq 1 type b\n\
         file appendonly.aof.1.incr.aof seq 1 type i\n\
         file appendonly.aof.2.incr.aof seq 2 type i\n"
    );
    let leftovers: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("temp-"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
    // The next rewrite succeeds and leaves one base and one incremental file.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("rdb-key-save-delay")
        .arg(0)
        .query(&mut c)
        .unwrap();
    let _: String = redis::cmd("BGREWRITEAOF").query(&mut c).unwrap();
    wait_rewrite_done(&mut c);
    assert_eq!(info_field(&mut c, "aof_last_bgrewrite_status"), "ok");
    assert_eq!(info_field(&mut c, "aof_rewrites_consecutive_failures"), "0");
    assert_eq!(
        manifest_text(&dir),
        "file appendonly.aof.2.base.rdb seq 2 type b\n\
         file appendonly.aof.3.incr.aof seq 3 type i\n"
    );
    let _: f64 = redis::cmd("ZINCRBY")
        .arg("lb")
        .arg(1000)
        .arg("m0")
        .query(&mut c)
        .unwrap();
    drop(c);
    srv.kill9();
    let srv = start(&dir, &["--appendonly", "yes"]).unwrap();
    let mut c = srv.con();
    let n: i64 = redis::cmd("ZCARD").arg("lb").query(&mut c).unwrap();
    assert_eq!(n, 80);
    for i in 1..80 {
        let s: f64 = redis::cmd("ZSCORE")
            .arg("lb")
            .arg(format!("m{i}"))
            .query(&mut c)
            .unwrap();
        assert_eq!(s, i as f64);
    }
    let s: f64 = redis::cmd("ZSCORE")
        .arg("lb")
        .arg("m0")
        .query(&mut c)
        .unwrap();
    assert_eq!(s, 1000.0);
    srv.stop();
}

/// Nothing expires while the AOF loads (as in Redis): a key that expired between the write and
/// the restart must not be resurrected by replaying a later command on it without its TTL.
#[test]
fn key_expired_before_restart_stays_gone() {
    let tmp = tempdir();
    let dir = tmp.path().join("data");
    std::fs::create_dir_all(&dir).unwrap();
    let srv = start(&dir, &["--appendonly", "yes"]).unwrap();
    let mut c = srv.con();
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg(5)
        .arg("PX")
        .arg(300)
        .query(&mut c)
        .unwrap();
    let n: i64 = redis::cmd("INCR").arg("k").query(&mut c).unwrap();
    assert_eq!(n, 6);
    let _: () = redis::cmd("SET")
        .arg("keep")
        .arg(1)
        .arg("PX")
        .arg(100_000)
        .query(&mut c)
        .unwrap();
    let _: i64 = redis::cmd("INCR").arg("keep").query(&mut c).unwrap();
    drop(c);
    srv.stop();
    std::thread::sleep(Duration::from_millis(400));
    let srv = start(&dir, &["--appendonly", "yes"]).unwrap();
    let mut c = srv.con();
    let v: Option<String> = redis::cmd("GET").arg("k").query(&mut c).unwrap();
    assert_eq!(v, None);
    let v: Option<String> = redis::cmd("GET").arg("keep").query(&mut c).unwrap();
    assert_eq!(v.as_deref(), Some("2"));
    let pttl: i64 = redis::cmd("PTTL").arg("keep").query(&mut c).unwrap();
    assert!(pttl > 90_000, "{pttl}");
    srv.stop();
}

/// Under `appendfsync everysec`, a SIGKILL (the process dies, the kernel keeps its page cache)
/// may only lose the writes still in Podium's own buffer, which the writer hands to the kernel
/// every few milliseconds: every write acknowledged well before the kill must come back.
#[test]
fn sigkill_under_everysec_loses_at_most_the_last_moments() {
    let tmp = tempdir();
    let dir = tmp.path().join("data");
    std::fs::create_dir_all(&dir).unwrap();
    for round in 0..5u64 {
        let srv = start(&dir, &["--appendonly", "yes", "--appendfsync", "everysec"]).unwrap();
        let port = srv.port;
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                    .unwrap()
                    .get_connection()
                    .unwrap();
                // (sequence number, when it was acknowledged)
                let mut acked: Vec<(u64, Instant)> = Vec::new();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let r: redis::RedisResult<i64> = redis::cmd("ZADD")
                        .arg(format!("board{round}"))
                        .arg(i)
                        .arg(format!("m{i}"))
                        .query(&mut c);
                    if r.is_err() {
                        break;
                    }
                    acked.push((i, Instant::now()));
                    i += 1;
                }
                acked
            })
        };
        std::thread::sleep(Duration::from_millis(300 + round * 50));
        let killed_at = Instant::now();
        srv.kill9();
        stop.store(true, Ordering::Relaxed);
        let acked = writer.join().unwrap();
        assert!(acked.len() > 100, "too few writes: {}", acked.len());
        let srv = start(&dir, &["--appendonly", "yes", "--appendfsync", "everysec"]).unwrap();
        let mut c = srv.con();
        let card: usize = redis::cmd("ZCARD")
            .arg(format!("board{round}"))
            .query(&mut c)
            .unwrap();
        // Acknowledged at least 100 ms before the kill: must be there.
        let must = acked
            .iter()
            .filter(|(_, t)| killed_at.duration_since(*t) > Duration::from_millis(100))
            .count();
        assert!(card >= must, "round {round}: {card} members after restart, {must} were acknowledged >100 ms before the kill");
        // Members come back as a prefix: nothing in the middle is lost.
        if card > 0 {
            let last: Option<f64> = redis::cmd("ZSCORE")
                .arg(format!("board{round}"))
                .arg(format!("m{}", card - 1))
                .query(&mut c)
                .unwrap();
            assert_eq!(last, Some((card - 1) as f64));
        }
        srv.stop();
    }
}

/// A disk that fills up under `everysec`: the AOF write fails with ENOSPC (simulated with
/// `aof-max-size`, as Redis's own tests do), write commands and PING are refused with Redis's
/// `-MISCONF` text while reads go on, INFO says `aof_last_write_status:err`; once writing works
/// again the buffered commands reach the file exactly once and writes are accepted.
#[test]
fn disk_full_under_everysec_refuses_writes_until_the_aof_can_be_written() {
    let tmp = tempdir();
    let dir = tmp.path().join("data");
    std::fs::create_dir_all(&dir).unwrap();
    let srv = start(&dir, &["--appendonly", "yes", "--appendfsync", "everysec"]).unwrap();
    let mut c = srv.con();
    let _: () = redis::cmd("SET").arg("k1").arg("v1").query(&mut c).unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("aof-max-size")
        .arg("1")
        .query(&mut c)
        .unwrap();
    // Acknowledged (everysec does not wait for the disk), then fails to reach the file.
    let _: () = redis::cmd("SET").arg("k2").arg("v2").query(&mut c).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut accepted_probes = 0;
    let err = loop {
        match redis::cmd("SET").arg("probe").arg("x").query::<()>(&mut c) {
            Err(e) => break e.to_string(),
            Ok(()) => {
                accepted_probes += 1;
                assert!(Instant::now() < deadline, "writes were never refused");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    assert!(
        err.contains("MISCONF")
            && err.contains("Errors writing to the AOF file: No space left on device"),
        "{err}"
    );
    let ping = redis::cmd("PING")
        .query::<String>(&mut c)
        .unwrap_err()
        .to_string();
    assert!(ping.contains("MISCONF"), "{ping}");
    let v: String = redis::cmd("GET").arg("k1").query(&mut c).unwrap();
    assert_eq!(v, "v1");
    assert_eq!(info_field(&mut c, "aof_last_write_status"), "err");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("aof-max-size")
        .arg("0")
        .query(&mut c)
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while redis::cmd("SET")
        .arg("k3")
        .arg("v3")
        .query::<()>(&mut c)
        .is_err()
    {
        assert!(Instant::now() < deadline, "writes stayed refused");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(info_field(&mut c, "aof_last_write_status"), "ok");
    drop(c);
    srv.stop();
    let log = std::fs::read(incr_file(&dir)).unwrap();
    let count = |needle: &[u8]| log.windows(needle.len()).filter(|w| *w == needle).count();
    assert_eq!(count(b"$2\r\nk2\r\n"), 1, "k2 logged exactly once");
    // Probes acknowledged before the failure was seen are logged; the refused one is not.
    assert_eq!(
        count(b"$5\r\nprobe\r\n"),
        accepted_probes,
        "refused writes are not logged"
    );
    let srv = start(&dir, &["--appendonly", "yes"]).unwrap();
    let mut c = srv.con();
    for (k, v) in [("k1", "v1"), ("k2", "v2"), ("k3", "v3")] {
        let got: String = redis::cmd("GET").arg(k).query(&mut c).unwrap();
        assert_eq!(got, v);
    }
}

/// A single-file AOF as Redis 6 wrote it (`<dir>/appendonly.aof`, no `appendonlydir`) is
/// upgraded on the first start, as Redis 7 does: it becomes the base of a new manifest, its
/// data loads, and later writes and restarts go through the multi-part layout. One that starts
/// with an RDB preamble is refused with an error naming it.
#[test]
fn single_file_aof_from_redis_6_is_upgraded() {
    let tmp = tempdir();
    let dir = tmp.path().join("data");
    std::fs::create_dir_all(&dir).unwrap();
    let mut old = Vec::new();
    for cmd in [
        &["SELECT", "0"][..],
        &["SET", "a", "1"],
        &["ZADD", "z", "1.5", "m"],
        &["SELECT", "3"],
        &["SET", "b", "2"],
    ] {
        old.extend(resp(cmd));
    }
    std::fs::write(dir.join("appendonly.aof"), &old).unwrap();
    let srv = start(&dir, &["--appendonly", "yes"]).unwrap();
    let mut c = srv.con();
    let a: String = redis::cmd("GET").arg("a").query(&mut c).unwrap();
    assert_eq!(a, "1");
    let z: f64 = redis::cmd("ZSCORE")
        .arg("z")
        .arg("m")
        .query(&mut c)
        .unwrap();
    assert_eq!(z, 1.5);
    let _: () = redis::cmd("SELECT").arg(3).query(&mut c).unwrap();
    let b: String = redis::cmd("GET").arg("b").query(&mut c).unwrap();
    assert_eq!(b, "2");
    let _: () = redis::cmd("SET").arg("c").arg("3").query(&mut c).unwrap();
    drop(c);
    srv.stop();
    assert!(!dir.join("appendonly.aof").exists(), "the old file moved");
    assert_eq!(
        std::fs::read(aof_dir(&dir).join("appendonly.aof")).unwrap(),
        old,
        "the old file is the base, unchanged"
    );
    let manifest = std::fs::read_to_string(aof_dir(&dir).join("appendonly.aof.manifest")).unwrap();
    assert!(
        manifest.contains("file appendonly.aof seq 1 type b"),
        "{manifest}"
    );
    let srv = start(&dir, &["--appendonly", "yes"]).unwrap();
    let mut c = srv.con();
    let _: () = redis::cmd("SELECT").arg(3).query(&mut c).unwrap();
    let got: (String, String) = redis::cmd("MGET").arg("b").arg("c").query(&mut c).unwrap();
    assert_eq!(got, ("2".to_string(), "3".to_string()));
    drop(c);
    srv.stop();

    // A damaged preamble is refused with an error naming it.
    let tmp = tempdir();
    let dir = tmp.path().join("data");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("appendonly.aof"), b"REDIS0009\xfa\x09redis-ver").unwrap();
    let err = start(&dir, &["--appendonly", "yes"])
        .err()
        .expect("refused");
    assert!(err.contains("RDB preamble"), "{err}");
}

/// AOFs with an RDB preamble, as redis-server writes them with `aof-use-rdb-preamble yes`:
/// a Redis 7 appendonlydir whose base is `.base.rdb`, and a Redis 6 single file (the RDB image
/// followed by commands) both load; Podium's own RDB base loads into redis-server.
#[test]
fn rdb_preamble_aofs_load_both_ways() {
    let Some(redis_server) = require_tool("redis-server") else {
        return;
    };
    let tmp = tempdir();
    let dir = tmp.path().join("r");
    std::fs::create_dir_all(&dir).unwrap();
    let redis = start_prog(
        &redis_server,
        &dir,
        &["--appendonly", "yes", "--aof-use-rdb-preamble", "yes"],
    )
    .unwrap();
    let mut c = redis.con();
    fill(&mut c);
    let _: String = redis::cmd("BGREWRITEAOF").query(&mut c).unwrap();
    wait_rewrite_done(&mut c);
    let _: () = redis::cmd("SET")
        .arg("after")
        .arg("rewrite")
        .query(&mut c)
        .unwrap();
    drop(c);
    redis.stop();
    let manifest = std::fs::read_to_string(aof_dir(&dir).join("appendonly.aof.manifest")).unwrap();
    let base = manifest
        .lines()
        .find(|l| l.ends_with("type b"))
        .and_then(|l| l.split(' ').nth(1))
        .unwrap()
        .to_string();
    assert!(base.ends_with(".base.rdb"), "{manifest}");
    let srv = start(&dir, &["--appendonly", "yes"]).unwrap();
    let mut c = srv.con();
    check(&mut c, "podium loading redis's .base.rdb");
    let v: Option<String> = redis::cmd("GET").arg("after").query(&mut c).unwrap();
    assert_eq!(v.as_deref(), Some("rewrite"));
    drop(c);
    srv.stop();

    // Redis 6's single file: the RDB image, then the commands after the rewrite.
    let single = tmp.path().join("six");
    std::fs::create_dir_all(&single).unwrap();
    let mut data = std::fs::read(aof_dir(&dir).join(&base)).unwrap();
    data.extend(std::fs::read(incr_file(&dir)).unwrap());
    std::fs::write(single.join("appendonly.aof"), &data).unwrap();
    let srv = start(&single, &["--appendonly", "yes"]).unwrap();
    let mut c = srv.con();
    check(&mut c, "podium loading a Redis 6 preamble AOF");
    let v: Option<String> = redis::cmd("GET").arg("after").query(&mut c).unwrap();
    assert_eq!(v.as_deref(), Some("rewrite"));
    drop(c);
    srv.stop();

    // Podium's RDB base (the default) -> redis-check-aof and redis-server.
    let dir = tmp.path().join("p");
    std::fs::create_dir_all(&dir).unwrap();
    let srv = start(&dir, &["--appendonly", "yes"]).unwrap();
    let mut c = srv.con();
    fill(&mut c);
    let _: String = redis::cmd("BGREWRITEAOF").query(&mut c).unwrap();
    wait_rewrite_done(&mut c);
    let _: () = redis::cmd("SET")
        .arg("after")
        .arg("rewrite")
        .query(&mut c)
        .unwrap();
    drop(c);
    srv.stop();
    let manifest = std::fs::read_to_string(aof_dir(&dir).join("appendonly.aof.manifest")).unwrap();
    assert!(manifest.contains(".base.rdb seq 2 type b"), "{manifest}");
    check_aof_tool(&dir);
    let redis = start_prog(&redis_server, &dir, &["--appendonly", "yes"]).unwrap();
    let mut c = redis.con();
    check(&mut c, "redis loading podium's .base.rdb");
    let v: Option<String> = redis::cmd("GET").arg("after").query(&mut c).unwrap();
    assert_eq!(v.as_deref(), Some("rewrite"));
    drop(c);
    redis.stop();
}

/// While a large AOF loads, clients are accepted, as with Redis: commands answer
/// `-LOADING Redis is loading the dataset in memory`, INFO (flagged `loading`) answers and
/// shows `loading:1`; once loaded, everything is there and `loading:0`.
#[test]
fn clients_get_loading_while_the_aof_loads() {
    let tmp = tempdir();
    let dir = tmp.path().join("data");
    std::fs::create_dir_all(&dir).unwrap();
    let n = 1_500_000;
    {
        use std::io::Write;
        let mut f =
            std::io::BufWriter::new(std::fs::File::create(dir.join("appendonly.aof")).unwrap());
        f.write_all(&resp(&["SELECT", "0"])).unwrap();
        for i in 0..n {
            f.write_all(&resp(&["SET", &format!("k{i}"), "v"])).unwrap();
        }
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    // Ours and accepting, but still loading.
    let srv = Launch::podium()
        .args(&["--appendonly", "yes", "--dir", dir.to_str().unwrap()])
        .timeout(Duration::from_secs(20))
        .start();
    let mut c = srv.con();
    let err = redis::cmd("GET")
        .arg("k1")
        .query::<Option<String>>(&mut c)
        .unwrap_err();
    // The redis crate turns the `LOADING` code into BusyLoadingError.
    assert_eq!(err.kind(), redis::ErrorKind::BusyLoadingError, "{err}");
    assert!(
        err.to_string()
            .contains("Redis is loading the dataset in memory"),
        "{err}"
    );
    assert_eq!(info_field(&mut c, "loading"), "1");
    while info_field(&mut c, "loading") == "1" {
        assert!(Instant::now() < deadline, "loading never finished");
        std::thread::sleep(Duration::from_millis(20));
    }
    let size: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(size, n as i64);
    let v: String = redis::cmd("GET").arg("k1").query(&mut c).unwrap();
    assert_eq!(v, "v");
    drop(c);
    srv.stop();
}

/// A request refused during a load is held until the loader's next step (as Redis answers
/// only between steps), but holding it must not stall the worker thread's other clients:
/// Sentinels and replicas PING a loading master many times a second, and the INFO that
/// Sentinels poll it with (allowed during a load) went unanswered for seconds, then answered
/// in a burst (each reply setting off one more reconfiguration of the node once it loaded).
/// Sixteen clients spin on PING while the load runs; INFO on another connection stays prompt.
#[test]
fn info_stays_prompt_while_refused_requests_wait_for_the_load() {
    let tmp = tempdir();
    let dir = tmp.path().join("data");
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.to_str().unwrap();
    {
        let srv = Podium::start(&["--dir", d, "--enable-debug-command", "yes"]);
        let mut c = srv.con();
        let _: () = redis::cmd("DEBUG")
            .arg("POPULATE")
            .arg(20_000)
            .query(&mut c)
            .unwrap();
        let _: () = redis::cmd("SAVE").query(&mut c).unwrap();
        drop(c);
        srv.stop();
    }
    // About ten seconds of loading (500 us a key); a held request waits for the next 100 kB
    // of progress, which never comes within the hold's 100 ms cap.
    let srv = Launch::podium()
        .args(&[
            "--dir",
            d,
            "--threads",
            "2",
            "--key-load-delay",
            "500",
            "--loading-process-events-interval-bytes",
            "100000",
        ])
        .timeout(Duration::from_secs(20))
        .start();
    let stop = Arc::new(AtomicBool::new(false));
    let spinners: Vec<_> = (0..16)
        .map(|_| {
            let mut c = srv.con();
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let _ = redis::cmd("PING").query::<String>(&mut c);
                }
            })
        })
        .collect();
    let mut c = srv.con();
    std::thread::sleep(Duration::from_millis(300));
    // Twenty INFOs 20 ms apart: about half a second of a ten-second load when they answer
    // at once. Stalled, each takes a hold's 100 ms or more, and the load may end first.
    let mut waits = Vec::new();
    let mut during_load = 0;
    for _ in 0..20 {
        let t = Instant::now();
        if info_field(&mut c, "loading") == "1" {
            during_load += 1;
        }
        waits.push(t.elapsed());
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    for t in spinners {
        t.join().unwrap();
    }
    waits.sort();
    let median = waits[waits.len() / 2];
    assert!(
        during_load == 20 && median < Duration::from_millis(30),
        "INFO during the load took {median:?} (median; {during_load} of 20 answered while \
         it loaded; {waits:?})"
    );
}

/// `appendfsync everysec` writes each command to the file before its reply goes out, so a
/// SIGKILL (the process dies, the machine does not) loses no acknowledged write: 4 writers,
/// killed at a random moment, 10 rounds.
#[test]
fn sigkill_under_everysec_loses_no_acknowledged_write() {
    everysec_sigkill_rounds(&[]);
}

/// The same with one worker thread, where replies wait for the worker's turn and the park
/// hook writes them (`util::write_turn`): it too must write the log before any reply.
#[test]
fn sigkill_under_everysec_loses_no_acknowledged_write_with_one_worker() {
    everysec_sigkill_rounds(&["--threads", "1"]);
}

fn everysec_sigkill_rounds(extra: &[&str]) {
    const WRITERS: usize = 4;
    let tmp = tempdir();
    let dir = tmp.path().join("data");
    std::fs::create_dir_all(&dir).unwrap();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(0xe5ec);
    // Per writer: the last value acknowledged, and the one in flight at the kill.
    let mut acked = [0u64; WRITERS];
    let mut total = 0u64;
    for round in 0..=10 {
        let mut args = vec![
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--save",
            "",
        ];
        args.extend_from_slice(extra);
        let srv = start(&dir, &args).unwrap();
        let mut c = srv.con();
        for (w, slot) in acked.iter_mut().enumerate() {
            let a = *slot;
            let got: Option<u64> = redis::cmd("GET")
                .arg(format!("w{w}"))
                .query(&mut c)
                .unwrap();
            let got = got.unwrap_or(0);
            assert!(
                got == a || got == a + 1,
                "round {round}, writer {w}: acknowledged {a}, the AOF has {got}"
            );
            *slot = got;
        }
        if round == 10 {
            srv.stop();
            break;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let handles: Vec<_> = (0..WRITERS)
            .map(|w| {
                let stop = stop.clone();
                let mut c = srv.con();
                let mut n = acked[w];
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let r: redis::RedisResult<()> = redis::cmd("SET")
                            .arg(format!("w{w}"))
                            .arg(n + 1)
                            .query(&mut c);
                        if r.is_err() {
                            break;
                        }
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(rng.gen_range(30..200)));
        srv.kill9();
        stop.store(true, Ordering::Relaxed);
        for (w, h) in handles.into_iter().enumerate() {
            let n = h.join().unwrap();
            total += n - acked[w];
            acked[w] = n;
        }
    }
    assert!(total > 1000, "only {total} writes acknowledged in all");
}

/// A BGSAVE child whose server is killed (the OOM killer, kill -9) exits at its next
/// progress report instead of running on as an orphan, as Redis's child does.
#[test]
fn a_save_child_exits_when_its_server_is_killed() {
    let tmp = tempdir();
    let dir = tmp.path().join("data");
    std::fs::create_dir_all(&dir).unwrap();
    let srv = start(&dir, &["--enable-debug-command", "yes"]).unwrap();
    let mut c = srv.con();
    let _: () = redis::cmd("DEBUG")
        .arg("POPULATE")
        .arg(10_000)
        .query(&mut c)
        .unwrap();
    // 1 ms per key: about 10 s of saving, reporting its progress once a second.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("rdb-key-save-delay")
        .arg(1000)
        .query(&mut c)
        .unwrap();
    let _: String = redis::cmd("BGSAVE").query(&mut c).unwrap();
    let kids = children_of(srv.pid());
    assert_eq!(kids.len(), 1, "one save child: {kids:?}");
    let child = kids[0];
    srv.kill9();
    let deadline = Instant::now() + Duration::from_secs(5);
    // The orphan is reparented; it is gone once /proc has no entry (or only a zombie's).
    let alive = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.contains(") Z "))
            .unwrap_or(false)
    };
    while alive(child) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!alive(child), "the save child {child} outlived its server");
}
