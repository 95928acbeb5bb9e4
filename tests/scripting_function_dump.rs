//! FUNCTION DUMP / RESTORE: the payload is Redis's (RDB strings, RDB version, CRC64), so a
//! dump taken from redis-server 7.0 restores in Podium and the reverse (redis-server needed,
//! see `common::require_tool`); the restore policies and errors as Redis's.

use crate::common;

use common::{Launch, Podium};
use redis::{Connection, Value};

const LIB1: &str = "#!lua name=lib1
redis.register_function('f1', function(keys, args) return 1 end)
redis.register_function{function_name='f2', callback=function() return 2 end,
  flags={'no-writes'}, description='a long enough description to be compressed by Redis'}";

const LIB2: &str = "#!lua name=lib2
redis.register_function('f3', function(keys, args) return #args end)";

fn function(con: &mut Connection, args: &[&[u8]]) -> redis::RedisResult<Value> {
    let mut c = redis::cmd("FUNCTION");
    for a in args {
        c.arg(*a);
    }
    c.query(con)
}

fn dump(con: &mut Connection) -> Vec<u8> {
    match function(con, &[b"DUMP"]).unwrap() {
        Value::BulkString(b) => b,
        other => panic!("DUMP gave {other:?}"),
    }
}

fn error(r: redis::RedisResult<Value>) -> String {
    let e = r.expect_err("an error");
    format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or(""))
}

/// `v` holds the bulk string `want` somewhere.
fn holds(v: &Value, want: &[u8]) -> bool {
    match v {
        Value::BulkString(b) => b == want,
        Value::Array(items) => items.iter().any(|i| holds(i, want)),
        _ => false,
    }
}

fn fcall(con: &mut Connection, name: &str) -> i64 {
    redis::cmd("FCALL").arg(name).arg(0).query(con).unwrap()
}

#[test]
fn dump_and_restore_with_their_policies() {
    let s = Podium::start(&[]);
    let mut con = s.con();
    function(&mut con, &[b"LOAD", LIB1.as_bytes()]).unwrap();
    function(&mut con, &[b"LOAD", LIB2.as_bytes()]).unwrap();
    let payload = dump(&mut con);
    // APPEND (the default) refuses a library that exists; REPLACE and FLUSH do not.
    assert_eq!(
        error(function(&mut con, &[b"RESTORE", &payload])),
        "ERR Library lib1 already exists"
    );
    function(&mut con, &[b"RESTORE", &payload, b"REPLACE"]).unwrap();
    function(&mut con, &[b"FLUSH"]).unwrap();
    function(&mut con, &[b"RESTORE", &payload]).unwrap();
    assert_eq!(fcall(&mut con, "f1"), 1);
    assert_eq!(fcall(&mut con, "F2"), 2);
    // A function name taken by another library refuses the whole restore.
    function(&mut con, &[b"FLUSH"]).unwrap();
    function(
        &mut con,
        &[
            b"LOAD",
            b"#!lua name=other\nredis.register_function('f3', function() return 3 end)",
        ],
    )
    .unwrap();
    assert_eq!(
        error(function(&mut con, &[b"RESTORE", &payload])),
        "ERR Function f3 already exists"
    );
    let listed = function(&mut con, &[b"LIST"]).unwrap();
    assert!(
        matches!(&listed, Value::Array(l) if l.len() == 1),
        "{listed:?}"
    );
    function(&mut con, &[b"RESTORE", &payload, b"FLUSH"]).unwrap();
    assert_eq!(fcall(&mut con, "f1"), 1);
    // Damaged payloads and bad policies change nothing.
    let mut damaged = payload.clone();
    damaged[3] ^= 1;
    assert_eq!(
        error(function(&mut con, &[b"RESTORE", &damaged])),
        "ERR DUMP payload version or checksum are wrong"
    );
    assert_eq!(
        error(function(&mut con, &[b"RESTORE", &payload, b"MERGE"])),
        "ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE."
    );
    assert_eq!(
        error(function(&mut con, &[b"RESTORE", &payload, b"FLUSH", b"x"])),
        "ERR unknown subcommand or wrong number of arguments for 'restore'. Try FUNCTION HELP."
    );
    assert_eq!(fcall(&mut con, "f1"), 1);
}

#[test]
fn payloads_cross_between_redis_and_podium() {
    let Some(redis_server) = common::require_tool("redis-server") else {
        return;
    };
    let redis = Launch::prog(&redis_server).args(&["--save", ""]).start();
    let podium = Podium::start(&[]);
    let (mut r, mut p) = (redis.con(), podium.con());
    // Redis -> Podium (Redis compresses the longer library text with LZF).
    function(&mut r, &[b"LOAD", LIB1.as_bytes()]).unwrap();
    let from_redis = dump(&mut r);
    function(&mut p, &[b"RESTORE", &from_redis]).unwrap();
    assert_eq!(fcall(&mut p, "f1"), 1);
    assert_eq!(fcall(&mut p, "f2"), 2);
    // The library's code arrives whole (the order of its functions in FUNCTION LIST is
    // each server's own table order).
    for con in [&mut p, &mut r] {
        let listed = function(con, &[b"LIST", b"WITHCODE"]).unwrap();
        assert!(holds(&listed, LIB1.as_bytes()), "{listed:?}");
    }
    // Podium -> Redis.
    function(&mut p, &[b"LOAD", LIB2.as_bytes()]).unwrap();
    let from_podium = dump(&mut p);
    function(&mut r, &[b"RESTORE", &from_podium, b"FLUSH"]).unwrap();
    let n: i64 = redis::cmd("FCALL")
        .arg("f3")
        .arg(0)
        .arg("a")
        .arg("b")
        .query(&mut r)
        .unwrap();
    assert_eq!(n, 2);
    assert_eq!(fcall(&mut r, "f1"), 1);
}
