//! Scripts and threads: two scripts that lock disjoint shards run at the same time on two
//! worker threads (scripts that only touch their KEYS lock only those keys' shards, so two of
//! them on different keys of one database run in parallel; scripts that stay in their own
//! database lock that database), while a script and a command on the same key never
//! interleave.

use crate::common;

use common::Podium;
use redis::Connection;
use std::sync::{Arc, Barrier};
use std::time::Duration;

/// Sets KEYS[1] to "a", spins for ARGV[1] microseconds of wall time (by TIME), reads KEYS[1]
/// back, appends "b" to what it read, and returns {start us, end us, what it read}.
const SPIN: &str = "\
local function now() local t = redis.call('time') return t[1] * 1000000 + t[2] end
local t0 = now()
redis.call('set', KEYS[1], 'a')
while now() - t0 < tonumber(ARGV[1]) do end
local v = redis.call('get', KEYS[1])
redis.call('set', KEYS[1], v .. 'b')
return {t0, now(), v}";

/// Run SPIN on `key` for `micros`; (start, end, value read back).
fn spin(con: &mut Connection, key: &str, micros: u64) -> (i64, i64, String) {
    redis::cmd("EVAL")
        .arg(SPIN)
        .arg(1)
        .arg(key)
        .arg(micros)
        .query(con)
        .expect("EVAL")
}

/// SPIN written so that its text does not show it touches only its KEYS (the key goes
/// through a local variable): it locks the caller's whole database.
const SPIN_WHOLE_DB: &str = "\
local key = KEYS[1]
local function now() local t = redis.call('time') return t[1] * 1000000 + t[2] end
local t0 = now()
redis.call('set', key, 'a')
while now() - t0 < tonumber(ARGV[1]) do end
local v = redis.call('get', key)
redis.call('set', key, v .. 'b')
return {t0, now(), v}";

/// Run `script` on keys `a` and `b` of database 0 from two clients at once; whether the
/// two runs overlapped in time, after checking each saw only its own writes.
fn overlapped(s: &Podium, script: &'static str, a: &str, b: &str) -> bool {
    let start = Arc::new(Barrier::new(2));
    let runners: Vec<_> = [a.to_string(), b.to_string()]
        .into_iter()
        .map(|key| {
            let mut con = s.con();
            let start = start.clone();
            std::thread::spawn(move || {
                start.wait();
                let run: (i64, i64, String) = redis::cmd("EVAL")
                    .arg(script)
                    .arg(1)
                    .arg(&key)
                    .arg(400_000)
                    .query(&mut con)
                    .expect("EVAL");
                run
            })
        })
        .collect();
    let runs: Vec<_> = runners.into_iter().map(|r| r.join().unwrap()).collect();
    for (run, key) in runs.iter().zip([a, b]) {
        assert_eq!(run.2, "a", "{key}: the script saw another write");
        let v: String = redis::cmd("GET").arg(key).query(&mut s.con()).unwrap();
        assert_eq!(v, "ab");
    }
    runs[0].0 < runs[1].1 && runs[1].0 < runs[0].1
}

#[test]
fn scripts_on_different_keys_of_one_database_run_in_parallel() {
    // 64 shards: two keys share one with odds 1/64, so three pairs are tried before the
    // scripts are judged to run one after the other.
    let s = Podium::start(&["--threads", "2", "--shards-per-db", "64"]);
    let parallel = [("k1", "k2"), ("k3", "k4"), ("k5", "k6")]
        .iter()
        .any(|(a, b)| overlapped(&s, SPIN, a, b));
    assert!(
        parallel,
        "scripts on different keys ran one after the other"
    );
    // The same work written so that the lock scope cannot be judged from the text locks the
    // whole database: the two runs serialize (which also shows the check above can fail).
    assert!(
        !overlapped(&s, SPIN_WHOLE_DB, "k7", "k8"),
        "scripts that lock the whole database overlapped"
    );
}

#[test]
fn scripts_in_different_databases_run_in_parallel() {
    let s = Podium::start(&["--threads", "2"]);
    let start = Arc::new(Barrier::new(2));
    let runners: Vec<_> = [0usize, 1]
        .into_iter()
        .map(|db| {
            let mut con = s.con_db(db);
            let start = start.clone();
            std::thread::spawn(move || {
                start.wait();
                spin(&mut con, "k", 600_000)
            })
        })
        .collect();
    let runs: Vec<_> = runners.into_iter().map(|r| r.join().unwrap()).collect();
    let (a, b) = (&runs[0], &runs[1]);
    // Each script is one synchronous call on one thread: overlapping wall-clock intervals
    // mean two threads ran them at once (serialised, one would start after the other ended).
    assert!(
        a.0 < b.1 && b.0 < a.1,
        "the scripts ran one after the other: {a:?} {b:?}"
    );
    for (run, db) in runs.iter().zip([0usize, 1]) {
        assert_eq!(run.2, "a", "db {db}: the script saw another write");
        let v: String = redis::cmd("GET").arg("k").query(&mut s.con_db(db)).unwrap();
        assert_eq!(v, "ab");
    }
}

#[test]
fn a_script_and_a_command_on_its_key_never_interleave() {
    let s = Podium::start(&["--threads", "2"]);
    let mut script_con = s.con();
    let runner = std::thread::spawn(move || spin(&mut script_con, "k", 400_000));
    // The script is running (or about to): every command on k waits for it whole.
    std::thread::sleep(Duration::from_millis(100));
    let mut con = s.con();
    let appended: i64 = redis::cmd("APPEND")
        .arg("k")
        .arg("z")
        .query(&mut con)
        .unwrap();
    let mut seen = Vec::new();
    for _ in 0..20 {
        let v: Option<String> = redis::cmd("GET").arg("k").query(&mut con).unwrap();
        seen.push(v);
        std::thread::sleep(Duration::from_millis(5));
    }
    let (_, _, read_back) = runner.join().unwrap();
    // The script read back its own write, untouched by the APPEND sent while it ran ...
    assert_eq!(read_back, "a");
    // ... and the APPEND ran after the script (or, on a slow machine, wholly before it,
    // when the script's SET overwrote it): never in between.
    let last: String = redis::cmd("GET").arg("k").query(&mut con).unwrap();
    match appended {
        3 => assert_eq!(last, "abz"),
        1 => assert_eq!(last, "ab"),
        n => panic!("APPEND interleaved with the script: length {n}, value {last}"),
    }
    for v in seen {
        assert!(
            matches!(v.as_deref(), Some("abz") | Some("ab")),
            "a GET saw the script half done: {v:?}"
        );
    }
}

#[test]
fn script_kill_stops_every_killable_script_and_busy_names_the_oldest() {
    let s = Podium::start(&["--threads", "2"]);
    let mut con = s.con();
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("lua-time-limit")
        // Both scripts must start before the first turns the server busy (then the second
        // would get -BUSY): 200 ms leaves room for a loaded machine to start the second.
        .arg(200)
        .query::<()>(&mut con)
        .unwrap();
    let runners: Vec<_> = [0usize, 1]
        .into_iter()
        .map(|db| {
            let mut c = s.con_db(db);
            std::thread::spawn(move || {
                redis::cmd("EVAL")
                    .arg("while true do end")
                    .arg(0)
                    .query::<redis::Value>(&mut c)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(600));
    let busy = redis::cmd("PING").query::<String>(&mut con).unwrap_err();
    assert_eq!(busy.code(), Some("BUSY"));
    redis::cmd("SCRIPT")
        .arg("KILL")
        .query::<()>(&mut con)
        .unwrap();
    for r in runners {
        let e = r.join().unwrap().unwrap_err();
        assert!(
            e.detail()
                .unwrap_or("")
                .starts_with("Script killed by user with SCRIPT KILL"),
            "{e}"
        );
    }
    let e = redis::cmd("SCRIPT")
        .arg("KILL")
        .query::<()>(&mut con)
        .unwrap_err();
    assert_eq!(e.code(), Some("NOTBUSY"));
}

#[test]
fn scripts_running_in_parallel_keep_their_aof_blocks_whole() {
    let dir = tempfile::tempdir().expect("temp dir");
    let s = common::Launch::podium()
        .args(&[
            "--threads",
            "2",
            "--shards-per-db",
            "64",
            "--appendonly",
            "yes",
            "--dir",
            dir.path().to_str().expect("UTF-8 dir"),
        ])
        .wait_loaded()
        .start();
    let script = "redis.call('incr', KEYS[1]) redis.call('incr', KEYS[1]) return 1";
    let runners: Vec<_> = ["ka", "kb", "kc", "kd"]
        .into_iter()
        .map(|key| {
            let mut con = s.con();
            std::thread::spawn(move || {
                for _ in 0..300 {
                    let _: i64 = redis::cmd("EVAL")
                        .arg(script)
                        .arg(1)
                        .arg(key)
                        .query(&mut con)
                        .expect("EVAL");
                }
            })
        })
        .collect();
    for r in runners {
        r.join().unwrap();
    }
    drop(s);
    // Every MULTI is closed by its EXEC before the next MULTI, and holds both INCRs of one key.
    let mut log = Vec::new();
    for f in std::fs::read_dir(dir.path().join("appendonlydir")).expect("AOF dir") {
        let path = f.expect("entry").path();
        if path.to_string_lossy().ends_with(".incr.aof") {
            log.extend(std::fs::read(&path).expect("AOF file"));
        }
    }
    let text = String::from_utf8_lossy(&log);
    let words: Vec<&str> = text
        .split("\r\n")
        .filter(|w| !w.is_empty() && !w.starts_with(['*', '$']))
        .collect();
    let mut blocks = 0;
    let mut i = 0;
    while i < words.len() {
        match words[i] {
            "MULTI" => {
                let block = &words[i + 1..(i + 6).min(words.len())];
                assert_eq!(block.len(), 5, "a block is cut short");
                assert!(
                    block[0].eq_ignore_ascii_case("incr")
                        && block[2].eq_ignore_ascii_case("incr")
                        && block[1] == block[3]
                        && block[4] == "EXEC",
                    "a script's block interleaved with another: {block:?}"
                );
                blocks += 1;
                i += 6;
            }
            "SELECT" => i += 2,
            other => panic!("a command outside any script's block: {other}"),
        }
    }
    assert_eq!(blocks, 1200);
}
