//! Diskless replication both ways, each side checked against a real redis-server (see
//! `common::require_tool`): a Podium master streaming its image straight to the sockets of a
//! redis-server replica and a Podium replica in one shared transfer (`repl-diskless-sync`,
//! `-delay`, `-max-replicas`); a Podium replica loading a redis-server master's diskless image
//! from the socket (`repl-diskless-load swapdb` keeping its old data set when the transfer
//! fails, `on-empty-db`); async loading between two Podiums (the old data set served while the
//! new one loads); and a late replica joining a BGSAVE to disk already running.

use crate::common;

use common::{require_tool, Launch, Podium};
use redis::Connection;
use std::path::Path;
use std::time::{Duration, Instant};

fn wait_until(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("timed out waiting for {what}");
}

fn info(c: &mut Connection, field: &str) -> String {
    let text: String = redis::cmd("INFO").arg("all").query(c).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or("")
        .trim()
        .to_string()
}

fn cmd<T: redis::FromRedisValue>(c: &mut Connection, args: &[&str]) -> T {
    let mut q = redis::cmd(args[0]);
    for a in &args[1..] {
        q.arg(*a);
    }
    q.query(c)
        .unwrap_or_else(|e| panic!("{}: {e}", args.join(" ")))
}

fn follow(c: &mut Connection, master: &Podium) {
    let _: () = cmd(c, &["REPLICAOF", "127.0.0.1", &master.port.to_string()]);
}

fn link_up(c: &mut Connection) -> bool {
    info(c, "master_link_status") == "up"
}

fn digest(c: &mut Connection) -> String {
    cmd(c, &["DEBUG", "DIGEST"])
}

fn log_text(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// A server (Podium, or `prog`) logging to `dir/<name>.log`, DEBUG allowed.
fn start(prog: Option<&str>, dir: &Path, name: &str, extra: &[&str]) -> Podium {
    let log = dir.join(format!("{name}.log"));
    let data = dir.join(name);
    std::fs::create_dir_all(&data).unwrap();
    let mut args = vec![
        "--logfile",
        log.to_str().unwrap(),
        "--dir",
        data.to_str().unwrap(),
        "--enable-debug-command",
        "yes",
        "--save",
        "",
    ];
    args.extend_from_slice(extra);
    let launch = match prog {
        Some(p) => Launch::prog(p),
        None => Launch::podium(),
    };
    launch.args(&args).start()
}

/// A redis-server master sending its image diskless at once (`dir/master.log`).
fn redis_diskless_master(redis_server: &str, dir: &Path, extra: &[&str]) -> Podium {
    let mut args = vec![
        "--repl-diskless-sync",
        "yes",
        "--repl-diskless-sync-delay",
        "0",
    ];
    args.extend_from_slice(extra);
    start(Some(redis_server), dir, "master", &args)
}

fn populate(c: &mut Connection, n: usize, prefix: &str, size: usize) {
    let _: () = cmd(
        c,
        &[
            "DEBUG",
            "POPULATE",
            &n.to_string(),
            prefix,
            &size.to_string(),
        ],
    );
}

/// One transfer to sockets serves a redis-server replica (which writes it to disk) and a
/// Podium replica (which loads it from the socket): the master waits for both
/// (`repl-diskless-sync-max-replicas 2`), forks once, and both end with the master's data set
/// and its stream.
#[test]
fn a_podium_master_streams_one_diskless_transfer_to_redis_and_podium_replicas() {
    let Some(redis_server) = require_tool("redis-server") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let master = start(
        None,
        dir.path(),
        "master",
        &[
            "--repl-diskless-sync",
            "yes",
            "--repl-diskless-sync-delay",
            "60",
            "--repl-diskless-sync-max-replicas",
            "2",
        ],
    );
    let redis_replica = start(Some(&redis_server), dir.path(), "redis", &[]);
    let podium_replica = start(
        None,
        dir.path(),
        "podium",
        &["--repl-diskless-load", "swapdb"],
    );
    let mut m = master.con();
    populate(&mut m, 20000, "key", 100);
    let _: () = cmd(
        &mut m,
        &[
            "FUNCTION",
            "LOAD",
            "#!lua name=lib\nredis.register_function{function_name='f', callback=function() return 'hi' end, flags={'no-writes'}}",
        ],
    );
    let mut rr = redis_replica.con();
    let mut pr = podium_replica.con();
    let _: () = cmd(&mut pr, &["SET", "only-on-the-replica", "1"]);
    let forks_before: i64 = info(&mut m, "total_forks").parse().unwrap();
    follow(&mut rr, &master);
    // The first replica waits for the second (the delay is a minute).
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(info(&mut m, "rdb_bgsave_in_progress"), "0");
    follow(&mut pr, &master);
    wait_until("both links up", 30, || link_up(&mut rr) && link_up(&mut pr));
    let forks_after: i64 = info(&mut m, "total_forks").parse().unwrap();
    assert_eq!(
        forks_after - forks_before,
        1,
        "one fork served both replicas"
    );
    let _: () = cmd(&mut m, &["SET", "after", "sync"]);
    wait_until("the stream to reach both", 10, || {
        let a: Option<String> = cmd(&mut rr, &["GET", "after"]);
        let b: Option<String> = cmd(&mut pr, &["GET", "after"]);
        a.is_some() && b.is_some()
    });
    let d = digest(&mut m);
    assert_eq!(digest(&mut rr), d);
    assert_eq!(digest(&mut pr), d);
    let v: Option<String> = cmd(&mut pr, &["GET", "only-on-the-replica"]);
    assert_eq!(v, None, "the replica's own data set was replaced");
    let hi: String = cmd(&mut pr, &["FCALL_RO", "f", "0"]);
    assert_eq!(hi, "hi", "the libraries came with the image");
    let log = log_text(&dir.path().join("master.log"));
    assert!(
        log.contains("Starting BGSAVE for SYNC with target: replicas sockets"),
        "{log}"
    );
    assert!(
        log.contains("Diskless rdb transfer, done reading from pipe, 2 replicas still up"),
        "{log}"
    );
    assert!(
        !dir.path().join("master/dump.rdb").exists(),
        "nothing on disk"
    );
    let plog = log_text(&dir.path().join("podium.log"));
    assert!(
        plog.contains("receiving streamed RDB from master with EOF to parser"),
        "{plog}"
    );
}

/// A redis-server master streaming diskless, slowly (`rdb-key-save-delay`); the Podium replica
/// (`swapdb`) is loading, and its clients get -LOADING, when the master drops it: the
/// replica's old data set is as it was. Once the master is fast again the next transfer
/// replaces it.
#[test]
fn a_failed_swapdb_load_from_redis_keeps_the_old_data_set() {
    let Some(redis_server) = require_tool("redis-server") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let master = redis_diskless_master(&redis_server, dir.path(), &["--rdbcompression", "no"]);
    let replica = start(
        None,
        dir.path(),
        "replica",
        &["--repl-diskless-load", "swapdb"],
    );
    let mut m = master.con();
    let mut r = replica.con();
    populate(&mut m, 1000, "master", 10000);
    populate(&mut r, 200, "replica", 10);
    let _: () = cmd(&mut r, &["SET", "mykey", "myvalue"]);
    let _: () = cmd(&mut m, &["CONFIG", "SET", "rdb-key-save-delay", "10000"]);
    follow(&mut r, &master);
    wait_until("the replica to load", 10, || info(&mut r, "loading") == "1");
    assert_eq!(info(&mut r, "async_loading"), "0");
    let e = redis::cmd("GET")
        .arg("mykey")
        .query::<Option<String>>(&mut r)
        .unwrap_err();
    assert!(e.to_string().contains("loading the dataset"), "{e}");
    let _: () = cmd(&mut m, &["CONFIG", "SET", "repl-diskless-sync-delay", "5"]);
    let _: i64 = cmd(&mut m, &["CLIENT", "KILL", "TYPE", "replica"]);
    wait_until("the load to stop", 10, || info(&mut r, "loading") == "0");
    let v: String = cmd(&mut r, &["GET", "mykey"]);
    assert_eq!(v, "myvalue");
    let n: i64 = cmd(&mut r, &["DBSIZE"]);
    assert_eq!(n, 201);
    let log = log_text(&dir.path().join("replica.log"));
    assert!(log.contains("Internal error in RDB"), "{log}");
    assert!(
        log.contains("Failed trying to load the MASTER synchronization DB from socket"),
        "{log}"
    );
    // The next transfer goes through and replaces the data set.
    let _: () = cmd(&mut m, &["CONFIG", "SET", "rdb-key-save-delay", "0"]);
    let _: () = cmd(&mut m, &["CONFIG", "SET", "repl-diskless-sync-delay", "0"]);
    wait_until("the link", 30, || link_up(&mut r));
    let n: i64 = cmd(&mut r, &["DBSIZE"]);
    assert_eq!(n, 1000);
    assert_eq!(digest(&mut r), digest(&mut m));
}

/// `on-empty-db`: an empty replica loads a redis-server master's diskless image from the
/// socket; one holding data takes the file route (Redis's `disabled`).
#[test]
fn on_empty_db_loads_from_the_socket_only_when_empty() {
    let Some(redis_server) = require_tool("redis-server") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let master = redis_diskless_master(&redis_server, dir.path(), &[]);
    let empty = start(
        None,
        dir.path(),
        "empty",
        &["--repl-diskless-load", "on-empty-db"],
    );
    let full = start(
        None,
        dir.path(),
        "full",
        &["--repl-diskless-load", "on-empty-db"],
    );
    let mut m = master.con();
    populate(&mut m, 5000, "k", 50);
    let mut e = empty.con();
    let mut f = full.con();
    let _: () = cmd(&mut f, &["SET", "mine", "1"]);
    follow(&mut e, &master);
    follow(&mut f, &master);
    wait_until("both links", 30, || link_up(&mut e) && link_up(&mut f));
    let d = digest(&mut m);
    assert_eq!(digest(&mut e), d);
    assert_eq!(digest(&mut f), d);
    let elog = log_text(&dir.path().join("empty.log"));
    assert!(elog.contains("with EOF to parser"), "{elog}");
    let flog = log_text(&dir.path().join("full.log"));
    assert!(flog.contains("with EOF to disk"), "{flog}");
}

/// Async loading between two Podiums: the replica resynchronizes in full with the history it
/// already follows (its backlog position is gone), so it keeps serving its old data set while
/// the new image loads (INFO async_loading, REPLICAOF refused with -LOADING), then swaps.
#[test]
fn async_loading_serves_the_old_data_set_until_the_swap() {
    let dir = tempfile::tempdir().unwrap();
    let master = start(
        None,
        dir.path(),
        "master",
        &[
            "--repl-diskless-sync",
            "yes",
            "--repl-diskless-sync-delay",
            "0",
        ],
    );
    let replica = start(
        None,
        dir.path(),
        "replica",
        &[
            "--repl-diskless-load",
            "swapdb",
            "--replica-read-only",
            "no",
        ],
    );
    let mut m = master.con();
    let mut r = replica.con();
    follow(&mut r, &master);
    wait_until("the first sync", 20, || link_up(&mut r));
    // DEBUG POPULATE is not replicated: the two data sets now differ.
    populate(&mut m, 2000, "master", 1000);
    populate(&mut r, 2000, "replica", 10);
    let _: () = cmd(&mut r, &["SET", "mykey", "myvalue"]);
    // Drop the replica and move the stream past its backlog: a full sync, same history.
    let _: () = cmd(&mut m, &["CONFIG", "SET", "rdb-key-save-delay", "5000"]);
    let _: () = cmd(&mut m, &["CONFIG", "SET", "repl-backlog-size", "16384"]);
    let _: () = cmd(&mut m, &["MULTI"]);
    let _: () = cmd(&mut m, &["CLIENT", "KILL", "TYPE", "replica"]);
    for i in 0..10 {
        let _: () = cmd(&mut m, &["SET", &format!("big{i}"), &"A".repeat(16384)]);
    }
    let _: redis::Value = cmd(&mut m, &["EXEC"]);
    wait_until("async loading", 20, || info(&mut r, "async_loading") == "1");
    assert_eq!(info(&mut r, "loading"), "0");
    let v: String = cmd(&mut r, &["GET", "mykey"]);
    assert_eq!(v, "myvalue", "the old data set is served meanwhile");
    let n: i64 = cmd(&mut r, &["DBSIZE"]);
    assert_eq!(n, 2001);
    let e = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query::<()>(&mut r)
        .unwrap_err();
    assert!(e.to_string().contains("loading the dataset"), "{e}");
    let e = redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendonly")
        .arg("no")
        .query::<()>(&mut r)
        .unwrap_err();
    assert!(e.to_string().contains("loading the dataset"), "{e}");
    let _: () = cmd(&mut m, &["CONFIG", "SET", "rdb-key-save-delay", "0"]);
    wait_until("the swap", 60, || {
        info(&mut r, "async_loading") == "0" && link_up(&mut r)
    });
    let v: Option<String> = cmd(&mut r, &["GET", "mykey"]);
    assert_eq!(v, None);
    let n: i64 = cmd(&mut r, &["DBSIZE"]);
    assert_eq!(n, 2010);
    assert_eq!(digest(&mut r), digest(&mut m));
}

/// `repl-diskless-sync no`: a replica arriving while a BGSAVE to disk made for another
/// replica runs joins it (one fork), its stream copied from the fork's instant; a redis-server
/// replica and a Podium replica end with the master's data set.
#[test]
fn a_late_replica_joins_the_running_bgsave_to_disk() {
    let Some(redis_server) = require_tool("redis-server") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let master = start(None, dir.path(), "master", &["--repl-diskless-sync", "no"]);
    let first = start(Some(&redis_server), dir.path(), "first", &[]);
    let late = start(None, dir.path(), "late", &[]);
    let mut m = master.con();
    populate(&mut m, 3000, "k", 10);
    let _: () = cmd(&mut m, &["CONFIG", "SET", "rdb-key-save-delay", "1000"]);
    let mut f = first.con();
    let mut l = late.con();
    let forks_before: i64 = info(&mut m, "total_forks").parse().unwrap();
    follow(&mut f, &master);
    wait_until("the BGSAVE", 10, || {
        info(&mut m, "rdb_bgsave_in_progress") == "1"
    });
    // Writes after the fork reach the late replica through the copied stream.
    let _: () = cmd(&mut m, &["SET", "during", "1"]);
    follow(&mut l, &master);
    let _: () = cmd(&mut m, &["SET", "during2", "2"]);
    let _: () = cmd(&mut m, &["CONFIG", "SET", "rdb-key-save-delay", "0"]);
    wait_until("both links", 30, || link_up(&mut f) && link_up(&mut l));
    let forks_after: i64 = info(&mut m, "total_forks").parse().unwrap();
    assert_eq!(forks_after - forks_before, 1);
    let log = log_text(&dir.path().join("master.log"));
    assert!(log.contains("Waiting for end of BGSAVE for SYNC"), "{log}");
    let _: () = cmd(&mut m, &["SET", "after", "1"]);
    wait_until("the stream", 10, || {
        cmd::<Option<String>>(&mut l, &["GET", "after"]).is_some()
            && cmd::<Option<String>>(&mut f, &["GET", "after"]).is_some()
    });
    let d = digest(&mut m);
    assert_eq!(digest(&mut f), d);
    assert_eq!(digest(&mut l), d);
}
