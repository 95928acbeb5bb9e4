//! A long command does not hold up clients whose keys it does not touch: while a ZUNIONSTORE
//! of two large sets runs (on one worker, holding its keys' locks), PING and a ZSCORE on
//! another database are answered before the union's reply comes. Checked by order, not time:
//! before `commands::long` existed, their replies came only after the union's.

use crate::common;
use common::Podium;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::Duration;

fn fill(con: &mut redis::Connection, key: &str, from: usize, n: usize) {
    for lo in (0..n).step_by(5000) {
        let mut cmd = redis::cmd("ZADD");
        cmd.arg(key);
        for i in lo..(lo + 5000).min(n) {
            cmd.arg(((from + i) * 7919 % 1_000_003) as f64)
                .arg(format!("m:{:012}", from + i));
        }
        let _: i64 = cmd.query(con).expect("zadd");
    }
}

fn read_reply(s: &mut TcpStream) -> Vec<u8> {
    let mut buf = vec![0u8; 256];
    let n = s.read(&mut buf).expect("reply");
    buf.truncate(n);
    buf
}

#[test]
#[cfg_attr(debug_assertions, ignore = "large sets: run with --release")]
fn other_clients_are_answered_while_a_union_runs() {
    let srv = Podium::start(&["--threads", "2"]);
    let mut con = srv.con();
    let n = 400_000;
    fill(&mut con, "a", 0, n);
    fill(&mut con, "b", n / 2, n);
    let mut other = srv.con_db(1);
    let _: i64 = redis::cmd("ZADD")
        .arg("o")
        .arg(1)
        .arg("x")
        .query(&mut other)
        .expect("zadd o");

    // Every connection is open (accepted) before the union starts, so what is measured is
    // whether requests are served during it, not how soon a new connection is accepted.
    let mut ping = srv.raw();
    let mut zscore = srv.raw();
    zscore.write_all(b"SELECT 1\r\n").expect("select");
    assert_eq!(read_reply(&mut zscore), b"+OK\r\n");

    let (tx, rx) = mpsc::channel::<&'static str>();
    let mut union = srv.raw();
    union
        .set_read_timeout(Some(Duration::from_secs(120)))
        .expect("timeout");
    let done = tx.clone();
    let t = std::thread::spawn(move || {
        // Each input named four times: four times the work of one union of a and b, the same
        // result, and a run long enough (hundreds of ms) on a fast machine too.
        let mut req = b"*11\r\n$11\r\nZUNIONSTORE\r\n$3\r\ndst\r\n$1\r\n8\r\n".to_vec();
        for _ in 0..4 {
            req.extend_from_slice(b"$1\r\na\r\n$1\r\nb\r\n");
        }
        union.write_all(&req).expect("send union");
        let r = read_reply(&mut union);
        assert_eq!(r, format!(":{}\r\n", n + n / 2).into_bytes());
        done.send("union").expect("send");
    });
    // Give the union time to start, then ask others; each answer must come before it ends.
    std::thread::sleep(Duration::from_millis(50));
    ping.write_all(b"PING\r\n").expect("ping");
    assert_eq!(read_reply(&mut ping), b"+PONG\r\n");
    tx.send("ping").expect("send");
    zscore.write_all(b"ZSCORE o x\r\n").expect("zscore");
    let mut got = Vec::new();
    while got.len() < b"$1\r\n1\r\n".len() {
        got.extend(read_reply(&mut zscore));
    }
    assert_eq!(got, b"$1\r\n1\r\n");
    tx.send("zscore").expect("send");
    t.join().expect("union thread");
    let order: Vec<&str> = rx.try_iter().collect();
    assert_eq!(order, ["ping", "zscore", "union"], "replies in this order");
}
