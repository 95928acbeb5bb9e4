//! MIGRATE between Podium and redis-server 7.0 in both directions (redis-server needed, see
//! `common::require_tool`), and
//! between two Podiums: keys arrive with their values and time to live, leave the source
//! unless COPY, errors from the target and from the network are Redis's, and the password
//! given to MIGRATE never shows in SLOWLOG.

use crate::common;

use common::{Launch, Podium};
use redis::Connection;

fn err_text<T: std::fmt::Debug>(r: redis::RedisResult<T>) -> String {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or(""))
            .trim()
            .to_string(),
    }
}

fn migrate(con: &mut Connection, args: &[&str]) -> redis::RedisResult<String> {
    let mut c = redis::cmd("MIGRATE");
    for a in args {
        c.arg(*a);
    }
    c.query(con)
}

fn fill(con: &mut Connection) {
    redis::pipe()
        .cmd("SET")
        .arg("s")
        .arg("hello")
        .cmd("EXPIRE")
        .arg("s")
        .arg(1000)
        .cmd("ZADD")
        .arg("board")
        .arg(10)
        .arg("ann")
        .arg(20)
        .arg("bob")
        .cmd("HSET")
        .arg("profile")
        .arg("name")
        .arg("ann")
        .query::<()>(con)
        .expect("fill");
}

fn check_arrived(con: &mut Connection) {
    let s: String = redis::cmd("GET").arg("s").query(con).unwrap();
    assert_eq!(s, "hello");
    let ttl: i64 = redis::cmd("TTL").arg("s").query(con).unwrap();
    assert!((990..=1000).contains(&ttl), "ttl {ttl}");
    let z: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg("board")
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(con)
        .unwrap();
    assert_eq!(z, vec![("ann".into(), 10.0), ("bob".into(), 20.0)]);
    let name: String = redis::cmd("HGET")
        .arg("profile")
        .arg("name")
        .query(con)
        .unwrap();
    assert_eq!(name, "ann");
}

fn exists(con: &mut Connection, keys: &[&str]) -> i64 {
    redis::cmd("EXISTS").arg(keys).query(con).unwrap()
}

/// Source and target may each be Podium or redis-server: the same checks both ways.
fn round(src: &Podium, dst: &Podium, dst_pass: Option<&str>) {
    let mut s = src.con();
    // This connection is made before the password is set, and stays authenticated.
    let mut d = dst.con_db(3);
    if let Some(p) = dst_pass {
        let _: String = redis::cmd("CONFIG")
            .arg("SET")
            .arg("requirepass")
            .arg(p)
            .query(&mut d)
            .unwrap();
    }
    fill(&mut s);
    let port = dst.port.to_string();
    let mut base = vec!["127.0.0.1", &port, "", "3", "5000"];
    if let Some(p) = dst_pass {
        // A wrong password is the target's error, and nothing moves.
        let mut wrong = base.clone();
        wrong.extend(["AUTH", "nope", "KEYS", "s"]);
        assert!(err_text(migrate(&mut s, &wrong))
            .starts_with("ERR Target instance replied with error: WRONGPASS"),);
        assert_eq!(exists(&mut s, &["s"]), 1);
        base.extend(["AUTH", p]);
    }
    // COPY leaves the source as it was.
    let mut copy = base.clone();
    copy.extend(["COPY", "KEYS", "board"]);
    assert_eq!(migrate(&mut s, &copy).unwrap(), "OK");
    assert_eq!(exists(&mut s, &["board"]), 1);
    // Without REPLACE an existing key is the target's BUSYKEY error.
    let mut again = base.clone();
    again.extend(["KEYS", "board"]);
    assert_eq!(
        err_text(migrate(&mut s, &again)),
        "ERR Target instance replied with error: BUSYKEY Target key name already exists."
    );
    assert_eq!(exists(&mut s, &["board"]), 1);
    // REPLACE and a missing key among the others: the ones here move and leave.
    let mut all = base.clone();
    all.extend(["REPLACE", "KEYS", "s", "board", "missing", "profile"]);
    assert_eq!(migrate(&mut s, &all).unwrap(), "OK");
    assert_eq!(exists(&mut s, &["s", "board", "profile"]), 0);
    check_arrived(&mut d);
    // Nothing to move at all.
    let mut none = base.clone();
    none.extend(["KEYS", "missing"]);
    assert_eq!(migrate(&mut s, &none).unwrap(), "NOKEY");
}

#[test]
fn migrate_between_podiums() {
    let a = Podium::start(&["--slowlog-log-slower-than", "0"]);
    let b = Podium::start(&[]);
    round(&a, &b, Some("s3cret"));
    let mut s = a.con();
    // The password MIGRATE was given is not in the slow log.
    let log: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(100)
        .query(&mut s)
        .unwrap();
    let text = format!("{log:?}");
    assert!(text.contains("redacted"), "{text}");
    assert!(!text.contains("s3cret"), "{text}");
    // The connection is cached.
    let info: String = redis::cmd("INFO").arg("stats").query(&mut s).unwrap();
    assert!(info.contains("migrate_cached_sockets:1"), "{info}");
}

#[test]
fn migrate_errors_match_redis() {
    let a = Podium::start(&[]);
    let mut s = a.con();
    let _: String = redis::cmd("SET").arg("k").arg("v").query(&mut s).unwrap();
    // Nothing listens on a port just released by a stopped server.
    let gone = Podium::start(&[]);
    let port = gone.port.to_string();
    gone.stop();
    assert_eq!(
        err_text(migrate(&mut s, &["127.0.0.1", &port, "k", "0", "500"])),
        "IOERR error or timeout connecting to the client"
    );
    assert_eq!(
        err_text(migrate(&mut s, &["127.0.0.1", &port, "k", "0", "x"])),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        err_text(migrate(
            &mut s,
            &["127.0.0.1", &port, "k", "0", "10", "KEYS", "k"]
        )),
        "ERR When using MIGRATE KEYS option, the key argument must be set to the empty string"
    );
    assert_eq!(
        err_text(migrate(
            &mut s,
            &["127.0.0.1", &port, "k", "0", "10", "AUTH2", "u"]
        )),
        "ERR syntax error"
    );
    assert_eq!(
        migrate(&mut s, &["127.0.0.1", &port, "nokey", "0", "10"]).unwrap(),
        "NOKEY"
    );
    assert_eq!(
        err_text(redis::cmd("ASKING").query::<String>(&mut s)),
        "ERR This instance has cluster support disabled"
    );
    assert_eq!(exists(&mut s, &["k"]), 1);
}

#[test]
fn migrate_to_and_from_redis_server() {
    let Some(redis_server) = common::require_tool("redis-server") else {
        return;
    };
    let redis = Launch::prog(&redis_server).args(&["--save", ""]).start();
    let podium = Podium::start(&[]);
    round(&podium, &redis, Some("pw"));
    let redis2 = Launch::prog(&redis_server).args(&["--save", ""]).start();
    let podium2 = Podium::start(&[]);
    round(&redis2, &podium2, Some("pw2"));
}
