//! Blocked clients and the order of requests across connections, on the multi-threaded runtime.
//!
//! Both tests replay, many times over, what Redis's own list tests do with deferring clients:
//! requests sent back to back on different connections without waiting for replies. The first
//! one stopped the server for good before 2026-11-26 (a push serving a blocked BRPOPLPUSH took
//! the destination's shard while holding the waiter registry, and a client blocking held that
//! shard and wanted the registry); the second measures that such requests run in the order
//! they were sent (src/arrival.rs).

use crate::common;

use common::Podium;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// The two tests take turns: the first one's noise would make the second one's server busy,
/// and a busy server does not keep arrival order (by design, see src/arrival.rs).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn encode(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    out
}

/// A socket that sends requests and reads whole replies (as text lines), with a timeout.
struct Raw {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Raw {
    fn new(srv: &Podium) -> Raw {
        let s = srv.raw();
        s.set_nodelay(true).expect("nodelay");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        Raw { s, buf: Vec::new() }
    }

    fn send(&mut self, args: &[&str]) {
        self.s.write_all(&encode(args)).expect("send");
    }

    fn line(&mut self) -> String {
        loop {
            if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&self.buf[..i]).into_owned();
                self.buf.drain(..i + 2);
                return line;
            }
            let mut chunk = [0u8; 4096];
            let n = self
                .s
                .read(&mut chunk)
                .expect("a reply within 10 s (the server stopped answering)");
            assert!(n > 0, "connection closed");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// One reply, flattened: bulk strings as their text, arrays as their elements joined by
    /// spaces, everything else as its line.
    fn reply(&mut self) -> String {
        let line = self.line();
        match line.as_bytes().first() {
            Some(b'$') if line != "$-1" => self.line(),
            Some(b'*') if line != "*-1" => {
                let n: usize = line[1..].parse().expect("array length");
                (0..n).map(|_| self.reply()).collect::<Vec<_>>().join(" ")
            }
            _ => line,
        }
    }

    fn call(&mut self, args: &[&str]) -> String {
        self.send(args);
        self.reply()
    }
}

/// Two BRPOPLPUSH clients on one list, a push of two elements sent right behind them, and two
/// other connections running MULTI/INCR/EXEC (which locks every shard) all the while: both
/// clients are served and the server keeps answering, whatever order things run in.
#[test]
fn pushes_that_serve_blocked_moves_never_stop_the_server() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let srv = Podium::start(&["--threads", "2"]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let noise: Vec<_> = (0..2)
        .map(|_| {
            let mut c = Raw::new(&srv);
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    c.send(&["MULTI"]);
                    c.send(&["INCR", "noise"]);
                    c.send(&["EXEC"]);
                    for _ in 0..3 {
                        c.reply();
                    }
                }
            })
        })
        .collect();
    let mut r = Raw::new(&srv);
    for i in 0..300 {
        let (src, a, b) = (
            format!("src{}", i % 16),
            format!("dsta{}", i % 16),
            format!("dstb{}", i % 16),
        );
        r.call(&["DEL", &src, &a, &b]);
        let mut rd1 = Raw::new(&srv);
        let mut rd2 = Raw::new(&srv);
        rd1.send(&["BRPOPLPUSH", &src, &a, "0"]);
        rd2.send(&["BRPOPLPUSH", &src, &b, "0"]);
        assert_eq!(r.call(&["LPUSH", &src, "x", "y"]), ":2");
        let mut got = vec![rd1.reply(), rd2.reply()];
        got.sort();
        assert_eq!(got, ["x", "y"], "round {i}");
        assert_eq!(r.call(&["LLEN", &src]), ":0", "round {i}");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in noise {
        t.join().expect("noise client");
    }
    assert_eq!(r.call(&["PING"]), "+PONG");
}

/// Redis's "BRPOPLPUSH does not affect WATCH while still blocked", 500 times: EXEC on one
/// connection, and right behind it on another a push that serves a BRPOPLPUSH into the
/// watched key. EXEC was sent first, so it runs first and the transaction goes through.
/// Without arrival ordering the push overtook the EXEC in 231 rounds of 500 here (main's build
/// of 2026-11-26 on this project's 2-core machine); with it, in none on an idle machine and in
/// 6-42 of 500 while a build kept both cores busy (threads off their core for over the 2 ms
/// an earlier request may hold a later one back), and 91 in one CI run that shared the machine
/// with a release build. The bound, 30%, leaves room for that and still fails the unordered
/// server's 46%.
#[test]
fn a_request_sent_first_on_another_connection_runs_first() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let srv = Podium::start(&["--threads", "2"]);
    let mut r = Raw::new(&srv);
    let mut lost = 0;
    let rounds = 500;
    for i in 0..rounds {
        let (src, dst) = (format!("src{}", i % 8), format!("dst{}", i % 8));
        r.call(&["DEL", &src, &dst]);
        r.call(&["SET", "somekey", "somevalue"]);
        let mut blocked = Raw::new(&srv);
        blocked.send(&["BRPOPLPUSH", &src, &dst, "0"]);
        while !r.call(&["INFO", "clients"]).contains("blocked_clients:1") {}
        let mut w = Raw::new(&srv);
        assert_eq!(w.call(&["WATCH", &dst]), "+OK");
        assert_eq!(w.call(&["MULTI"]), "+OK");
        assert_eq!(w.call(&["GET", "somekey"]), "+QUEUED");
        w.send(&["EXEC"]);
        r.call(&["LPUSH", &src, "element"]);
        match w.reply().as_str() {
            "somevalue" => {}
            "*-1" | "" => lost += 1,
            other => panic!("EXEC replied {other:?}"),
        }
        assert_eq!(blocked.reply(), "element");
    }
    assert!(
        lost * 100 <= rounds * 30,
        "EXEC lost to a later push {lost} times in {rounds}"
    );
}

/// A key that expires while the transaction that filled it runs is gone by the time its
/// waiters are served (Redis reads the clock again before serving): the waiter stays blocked,
/// and the expiry is logged as a DEL.
#[test]
fn a_key_expired_during_exec_does_not_wake_its_waiter() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let srv = Podium::start(&["--enable-debug-command", "yes"]);
    let mut c = srv.con();
    let info = |c: &mut redis::Connection, section: &str| -> String {
        redis::cmd("INFO").arg(section).query(c).expect("INFO")
    };
    let mut r = Raw::new(&srv);
    assert_eq!(r.call(&["DEBUG", "SET-ACTIVE-EXPIRE", "0"]), "+OK");
    let mut blocked = Raw::new(&srv);
    blocked.send(&["BRPOP", "k", "0"]);
    while !info(&mut c, "clients").contains("blocked_clients:1") {}
    assert_eq!(r.call(&["MULTI"]), "+OK");
    assert_eq!(r.call(&["RPUSH", "k", "hello"]), "+QUEUED");
    assert_eq!(r.call(&["PEXPIRE", "k", "100"]), "+QUEUED");
    assert_eq!(r.call(&["DEBUG", "SLEEP", "0.2"]), "+QUEUED");
    assert_eq!(r.call(&["EXEC"]), ":1 :1 +OK");
    assert!(info(&mut c, "clients").contains("blocked_clients:1"));
    assert!(info(&mut c, "stats").contains("expired_keys:1"));
    assert_eq!(r.call(&["EXISTS", "k"]), ":0");
    // Served normally once a live element arrives.
    assert_eq!(r.call(&["RPUSH", "k", "again"]), ":1");
    assert_eq!(blocked.reply(), "k again");
}
