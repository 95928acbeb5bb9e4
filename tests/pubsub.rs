//! Pub/Sub, keyspace notifications and MONITOR against the real binary: RESP2 subscribers
//! through the `redis` crate, RESP3 pushes byte for byte on a raw socket, the subscriber-mode
//! rules, the pubsub output buffer limit and the MONITOR line format.

use crate::common;

use common::Podium;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Read exactly `want.len()` bytes and compare.
fn expect(s: &mut TcpStream, want: &[u8]) {
    let mut got = vec![0u8; want.len()];
    s.read_exact(&mut got).expect("read");
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(want),
        "unexpected bytes"
    );
}

fn send(s: &mut TcpStream, cmd: &[&str]) {
    let mut out = format!("*{}\r\n", cmd.len()).into_bytes();
    for a in cmd {
        out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    s.write_all(&out).expect("write");
}

fn push3(items: &[&str]) -> Vec<u8> {
    let mut out = format!(">{}\r\n", items.len()).into_bytes();
    for a in items {
        out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    out
}

fn sub_ack(resp3: bool, kind: &str, name: &str, n: i64) -> Vec<u8> {
    format!(
        "{}3\r\n${}\r\n{kind}\r\n${}\r\n{name}\r\n:{n}\r\n",
        if resp3 { '>' } else { '*' },
        kind.len(),
        name.len()
    )
    .into_bytes()
}

/// The keyspace events of ZINCRBY, EXPIRE and the key's expiry, as pmessage triples.
fn leaderboard_events() -> Vec<[String; 3]> {
    let ev = |chan: &str, payload: &str| {
        [
            "__key*@0__:*".to_string(),
            chan.to_string(),
            payload.to_string(),
        ]
    };
    vec![
        ev("__keyspace@0__:lb", "zincr"),
        ev("__keyevent@0__:zincr", "lb"),
        ev("__keyspace@0__:lb", "expire"),
        ev("__keyevent@0__:expire", "lb"),
        ev("__keyspace@0__:lb", "expired"),
        ev("__keyevent@0__:expired", "lb"),
    ]
}

fn run_leaderboard_changes(srv: &Podium) {
    let mut c = srv.con();
    let _: f64 = redis::cmd("ZINCRBY")
        .arg("lb")
        .arg(5)
        .arg("alice")
        .query(&mut c)
        .unwrap();
    let _: i64 = redis::cmd("PEXPIRE")
        .arg("lb")
        .arg(100)
        .query(&mut c)
        .unwrap();
}

#[test]
fn resp2_subscriber_gets_keyspace_events_in_order() {
    let srv = Podium::start(&[]);
    let mut c = srv.con();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("KEzgx")
        .query(&mut c)
        .unwrap();
    let mut sub_con = srv.con();
    sub_con
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut sub = sub_con.as_pubsub();
    sub.psubscribe("__key*@0__:*").unwrap();
    run_leaderboard_changes(&srv);
    // The key expires through active expiry (nobody touches it).
    for want in leaderboard_events() {
        let msg = sub.get_message().expect("an event");
        let pattern: String = msg.get_pattern().unwrap();
        let payload: String = msg.get_payload().unwrap();
        assert_eq!([pattern, msg.get_channel_name().to_string(), payload], want);
    }
}

#[test]
fn resp3_subscriber_gets_keyspace_events_as_pushes() {
    let srv = Podium::start(&[]);
    let mut c = srv.con();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("KEzgx")
        .query(&mut c)
        .unwrap();
    let mut s = srv.raw();
    send(&mut s, &["HELLO", "3"]);
    let mut hello = [0u8; 1];
    s.read_exact(&mut hello).unwrap();
    assert_eq!(hello[0], b'%');
    // Skip the rest of the HELLO map: ask for a PING and read up to its reply.
    send(&mut s, &["PING", "sync"]);
    let mut seen = Vec::new();
    while !seen.ends_with(b"$4\r\nsync\r\n") {
        let mut b = [0u8; 1];
        s.read_exact(&mut b).unwrap();
        seen.push(b[0]);
    }
    send(&mut s, &["PSUBSCRIBE", "__key*@0__:*"]);
    expect(&mut s, &sub_ack(true, "psubscribe", "__key*@0__:*", 1));
    // A RESP3 subscriber may still run ordinary commands.
    send(&mut s, &["GET", "nothing"]);
    expect(&mut s, b"_\r\n");
    run_leaderboard_changes(&srv);
    for [p, ch, m] in leaderboard_events() {
        expect(&mut s, &push3(&["pmessage", &p, &ch, &m]));
    }
    // Its own command's events come before the command's reply.
    send(&mut s, &["ZADD", "mine", "1", "a"]);
    expect(
        &mut s,
        &push3(&["pmessage", "__key*@0__:*", "__keyspace@0__:mine", "zadd"]),
    );
    expect(
        &mut s,
        &push3(&["pmessage", "__key*@0__:*", "__keyevent@0__:zadd", "mine"]),
    );
    expect(&mut s, b":1\r\n");
}

#[test]
fn resp2_and_resp3_subscribers_of_the_redis_crate_get_the_same_events_in_order() {
    let srv = Podium::start(&[]);
    let mut c = srv.con();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("KEzgx")
        .query(&mut c)
        .unwrap();
    let (mut con2, mut con3) = (srv.con(), srv.con3());
    for con in [&mut con2, &mut con3] {
        con.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    }
    let mut sub2 = con2.as_pubsub();
    let mut sub3 = con3.as_pubsub();
    sub2.psubscribe("__key*@0__:*").unwrap();
    sub3.psubscribe("__key*@0__:*").unwrap();
    // ZINCRBY, PEXPIRE, then the expiry (active: nobody touches the key), twice over, so that
    // the order is checked across rounds too.
    for _ in 0..2 {
        run_leaderboard_changes(&srv);
        for want in leaderboard_events() {
            for (proto, sub) in [("RESP2", &mut sub2), ("RESP3", &mut sub3)] {
                let msg = sub
                    .get_message()
                    .unwrap_or_else(|e| panic!("{proto}: no event {want:?}: {e}"));
                let pattern: String = msg.get_pattern().unwrap();
                let payload: String = msg.get_payload().unwrap();
                assert_eq!(
                    [pattern, msg.get_channel_name().to_string(), payload],
                    want,
                    "{proto}"
                );
            }
        }
    }
}

#[test]
fn lazy_expiry_publishes_expired_before_the_command_effects() {
    let srv = Podium::start(&[]);
    let mut c = srv.con();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("Egxzn")
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .arg("PX")
        .arg(30)
        .query(&mut c)
        .unwrap();
    let mut s = srv.raw();
    send(
        &mut s,
        &[
            "SUBSCRIBE",
            "__keyevent@0__:expired",
            "__keyevent@0__:new",
            "__keyevent@0__:zadd",
        ],
    );
    expect(
        &mut s,
        &sub_ack(false, "subscribe", "__keyevent@0__:expired", 1),
    );
    expect(
        &mut s,
        &sub_ack(false, "subscribe", "__keyevent@0__:new", 2),
    );
    expect(
        &mut s,
        &sub_ack(false, "subscribe", "__keyevent@0__:zadd", 3),
    );
    std::thread::sleep(Duration::from_millis(60));
    // ZADD finds the key expired (lazy expiry), then creates it anew.
    let _: i64 = redis::cmd("ZADD")
        .arg("k")
        .arg(1)
        .arg("m")
        .query(&mut c)
        .unwrap();
    let msg = |ch: &str, m: &str| {
        format!(
            "*3\r\n$7\r\nmessage\r\n${}\r\n{ch}\r\n${}\r\n{m}\r\n",
            ch.len(),
            m.len()
        )
        .into_bytes()
    };
    expect(&mut s, &msg("__keyevent@0__:expired", "k"));
    expect(&mut s, &msg("__keyevent@0__:new", "k"));
    expect(&mut s, &msg("__keyevent@0__:zadd", "k"));
}

#[test]
fn resp2_subscriber_mode_rules() {
    let srv = Podium::start(&[]);
    let mut s = srv.raw();
    send(&mut s, &["SUBSCRIBE", "a"]);
    expect(&mut s, &sub_ack(false, "subscribe", "a", 1));
    send(&mut s, &["GET", "x"]);
    expect(&mut s, b"-ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context\r\n");
    send(&mut s, &["PING"]);
    expect(&mut s, b"*2\r\n$4\r\npong\r\n$0\r\n\r\n");
    send(&mut s, &["SSUBSCRIBE", "s"]);
    expect(&mut s, &sub_ack(false, "ssubscribe", "s", 1));
    send(&mut s, &["UNSUBSCRIBE"]);
    expect(&mut s, &sub_ack(false, "unsubscribe", "a", 0));
    // Still subscribed to a shard channel: still in subscriber mode.
    send(&mut s, &["PING", "x"]);
    expect(&mut s, b"*2\r\n$4\r\npong\r\n$1\r\nx\r\n");
    send(&mut s, &["RESET"]);
    expect(&mut s, b"+RESET\r\n");
    send(&mut s, &["PING"]);
    expect(&mut s, b"+PONG\r\n");
    let mut c = srv.con();
    let n: Vec<redis::Value> = redis::cmd("PUBSUB")
        .arg("SHARDNUMSUB")
        .arg("s")
        .query(&mut c)
        .unwrap();
    assert_eq!(n[1], redis::Value::Int(0), "RESET dropped the subscription");
}

#[test]
fn messages_keep_publish_order_and_counts() {
    let srv = Podium::start(&[]);
    let mut s = srv.raw();
    send(&mut s, &["SUBSCRIBE", "c"]);
    expect(&mut s, &sub_ack(false, "subscribe", "c", 1));
    send(&mut s, &["PSUBSCRIBE", "c*"]);
    expect(&mut s, &sub_ack(false, "psubscribe", "c*", 2));
    let mut c = srv.con();
    let mut pipe = redis::pipe();
    for i in 0..2000 {
        pipe.cmd("PUBLISH").arg("c").arg(i);
    }
    let counts: Vec<i64> = pipe.query(&mut c).unwrap();
    assert!(
        counts.iter().all(|&n| n == 2),
        "one exact and one pattern receiver"
    );
    for i in 0..2000 {
        let m = i.to_string();
        expect(
            &mut s,
            format!("*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n${}\r\n{m}\r\n", m.len()).as_bytes(),
        );
        expect(
            &mut s,
            format!(
                "*4\r\n$8\r\npmessage\r\n$2\r\nc*\r\n$1\r\nc\r\n${}\r\n{m}\r\n",
                m.len()
            )
            .as_bytes(),
        );
    }
    let info: String = redis::cmd("INFO").arg("stats").query(&mut c).unwrap();
    assert!(info.contains("pubsub_channels:1\r\n"), "{info}");
    assert!(info.contains("pubsub_patterns:1\r\n"), "{info}");
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut c).unwrap();
    assert!(
        list.lines()
            .any(|l| l.contains("flags=P ") && l.contains(" sub=1 psub=1 ssub=0 ")),
        "{list}"
    );
}

#[test]
fn subscriber_that_stops_reading_is_disconnected_and_publisher_never_waits() {
    let srv = Podium::start(&[]);
    let mut c = srv.con();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("client-output-buffer-limit")
        .arg("pubsub 1mb 256kb 1")
        .query(&mut c)
        .unwrap();
    let cfg: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("client-output-buffer-limit")
        .query(&mut c)
        .unwrap();
    assert_eq!(
        cfg[1],
        "normal 0 0 0 slave 268435456 67108864 60 pubsub 1048576 262144 1"
    );
    let mut s = srv.raw();
    send(&mut s, &["SUBSCRIBE", "big"]);
    expect(&mut s, &sub_ack(false, "subscribe", "big", 1));
    // The subscriber never reads again. 64 MB of messages would be held for it otherwise.
    let payload = "x".repeat(64 * 1024);
    let started = Instant::now();
    let mut last = 1;
    for _ in 0..1024 {
        last = redis::cmd("PUBLISH")
            .arg("big")
            .arg(&payload)
            .query(&mut c)
            .unwrap();
        if last == 0 {
            break;
        }
    }
    assert_eq!(last, 0, "the subscriber was dropped");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "publishing never waited for the subscriber"
    );
    let n: Vec<redis::Value> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg("big")
        .query(&mut c)
        .unwrap();
    assert_eq!(n[1], redis::Value::Int(0));
    // Its connection is closed: reading drains what was sent, then hits the end.
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    // Bad values are refused with Redis's texts.
    let e = redis::cmd("CONFIG")
        .arg("SET")
        .arg("client-output-buffer-limit")
        .arg("pubsub 1mb 1mb")
        .query::<()>(&mut c)
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("Wrong number of arguments in buffer limit configuration."),
        "{e}"
    );
}

#[test]
fn monitor_shows_commands_as_redis_does() {
    let srv = Podium::start(&[]);
    let mut c = srv.con();
    let mut m = srv.raw();
    send(&mut m, &["MONITOR"]);
    expect(&mut m, b"+OK\r\n");
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("a \"b\"\n")
        .query(&mut c)
        .unwrap();
    let _: redis::Value = redis::cmd("AUTH")
        .arg("secret")
        .query(&mut c)
        .unwrap_or(redis::Value::Nil);
    let mut text = String::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while text.matches("\r\n").count() < 2 && Instant::now() < deadline {
        let mut buf = [0u8; 4096];
        let n = m.read(&mut buf).unwrap();
        text.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    let lines: Vec<&str> = text.split("\r\n").collect();
    let set_line = lines[0];
    assert!(set_line.starts_with('+'), "{set_line}");
    let (ts, rest) = set_line[1..].split_once(' ').unwrap();
    let (secs, usecs) = ts.split_once('.').unwrap();
    assert!(secs.parse::<u64>().is_ok() && usecs.len() == 6, "{ts}");
    assert!(
        rest.starts_with("[0 127.0.0.1:") && rest.ends_with("] \"SET\" \"k\" \"a \\\"b\\\"\\n\""),
        "{rest}"
    );
    assert!(
        lines[1].ends_with("\"AUTH\" \"(redacted)\""),
        "{}",
        lines[1]
    );
}

#[test]
fn tracking_invalidates_after_the_reply_and_through_redirection() {
    let srv = Podium::start(&[]);
    let mut c = srv.con();
    // RESP3, default mode: a key it read is invalidated once, after its own write's reply.
    let mut s = srv.raw();
    send(&mut s, &["HELLO", "3"]);
    send(&mut s, &["PING", "sync"]);
    let mut seen = Vec::new();
    while !seen.ends_with(b"$4\r\nsync\r\n") {
        let mut b = [0u8; 1];
        s.read_exact(&mut b).unwrap();
        seen.push(b[0]);
    }
    send(&mut s, &["CLIENT", "TRACKING", "on"]);
    expect(&mut s, b"+OK\r\n");
    send(&mut s, &["GET", "k"]);
    expect(&mut s, b"_\r\n");
    send(&mut s, &["SET", "k", "v"]);
    expect(&mut s, b"+OK\r\n");
    expect(&mut s, b">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n");
    // Forgotten after one invalidation: another write sends nothing until it reads again.
    let _: () = redis::cmd("SET").arg("k").arg("w").query(&mut c).unwrap();
    send(&mut s, &["PING", "after"]);
    expect(&mut s, b"$5\r\nafter\r\n");

    // RESP2 with REDIRECT to a connection subscribed to __redis__:invalidate.
    let mut r = srv.raw();
    send(&mut r, &["CLIENT", "ID"]);
    let mut id = Vec::new();
    while !id.ends_with(b"\r\n") {
        let mut b = [0u8; 1];
        r.read_exact(&mut b).unwrap();
        id.push(b[0]);
    }
    let id = String::from_utf8_lossy(&id[1..id.len() - 2]).to_string();
    send(&mut r, &["SUBSCRIBE", "__redis__:invalidate"]);
    expect(
        &mut r,
        &sub_ack(false, "subscribe", "__redis__:invalidate", 1),
    );
    let mut t = srv.con();
    let _: () = redis::cmd("CLIENT")
        .arg("TRACKING")
        .arg("on")
        .arg("REDIRECT")
        .arg(&id)
        .arg("BCAST")
        .arg("PREFIX")
        .arg("user:")
        .query(&mut t)
        .unwrap();
    let _: () = redis::cmd("MSET")
        .arg("user:1")
        .arg("a")
        .arg("other")
        .arg("b")
        .query(&mut c)
        .unwrap();
    expect(
        &mut r,
        b"*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*1\r\n$6\r\nuser:1\r\n",
    );
    let info: redis::Value = redis::cmd("CLIENT")
        .arg("TRACKINGINFO")
        .query(&mut t)
        .unwrap();
    let text = format!("{info:?}");
    assert!(text.contains("bcast") && text.contains("user:"), "{text}");
    let e = redis::cmd("CLIENT")
        .arg("TRACKING")
        .arg("on")
        .arg("BCAST")
        .arg("PREFIX")
        .arg("user:1")
        .query::<()>(&mut t)
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("Prefix 'user:1' overlaps with an existing prefix 'user:'"),
        "{e}"
    );
}

/// Read until `end` has been seen; returns everything read.
fn read_until(s: &mut TcpStream, end: &[u8]) -> Vec<u8> {
    let mut seen = Vec::new();
    while !seen.ends_with(end) {
        let mut b = [0u8; 1];
        s.read_exact(&mut b).expect("read");
        seen.push(b[0]);
    }
    seen
}

#[test]
fn own_invalidations_of_exec_and_scripts_follow_their_reply() {
    let srv = Podium::start(&[]);
    let mut s = srv.raw();
    send(&mut s, &["HELLO", "3"]);
    send(&mut s, &["PING", "sync"]);
    read_until(&mut s, b"$4\r\nsync\r\n");
    send(&mut s, &["CLIENT", "TRACKING", "on"]);
    expect(&mut s, b"+OK\r\n");
    let invalidate_k = b">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n";
    // A write inside EXEC: the invalidation comes after EXEC's whole reply.
    send(&mut s, &["GET", "k"]);
    expect(&mut s, b"_\r\n");
    for cmd in [&["MULTI"][..], &["SET", "k", "1"], &["INCR", "k"]] {
        send(&mut s, cmd);
    }
    expect(&mut s, b"+OK\r\n+QUEUED\r\n+QUEUED\r\n");
    send(&mut s, &["EXEC"]);
    expect(&mut s, b"*2\r\n+OK\r\n:2\r\n");
    expect(&mut s, invalidate_k);
    // A script's write: after the script's reply.
    send(&mut s, &["GET", "k"]);
    expect(&mut s, b"$1\r\n2\r\n");
    send(
        &mut s,
        &["EVAL", "return redis.call('incr', KEYS[1])", "1", "k"],
    );
    expect(&mut s, b":3\r\n");
    expect(&mut s, invalidate_k);
    // FLUSHALL inside EXEC: a null invalidation (everything) after EXEC's reply.
    send(&mut s, &["GET", "k"]);
    expect(&mut s, b"$1\r\n3\r\n");
    send(&mut s, &["MULTI"]);
    send(&mut s, &["FLUSHALL"]);
    expect(&mut s, b"+OK\r\n+QUEUED\r\n");
    send(&mut s, &["EXEC"]);
    expect(&mut s, b"*1\r\n+OK\r\n>2\r\n$10\r\ninvalidate\r\n_\r\n");
    send(&mut s, &["PING", "end"]);
    expect(&mut s, b"$3\r\nend\r\n");
}

#[test]
fn subscribe_confirmations_are_written_under_client_reply_off() {
    let srv = Podium::start(&[]);
    let mut s = srv.raw();
    send(&mut s, &["CLIENT", "REPLY", "OFF"]);
    send(&mut s, &["PING"]);
    send(&mut s, &["SUBSCRIBE", "ch"]);
    expect(&mut s, &sub_ack(false, "subscribe", "ch", 1));
    send(&mut s, &["UNSUBSCRIBE", "ch"]);
    expect(&mut s, &sub_ack(false, "unsubscribe", "ch", 0));
    send(&mut s, &["CLIENT", "REPLY", "ON"]);
    expect(&mut s, b"+OK\r\n");
}
