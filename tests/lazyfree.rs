//! The lazyfree directives and commands do what Redis's do: a big value (free effort over 64)
//! deleted by UNLINK, by DEL under `lazyfree-lazy-user-del`, overwritten under
//! `lazyfree-lazy-server-del`, expired under `lazyfree-lazy-expire`, or a database emptied by
//! FLUSHDB ASYNC (or plain FLUSHDB under `lazyfree-lazy-user-flush`) is freed on the lazyfree
//! thread, which INFO's `lazyfreed_objects` counts; with the directive off, it is freed in place
//! and the count does not move. Small values are always freed in place.

use crate::common;

use common::Podium;
use redis::Connection;
use std::time::{Duration, Instant};

fn info_int(c: &mut Connection, field: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg("memory").query(c).expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in INFO memory"))
}

/// `lazyfreed_objects` once nothing is pending.
fn freed(c: &mut Connection) -> u64 {
    let start = Instant::now();
    while info_int(c, "lazyfree_pending_objects") > 0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "lazyfree never done"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    info_int(c, "lazyfreed_objects")
}

fn big_set(c: &mut Connection, key: &str) {
    let members: Vec<String> = (0..1000).map(|i| format!("m{i}")).collect();
    let _: i64 = redis::cmd("SADD")
        .arg(key)
        .arg(&members)
        .query(c)
        .expect("SADD");
}

fn set(c: &mut Connection, directive: &str, value: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(directive)
        .arg(value)
        .query(c)
        .expect("CONFIG SET");
}

#[test]
fn each_directive_moves_big_values_to_the_lazyfree_thread() {
    let srv = Podium::start(&[]);
    let mut c = srv.con();
    let del = |c: &mut Connection, cmd: &str, key: &str| {
        let n: i64 = redis::cmd(cmd).arg(key).query(c).expect(cmd);
        assert_eq!(n, 1);
    };

    // UNLINK: always lazy for a big value, in place for a small one.
    big_set(&mut c, "s");
    let before = freed(&mut c);
    del(&mut c, "UNLINK", "s");
    assert_eq!(freed(&mut c), before + 1, "UNLINK of a big set");
    let _: () = redis::cmd("SET")
        .arg("small")
        .arg("v")
        .query(&mut c)
        .expect("SET");
    del(&mut c, "UNLINK", "small");
    assert_eq!(freed(&mut c), before + 1, "a small value is freed in place");

    // DEL: in place unless lazyfree-lazy-user-del.
    big_set(&mut c, "s");
    del(&mut c, "DEL", "s");
    assert_eq!(
        freed(&mut c),
        before + 1,
        "DEL with lazyfree-lazy-user-del no"
    );
    set(&mut c, "lazyfree-lazy-user-del", "yes");
    big_set(&mut c, "s");
    del(&mut c, "DEL", "s");
    assert_eq!(
        freed(&mut c),
        before + 2,
        "DEL with lazyfree-lazy-user-del yes"
    );

    // An overwrite: lazyfree-lazy-server-del.
    big_set(&mut c, "s");
    let _: () = redis::cmd("SET")
        .arg("s")
        .arg("x")
        .query(&mut c)
        .expect("SET");
    assert_eq!(
        freed(&mut c),
        before + 2,
        "overwrite with lazyfree-lazy-server-del no"
    );
    set(&mut c, "lazyfree-lazy-server-del", "yes");
    big_set(&mut c, "t");
    let _: () = redis::cmd("SET")
        .arg("t")
        .arg("x")
        .query(&mut c)
        .expect("SET");
    assert_eq!(
        freed(&mut c),
        before + 3,
        "overwrite with lazyfree-lazy-server-del yes"
    );

    // Expiry: lazyfree-lazy-expire (the key is found expired by a read).
    set(&mut c, "lazyfree-lazy-expire", "yes");
    big_set(&mut c, "e");
    let _: i64 = redis::cmd("PEXPIRE")
        .arg("e")
        .arg(1)
        .query(&mut c)
        .expect("PEXPIRE");
    std::thread::sleep(Duration::from_millis(20));
    let n: i64 = redis::cmd("EXISTS").arg("e").query(&mut c).expect("EXISTS");
    assert_eq!(n, 0);
    assert_eq!(
        freed(&mut c),
        before + 4,
        "expiry with lazyfree-lazy-expire yes"
    );

    // FLUSHDB: SYNC in place, ASYNC counts the keys; no mode follows lazyfree-lazy-user-flush.
    for k in ["a", "b"] {
        big_set(&mut c, k);
    }
    let _: () = redis::cmd("FLUSHDB")
        .arg("SYNC")
        .query(&mut c)
        .expect("FLUSHDB");
    assert_eq!(freed(&mut c), before + 4, "FLUSHDB SYNC");
    for k in ["a", "b"] {
        big_set(&mut c, k);
    }
    let _: () = redis::cmd("FLUSHDB")
        .arg("ASYNC")
        .query(&mut c)
        .expect("FLUSHDB");
    assert_eq!(
        freed(&mut c),
        before + 6,
        "FLUSHDB ASYNC frees its 2 keys there"
    );
    big_set(&mut c, "a");
    let _: () = redis::cmd("FLUSHDB").query(&mut c).expect("FLUSHDB");
    assert_eq!(
        freed(&mut c),
        before + 6,
        "FLUSHDB with lazyfree-lazy-user-flush no"
    );
    set(&mut c, "lazyfree-lazy-user-flush", "yes");
    big_set(&mut c, "a");
    let _: () = redis::cmd("FLUSHDB").query(&mut c).expect("FLUSHDB");
    assert_eq!(
        freed(&mut c),
        before + 7,
        "FLUSHDB with lazyfree-lazy-user-flush yes"
    );

    // CONFIG RESETSTAT zeroes the count.
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut c)
        .expect("RESETSTAT");
    assert_eq!(freed(&mut c), 0);
}

/// Load `n` small hashes (the profile hash of a leaderboard application) in pipelines.
fn load_profiles(c: &mut Connection, n: usize) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let mut p = redis::pipe();
        for i in chunk {
            p.cmd("HSET")
                .arg(format!("user:{i}"))
                .arg("name")
                .arg(format!("player{i}"))
                .arg("country")
                .arg("SE")
                .arg("level")
                .arg(i % 90)
                .arg("avatar")
                .arg(format!("a{}.png", i % 1000))
                .arg("joined")
                .arg("1732700000")
                .ignore();
        }
        let () = p.query(c).expect("HSET pipeline");
    }
}

/// RSS once it stops falling (the allocator's decay runs on its own clock).
fn settled_rss(c: &mut Connection) -> u64 {
    let mut last = info_int(c, "used_memory_rss");
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(100));
        let now = info_int(c, "used_memory_rss");
        if now >= last {
            return now;
        }
        last = now;
    }
    last
}

#[test]
fn a_flushed_server_gives_its_memory_back() {
    // FLUSHALL of many small keys, in place and on the lazyfree thread: the thread that freed
    // them gives its allocator cache back, which otherwise pinned about 24 B of RSS per key
    // (a few hundred cached blocks per size class, each holding a page of empty slots).
    const KEYS: usize = 200_000;
    for flush in ["SYNC", "ASYNC"] {
        let srv = Podium::start(&[]);
        let mut c = srv.con();
        let before = settled_rss(&mut c);
        load_profiles(&mut c, KEYS);
        let loaded = settled_rss(&mut c);
        assert!(
            loaded > before + (KEYS as u64) * 100,
            "{flush}: the load itself should take RSS ({before} -> {loaded})"
        );
        let () = redis::cmd("FLUSHALL")
            .arg(flush)
            .query(&mut c)
            .expect("FLUSHALL");
        let _ = freed(&mut c);
        let left = settled_rss(&mut c).saturating_sub(before) / KEYS as u64;
        assert!(
            left <= 12,
            "{flush}: {left} B of RSS per flushed key left ({before} before the load)"
        );
    }
}
