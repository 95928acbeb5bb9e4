//! Replication end to end: a Podium replica of a Podium master, and (redis-server needed, see
//! `common::require_tool`) a Redis 7 replica of a Podium master and a Podium replica of a
//! Redis 7 master (the protocol and the RDB image are shared, so each side is checked against
//! the real other side). Covers the full synchronization (image, then the stream from the fork's
//! instant), writes while the image is made, SELECT in the stream, WAIT, ROLE and INFO
//! replication, read-only replicas, partial resynchronization after a dropped link, and
//! REPLICAOF NO ONE.

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
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out waiting for {what}");
}

fn info_field(c: &mut Connection, field: &str) -> String {
    let info: String = redis::cmd("INFO").arg("replication").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or("")
        .to_string()
}

fn link_up(c: &mut Connection) -> bool {
    info_field(c, "master_link_status") == "up"
}

/// Make the server behind `r` a replica of `master` and wait for the link.
fn follow(r: &mut Connection, master: &Podium) {
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(master.port)
        .query(r)
        .unwrap();
    wait_until("the link to come up", || link_up(r));
}

/// Writes in several databases and types, some while the replica synchronizes.
fn write_some(c: &mut Connection, from: usize, to: usize) {
    for i in from..to {
        let _: () = redis::cmd("ZADD")
            .arg("board")
            .arg(i as f64)
            .arg(format!("player:{i}"))
            .query(c)
            .unwrap();
        let _: () = redis::cmd("SET")
            .arg(format!("k{i}"))
            .arg(i)
            .query(c)
            .unwrap();
    }
}

fn same_data(master: &mut Connection, replica: &mut Connection) -> bool {
    let a: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg("board")
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(master)
        .unwrap();
    let b: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg("board")
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(replica)
        .unwrap();
    let ka: i64 = redis::cmd("DBSIZE").query(master).unwrap();
    let kb: i64 = redis::cmd("DBSIZE").query(replica).unwrap();
    a == b && ka == kb
}

fn check_pair(master: &Podium, replica: &Podium, replica_is_podium: bool) {
    let mut m = master.con();
    let mut r = replica.con();
    write_some(&mut m, 0, 500);
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(master.port)
        .query(&mut r)
        .unwrap();
    // Writes while the replica synchronizes land either in the image or in the stream.
    write_some(&mut m, 500, 1000);
    wait_until("the link to come up", || link_up(&mut r));
    write_some(&mut m, 1000, 1200);
    // Another database: the stream selects it.
    let mut m3 = master.con_db(3);
    let _: () = redis::cmd("SET")
        .arg("in3")
        .arg("x")
        .query(&mut m3)
        .unwrap();
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut m).unwrap();
    assert_eq!(acked, 1, "WAIT 1 counts the replica");
    wait_until("the replica to catch up", || same_data(&mut m, &mut r));
    let mut r3 = replica.con_db(3);
    let v: String = redis::cmd("GET").arg("in3").query(&mut r3).unwrap();
    assert_eq!(v, "x");
    // Offsets agree once caught up.
    wait_until("offsets to agree", || {
        info_field(&mut m, "master_repl_offset") == info_field(&mut r, "master_repl_offset")
    });
    // A read-only replica refuses its clients' writes.
    let e = redis::cmd("SET")
        .arg("x")
        .arg(1)
        .query::<()>(&mut r)
        .unwrap_err();
    assert!(e.to_string().contains("read only replica"), "{e}");
    // ROLE on both sides.
    let role: redis::Value = redis::cmd("ROLE").query(&mut m).unwrap();
    let text = format!("{role:?}");
    assert!(text.contains("master"), "{text}");
    let role: redis::Value = redis::cmd("ROLE").query(&mut r).unwrap();
    let text = format!("{role:?}");
    assert!(
        text.contains("slave") && text.contains("connected"),
        "{text}"
    );
    if replica_is_podium {
        // A dropped link continues with PSYNC (no new full synchronization).
        let full_before = info_stat(&mut m, "sync_full");
        let _: () = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("replica")
            .query(&mut m)
            .unwrap();
        write_some(&mut m, 1200, 1300);
        wait_until("the link to come back", || link_up(&mut r));
        wait_until("the replica to catch up again", || {
            same_data(&mut m, &mut r)
        });
        assert_eq!(info_stat(&mut m, "sync_full"), full_before);
        assert!(info_stat(&mut m, "sync_partial_ok") >= 1);
    }
    // Promotion: the replica becomes a master and takes writes.
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut r)
        .unwrap();
    let _: () = redis::cmd("SET").arg("after").arg(1).query(&mut r).unwrap();
    assert_eq!(info_field(&mut r, "role"), "master");
}

fn info_stat(c: &mut Connection, field: &str) -> i64 {
    let info: String = redis::cmd("INFO").arg("stats").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.parse().ok())
        .unwrap_or(-1)
}

#[test]
fn podium_replica_of_podium_master() {
    let master = Podium::start(&[]);
    let replica = Podium::start(&[]);
    check_pair(&master, &replica, true);
}

#[test]
fn redis_replica_of_podium_master() {
    let Some(redis_server) = require_tool("redis-server") else {
        return;
    };
    let master = Podium::start(&[]);
    let replica = Launch::prog(&redis_server).args(&["--save", ""]).start();
    check_pair(&master, &replica, false);
}

#[test]
fn podium_replica_of_redis_master() {
    let Some(redis_server) = require_tool("redis-server") else {
        return;
    };
    // Redis sends its image diskless (the `$EOF:<mark>` form) by default; no delay here.
    let master = Launch::prog(&redis_server)
        .args(&["--save", "", "--repl-diskless-sync-delay", "0"])
        .start();
    let replica = Podium::start(&[]);
    check_pair(&master, &replica, true);
}

/// The stream as a SYNC client sees it: the image as one bulk, then the writes since, with
/// SELECT before the first one; a transaction of one write is that write alone, one of
/// several is wrapped in MULTI/EXEC.
#[test]
fn sync_client_reads_image_then_stream() {
    use std::io::{BufRead, BufReader, Read, Write};
    let server = Podium::start(&[]);
    let mut c = server.con();
    let _: () = redis::cmd("SET")
        .arg("before")
        .arg(1)
        .query(&mut c)
        .unwrap();
    let mut s = server.raw();
    s.write_all(b"SYNC\r\n").unwrap();
    let mut rd = BufReader::new(s.try_clone().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        rd.read_line(&mut line).unwrap();
        if !line.trim().is_empty() {
            break;
        }
    }
    let len: usize = line.trim().trim_start_matches('$').parse().unwrap();
    let mut image = vec![0u8; len];
    rd.read_exact(&mut image).unwrap();
    assert!(image.starts_with(b"REDIS0010"));
    let _: () = redis::cmd("SET").arg("after").arg(2).query(&mut c).unwrap();
    let _: () = redis::pipe()
        .atomic()
        .cmd("INCR")
        .arg("n")
        .cmd("INCR")
        .arg("n")
        .query(&mut c)
        .unwrap();
    let mut want = Vec::new();
    for cmd in [
        &["SELECT", "0"][..],
        &["SET", "after", "2"],
        &["MULTI"],
        &["INCR", "n"],
        &["INCR", "n"],
        &["EXEC"],
    ] {
        want.extend_from_slice(format!("*{}\r\n", cmd.len()).as_bytes());
        for a in cmd {
            want.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
    }
    let mut got = vec![0u8; want.len()];
    rd.read_exact(&mut got).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&want)
    );
}

/// `REPLCONF rdb-only 1` and `rdb-filter-only functions` (what redis-cli --functions-rdb
/// sends): an image with the libraries and no key, then the connection closes.
#[test]
fn rdb_only_functions_image_then_close() {
    use std::io::{BufRead, BufReader, Read, Write};
    let server = Podium::start(&[]);
    let mut c = server.con();
    let _: () = redis::cmd("SET").arg("key").arg("v").query(&mut c).unwrap();
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("#!lua name=lib1\nredis.register_function('f', function() return 1 end)")
        .query(&mut c)
        .unwrap();
    let mut s = server.raw();
    let mut rd = BufReader::new(s.try_clone().unwrap());
    let mut lines = Vec::new();
    // One at a time, as redis-cli --functions-rdb sends them: PSYNC behind replies not yet
    // written is refused ("SYNC and PSYNC are invalid with pending output"), as by Redis.
    for (cmd, replies) in [
        (&b"REPLCONF rdb-only 1\r\n"[..], 1),
        (b"REPLCONF rdb-filter-only functions\r\n", 1),
        (b"PSYNC ? -1\r\n", 2),
    ] {
        s.write_all(cmd).unwrap();
        let want = lines.len() + replies;
        while lines.len() < want {
            let mut line = String::new();
            rd.read_line(&mut line).unwrap();
            if !line.trim().is_empty() {
                lines.push(line.trim().to_string());
            }
        }
    }
    assert_eq!(&lines[..2], &["+OK", "+OK"]);
    assert!(lines[2].starts_with("+FULLRESYNC "), "{lines:?}");
    let len: usize = lines[3].trim_start_matches('$').parse().unwrap();
    let mut image = vec![0u8; len];
    rd.read_exact(&mut image).unwrap();
    assert!(image.starts_with(b"REDIS0010"));
    let text = String::from_utf8_lossy(&image);
    assert!(text.contains("lib1"), "the library is in the image");
    assert!(!text.contains("key"), "no data in a functions-only image");
    let mut rest = Vec::new();
    rd.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "the connection closes after the image");
}

/// Keys a writable replica's own clients give a TTL expire on the replica (no DEL will come
/// from a master that never had them), while keys from the master wait for the master's DEL.
#[test]
fn a_writable_replica_expires_its_own_keys() {
    let master = Podium::start(&["--enable-debug-command", "yes"]);
    let replica = Podium::start(&["--replica-read-only", "no"]);
    let mut m = master.con();
    let mut r = replica.con();
    let _: () = redis::cmd("DEBUG")
        .arg("SET-ACTIVE-EXPIRE")
        .arg(0)
        .query(&mut m)
        .unwrap();
    follow(&mut r, &master);
    // From the master, expiring in 50 ms: the master does not expire it (active expiry off).
    let _: () = redis::cmd("SET")
        .arg("from-master")
        .arg("v")
        .arg("PX")
        .arg(50)
        .query(&mut m)
        .unwrap();
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut m).unwrap();
    assert_eq!(acked, 1);
    let before = info_stat(&mut r, "expired_keys");
    let _: () = redis::cmd("SET")
        .arg("own")
        .arg("v")
        .arg("PX")
        .arg(1)
        .query(&mut r)
        .unwrap();
    wait_until("the replica's own key to expire", || {
        info_stat(&mut r, "expired_keys") == before + 1
    });
    let own: Option<String> = redis::cmd("GET").arg("own").query(&mut r).unwrap();
    assert_eq!(own, None);
    // The master's key reads as absent but stays until the master's DEL.
    std::thread::sleep(Duration::from_millis(300));
    let size: i64 = redis::cmd("DBSIZE").query(&mut r).unwrap();
    assert_eq!(size, 1, "the master's expired key is kept for its DEL");
    assert_eq!(info_stat(&mut r, "expired_keys"), before + 1);
}

/// A command from the master that fails on the replica (a writable replica's own data, or a
/// command DEBUG REPLICATE sent only to replicas) is logged as Redis logs it and counted in
/// unexpected_error_replies; the replica goes on (`propagation-error-behavior ignore`).
#[test]
fn errors_answered_to_the_master_are_logged_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("replica.log");
    let master = Podium::start(&["--enable-debug-command", "yes"]);
    let replica = Launch::podium()
        .args(&[
            "--replica-read-only",
            "no",
            "--logfile",
            log.to_str().unwrap(),
        ])
        .start();
    let mut m = master.con();
    let mut r = replica.con();
    follow(&mut r, &master);
    let _: () = redis::cmd("SET").arg("n").arg("foo").query(&mut r).unwrap();
    let _: i64 = redis::cmd("INCRBY").arg("n").arg(1).query(&mut m).unwrap();
    let _: () = redis::cmd("DEBUG")
        .arg("REPLICATE")
        .arg("fake-command-1")
        .query(&mut m)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("after")
        .arg("1")
        .query(&mut m)
        .unwrap();
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut m).unwrap();
    assert_eq!(acked, 1);
    // The stream goes on after the failures.
    let after: String = redis::cmd("GET").arg("after").query(&mut r).unwrap();
    assert_eq!(after, "1");
    assert_eq!(info_stat(&mut r, "unexpected_error_replies"), 2);
    let text = std::fs::read_to_string(&log).unwrap();
    let critical: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("== CRITICAL =="))
        .collect();
    assert_eq!(critical.len(), 2, "{text}");
    assert!(critical[0].ends_with(
        "This replica is sending an error to its master: 'ERR value is not an integer or out of range' after processing the command 'incrby'"
    ), "{}", critical[0]);
    assert!(
        critical[1].contains("'ERR unknown command 'fake-command-1'"),
        "{}",
        critical[1]
    );
    assert!(
        critical[1].ends_with("after processing the command '<unknown>'"),
        "{}",
        critical[1]
    );
    let n: String = redis::cmd("GET").arg("n").query(&mut r).unwrap();
    assert_eq!(n, "foo");
}

/// A master that becomes a replica unblocks its blocked clients with Redis's error and closes
/// their connections (integration/replication's "BLPOP followed by role change"): a client
/// left blocked would pop what the new master pushes, and the two would hold different lists.
#[test]
fn a_demoted_master_unblocks_and_disconnects_its_blocked_clients() {
    use std::io::{Read, Write};
    let a = Podium::start(&[]);
    let b = Podium::start(&[]);
    let mut ca = a.con();
    let mut cb = b.con();
    let mut blocked = b.raw();
    blocked
        .write_all(b"*3\r\n$5\r\nBLPOP\r\n$3\r\nfoo\r\n$1\r\n0\r\n")
        .unwrap();
    wait_until("the client to block", || {
        let info: String = redis::cmd("INFO").arg("clients").query(&mut cb).unwrap();
        info.contains("blocked_clients:1")
    });
    follow(&mut cb, &a);
    let mut got = Vec::new();
    blocked
        .read_to_end(&mut got)
        .expect("the connection closes");
    assert_eq!(
        String::from_utf8_lossy(&got),
        "-UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)\r\n"
    );
    let _: () = redis::cmd("RPUSH")
        .arg("foo")
        .arg(&["a", "b", "c"])
        .query(&mut ca)
        .unwrap();
    wait_until("the list to reach the replica", || {
        let l: Vec<String> = redis::cmd("LRANGE")
            .arg("foo")
            .arg(0)
            .arg(-1)
            .query(&mut cb)
            .unwrap();
        l == ["a", "b", "c"]
    });
    let info: String = redis::cmd("INFO").arg("clients").query(&mut cb).unwrap();
    assert!(info.contains("blocked_clients:0"), "{info}");
}

/// A replica promoted with REPLICAOF NO ONE disconnects its own replicas, so they learn its
/// new replication ID; they come back with a partial resynchronization (the old ID is its
/// secondary one), as Redis's replicationUnsetMaster makes them.
#[test]
fn a_promoted_replica_hands_its_replicas_the_new_id_by_partial_resync() {
    let a = Podium::start(&[]);
    let b = Podium::start(&[]);
    let c = Podium::start(&[]);
    let mut ca = a.con();
    let mut cb = b.con();
    let mut cc = c.con();
    follow(&mut cb, &a);
    follow(&mut cc, &b);
    write_some(&mut ca, 0, 50);
    wait_until("the chain to catch up", || same_data(&mut ca, &mut cc));
    let full_before = info_stat(&mut cb, "sync_full");
    let partial_before = info_stat(&mut cb, "sync_partial_ok");
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut cb)
        .unwrap();
    let new_id = info_field(&mut cb, "master_replid");
    wait_until("the replica to take the new replication ID", || {
        info_field(&mut cc, "master_replid") == new_id && link_up(&mut cc)
    });
    assert_eq!(info_stat(&mut cb, "sync_partial_ok"), partial_before + 1);
    assert_eq!(info_stat(&mut cb, "sync_full"), full_before);
    write_some(&mut cb, 50, 60);
    wait_until("the new master's writes to arrive", || {
        same_data(&mut cb, &mut cc)
    });
}

/// A partial resynchronization continues the master's stream where it stopped, with no SELECT
/// in front: the replica applies it in the database the stream had selected before the link
/// dropped (Redis keeps it in its cached master), not in database 0.
#[test]
fn a_partial_resync_continues_in_the_database_the_stream_had_selected() {
    let master = Podium::start(&[]);
    let replica = Podium::start(&[]);
    let mut cm = master.con();
    let mut cr = replica.con();
    let _: () = redis::cmd("SELECT").arg(9).query(&mut cm).unwrap();
    let _: () = redis::cmd("SELECT").arg(9).query(&mut cr).unwrap();
    follow(&mut cr, &master);
    let _: i64 = redis::cmd("INCR").arg("counter").query(&mut cm).unwrap();
    wait_until("the first INCR to arrive", || {
        redis::cmd("GET")
            .arg("counter")
            .query::<Option<i64>>(&mut cr)
            .unwrap()
            == Some(1)
    });
    let partial_before = info_stat(&mut cm, "sync_partial_ok");
    let _: () = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut cm)
        .unwrap();
    wait_until(
        "the replica to continue by partial resynchronization",
        || info_stat(&mut cm, "sync_partial_ok") == partial_before + 1 && link_up(&mut cr),
    );
    let _: i64 = redis::cmd("INCR").arg("counter").query(&mut cm).unwrap();
    wait_until("the second INCR to arrive in database 9", || {
        redis::cmd("GET")
            .arg("counter")
            .query::<Option<i64>>(&mut cr)
            .unwrap()
            == Some(2)
    });
    let _: () = redis::cmd("SELECT").arg(0).query(&mut cr).unwrap();
    let in_db0: Option<i64> = redis::cmd("GET").arg("counter").query(&mut cr).unwrap();
    assert_eq!(
        in_db0, None,
        "the continued stream was applied in database 0"
    );
}

/// A replica's RDB records its master's history (ID, the offset it applied up to, the stream's
/// database): restarted from it with `replicaof`, the replica continues by a partial
/// resynchronization, and the master's later writes land in the right database.
#[test]
fn a_restarted_replica_continues_from_its_rdb_by_partial_resync() {
    let master = Podium::start(&[]);
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().to_str().expect("UTF-8 dir");
    let target = master.port.to_string();
    let args = ["--dir", d, "--replicaof", "127.0.0.1", &target];
    let mut cm = master.con_db(5);
    let replica = Podium::start(&args);
    let mut cr = replica.con();
    wait_until("the link to come up", || link_up(&mut cr));
    let _: () = redis::cmd("SET").arg("a").arg(1).query(&mut cm).unwrap();
    let mut cr5 = replica.con_db(5);
    wait_until("the SET to arrive", || {
        redis::cmd("GET")
            .arg("a")
            .query::<Option<i64>>(&mut cr5)
            .unwrap()
            == Some(1)
    });
    let _: () = redis::cmd("SAVE").query(&mut cr).unwrap();
    replica.stop();
    let _: i64 = redis::cmd("INCR").arg("a").query(&mut cm).unwrap();
    let (full, partial) = (
        info_stat(&mut cm, "sync_full"),
        info_stat(&mut cm, "sync_partial_ok"),
    );
    let replica = Podium::start(&args);
    let mut cr5 = replica.con_db(5);
    wait_until("the INCR to arrive in database 5", || {
        redis::cmd("GET")
            .arg("a")
            .query::<Option<i64>>(&mut cr5)
            .unwrap()
            == Some(2)
    });
    assert_eq!(info_stat(&mut cm, "sync_partial_ok"), partial + 1);
    assert_eq!(info_stat(&mut cm, "sync_full"), full);
}

/// Commands are propagated as Redis rewrites them: GETSET as SET, a served BRPOPLPUSH as
/// RPOPLPUSH (and BLMOVE as LMOVE), so a replica's command statistics are Redis's.
#[test]
fn getset_and_brpoplpush_propagate_as_redis_rewrites_them() {
    use std::io::Write;
    let a = Podium::start(&[]);
    let b = Podium::start(&[]);
    let mut ca = a.con();
    let mut cb = b.con();
    follow(&mut cb, &a);
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut cb)
        .unwrap();
    let _: Option<String> = redis::cmd("GETSET")
        .arg("g")
        .arg("v")
        .query(&mut ca)
        .unwrap();
    let mut blocked = a.raw();
    blocked
        .write_all(b"*4\r\n$10\r\nBRPOPLPUSH\r\n$3\r\nsrc\r\n$3\r\ndst\r\n$1\r\n5\r\n")
        .unwrap();
    wait_until("the client to block", || {
        let info: String = redis::cmd("INFO").arg("clients").query(&mut ca).unwrap();
        info.contains("blocked_clients:1")
    });
    let _: i64 = redis::cmd("LPUSH")
        .arg("src")
        .arg("x")
        .query(&mut ca)
        .unwrap();
    wait_until("the move to reach the replica", || {
        let l: Vec<String> = redis::cmd("LRANGE")
            .arg("dst")
            .arg(0)
            .arg(-1)
            .query(&mut cb)
            .unwrap();
        l == ["x"]
    });
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut cb)
        .unwrap();
    assert!(stats.contains("cmdstat_set:calls=1,"), "{stats}");
    assert!(stats.contains("cmdstat_rpoplpush:calls=1,"), "{stats}");
    assert!(
        !stats.contains("cmdstat_getset") && !stats.contains("cmdstat_lmove"),
        "{stats}"
    );
}

/// A replica that sends a command touching the keyspace after reading +FULLRESYNC (while its
/// image is still being made, so the bytes wait in the socket) is refused and disconnected,
/// as Redis does it: the bytes waiting there are read once the image is sent.
#[test]
fn a_replica_command_sent_during_its_full_sync_is_read_and_refused() {
    use std::io::{BufRead, BufReader, Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("podium.log");
    let server = Podium::start(&[
        "--rdb-key-save-delay",
        "100000",
        "--logfile",
        log.to_str().unwrap(),
    ]);
    let mut c = server.con();
    for i in 0..5 {
        let _: () = redis::cmd("SET")
            .arg(format!("k{i}"))
            .arg("v")
            .query(&mut c)
            .unwrap();
    }
    let mut s = server.raw();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut rd = BufReader::new(s.try_clone().unwrap());
    s.write_all(b"PSYNC replicationid -1\r\n").unwrap();
    let mut line = String::new();
    rd.read_line(&mut line).unwrap();
    assert!(line.starts_with("+FULLRESYNC "), "{line}");
    assert!(line.trim_end().ends_with(" 0"), "{line}");
    // Sent while the image is still being made (each key takes 100 ms to save).
    s.write_all(b"GET foo\r\n").unwrap();
    // The image, then nothing: the server closes the link for the command's reply.
    let mut rest = Vec::new();
    rd.read_to_end(&mut rest)
        .expect("the server closes the replica's link");
    let text = String::from_utf8_lossy(&rest);
    assert!(text.contains("REDIS0010"), "the image came first");
    assert!(
        !text.contains("ERR"),
        "no reply reaches the replica's stream"
    );
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(
        log.contains("Replica generated a reply to command 'get', disconnecting it"),
        "{log}"
    );
}

/// CLIENT KILL of the master's client closes the link at once, even when the replica then
/// sleeps inside the same transaction (replication-psync's "backlog expired": the master must
/// see its replica gone while the replica sleeps, as with Redis, which closes the socket in
/// the kill), and the replica stays away until its sleep ends.
#[test]
fn killing_the_master_client_closes_the_link_at_once() {
    let master = Podium::start(&[]);
    let replica = Podium::start(&["--enable-debug-command", "yes"]);
    let mut m = master.con();
    let mut r = replica.con();
    follow(&mut r, &master);
    wait_until("the master to count its replica", || {
        info_field(&mut m, "connected_slaves") == "1"
    });
    let port = master.port;
    let sleeper = std::thread::spawn(move || {
        let _: () = redis::cmd("MULTI").query(&mut r).unwrap();
        let _: () = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("master")
            .query(&mut r)
            .unwrap();
        let _: () = redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg(3)
            .query(&mut r)
            .unwrap();
        let _: redis::Value = redis::cmd("EXEC").query(&mut r).unwrap();
    });
    let start = Instant::now();
    let mut gone_after = None;
    while start.elapsed() < Duration::from_secs(3) {
        if info_field(&mut m, "connected_slaves") == "0" {
            gone_after = Some(start.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // The replica does not come back while it sleeps: Redis reconnects from its cron, which
    // the sleep holds up (a backlog with a short TTL expires meanwhile in Redis's psync suite).
    while start.elapsed() < Duration::from_millis(2700) {
        assert_eq!(
            info_field(&mut m, "connected_slaves"),
            "0",
            "the replica reconnected during its DEBUG SLEEP ({:?})",
            start.elapsed()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    sleeper.join().unwrap();
    let gone_after = gone_after.unwrap_or_else(|| {
        panic!("the master on port {port} still counted its replica while the replica slept")
    });
    assert!(gone_after < Duration::from_millis(1500), "{gone_after:?}");
    wait_until("the replica to come back after its sleep", || {
        info_field(&mut m, "connected_slaves") == "1"
    });
}

/// A replica's output limit below `repl-backlog-size` counts as the backlog's size, as in
/// Redis: a partial resynchronization that hands the replica more than its limit (but no more
/// than the backlog holds) continues, and the writes after it do not drop the replica.
#[test]
fn a_partial_resync_past_the_replica_output_limit_within_the_backlog_keeps_the_replica() {
    let master = Podium::start(&["--enable-debug-command", "yes"]);
    let replica = Podium::start(&[]);
    let mut cm = master.con();
    let mut cr = replica.con();
    for (name, value) in [
        ("repl-backlog-size", "64mb"),
        ("client-output-buffer-limit", "replica 256kb 0 0"),
    ] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .query(&mut cm)
            .unwrap();
    }
    follow(&mut cr, &master);
    let full_before = info_stat(&mut cm, "sync_full");
    let partial_before = info_stat(&mut cm, "sync_partial_ok");
    let big = vec![b'A'; 4 << 20];
    // The link drops, and 8 MB are written before the replica can reconnect.
    let _: redis::Value = redis::pipe()
        .atomic()
        .cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .cmd("SET")
        .arg("key")
        .arg(&big[..])
        .cmd("SET")
        .arg("key")
        .arg(&big[..])
        .cmd("DEBUG")
        .arg("SLEEP")
        .arg(2)
        .query(&mut cm)
        .unwrap();
    wait_until("the replica to continue", || {
        info_stat(&mut cm, "sync_partial_ok") > partial_before
    });
    // A write adds to the buffer the replica still references: its limit is checked.
    let _: () = redis::cmd("SET")
        .arg("key")
        .arg(&big[..])
        .query(&mut cm)
        .unwrap();
    wait_until("the replica to catch up", || {
        link_up(&mut cr)
            && info_field(&mut cr, "master_repl_offset")
                == info_field(&mut cm, "master_repl_offset")
    });
    assert_eq!(info_stat(&mut cm, "sync_full"), full_before);
    assert_eq!(
        info_stat(&mut cm, "sync_partial_ok"),
        partial_before + 1,
        "the replica was dropped after its partial resynchronization"
    );
    assert_eq!(info_field(&mut cm, "connected_slaves"), "1");
}

/// A master whose host is gone answers no SYN, so the replica's connect waits (for
/// `repl-timeout`). REPLICAOF to another master must not wait for it: Redis cancels the
/// handshake in progress and connects to the new master at once, and Sentinel relies on
/// that when it points the other replicas at a promoted one (the compose scenario's replica
/// followed 9 s late before). The hanging connect is made on loopback: a listener that never
/// accepts, its accept queue full, drops further SYNs.
#[test]
fn replicaof_ends_a_connect_to_a_master_that_does_not_answer() {
    let silent =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    silent
        .bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .expect("bind");
    silent.listen(0).expect("listen");
    let silent_addr = silent
        .local_addr()
        .expect("addr")
        .as_socket()
        .expect("inet");
    // Fill the accept queue until a connect no longer completes.
    let mut queued = Vec::new();
    while queued.len() < 16 {
        match std::net::TcpStream::connect_timeout(&silent_addr, Duration::from_millis(300)) {
            Ok(s) => queued.push(s),
            Err(_) => break,
        }
    }
    assert!(queued.len() < 16, "the listener's queue never filled");

    // No diskless delay: the time measured is the link's, not the master's wait for more
    // replicas (5 s by default).
    let master = Podium::start(&["--repl-diskless-sync-delay", "0"]);
    let replica = Podium::start(&["--repl-timeout", "30"]);
    let mut r = replica.con();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(silent_addr.port())
        .query(&mut r)
        .unwrap();
    wait_until("the replica to be connecting", || {
        info_field(&mut r, "master_link_status") == "down"
    });
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    follow(&mut r, &master);
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "the link came up {took:?} after REPLICAOF (the old connect was waited for)"
    );
    drop(queued);
}
