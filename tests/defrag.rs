//! Active defragmentation, end to end: a server whose memory was fragmented by deleting every
//! other key of a few hundred thousand, once `activedefrag yes`, starts a run (INFO
//! `active_defrag_running`), moves blocks (`active_defrag_hits`), stops, and leaves the
//! allocator's fragmentation ratio well down, with the data unchanged (DEBUG DIGEST). And
//! DEBUG MALLCTL / MALLCTL-STR answer as redis-server's do.

use crate::common;

use common::Podium;
use redis::Connection;
use std::time::{Duration, Instant};

fn info_field(c: &mut Connection, section: &str, field: &str) -> String {
    let info: String = redis::cmd("INFO").arg(section).query(c).expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in INFO {section}"))
        .trim()
        .to_string()
}

fn frag(c: &mut Connection) -> f64 {
    info_field(c, "memory", "allocator_frag_ratio")
        .parse()
        .expect("a ratio")
}

fn config_set(c: &mut Connection, name: &str, value: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query(c)
        .unwrap_or_else(|e| panic!("CONFIG SET {name} {value}: {e}"));
}

fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_fragmented_keyspace_is_compacted_with_the_data_unchanged() {
    let srv = Podium::start(&["--enable-debug-command", "yes", "--hz", "100"]);
    let mut c = srv.con();
    // Strings of 150 bytes (jemalloc's 160-byte class) and some with a TTL, lists, hashes
    // and sets of those sizes, all interleaved; then every other key goes.
    const N: usize = 200_000;
    let value = "v".repeat(150);
    for chunk in (0..N).collect::<Vec<_>>().chunks(1000) {
        let mut p = redis::pipe();
        for &i in chunk {
            match i % 10 {
                1 => p.cmd("RPUSH").arg(format!("k{i}")).arg(&value).arg(&value),
                3 => p.cmd("HSET").arg(format!("k{i}")).arg("f").arg(&value),
                5 => p
                    .cmd("SET")
                    .arg(format!("k{i}"))
                    .arg(&value)
                    .arg("EX")
                    .arg(100_000),
                _ => p.cmd("SET").arg(format!("k{i}")).arg(&value),
            };
        }
        let _: () = p.query(&mut c).expect("fill");
    }
    for chunk in (0..N).step_by(2).collect::<Vec<_>>().chunks(1000) {
        let mut p = redis::pipe();
        for &i in chunk {
            p.cmd("DEL").arg(format!("k{i}"));
        }
        let _: () = p.query(&mut c).expect("delete");
    }
    let before = frag(&mut c);
    assert!(before >= 1.4, "fragmentation to start from: {before}");
    let digest: String = redis::cmd("DEBUG")
        .arg("DIGEST")
        .query(&mut c)
        .expect("DIGEST");
    config_set(&mut c, "active-defrag-threshold-lower", "5");
    config_set(&mut c, "active-defrag-ignore-bytes", "1mb");
    config_set(&mut c, "active-defrag-cycle-min", "65");
    config_set(&mut c, "active-defrag-cycle-max", "75");
    config_set(&mut c, "activedefrag", "yes");
    wait_until("defrag started", Duration::from_secs(5), || {
        info_field(&mut c, "memory", "active_defrag_running") != "0"
    });
    wait_until("defrag done", Duration::from_secs(60), || {
        info_field(&mut c, "memory", "active_defrag_running") == "0"
    });
    let after = frag(&mut c);
    let hits: u64 = info_field(&mut c, "stats", "active_defrag_hits")
        .parse()
        .unwrap();
    let key_hits: u64 = info_field(&mut c, "stats", "active_defrag_key_hits")
        .parse()
        .unwrap();
    assert!(
        after < 1.1,
        "fragmentation {before} -> {after}, {hits} hits"
    );
    assert!(
        hits > 10_000 && key_hits > 10_000,
        "{hits} hits, {key_hits} keys"
    );
    let again: String = redis::cmd("DEBUG")
        .arg("DIGEST")
        .query(&mut c)
        .expect("DIGEST");
    assert_eq!(digest, again, "the data is unchanged");
    // The moved keys (odd ones survived) still expire and read back.
    let ttl: i64 = redis::cmd("TTL").arg("k5").query(&mut c).unwrap();
    assert!(ttl > 0 && ttl <= 100_000, "{ttl}");
    let v: String = redis::cmd("LINDEX").arg("k1").arg(1).query(&mut c).unwrap();
    assert_eq!(v, value);
    let v: String = redis::cmd("HGET").arg("k3").arg("f").query(&mut c).unwrap();
    assert_eq!(v, value);
    let v: String = redis::cmd("GET").arg("k7").query(&mut c).unwrap();
    assert_eq!(v, value);
    // CONFIG RESETSTAT zeroes the counters.
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut c).unwrap();
    assert_eq!(info_field(&mut c, "stats", "active_defrag_hits"), "0");
}

#[test]
fn below_the_thresholds_nothing_runs() {
    let srv = Podium::start(&["--enable-debug-command", "yes", "--activedefrag", "yes"]);
    let mut c = srv.con();
    for i in 0..1000 {
        let _: () = redis::cmd("SET").arg(i).arg(i).query(&mut c).unwrap();
    }
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(info_field(&mut c, "memory", "active_defrag_running"), "0");
    assert_eq!(info_field(&mut c, "stats", "active_defrag_hits"), "0");
}

/// DEBUG MALLCTL and MALLCTL-STR against redis-server 7.0.15's answers (the same jemalloc
/// version family answers the same controls).
#[test]
fn debug_mallctl_answers_as_redis() {
    let srv = Podium::start(&["--enable-debug-command", "yes"]);
    let mut c = srv.con();
    let mut run = |args: &[&str]| -> Result<redis::Value, String> {
        let mut cmd = redis::cmd("DEBUG");
        for a in args {
            cmd.arg(*a);
        }
        cmd.query::<redis::Value>(&mut c).map_err(|e| e.to_string())
    };
    assert_eq!(
        run(&["MALLCTL", "arenas.page"]),
        Ok(redis::Value::Int(4096))
    );
    let e = run(&["MALLCTL", "nosuch"]).unwrap_err();
    assert!(e.contains("No such file or directory"), "{e}");
    let e = run(&["MALLCTL", "arenas.page", "5"]).unwrap_err();
    assert!(e.contains("Operation not permitted"), "{e}");
    // A 4-byte control ends in EINVAL, as Redis's size dance makes it.
    let e = run(&["MALLCTL", "opt.narenas"]).unwrap_err();
    assert!(e.contains("Invalid argument"), "{e}");
    let e = run(&["MALLCTL", "arenas.page", "abc"]).unwrap_err();
    assert!(e.contains("not an integer"), "{e}");
    assert_eq!(
        run(&["MALLCTL-STR", "thread.tcache.flush", "VOID"]),
        Ok(redis::Value::Okay)
    );
    match run(&["MALLCTL-STR", "version"]) {
        Ok(redis::Value::BulkString(v)) => assert!(v.starts_with(b"5.3."), "{v:?}"),
        other => panic!("{other:?}"),
    }
    // Redis follows a number as a string pointer and crashes; Podium refuses.
    let e = run(&["MALLCTL-STR", "arenas.page"]).unwrap_err();
    assert!(e.contains("Invalid argument"), "{e}");
    let e = run(&["MALLCTL", "arena.0.extent_hooks", "1"]).unwrap_err();
    assert!(e.contains("Operation not permitted"), "{e}");
    let pong: String = redis::cmd("PING").query(&mut c).unwrap();
    assert_eq!(pong, "PONG");
}
