//! Integration tests of the server foundation: the real binary on a free port, driven with the
//! `redis` crate and with raw sockets for malformed input.

use crate::common;

use common::{Launch, Podium};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

/// Send bytes, then read until the server closes or `timeout`.
fn exchange(s: &mut TcpStream, bytes: &[u8]) -> Vec<u8> {
    s.write_all(bytes).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(_) => break,
        }
    }
    out
}

fn read_some(s: &mut TcpStream, want: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while out.len() < want {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    out
}

#[test]
fn ping_set_get_roundtrip() {
    let srv = Podium::start(&[]);
    let mut c = srv.con();
    let pong: String = redis::cmd("PING").query(&mut c).unwrap();
    assert_eq!(pong, "PONG");
    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut c).unwrap();
    let v: String = redis::cmd("GET").arg("k").query(&mut c).unwrap();
    assert_eq!(v, "v");
    let n: i64 = redis::cmd("INCRBY").arg("n").arg(41).query(&mut c).unwrap();
    assert_eq!(n, 41);
    let f: String = redis::cmd("INCRBYFLOAT")
        .arg("f")
        .arg("1000.1")
        .query(&mut c)
        .unwrap();
    assert_eq!(
        f, "1000.09999999999999998",
        "long double arithmetic as Redis on x86_64"
    );
}

#[test]
fn pipeline_is_answered_in_order_in_one_write() {
    let srv = Podium::start(&[]);
    let mut s = srv.raw();
    let mut req = Vec::new();
    for i in 0..100 {
        req.extend_from_slice(
            format!(
                "*3\r\n$3\r\nSET\r\n$2\r\nk{}\r\n$1\r\n{}\r\n",
                i % 10,
                i % 10
            )
            .as_bytes(),
        );
        req.extend_from_slice(format!("*2\r\n$3\r\nGET\r\n$2\r\nk{}\r\n", i % 10).as_bytes());
    }
    s.write_all(&req).unwrap();
    let mut expect = Vec::new();
    for i in 0..100 {
        expect.extend_from_slice(format!("+OK\r\n$1\r\n{}\r\n", i % 10).as_bytes());
    }
    assert_eq!(read_some(&mut s, expect.len()), expect);
}

#[test]
fn inline_commands_work() {
    let srv = Podium::start(&[]);
    let mut s = srv.raw();
    s.write_all(b"SET greeting \"hello world\"\r\nGET greeting\r\n")
        .unwrap();
    assert_eq!(read_some(&mut s, 22), b"+OK\r\n$11\r\nhello world\r\n");
}

#[test]
fn protocol_errors_close_the_connection_and_server_keeps_serving() {
    let srv = Podium::start(&[]);
    let cases: &[(&[u8], &str)] = &[
        (
            b"*3000000000\r\n",
            "-ERR Protocol error: invalid multibulk length\r\n",
        ),
        (
            b"*1\r\nfoo\r\n",
            "-ERR Protocol error: expected '$', got 'f'\r\n",
        ),
        (
            b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$-10\r\n",
            "-ERR Protocol error: invalid bulk length\r\n",
        ),
        (
            b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$2000000000\r\n",
            "-ERR Protocol error: invalid bulk length\r\n",
        ),
        (
            b"set \"\"\"k\"\"\" v\r\n",
            "-ERR Protocol error: unbalanced quotes in request\r\n",
        ),
    ];
    for (input, want) in cases {
        let mut s = srv.raw();
        let got = exchange(&mut s, input);
        assert_eq!(
            String::from_utf8_lossy(&got),
            *want,
            "input {:?}",
            String::from_utf8_lossy(input)
        );
    }
    // Binary garbage with no newline: closed once it passes the inline limit.
    let mut s = srv.raw();
    let garbage: Vec<u8> = (0..70_000u32)
        .map(|i| (i % 251) as u8 | 1)
        .filter(|b| *b != b'\n' && *b != b'*')
        .collect();
    let got = exchange(&mut s, &garbage);
    assert!(
        String::from_utf8_lossy(&got).contains("Protocol error"),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
    // A huge declared bulk that never arrives, then disconnect mid-command.
    {
        let mut s = srv.raw();
        s.write_all(b"*2\r\n$3\r\nGET\r\n$500000000\r\nabc")
            .unwrap();
    }
    // Other clients are unaffected.
    let mut c = srv.con();
    let pong: String = redis::cmd("PING").query(&mut c).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn big_bulk_limit_is_configurable() {
    let srv = Podium::start(&["--proto-max-bulk-len", "1mb"]);
    let mut s = srv.raw();
    let got = exchange(&mut s, b"*2\r\n$3\r\nGET\r\n$2000000\r\n");
    assert_eq!(got, b"-ERR Protocol error: invalid bulk length\r\n");
}

#[test]
fn resp3_hello_and_shapes() {
    let srv = Podium::start(&[]);
    let mut s = srv.raw();
    s.write_all(b"HELLO 3\r\n").unwrap();
    let hello = read_some(&mut s, 10);
    assert!(
        hello.starts_with(b"%7\r\n"),
        "{:?}",
        String::from_utf8_lossy(&hello)
    );
    let mut s = srv.raw();
    s.write_all(b"HELLO 3\r\n").unwrap();
    let mut buf = [0u8; 4096];
    std::thread::sleep(Duration::from_millis(100));
    let _ = s.read(&mut buf).unwrap();
    s.write_all(b"GET nosuch\r\nCONFIG GET port\r\n").unwrap();
    let got = read_some(&mut s, 3 + 4 + 10 + 4);
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("_\r\n%1\r\n$4\r\nport\r\n"), "{text}");
    let mut c3 = srv.con3();
    let v: redis::Value = redis::cmd("HELLO").arg(3).query(&mut c3).unwrap();
    assert!(matches!(v, redis::Value::Map(_)), "{v:?}");
    let mut raw = srv.raw();
    assert_eq!(
        exchange_line(&mut raw, b"HELLO 4\r\n"),
        "-NOPROTO unsupported protocol version\r\n"
    );
}

fn exchange_line(s: &mut TcpStream, req: &[u8]) -> String {
    s.write_all(req).unwrap();
    let mut buf = [0u8; 4096];
    let n = s.read(&mut buf).unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn errors_match_redis_texts() {
    let srv = Podium::start(&[]);
    let mut s = srv.raw();
    assert_eq!(
        exchange_line(&mut s, b"FOO a b\r\n"),
        "-ERR unknown command 'FOO', with args beginning with: 'a' 'b' \r\n"
    );
    assert_eq!(
        exchange_line(&mut s, b"GET\r\n"),
        "-ERR wrong number of arguments for 'get' command\r\n"
    );
    assert_eq!(
        exchange_line(&mut s, b"CONFIG GET\r\n"),
        "-ERR wrong number of arguments for 'config|get' command\r\n"
    );
    assert_eq!(
        exchange_line(&mut s, b"SELECT 99\r\n"),
        "-ERR DB index is out of range\r\n"
    );
    assert_eq!(
        exchange_line(&mut s, b"SET a b c\r\n"),
        "-ERR syntax error\r\n"
    );
    assert_eq!(exchange_line(&mut s, b"SET n x\r\n"), "+OK\r\n");
    assert_eq!(
        exchange_line(&mut s, b"INCR n\r\n"),
        "-ERR value is not an integer or out of range\r\n"
    );
}

#[test]
fn databases_select_swap_flush() {
    let srv = Podium::start(&[]);
    let mut c = srv.con();
    let _: () = redis::cmd("SET").arg("a").arg("0").query(&mut c).unwrap();
    let _: () = redis::cmd("SELECT").arg(1).query(&mut c).unwrap();
    let _: () = redis::cmd("SET").arg("b").arg("1").query(&mut c).unwrap();
    let _: () = redis::cmd("SWAPDB").arg(0).arg(1).query(&mut c).unwrap();
    let a: Option<String> = redis::cmd("GET").arg("a").query(&mut c).unwrap();
    assert_eq!(a.as_deref(), Some("0"));
    let n: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(n, 1);
    let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
    let n: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(n, 0);
}

#[test]
fn info_reports_real_memory_and_keyspace() {
    let srv = Podium::start(&[]);
    let mut c = srv.con();
    let used = common::used_memory;
    let before = used(&mut c);
    let big = "x".repeat(1 << 20);
    for i in 0..8 {
        let _: () = redis::cmd("SET")
            .arg(format!("big{i}"))
            .arg(&big)
            .query(&mut c)
            .unwrap();
    }
    let after = used(&mut c);
    assert!(
        after >= before + 8 * (1 << 20),
        "used_memory {before} -> {after}"
    );
    let info: String = redis::cmd("INFO").query(&mut c).unwrap();
    for field in [
        "redis_version:",
        "role:master",
        "used_cpu_user:",
        "db0:keys=8,expires=0",
        "total_commands_processed:",
        // The allocator redis-server also uses, with its version (the string suite's
        // "trim on SET with big value" runs only when this says jemalloc).
        "mem_allocator:jemalloc-5.",
    ] {
        assert!(info.contains(field), "INFO lacks {field}");
    }
}

/// Pipelined batches of key commands on a keyspace large enough for the batch prefetch
/// (`Keyspace::warm_keys`: shards of at least 8,192 keys) answer exactly as the same commands
/// sent one at a time, on present and absent keys, strings inline and on the heap, and hashes.
#[test]
fn pipelined_key_batches_on_a_large_keyspace_match_one_at_a_time() {
    let srv = Podium::start(&[]);
    let mut c = srv.con();
    let n = 160_000;
    for prefix in ["a", "b"] {
        for start in (0..n).step_by(2000) {
            let mut cmd = redis::cmd("MSET");
            for i in start..start + 2000 {
                cmd.arg(format!("{prefix}:{i}"));
                if i % 3 == 0 {
                    cmd.arg(format!("a value long enough to live on the heap {i}"));
                } else {
                    cmd.arg(i);
                }
            }
            let _: () = cmd.query(&mut c).unwrap();
        }
    }
    let ops: Vec<Vec<String>> = (0..1200i64)
        .map(|j| {
            let k = format!("{}", (j * 7919) % (n as i64 + 500));
            let v = |s: &str| s.to_string();
            match j % 8 {
                0 => vec![v("GET"), k],
                1 => vec![v("SET"), k, format!("s{j}")],
                2 => vec![v("EXISTS"), k],
                3 => vec![v("TYPE"), k],
                4 => vec![v("HSET"), format!("h{}", j % 37), k, v("1")],
                5 => vec![v("HGET"), format!("h{}", j % 37), k],
                6 => vec![v("DEL"), k],
                _ => vec![v("GETDEL"), k],
            }
        })
        .collect();
    let with_prefix = |op: &Vec<String>, prefix: &str| {
        let mut cmd = redis::cmd(&op[0]);
        cmd.arg(format!("{prefix}:{}", op[1]));
        for a in &op[2..] {
            cmd.arg(a);
        }
        cmd
    };
    let mut piped: Vec<redis::Value> = Vec::new();
    for chunk in ops.chunks(64) {
        let mut p = redis::pipe();
        for op in chunk {
            p.add_command(with_prefix(op, "a"));
        }
        piped.extend(p.query::<Vec<redis::Value>>(&mut c).unwrap());
    }
    let single: Vec<redis::Value> = ops
        .iter()
        .map(|op| with_prefix(op, "b").query(&mut c).unwrap())
        .collect();
    assert_eq!(piped, single);
    let dbsize: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert!(dbsize > n as i64, "dbsize {dbsize}");
}

#[test]
fn config_file_errors_name_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.conf");
    std::fs::write(&path, "port 7000\n# comment\nnosuchdirective 1\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_podium"))
        .arg(&path)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(":3:") && err.contains("nosuchdirective"),
        "{err}"
    );
}

#[test]
fn shipped_config_starts() {
    let conf = concat!(env!("CARGO_MANIFEST_DIR"), "/conf/podium.conf");
    let srv = Podium::start(&[]);
    drop(srv);
    let srv = Launch::podium().config_file(conf).start();
    let mut c = srv.con();
    let v: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("zset-max-ziplist-entries")
        .query(&mut c)
        .unwrap();
    assert_eq!(
        v,
        vec!["zset-max-ziplist-entries".to_string(), "128".to_string()]
    );
}

#[test]
fn transactions_and_watch() {
    let srv = Podium::start(&[]);
    let mut c = srv.con();
    let mut other = srv.con();
    let _: () = redis::cmd("WATCH").arg("w").query(&mut c).unwrap();
    let _: () = redis::cmd("SET")
        .arg("w")
        .arg("changed")
        .query(&mut other)
        .unwrap();
    let _: () = redis::cmd("MULTI").query(&mut c).unwrap();
    let _: () = redis::cmd("SET")
        .arg("w")
        .arg("mine")
        .query(&mut c)
        .unwrap();
    let r: redis::Value = redis::cmd("EXEC").query(&mut c).unwrap();
    assert_eq!(
        r,
        redis::Value::Nil,
        "EXEC after a WATCHed key changed must abort"
    );
    let (a, b): (i64, i64) = redis::pipe()
        .atomic()
        .incr("ctr", 1)
        .incr("ctr", 2)
        .query(&mut c)
        .unwrap();
    assert_eq!((a, b), (1, 3));
    // A queueing error aborts the whole transaction.
    let mut s = srv.raw();
    s.write_all(b"MULTI\r\nSET x 1\r\nNOSUCH\r\nEXEC\r\nGET x\r\n")
        .unwrap();
    let got = String::from_utf8_lossy(&read_some(&mut s, 100)).into_owned();
    assert!(
        got.contains("-EXECABORT Transaction discarded because of previous errors.\r\n$-1\r\n"),
        "{got}"
    );
}

/// UNWATCH queued in a transaction runs as any queued command (the transaction commands are
/// rows of the command table, not names the dispatcher catches), and EXEC drops the WATCHes
/// before its queue runs, as Redis does: the transaction's own write to a watched key does
/// not leave the client flagged for the next one.
#[test]
fn unwatch_inside_multi_and_watches_dropped_by_exec() {
    let srv = Podium::start(&[]);
    let mut s = srv.raw();
    let got = exchange(&mut s, b"MULTI\r\nUNWATCH\r\nEXEC\r\n");
    assert_eq!(
        got,
        b"+OK\r\n+QUEUED\r\n*1\r\n+OK\r\n",
        "{}",
        String::from_utf8_lossy(&got)
    );
    let got = exchange(
        &mut s,
        b"WATCH w\r\nMULTI\r\nSET w 1\r\nEXEC\r\nMULTI\r\nSET w 2\r\nEXEC\r\n",
    );
    assert_eq!(
        got,
        b"+OK\r\n+OK\r\n+QUEUED\r\n*1\r\n+OK\r\n+OK\r\n+QUEUED\r\n*1\r\n+OK\r\n",
        "{}",
        String::from_utf8_lossy(&got)
    );
    let mut c = srv.con();
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut c)
        .unwrap();
    assert!(stats.contains("cmdstat_unwatch:calls=1,"), "{stats}");
}

#[test]
fn shutdown_stops_the_server() {
    shutdown_stops(&[]);
}

/// One core (the single-threaded runtime): SHUTDOWN used to panic there, in the wait for the
/// accept loops, and the process hung instead of exiting.
#[test]
fn shutdown_stops_a_single_threaded_server() {
    shutdown_stops(&["--threads", "1"]);
}

fn shutdown_stops(args: &[&str]) {
    let mut srv = Podium::start(args);
    let mut s = srv.raw();
    s.write_all(b"SHUTDOWN NOSAVE\r\n").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(Some(status)) = srv.child.try_wait() {
            assert!(status.success());
            break;
        }
        assert!(
            Instant::now() < deadline,
            "server did not exit after SHUTDOWN"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn many_clients_in_parallel() {
    let srv = Podium::start(&[]);
    let port = srv.port;
    let handles: Vec<_> = (0..8)
        .map(|t| {
            std::thread::spawn(move || {
                let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                    .unwrap()
                    .get_connection()
                    .unwrap();
                for i in 0..500 {
                    let _: i64 = redis::cmd("INCR").arg("shared").query(&mut c).unwrap();
                    let _: () = redis::cmd("MSET")
                        .arg(format!("a{t}"))
                        .arg(i)
                        .arg(format!("b{t}"))
                        .arg(i)
                        .query(&mut c)
                        .unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let mut c = srv.con();
    let n: i64 = redis::cmd("GET").arg("shared").query(&mut c).unwrap();
    assert_eq!(n, 4000);
}

#[test]
fn idle_clients_are_closed_after_timeout() {
    let srv = Podium::start(&["--timeout", "1"]);
    let mut idle = srv.raw();
    let mut busy = srv.con();
    // The busy client talks every 300 ms, the idle one never does.
    for _ in 0..6 {
        std::thread::sleep(Duration::from_millis(300));
        let pong: String = redis::cmd("PING").query(&mut busy).unwrap();
        assert_eq!(pong, "PONG");
    }
    // The idle connection was closed by the server: a read sees EOF.
    let mut buf = [0u8; 16];
    assert_eq!(
        idle.read(&mut buf).unwrap_or(0),
        0,
        "idle client still open"
    );
}

#[test]
fn logfile_receives_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("podium.log");
    let srv = Podium::start(&["--logfile", log.to_str().unwrap()]);
    let mut c = srv.con();
    let _: String = redis::cmd("PING").query(&mut c).unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("Ready to accept connections"), "{text}");
}

/// OBJECT REFCOUNT reports Redis's shared small integers (0..9999) as shared, except under
/// maxmemory with an LRU/LFU policy, where Redis gives each value its own object.
#[test]
fn object_refcount_follows_redis_shared_integers() {
    let srv = Podium::start(&[]);
    let mut con = srv.con();
    let refcount = |con: &mut redis::Connection, key: &str| -> i64 {
        redis::cmd("OBJECT")
            .arg("REFCOUNT")
            .arg(key)
            .query(con)
            .expect("object refcount")
    };
    let _: () = redis::cmd("SET")
        .arg("small")
        .arg("42")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("big")
        .arg("10000")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("text")
        .arg("abc")
        .query(&mut con)
        .unwrap();
    assert_eq!(refcount(&mut con, "small"), i64::from(i32::MAX));
    assert_eq!(refcount(&mut con, "big"), 1);
    assert_eq!(refcount(&mut con, "text"), 1);
    for (k, v) in [
        ("maxmemory", "1073741824"),
        ("maxmemory-policy", "allkeys-lru"),
    ] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(k)
            .arg(v)
            .query(&mut con)
            .unwrap();
    }
    assert_eq!(refcount(&mut con, "small"), 1);
}

/// With one thread, replies wait for the thread's turn to write (written together before it
/// sleeps, as Redis's beforeSleep writes them). Many clients at once, pipelined and not, one
/// of them reading a large reply slowly: every client gets exactly its own replies, in order,
/// and none waits (a turn that never came would leave them hanging until the read timeout).
#[test]
fn one_thread_writes_every_reply_in_its_turn() {
    let srv = Podium::start(&["--threads", "1", "--save", ""]);
    let port = srv.port;
    let mut workers = Vec::new();
    for c in 0..24usize {
        workers.push(std::thread::spawn(move || {
            let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
            s.set_read_timeout(Some(Duration::from_secs(10)))
                .expect("timeout");
            let depth = 1 + c % 5;
            let mut expected = 0u64;
            for _ in 0..200 {
                let mut req = Vec::new();
                for _ in 0..depth {
                    req.extend_from_slice(
                        format!("*2\r\n$4\r\nINCR\r\n${}\r\nc{c}\r\n", format!("c{c}").len())
                            .as_bytes(),
                    );
                }
                s.write_all(&req).expect("write");
                let mut want = Vec::new();
                for _ in 0..depth {
                    expected += 1;
                    want.extend_from_slice(format!(":{expected}\r\n").as_bytes());
                }
                let mut got = vec![0u8; want.len()];
                s.read_exact(&mut got).expect("replies arrive");
                assert_eq!(got, want, "client {c}");
            }
        }));
    }
    // A reply larger than the socket takes at once, read slowly while the others run.
    let mut con = srv.con();
    let big = "x".repeat(4 << 20);
    redis::cmd("SET")
        .arg("big")
        .arg(&big)
        .exec(&mut con)
        .expect("set");
    let mut slow = srv.raw();
    slow.write_all(b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n*1\r\n$4\r\nPING\r\n")
        .expect("write");
    let header = format!("${}\r\n", big.len());
    let mut got = vec![0u8; header.len() + big.len() + 2 + 7];
    let mut at = 0;
    while at < got.len() {
        std::thread::sleep(Duration::from_millis(2));
        let n = slow.read(&mut got[at..]).expect("read");
        assert!(n > 0, "closed early");
        at += n;
    }
    assert!(got.starts_with(header.as_bytes()));
    assert!(got.ends_with(b"\r\n+PONG\r\n"));
    for w in workers {
        w.join().expect("client thread");
    }
}
