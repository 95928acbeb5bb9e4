//! FAILOVER end to end (issue 36): the argument errors in Redis's order (compared with a real
//! redis-server, see `common::require_tool`), a failover to a named replica and to any
//! replica (the old master follows the new one, which continued the history with PSYNC, no
//! full synchronization), writes held back while waiting and released by ABORT, TIMEOUT with
//! and without FORCE, and the handover between Podium and redis-server in both directions.

use crate::common;

use common::{require_tool, Launch, Podium};
use redis::Connection;
use std::time::{Duration, Instant};

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("timed out waiting for {what}");
}

fn info(c: &mut Connection, section: &str, field: &str) -> String {
    let info: String = redis::cmd("INFO").arg(section).query(c).expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or("")
        .trim()
        .to_string()
}

fn repl(c: &mut Connection, field: &str) -> String {
    info(c, "replication", field)
}

fn stat(c: &mut Connection, field: &str) -> i64 {
    info(c, "stats", field).parse().unwrap_or(-1)
}

/// A command's reply as text: the status, the value, or the error's whole text.
fn reply(c: &mut Connection, args: &[&str]) -> String {
    match redis::cmd(args[0]).arg(&args[1..]).query::<redis::Value>(c) {
        Ok(redis::Value::Okay) => "OK".into(),
        Ok(redis::Value::SimpleString(s)) => s,
        Ok(redis::Value::BulkString(b)) => String::from_utf8_lossy(&b).into_owned(),
        Ok(v) => format!("{v:?}"),
        Err(e) => match (e.code(), e.detail()) {
            (Some(code), Some(detail)) => format!("-{code} {detail}"),
            (Some(code), None) => format!("-{code}"),
            _ => format!("-{e}"),
        },
    }
}

/// Make `r` follow `master` and wait until the link is up and the master sees it online.
fn follow(r: &mut Connection, m: &mut Connection, port: u16) {
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(port)
        .query(r)
        .expect("REPLICAOF");
    wait_until("the link to come up", || {
        repl(r, "master_link_status") == "up"
    });
    wait_until("the replica to be online", || {
        repl(m, "slave0").contains("state=online")
    });
}

fn signal(srv: &Podium, sig: i32) {
    // SAFETY: kill(2) on our own child's pid only sends a signal.
    unsafe {
        libc::kill(srv.pid() as i32, sig);
    }
}

/// The errors FAILOVER and PSYNC ... FAILOVER answer, on a master without replicas, then with
/// one, then on the replica.
fn argument_errors(master: &Podium, replica: &Podium) -> Vec<String> {
    let mut m = master.con();
    let mut r = replica.con();
    let mut out = Vec::new();
    let alone: &[&[&str]] = &[
        &["FAILOVER", "ABORT"],
        &["FAILOVER", "TO", "127.0.0.1"],
        &["FAILOVER", "TIMEOUT", "0"],
        &["FAILOVER", "TIMEOUT", "-5"],
        &["FAILOVER", "TIMEOUT", "abc"],
        &["FAILOVER", "TIMEOUT", "10", "TIMEOUT", "20"],
        &["FAILOVER", "TO", "127.0.0.1", "abc"],
        &["FAILOVER", "TO", "h", "1", "TO", "h", "2"],
        &["FAILOVER", "FORCE", "FORCE"],
        &["FAILOVER", "ABORT", "TIMEOUT", "10"],
        &["FAILOVER", "bogus"],
        &["FAILOVER"],
        &["FAILOVER", "FORCE", "TIMEOUT", "100"],
        &["PSYNC", "0123", "1", "FAILOVER"],
    ];
    for args in alone {
        out.push(format!("{args:?} -> {}", reply(&mut m, args)));
    }
    follow(&mut r, &mut m, master.port);
    let rport = replica.port.to_string();
    let paired: &[&[&str]] = &[
        &["FAILOVER", "FORCE", "TIMEOUT", "100"],
        &["FAILOVER", "TO", "127.0.0.1", &rport, "FORCE"],
        &["FAILOVER", "TO", "127.0.0.1", "1"],
        &["FAILOVER", "TO", "no-such-host", &rport],
        &[
            "FAILOVER",
            "TIMEOUT",
            "100",
            "TO",
            "127.0.0.1",
            "1",
            "FORCE",
        ],
    ];
    // The replica's port differs between the runs: it is written as PORT.
    for args in paired {
        let line = format!("{args:?} -> {}", reply(&mut m, args));
        out.push(line.replace(&rport, "PORT"));
    }
    for args in [
        &["FAILOVER"][..],
        &["FAILOVER", "TO", "127.0.0.1", &rport][..],
        &["PSYNC", "0123", "1", "FAILOVER"][..],
    ] {
        let line = format!("replica {args:?} -> {}", reply(&mut r, args));
        out.push(line.replace(&rport, "PORT"));
    }
    out
}

#[test]
fn argument_errors_are_redis_s_in_redis_s_order() {
    let podium = argument_errors(&Podium::start(&[]), &Podium::start(&[]));
    // Without redis-server, the expected texts alone.
    for (i, want) in [
        "-ERR No failover in progress.",
        "-ERR syntax error",
        "-ERR FAILOVER timeout must be greater than 0",
        "-ERR FAILOVER timeout must be greater than 0",
        "-ERR value is not an integer or out of range",
        "-ERR syntax error",
        "-ERR value is not an integer or out of range",
        "-ERR syntax error",
        "-ERR syntax error",
        "-ERR syntax error",
        "-ERR syntax error",
        "-ERR FAILOVER requires connected replicas.",
        "-ERR FAILOVER requires connected replicas.",
        "-ERR PSYNC FAILOVER can't be sent to a master.",
        "-ERR FAILOVER with force option requires both a timeout and target HOST and IP.",
        "-ERR FAILOVER with force option requires both a timeout and target HOST and IP.",
        "-ERR FAILOVER target HOST and PORT is not a replica.",
        "-ERR FAILOVER target HOST and PORT is not a replica.",
        "-ERR FAILOVER target HOST and PORT is not a replica.",
        "-ERR FAILOVER is not valid when server is a replica.",
        "-ERR FAILOVER is not valid when server is a replica.",
        "-ERR PSYNC FAILOVER replid must match my replid.",
    ]
    .iter()
    .enumerate()
    {
        assert!(podium[i].ends_with(want), "{} (wanted {want})", podium[i]);
    }
    let Some(redis_server) = require_tool("redis-server") else {
        return;
    };
    let start = || Launch::prog(&redis_server).args(&["--save", ""]).start();
    let redis = argument_errors(&start(), &start());
    assert_eq!(podium, redis);
}

/// A Podium master and a Podium replica with some data.
fn pair() -> (Podium, Podium) {
    let master = Podium::start(&[]);
    let replica = Podium::start(&[]);
    let mut m = master.con();
    let mut r = replica.con();
    for i in 0..100 {
        let _: () = redis::cmd("SET")
            .arg(format!("k{i}"))
            .arg(i)
            .query(&mut m)
            .unwrap();
    }
    follow(&mut r, &mut m, master.port);
    (master, replica)
}

fn role(c: &mut Connection) -> String {
    repl(c, "role")
}

#[test]
fn failover_to_a_named_replica_swaps_the_roles_with_a_partial_resync() {
    let (master, replica) = pair();
    let mut m = master.con();
    let mut r = replica.con();
    let full_before = stat(&mut r, "sync_full");
    let partial_before = stat(&mut r, "sync_partial_ok");
    assert_eq!(repl(&mut m, "master_failover_state"), "no-failover");
    assert_eq!(
        reply(
            &mut m,
            &["FAILOVER", "TO", "127.0.0.1", &replica.port.to_string()]
        ),
        "OK"
    );
    wait_until("the failover to end", || {
        repl(&mut m, "master_failover_state") == "no-failover"
    });
    assert_eq!(role(&mut m), "slave");
    assert_eq!(role(&mut r), "master");
    wait_until("the old master's link", || {
        repl(&mut m, "master_link_status") == "up"
    });
    assert_eq!(repl(&mut m, "master_port"), replica.port.to_string());
    // The new master continued the old history: one partial resync, no full one.
    assert_eq!(stat(&mut r, "sync_partial_ok") - partial_before, 1);
    assert_eq!(stat(&mut r, "sync_full"), full_before);
    let _: () = redis::cmd("SET")
        .arg("after")
        .arg("1")
        .query(&mut r)
        .unwrap();
    wait_until("the write to reach the old master", || {
        reply(&mut m, &["GET", "after"]) == "1"
    });
    let e = reply(&mut m, &["SET", "x", "1"]);
    assert!(e.starts_with("-READONLY"), "{e}");
    assert_eq!(
        reply(&mut m, &["FAILOVER", "ABORT"]),
        "-ERR No failover in progress."
    );
}

#[test]
fn failover_to_any_replica_picks_the_one_that_caught_up() {
    let (master, replica) = pair();
    let mut m = master.con();
    let mut r = replica.con();
    assert_eq!(reply(&mut m, &["FAILOVER"]), "OK");
    wait_until("the failover to end", || {
        repl(&mut m, "master_failover_state") == "no-failover"
    });
    assert_eq!(role(&mut m), "slave");
    assert_eq!(role(&mut r), "master");
}

#[test]
fn writes_wait_during_the_failover_and_abort_releases_them() {
    let (master, replica) = pair();
    let mut m = master.con();
    // The replica cannot acknowledge anything while stopped.
    signal(&replica, libc::SIGSTOP);
    let _: () = redis::cmd("SET")
        .arg("case")
        .arg("1")
        .query(&mut m)
        .unwrap();
    let rport = replica.port.to_string();
    assert_eq!(
        reply(
            &mut m,
            &["FAILOVER", "TO", "127.0.0.1", &rport, "TIMEOUT", "60000"]
        ),
        "OK"
    );
    assert_eq!(repl(&mut m, "master_failover_state"), "waiting-for-sync");
    assert_eq!(
        reply(&mut m, &["FAILOVER"]),
        "-ERR FAILOVER already in progress."
    );
    assert_eq!(
        reply(&mut m, &["REPLICAOF", "NO", "ONE"]),
        "-ERR REPLICAOF not allowed while failing over."
    );
    // Reads go on; a write waits (CLIENT UNPAUSE does not release it).
    assert_eq!(reply(&mut m, &["GET", "case"]), "1");
    assert_eq!(reply(&mut m, &["CLIENT", "UNPAUSE"]), "OK");
    let port = master.port;
    let writer = std::thread::spawn(move || {
        let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
            .unwrap()
            .get_connection()
            .unwrap();
        let started = Instant::now();
        let r: String = redis::cmd("SET")
            .arg("held")
            .arg("1")
            .query(&mut c)
            .unwrap();
        (r, started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(!writer.is_finished(), "the write was held back");
    assert_eq!(reply(&mut m, &["FAILOVER", "ABORT"]), "OK");
    let (r, waited) = writer.join().unwrap();
    assert_eq!(r, "OK");
    assert!(waited >= Duration::from_millis(250), "{waited:?}");
    assert_eq!(repl(&mut m, "master_failover_state"), "no-failover");
    assert_eq!(role(&mut m), "master");
    signal(&replica, libc::SIGCONT);
}

#[test]
fn a_timeout_aborts_without_force_and_fails_over_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("master.log");
    let master = Launch::podium()
        .args(&["--logfile", log.to_str().unwrap()])
        .start();
    let replica = Podium::start(&[]);
    let mut m = master.con();
    let mut r = replica.con();
    follow(&mut r, &mut m, master.port);
    let rport = replica.port.to_string();
    let partial_before = stat(&mut r, "sync_partial_ok");

    signal(&replica, libc::SIGSTOP);
    let _: () = redis::cmd("SET")
        .arg("case")
        .arg("1")
        .query(&mut m)
        .unwrap();
    assert_eq!(
        reply(
            &mut m,
            &["FAILOVER", "TO", "127.0.0.1", &rport, "TIMEOUT", "300"]
        ),
        "OK"
    );
    wait_until("the timeout", || {
        repl(&mut m, "master_failover_state") == "no-failover"
    });
    assert_eq!(role(&mut m), "master");
    signal(&replica, libc::SIGCONT);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains(&format!(
            "FAILOVER to 127.0.0.1:{rport} aborted: Replica never caught up before timeout"
        )),
        "{text}"
    );

    // With FORCE the master gives up waiting and hands over anyway.
    signal(&replica, libc::SIGSTOP);
    let _: () = redis::cmd("SET")
        .arg("case")
        .arg("2")
        .query(&mut m)
        .unwrap();
    assert_eq!(
        reply(
            &mut m,
            &[
                "FAILOVER",
                "TO",
                "127.0.0.1",
                &rport,
                "TIMEOUT",
                "100",
                "FORCE"
            ]
        ),
        "OK"
    );
    wait_until("the forced failover", || {
        repl(&mut m, "master_failover_state") == "failover-in-progress"
    });
    assert_eq!(role(&mut m), "slave");
    signal(&replica, libc::SIGCONT);
    wait_until("the failover to end", || {
        repl(&mut m, "master_failover_state") == "no-failover"
    });
    assert_eq!(role(&mut r), "master");
    assert!(stat(&mut r, "sync_partial_ok") > partial_before);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains(&format!(
            "FAILOVER to 127.0.0.1:{rport} time out exceeded, failing over."
        )),
        "{text}"
    );
}

#[test]
fn a_target_that_refuses_psync_aborts_the_failover() {
    let (master, replica) = pair();
    let mut m = master.con();
    let mut r = replica.con();
    assert_eq!(
        reply(&mut r, &["ACL", "SETUSER", "default", "-psync"]),
        "OK"
    );
    let old_id = repl(&mut m, "master_replid");
    assert_eq!(
        reply(
            &mut m,
            &["FAILOVER", "TO", "127.0.0.1", &replica.port.to_string()]
        ),
        "OK"
    );
    wait_until("the failover to end", || {
        repl(&mut m, "master_failover_state") == "no-failover"
    });
    // Master again, with a new history ID; the replica follows it again.
    assert_eq!(role(&mut m), "master");
    assert_eq!(repl(&mut m, "master_replid2"), old_id);
    assert_eq!(
        reply(&mut r, &["ACL", "SETUSER", "default", "+psync"]),
        "OK"
    );
    wait_until("the replica to come back", || {
        repl(&mut r, "master_link_status") == "up"
    });
    assert_eq!(role(&mut r), "slave");
}

/// Podium and redis-server hand the role to each other: each side's PSYNC ... FAILOVER is
/// understood by the other.
#[test]
fn failover_between_podium_and_redis_both_ways() {
    let Some(redis_server) = require_tool("redis-server") else {
        return;
    };
    let podium = Podium::start(&[]);
    let redis = Launch::prog(&redis_server)
        .args(&["--save", "", "--repl-diskless-sync-delay", "0"])
        .start();
    let mut p = podium.con();
    let mut r = redis.con();
    for i in 0..50 {
        let _: () = redis::cmd("SET")
            .arg(format!("k{i}"))
            .arg(i)
            .query(&mut p)
            .unwrap();
    }
    follow(&mut r, &mut p, podium.port);
    // Podium -> redis-server.
    assert_eq!(
        reply(
            &mut p,
            &["FAILOVER", "TO", "127.0.0.1", &redis.port.to_string()]
        ),
        "OK"
    );
    wait_until("Podium's failover to end", || {
        repl(&mut p, "master_failover_state") == "no-failover"
    });
    assert_eq!(role(&mut r), "master");
    assert_eq!(role(&mut p), "slave");
    wait_until("Podium to follow redis-server", || {
        repl(&mut p, "master_link_status") == "up"
    });
    assert_eq!(stat(&mut r, "sync_partial_ok"), 1);
    let _: () = redis::cmd("SET")
        .arg("from-redis")
        .arg("1")
        .query(&mut r)
        .unwrap();
    wait_until("the write to reach Podium", || {
        reply(&mut p, &["GET", "from-redis"]) == "1"
    });
    wait_until("redis-server to see Podium online", || {
        repl(&mut r, "slave0").contains("state=online")
    });
    // redis-server -> Podium.
    assert_eq!(reply(&mut r, &["FAILOVER"]), "OK");
    wait_until("redis-server's failover to end", || {
        repl(&mut r, "master_failover_state") == "no-failover"
    });
    assert_eq!(role(&mut p), "master");
    assert_eq!(role(&mut r), "slave");
    wait_until("redis-server to follow Podium", || {
        repl(&mut r, "master_link_status") == "up"
    });
    assert!(stat(&mut p, "sync_partial_ok") >= 1);
    let _: () = redis::cmd("SET")
        .arg("from-podium")
        .arg("1")
        .query(&mut p)
        .unwrap();
    wait_until("the write to reach redis-server", || {
        reply(&mut r, &["GET", "from-podium"]) == "1"
    });
    let a: i64 = redis::cmd("DBSIZE").query(&mut p).unwrap();
    let b: i64 = redis::cmd("DBSIZE").query(&mut r).unwrap();
    assert_eq!(a, b);
}
