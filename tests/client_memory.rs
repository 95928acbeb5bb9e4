//! Client memory as Redis 7.0 counts it, on the real binary: what CLIENT LIST shows of a
//! request still arriving and of a MULTI queue (checked against redis-server 7.0 where it is
//! installed: the same bytes on both), client eviction (`maxmemory-clients`) by each kind of
//! client memory, the order clients are evicted in, DEBUG REPLYBUFFER and the reply buffer's
//! resizing, and the link to a master letting go of a big request's buffer.

use crate::common;

use common::{require_tool, Launch, Podium};
use redis::Connection;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The field `f` of the CLIENT LIST line of the client named `name`, if there is one.
fn client_field(c: &mut Connection, name: &str, f: &str) -> Option<String> {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(c)
        .expect("CLIENT LIST");
    let line = list
        .lines()
        .find(|l| l.split(' ').any(|w| w == format!("name={name}")))?;
    line.split(' ')
        .find_map(|w| w.strip_prefix(&format!("{f}=")).map(str::to_string))
}

fn field_num(c: &mut Connection, name: &str, f: &str) -> Option<u64> {
    client_field(c, name, f).map(|v| v.parse().expect("a number"))
}

/// The test's own connection, named `control` and never evicted.
fn control(server: &Podium) -> Connection {
    let mut c = server.con();
    redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg("control")
        .query::<()>(&mut c)
        .unwrap();
    redis::cmd("CLIENT")
        .arg("NO-EVICT")
        .arg("on")
        .query::<()>(&mut c)
        .unwrap();
    c
}

/// CONFIG SET maxmemory-clients `limit`.
fn set_limit(c: &mut Connection, limit: u64) {
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-clients")
        .arg(limit)
        .query::<()>(c)
        .unwrap();
}

/// Wait up to 20 s for `cond` (a replica's first full sync waits repl-diskless-sync-delay,
/// 5 s by default, as with Redis).
fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A raw connection named `name` (its CLIENT SETNAME answered).
fn named(port: u16, name: &str) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(
        format!(
            "*3\r\n$6\r\nCLIENT\r\n$7\r\nSETNAME\r\n${}\r\n{name}\r\n",
            name.len()
        )
        .as_bytes(),
    )
    .unwrap();
    let mut ok = [0u8; 5];
    s.read_exact(&mut ok).unwrap();
    assert_eq!(&ok, b"+OK\r\n");
    s
}

/// True once the server has closed `s` (a read gets EOF or an error).
fn closed(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut b = [0u8; 64];
    loop {
        match s.read(&mut b) {
            Ok(0) | Err(_) => return true,
            Ok(_) => continue,
        }
    }
}

/// What CLIENT LIST shows of a client in the middle of a request and of one with a MULTI
/// queue: `qbuf` only what the parser has not taken yet, `argv-mem` the complete arguments,
/// `multi-mem` the queued arguments with a pointer each.
fn request_in_progress_fields(server: &Podium) -> Vec<(String, String)> {
    let mut c = server.con();
    let mut partial = named(server.port, "partial");
    partial
        .write_all(b"*3\r\n$3\r\nset\r\n$1\r\nk\r\n$1000\r\n")
        .unwrap();
    partial.write_all(&[b'v'; 500]).unwrap();
    let mut big = named(server.port, "big");
    big.write_all(b"*2\r\n$3\r\nset\r\n$100000\r\n").unwrap();
    big.write_all(&[b'v'; 50_000]).unwrap();
    let mut tx = server.con();
    redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg("tx")
        .query::<()>(&mut tx)
        .unwrap();
    redis::cmd("MULTI").query::<()>(&mut tx).unwrap();
    redis::cmd("SET")
        .arg("k")
        .arg("v".repeat(100))
        .query::<()>(&mut tx)
        .unwrap();
    redis::cmd("SET")
        .arg("k2")
        .arg("v".repeat(10))
        .query::<()>(&mut tx)
        .unwrap();
    wait_for("the partial requests to arrive", || {
        field_num(&mut c, "partial", "qbuf") == Some(500)
            && field_num(&mut c, "big", "qbuf") == Some(50_000)
    });
    let mut got = Vec::new();
    for (name, f) in [
        ("partial", "qbuf"),
        ("partial", "argv-mem"),
        ("big", "qbuf"),
        ("big", "argv-mem"),
        ("tx", "multi"),
        ("tx", "multi-mem"),
        ("tx", "qbuf"),
    ] {
        got.push((
            format!("{name} {f}"),
            client_field(&mut c, name, f).unwrap_or_default(),
        ));
    }
    got
}

#[test]
fn client_list_shows_a_request_in_progress_and_a_multi_queue_as_redis_does() {
    let podium = Podium::start(&[]);
    let got = request_in_progress_fields(&podium);
    let want: Vec<(String, String)> = [
        ("partial qbuf", "500"),
        ("partial argv-mem", "4"),
        ("big qbuf", "50000"),
        ("big argv-mem", "3"),
        ("tx multi", "2"),
        ("tx multi-mem", "167"),
        ("tx qbuf", "0"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(got, want);
    if let Some(redis) = require_tool("redis-server") {
        let redis = Launch::prog(&redis).args(&["--save", ""]).start();
        assert_eq!(request_in_progress_fields(&redis), want, "redis-server");
    }
}

/// An argument of 32 KiB or more gets a query buffer of its exact size once its header is
/// read, whatever pieces it arrives in: clients sending the same request use the same memory.
#[test]
fn a_big_argument_is_buffered_in_exactly_its_size() {
    let server = Podium::start(&[]);
    let mut c = server.con();
    let mut clients = Vec::new();
    for (i, piece) in [1000usize, 7000, 65536].into_iter().enumerate() {
        let mut s = named(server.port, &format!("big{i}"));
        s.write_all(b"*2\r\n$3\r\nset\r\n$300000\r\n").unwrap();
        for chunk in vec![b'v'; 300_000].chunks(piece) {
            s.write_all(chunk).unwrap();
        }
        clients.push(s);
    }
    wait_for("the arguments to arrive", || {
        (0..3).all(|i| field_num(&mut c, &format!("big{i}"), "qbuf") == Some(300_000))
    });
    for i in 0..3 {
        let name = format!("big{i}");
        // The request up to the argument's end: "*2\r\n$3\r\nset\r\n$300000\r\n" and its CRLF.
        assert_eq!(field_num(&mut c, &name, "qbuf-free"), Some(2), "{name}");
    }
    let mems: Vec<_> = (0..3)
        .map(|i| field_num(&mut c, &format!("big{i}"), "tot-mem").unwrap())
        .collect();
    assert!(mems.iter().all(|&m| m == mems[0]), "{mems:?}");
    assert!(mems[0] > 300_000 && mems[0] < 350_000, "{mems:?}");
}

/// The `j`th command of a series that grows one kind of client memory.
type Request = fn(usize) -> Vec<String>;

/// Each kind of client memory, grown past `maxmemory-clients`, gets the client evicted (the
/// connection closed, `evicted_clients` counted).
#[test]
fn clients_are_evicted_for_each_kind_of_memory() {
    let server = Podium::start(&[]);
    let mut c = control(&server);
    set_limit(&mut c, 200000);
    let kinds: [(&str, Request); 5] = [
        ("watch", |j| vec!["WATCH".into(), format!("key:{j}")]),
        ("psubscribe", |j| {
            vec!["PSUBSCRIBE".into(), format!("p{j}*")]
        }),
        ("subscribe", |j| vec!["SUBSCRIBE".into(), format!("ch{j}")]),
        ("ssubscribe", |j| {
            vec!["SSUBSCRIBE".into(), format!("sh{j}")]
        }),
        ("tracking prefix", |j| {
            [
                "CLIENT",
                "TRACKING",
                "on",
                "BCAST",
                "PREFIX",
                &format!("{j:012}"),
            ]
            .map(String::from)
            .to_vec()
        }),
    ];
    for (kind, command) in kinds {
        let mut s = named(server.port, "victim");
        let mut evicted_at = None;
        for j in 0..20_000 {
            let args = command(j);
            let mut req = format!("*{}\r\n", args.len());
            for a in &args {
                req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
            }
            if s.write_all(req.as_bytes()).is_err() {
                evicted_at = Some(j);
                break;
            }
            let mut reply = [0u8; 256];
            match s.read(&mut reply) {
                Ok(0) | Err(_) => {
                    evicted_at = Some(j);
                    break;
                }
                Ok(_) => {}
            }
        }
        let at = evicted_at.unwrap_or_else(|| panic!("{kind}: never evicted"));
        assert!(at > 50, "{kind}: evicted after only {at} commands");
        assert_eq!(client_field(&mut c, "victim", "tot-mem"), None, "{kind}");
    }
    let info: String = redis::cmd("INFO").arg("stats").query(&mut c).unwrap();
    assert!(info.contains("evicted_clients:5\r\n"), "{info}");
}

/// A MULTI queue over the limit, and a query buffer over it, evict their client; the
/// control connection (no-evict) stays.
#[test]
fn a_multi_queue_and_a_query_buffer_over_the_limit_are_evicted() {
    let server = Podium::start(&[]);
    let mut c = control(&server);
    set_limit(&mut c, 3000000);
    let mut tx = server.con();
    redis::cmd("MULTI").query::<()>(&mut tx).unwrap();
    let mut failed = false;
    for _ in 0..6 {
        if redis::cmd("SET")
            .arg("k")
            .arg("v".repeat(750_000))
            .query::<String>(&mut tx)
            .is_err()
        {
            failed = true;
            break;
        }
    }
    assert!(failed, "the MULTI queue of 4.5 MB was kept");
    let mut qb = named(server.port, "qb");
    let _ = qb.write_all(b"*1\r\n$3000000\r\n");
    let _ = qb.write_all(&vec![b'v'; 100_000]);
    assert!(closed(&mut qb), "a 3 MB argument in progress was kept");
    let pong: String = redis::cmd("PING").query(&mut c).unwrap();
    assert_eq!(pong, "PONG");
}

/// Lowering the limit evicts at once, biggest first, and only until the total is under it;
/// no-evict clients count but stay.
#[test]
fn lowering_the_limit_evicts_the_biggest_clients_until_under_it() {
    let server = Podium::start(&[]);
    let mut c = control(&server);
    let sizes = [("small", 100_000usize), ("large", 1_000_000)];
    let mut held = Vec::new();
    for (name, size) in sizes {
        for i in 0..2 {
            let mut s = named(server.port, &format!("{name}{i}"));
            s.write_all(format!("*2\r\n$3\r\nset\r\n${size}\r\n").as_bytes())
                .unwrap();
            s.write_all(&vec![b'v'; size]).unwrap();
            held.push(s);
        }
    }
    wait_for("the requests to arrive", || {
        field_num(&mut c, "large1", "qbuf") == Some(1_000_000)
            && field_num(&mut c, "small1", "qbuf") == Some(100_000)
    });
    let small = field_num(&mut c, "small0", "tot-mem").unwrap();
    let control = field_num(&mut c, "control", "tot-mem").unwrap();
    // Room for the small ones and the control connection: both large ones go, nothing else.
    let limit = 2 * small + control;
    set_limit(&mut c, limit);
    for name in ["small0", "small1", "control"] {
        assert!(client_field(&mut c, name, "id").is_some(), "{name} evicted");
    }
    for name in ["large0", "large1"] {
        assert_eq!(client_field(&mut c, name, "id"), None, "{name} kept");
    }
    // Under every client's size: all evictable ones go, the no-evict one stays.
    set_limit(&mut c, 1);
    assert_eq!(client_field(&mut c, "small0", "id"), None);
    assert!(client_field(&mut c, "control", "id").is_some());
}

/// DEBUG REPLYBUFFER as redis-server answers it, and the reply buffer resized as Redis
/// resizes it: an idle client's shrinks to 1 KiB, big replies grow it back to 16 KiB a
/// doubling per cron visit, and RESIZING 0 stops both.
#[test]
fn debug_replybuffer_and_the_reply_buffer_resizing() {
    let server = Podium::start(&["--enable-debug-command", "yes"]);
    let mut c = server.con();
    let errors = |c: &mut Connection| -> Vec<String> {
        [
            vec!["REPLYBUFFER", "foo", "1"],
            vec!["REPLYBUFFER", "peak-reset-time"],
            vec!["REPLYBUFFER", "peak-reset-time", "abc"],
        ]
        .iter()
        .map(|args| {
            redis::cmd("DEBUG")
                .arg(args)
                .query::<String>(c)
                .unwrap_err()
                .to_string()
        })
        .collect()
    };
    let podium_errors = errors(&mut c);
    assert!(
        podium_errors[0]
            .contains("unknown subcommand or wrong number of arguments for 'REPLYBUFFER'"),
        "{podium_errors:?}"
    );
    assert!(
        podium_errors[2].contains("value is not an integer"),
        "{podium_errors:?}"
    );
    if let Some(redis) = require_tool("redis-server") {
        let redis = Launch::prog(&redis)
            .args(&["--save", "", "--enable-debug-command", "yes"])
            .start();
        assert_eq!(errors(&mut redis.con()), podium_errors, "redis-server");
    }
    for ok in [
        vec!["REPLYBUFFER", "PEAK-RESET-TIME", "NEVER"],
        vec!["REPLYBUFFER", "peak-reset-time", "reset"],
        vec!["REPLYBUFFER", "resizing", "xyz"],
        vec!["REPLYBUFFER", "resizing", "1"],
        vec!["REPLYBUFFER", "peak-reset-time", "100"],
    ] {
        let r: String = redis::cmd("DEBUG").arg(&ok).query(&mut c).unwrap();
        assert_eq!(r, "OK", "{ok:?}");
    }
    let mut tc = server.con();
    redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg("tc")
        .query::<()>(&mut tc)
        .unwrap();
    wait_for("an idle client's buffer to shrink", || {
        field_num(&mut c, "tc", "rbs") == Some(1024)
    });
    let big = "x".repeat(40_000);
    redis::cmd("SET")
        .arg("big")
        .arg(&big)
        .query::<()>(&mut c)
        .unwrap();
    redis::cmd("DEBUG")
        .arg(&["REPLYBUFFER", "peak-reset-time", "never"])
        .query::<()>(&mut c)
        .unwrap();
    wait_for("a busy client's buffer to grow to 16 KiB", || {
        let v: String = redis::cmd("GET").arg("big").query(&mut tc).unwrap();
        assert_eq!(v.len(), big.len());
        field_num(&mut c, "tc", "rbs") == Some(16384)
    });
    // Resizing off: an idle buffer keeps its size.
    redis::cmd("DEBUG")
        .arg(&["REPLYBUFFER", "resizing", "0"])
        .query::<()>(&mut c)
        .unwrap();
    redis::cmd("DEBUG")
        .arg(&["REPLYBUFFER", "peak-reset-time", "reset"])
        .query::<()>(&mut c)
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(field_num(&mut c, "tc", "rbs"), Some(16384));
    redis::cmd("DEBUG")
        .arg(&["REPLYBUFFER", "resizing", "1"])
        .query::<()>(&mut c)
        .unwrap();
}

/// A replica lets go of the buffer a big command from its master arrived in once it ran:
/// its memory stays near its master's (Redis's unit/pendingquerybuf, at 8 MB).
#[test]
fn a_replica_lets_go_of_a_big_commands_buffer() {
    let master = Podium::start(&[]);
    let replica = Podium::start(&[]);
    let mut r = replica.con();
    redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(master.port)
        .query::<()>(&mut r)
        .unwrap();
    let mut m = master.con();
    wait_for("the link", || {
        let info: String = redis::cmd("INFO").arg("replication").query(&mut r).unwrap();
        info.contains("master_link_status:up")
    });
    redis::cmd("SET")
        .arg("key")
        .arg(vec![b'x'; 8 << 20])
        .query::<()>(&mut m)
        .unwrap();
    wait_for("the value on the replica", || {
        redis::cmd("STRLEN")
            .arg("key")
            .query::<u64>(&mut r)
            .unwrap()
            == 8 << 20
    });
    wait_for("the master link's buffer to be let go", || {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .arg("TYPE")
            .arg("master")
            .query(&mut r)
            .unwrap();
        let free: u64 = list
            .split(' ')
            .find_map(|w| w.strip_prefix("qbuf-free="))
            .expect("the master's link is listed")
            .parse()
            .unwrap();
        free < 1 << 20
    });
    // As the suite waits: the replica's memory comes down to its master's (without the fix
    // it stayed 16 MB above it: the doubled block a value kept alive).
    wait_for("the replica's memory to come down to its master's", || {
        common::used_memory(&mut r) < common::used_memory(&mut m) + (4 << 20)
    });
}
