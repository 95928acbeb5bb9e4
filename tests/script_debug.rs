//! The Lua debugger (SCRIPT DEBUG) against the real binary, over a plain socket as
//! redis-cli's `--ldb` talks to it: a SYNC session stepping through a script (print, eval,
//! redis, list, break, continue) whose changes stay, a forked (YES) session whose changes do
//! not reach the server, abort, Redis's protocol-error texts, and the refusals (EVALSHA while
//! debugging, SCRIPT DEBUG in a pipeline).

use crate::common;

use common::Podium;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;

/// One RESP reply read as text lines: an array of status lines becomes its lines; anything
/// else its first line.
fn read_reply(r: &mut BufReader<TcpStream>) -> Vec<String> {
    let mut line = String::new();
    r.read_line(&mut line).expect("reply");
    let line = line.trim_end().to_string();
    if let Some(n) = line.strip_prefix('*') {
        let n: i64 = n.parse().expect("array length");
        let mut out = Vec::new();
        for _ in 0..n.max(0) {
            let mut item = String::new();
            r.read_line(&mut item).expect("array item");
            let item = item.trim_end().to_string();
            if let Some(len) = item.strip_prefix('$') {
                let len: usize = len.parse().expect("bulk length");
                let mut data = vec![0u8; len + 2];
                std::io::Read::read_exact(r, &mut data).expect("bulk");
                out.push(String::from_utf8_lossy(&data[..len]).into_owned());
            } else {
                out.push(item.get(1..).unwrap_or("").to_string());
            }
        }
        return out;
    }
    if let Some(len) = line.strip_prefix('$') {
        let len: i64 = len.parse().expect("bulk length");
        if len < 0 {
            return vec!["(nil)".into()];
        }
        let mut data = vec![0u8; len as usize + 2];
        std::io::Read::read_exact(r, &mut data).expect("bulk");
        return vec![String::from_utf8_lossy(&data[..len as usize]).into_owned()];
    }
    vec![line]
}

fn send(w: &mut TcpStream, args: &[&str]) {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    w.write_all(&out).expect("send");
}

fn session(p: &Podium, mode: &str) -> (TcpStream, BufReader<TcpStream>) {
    let w = p.raw();
    let mut r = BufReader::new(w.try_clone().expect("clone"));
    let mut w2 = w.try_clone().expect("clone");
    send(&mut w2, &["SCRIPT", "DEBUG", mode]);
    assert_eq!(read_reply(&mut r), vec!["+OK"]);
    (w, r)
}

const SCRIPT: &str = "local a = 10\nlocal t = {1, 'two'}\nredis.call('set', KEYS[1], ARGV[1])\nredis.debug('at', a)\nreturn redis.call('get', KEYS[1])\n";

#[test]
fn a_sync_session_steps_through_the_script_and_keeps_its_changes() {
    let p = Podium::start(&[]);
    let (mut w, mut r) = session(&p, "SYNC");
    send(&mut w, &["EVAL", SCRIPT, "1", "k", "v1"]);
    assert_eq!(
        read_reply(&mut r),
        vec![
            "* Stopped at 1, stop reason = step over",
            "-> 1   local a = 10"
        ]
    );
    send(&mut w, &["s"]);
    assert_eq!(
        read_reply(&mut r),
        vec![
            "* Stopped at 2, stop reason = step over",
            "-> 2   local t = {1, 'two'}"
        ]
    );
    send(&mut w, &["s"]);
    read_reply(&mut r);
    send(&mut w, &["print"]);
    assert_eq!(
        read_reply(&mut r),
        vec!["<value> a = 10", "<value> t = {1; \"two\"}"]
    );
    send(&mut w, &["p", "KEYS"]);
    assert_eq!(read_reply(&mut r), vec!["<value> {\"k\"}"]);
    send(&mut w, &["p", "nope"]);
    assert_eq!(read_reply(&mut r), vec!["No such variable."]);
    send(&mut w, &["eval", "#KEYS", "*", "2"]);
    assert_eq!(read_reply(&mut r), vec!["<retval> 2"]);
    // Another call frame: the script's locals are not visible there.
    send(&mut w, &["eval", "a"]);
    assert_eq!(
        read_reply(&mut r),
        vec!["<error> ldb_eval:1: Script attempted to access nonexistent global variable 'a'"]
    );
    send(&mut w, &["redis", "incr", "counter"]);
    assert_eq!(
        read_reply(&mut r),
        vec!["<redis> incr counter", "<reply> 1"]
    );
    send(&mut w, &["b", "5"]);
    assert_eq!(
        read_reply(&mut r),
        vec![
            "   4   redis.debug('at', a)",
            "  #5   return redis.call('get', KEYS[1])"
        ]
    );
    send(&mut w, &["c"]);
    assert_eq!(
        read_reply(&mut r),
        vec![
            "<debug> line 4: \"at\", 10",
            "* Stopped at 5, stop reason = break point",
            "->#5   return redis.call('get', KEYS[1])"
        ]
    );
    send(&mut w, &["c"]);
    assert_eq!(read_reply(&mut r), vec!["<endsession>"]);
    assert_eq!(read_reply(&mut r), vec!["v1"]);
    // The connection closes after the session.
    let mut rest = String::new();
    assert_eq!(r.read_line(&mut rest).unwrap_or(0), 0);
    let mut con = p.con();
    let v: String = redis::cmd("GET").arg("k").query(&mut con).expect("get");
    assert_eq!(v, "v1");
    let n: i64 = redis::cmd("GET")
        .arg("counter")
        .query(&mut con)
        .expect("get");
    assert_eq!(n, 1);
}

#[test]
fn a_forked_session_leaves_the_data_set_alone() {
    let p = Podium::start(&[]);
    let (mut w, mut r) = session(&p, "YES");
    send(&mut w, &["EVAL", SCRIPT, "1", "k", "forked"]);
    read_reply(&mut r);
    send(&mut w, &["c"]);
    assert_eq!(
        read_reply(&mut r),
        vec!["<debug> line 4: \"at\", 10", "<endsession>"]
    );
    assert_eq!(read_reply(&mut r), vec!["forked"]);
    let mut con = p.con();
    let v: Option<String> = redis::cmd("GET").arg("k").query(&mut con).expect("get");
    assert_eq!(v, None, "a forked session's write stays in the child");
    let pong: String = redis::cmd("PING").query(&mut con).expect("ping");
    assert_eq!(pong, "PONG");
}

#[test]
fn abort_and_protocol_errors_end_the_script_with_redis_texts() {
    let p = Podium::start(&[]);
    let (mut w, mut r) = session(&p, "SYNC");
    send(&mut w, &["EVAL", "return 'hello'", "0"]);
    read_reply(&mut r);
    send(&mut w, &["'hello\0world'"]);
    assert_eq!(
        read_reply(&mut r),
        vec!["<error> Unknown Redis Lua debugger command or wrong number of arguments."]
    );
    // A command the server rejects, with more than ten words in it.
    let mut long = vec!["redis"];
    long.extend(std::iter::repeat_n("test", 100));
    send(&mut w, &long);
    let lines = read_reply(&mut r);
    assert_eq!(
        lines[0],
        "<redis> test test test test test test test test test test ... (89 more)"
    );
    assert_eq!(lines[1], "<error> Unknown Redis command called from script");
    send(&mut w, &["abort"]);
    assert_eq!(read_reply(&mut r), vec!["<endsession>"]);
    let e = read_reply(&mut r);
    assert!(
        e[0].starts_with("-ERR script aborted for user request script:"),
        "{e:?}"
    );

    let (mut w, mut r) = session(&p, "SYNC");
    send(&mut w, &["EVAL", "return 1", "0"]);
    read_reply(&mut r);
    w.write_all(b"garbage\r\n").expect("send");
    assert_eq!(read_reply(&mut r), vec!["<endsession>"]);
    let e = read_reply(&mut r);
    assert!(e[0].starts_with("-ERR protocol error"), "{e:?}");
}

#[test]
fn refusals_while_debugging() {
    let p = Podium::start(&[]);
    let (mut w, mut r) = session(&p, "SYNC");
    send(&mut w, &["EVALSHA", "x", "0"]);
    assert_eq!(
        read_reply(&mut r),
        vec!["-NOSCRIPT No matching script. Please use EVAL."]
    );
    send(&mut w, &["EVALSHA", &"a".repeat(40), "0"]);
    assert_eq!(
        read_reply(&mut r),
        vec!["-ERR Please use EVAL instead of EVALSHA for debugging"]
    );
    send(&mut w, &["SCRIPT", "DEBUG", "maybe"]);
    assert_eq!(
        read_reply(&mut r),
        vec!["-ERR Use SCRIPT DEBUG YES/SYNC/NO"]
    );
    // Pipelined after a command whose reply is not written yet.
    let mut w = p.raw();
    let mut r = BufReader::new(w.try_clone().expect("clone"));
    w.write_all(b"*1\r\n$4\r\nPING\r\n*3\r\n$6\r\nSCRIPT\r\n$5\r\nDEBUG\r\n$3\r\nYES\r\n")
        .expect("send");
    assert_eq!(read_reply(&mut r), vec!["+PONG"]);
    assert_eq!(
        read_reply(&mut r),
        vec!["-ERR SCRIPT DEBUG must be called outside a pipeline"]
    );
    send(&mut w, &["SCRIPT", "DEBUG", "NO"]);
    assert_eq!(read_reply(&mut r), vec!["+OK"]);
    send(&mut w, &["EVAL", "return 7", "0"]);
    assert_eq!(read_reply(&mut r), vec![":7"]);
}
