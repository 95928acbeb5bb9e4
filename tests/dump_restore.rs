//! DUMP and RESTORE: replies and errors, options, TTLs, AOF logging, and payload compatibility
//! with redis-server 7.0 in both directions (redis-server needed, see `common::require_tool`).

use crate::common;

use common::{Launch, Podium};
use redis::Connection;

fn dump(con: &mut Connection, key: &str) -> Option<Vec<u8>> {
    redis::cmd("DUMP").arg(key).query(con).expect("DUMP")
}

fn restore(con: &mut Connection, args: &[&[u8]]) -> redis::RedisResult<String> {
    let mut c = redis::cmd("RESTORE");
    for a in args {
        c.arg(*a);
    }
    c.query(con)
}

fn err_text(r: redis::RedisResult<String>) -> String {
    match r {
        Ok(v) => panic!("expected an error, got {v}"),
        Err(e) => {
            let code = e.code().unwrap_or("").to_string();
            let detail = e.detail().unwrap_or("").to_string();
            format!("{code} {detail}").trim().to_string()
        }
    }
}

/// Everything a key holds, in a comparable form (sets and hashes sorted).
fn contents(con: &mut Connection, key: &str) -> (String, Vec<Vec<u8>>) {
    let t: String = redis::cmd("TYPE").arg(key).query(con).expect("TYPE");
    let mut items: Vec<Vec<u8>> = match t.as_str() {
        "string" => vec![redis::cmd("GET").arg(key).query(con).expect("GET")],
        "list" => redis::cmd("LRANGE")
            .arg(key)
            .arg(0)
            .arg(-1)
            .query(con)
            .expect("LRANGE"),
        "set" => redis::cmd("SMEMBERS")
            .arg(key)
            .query(con)
            .expect("SMEMBERS"),
        "hash" => {
            let flat: Vec<Vec<u8>> = redis::cmd("HGETALL").arg(key).query(con).expect("HGETALL");
            flat.chunks(2)
                .map(|p| [&p[0][..], b"=", &p[1][..]].concat())
                .collect()
        }
        "zset" => redis::cmd("ZRANGE")
            .arg(key)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query(con)
            .expect("ZRANGE"),
        other => panic!("unexpected type {other}"),
    };
    if t == "set" || t == "hash" {
        items.sort();
    }
    (t, items)
}

/// Keys of every type in both the compact and the large encodings, strings of every encoding.
fn fill(con: &mut Connection) -> Vec<&'static str> {
    let long = "x".repeat(70_000);
    let words = "abcdefgh".repeat(100);
    redis::pipe()
        .cmd("SET")
        .arg("s:small")
        .arg("hello")
        .cmd("SET")
        .arg("s:int8")
        .arg("-7")
        .cmd("SET")
        .arg("s:int16")
        .arg("3000")
        .cmd("SET")
        .arg("s:int32")
        .arg("-2000000000")
        .cmd("SET")
        .arg("s:int64")
        .arg("9223372036854775807")
        .cmd("SET")
        .arg("s:zero-padded")
        .arg("0012")
        .cmd("SET")
        .arg("s:compressible")
        .arg(&words)
        .cmd("SET")
        .arg("s:long")
        .arg(&long)
        .cmd("SET")
        .arg("s:binary")
        .arg(&[0u8, 255, 13, 10, 7][..])
        .cmd("RPUSH")
        .arg("l:small")
        .arg("a")
        .arg("12")
        .arg("-70000")
        .arg("b")
        .cmd("SADD")
        .arg("set:ints")
        .arg(1)
        .arg(-5)
        .arg(300)
        .arg(70000)
        .arg(5_000_000_000i64)
        .cmd("SADD")
        .arg("set:strs")
        .arg("x")
        .arg("y")
        .arg("zz")
        .cmd("HSET")
        .arg("h:small")
        .arg("f")
        .arg("v")
        .arg("n")
        .arg(42)
        .cmd("ZADD")
        .arg("z:small")
        .arg(1.5)
        .arg("a")
        .arg("-inf")
        .arg("b")
        .arg(3)
        .arg("c")
        .query::<()>(con)
        .expect("fill");
    let mut p = redis::pipe();
    for i in 0..600 {
        p.cmd("RPUSH").arg("l:big").arg(format!("element-{i}"));
        p.cmd("SADD").arg("set:big").arg(format!("member-{i}"));
        p.cmd("HSET")
            .arg("h:big")
            .arg(format!("field-{i}"))
            .arg(i * 7);
        p.cmd("ZADD")
            .arg("z:big")
            .arg(i as f64 / 3.0)
            .arg(format!("m-{i}"));
    }
    p.cmd("HSET").arg("h:bigvalue").arg("f").arg(&long);
    p.cmd("ZADD")
        .arg("z:inf")
        .arg("+inf")
        .arg("top")
        .arg(0)
        .arg("zero");
    p.query::<()>(con).expect("fill big");
    vec![
        "s:small",
        "s:int8",
        "s:int16",
        "s:int32",
        "s:int64",
        "s:zero-padded",
        "s:compressible",
        "s:long",
        "s:binary",
        "l:small",
        "l:big",
        "set:ints",
        "set:strs",
        "set:big",
        "h:small",
        "h:big",
        "h:bigvalue",
        "z:small",
        "z:big",
        "z:inf",
    ]
}

#[test]
fn dump_and_restore_round_trip_every_type() {
    let s = Podium::start(&[]);
    let mut con = s.con();
    let keys = fill(&mut con);
    for key in keys {
        let before = contents(&mut con, key);
        let payload = dump(&mut con, key).expect("payload");
        let copy = format!("{key}:copy");
        assert_eq!(
            restore(&mut con, &[copy.as_bytes(), b"0", &payload]).unwrap(),
            "OK"
        );
        assert_eq!(contents(&mut con, &copy), before, "{key}");
        let ttl: i64 = redis::cmd("PTTL").arg(&copy).query(&mut con).unwrap();
        assert_eq!(ttl, -1);
    }
    assert_eq!(dump(&mut con, "missing"), None);
}

#[test]
fn restore_options_and_errors_match_redis() {
    let s = Podium::start(&[]);
    let mut con = s.con();
    redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query::<()>(&mut con)
        .unwrap();
    let p = dump(&mut con, "k").unwrap();
    assert_eq!(
        err_text(restore(&mut con, &[b"k", b"0", &p])),
        "BUSYKEY Target key name already exists."
    );
    assert_eq!(
        err_text(restore(&mut con, &[b"n", b"-1", &p])),
        "ERR Invalid TTL value, must be >= 0"
    );
    assert_eq!(
        err_text(restore(&mut con, &[b"n", b"x", &p])),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        err_text(restore(&mut con, &[b"n", b"0", &p, b"bogus"])),
        "ERR syntax error"
    );
    assert_eq!(
        err_text(restore(&mut con, &[b"n", b"0", &p, b"IDLETIME", b"-1"])),
        "ERR Invalid IDLETIME value, must be >= 0"
    );
    assert_eq!(
        err_text(restore(&mut con, &[b"n", b"0", &p, b"FREQ", b"256"])),
        "ERR Invalid FREQ value, must be >= 0 and <= 255"
    );
    // IDLETIME and FREQ exclude each other.
    assert_eq!(
        err_text(restore(
            &mut con,
            &[b"n", b"0", &p, b"IDLETIME", b"1", b"FREQ", b"1"]
        )),
        "ERR syntax error"
    );
    let mut bad = p.clone();
    bad[1] ^= 1;
    assert_eq!(
        err_text(restore(&mut con, &[b"n", b"0", &bad])),
        "ERR DUMP payload version or checksum are wrong"
    );
    assert_eq!(
        err_text(restore(&mut con, &[b"n", b"0", b"garbage"])),
        "ERR DUMP payload version or checksum are wrong"
    );
    // A payload with a valid footer around an object that does not decode.
    let mut body = vec![2u8, 5, 1, b'a'];
    body.extend_from_slice(&10u16.to_le_bytes());
    let crc = podium::persistence::rdb::crc64(0, &body);
    body.extend_from_slice(&crc.to_le_bytes());
    assert_eq!(
        err_text(restore(&mut con, &[b"n", b"0", &body])),
        "ERR Bad data format"
    );
    // Options accepted: REPLACE with a relative TTL, ABSTTL, IDLETIME, FREQ.
    assert_eq!(
        restore(
            &mut con,
            &[b"k", b"100000", &p, b"REPLACE", b"IDLETIME", b"5"]
        )
        .unwrap(),
        "OK"
    );
    let ttl: i64 = redis::cmd("PTTL").arg("k").query(&mut con).unwrap();
    assert!(ttl > 99_000 && ttl <= 100_000, "{ttl}");
    let at = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 50_000)
        .to_string();
    assert_eq!(
        restore(
            &mut con,
            &[b"k2", at.as_bytes(), &p, b"ABSTTL", b"FREQ", b"3"]
        )
        .unwrap(),
        "OK"
    );
    let ttl: i64 = redis::cmd("PTTL").arg("k2").query(&mut con).unwrap();
    // (The server's clock and ours may round the same instant 1 ms apart.)
    assert!(ttl > 45_000 && ttl <= 50_002, "{ttl}");
    // An absolute TTL in the past: OK, the old key is gone and nothing is created.
    assert_eq!(
        restore(&mut con, &[b"k2", b"1", &p, b"ABSTTL", b"REPLACE"]).unwrap(),
        "OK"
    );
    let n: i64 = redis::cmd("EXISTS").arg("k2").query(&mut con).unwrap();
    assert_eq!(n, 0);
    // RESTORE over a key of another type with REPLACE.
    redis::cmd("ZADD")
        .arg("z")
        .arg(1)
        .arg("m")
        .query::<()>(&mut con)
        .unwrap();
    assert_eq!(
        restore(&mut con, &[b"z", b"0", &p, b"REPLACE"]).unwrap(),
        "OK"
    );
    let v: String = redis::cmd("GET").arg("z").query(&mut con).unwrap();
    assert_eq!(v, "v");
}

#[test]
fn restored_collections_take_the_encoding_the_limits_give() {
    let s = Podium::start(&[]);
    let mut con = s.con();
    let mut p = redis::pipe();
    for i in 0..10 {
        p.cmd("HSET").arg("h").arg(format!("f{i}")).arg(i);
        p.cmd("ZADD").arg("z").arg(i).arg(format!("m{i}"));
    }
    p.query::<()>(&mut con).unwrap();
    let enc = |con: &mut Connection, k: &str| -> String {
        redis::cmd("OBJECT")
            .arg("ENCODING")
            .arg(k)
            .query(con)
            .unwrap()
    };
    assert_eq!(enc(&mut con, "h"), "listpack");
    let ph = dump(&mut con, "h").unwrap();
    let pz = dump(&mut con, "z").unwrap();
    for (k, v) in [
        ("hash-max-listpack-entries", "2"),
        ("zset-max-listpack-entries", "2"),
    ] {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg(k)
            .arg(v)
            .query::<()>(&mut con)
            .unwrap();
    }
    restore(&mut con, &[b"h2", b"0", &ph]).unwrap();
    restore(&mut con, &[b"z2", b"0", &pz]).unwrap();
    assert_eq!(enc(&mut con, "h2"), "hashtable");
    assert_eq!(enc(&mut con, "z2"), "skiplist");
    assert_eq!(contents(&mut con, "h2"), contents(&mut con, "h"));
    assert_eq!(contents(&mut con, "z2"), contents(&mut con, "z"));
}

#[test]
fn restore_is_logged_so_a_restart_restores_the_same_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let args = ["--appendonly", "yes", "--dir", d];
    let s = Launch::podium().args(&args).wait_loaded().start();
    let mut con = s.con();
    redis::cmd("RPUSH")
        .arg("l")
        .arg("a")
        .arg("b")
        .query::<()>(&mut con)
        .unwrap();
    let p = dump(&mut con, "l").unwrap();
    restore(&mut con, &[b"copy", b"600000", &p]).unwrap();
    restore(&mut con, &[b"forever", b"0", &p]).unwrap();
    let before: i64 = redis::cmd("PEXPIRETIME")
        .arg("copy")
        .query(&mut con)
        .unwrap();
    s.stop();
    let s = Launch::podium().args(&args).wait_loaded().start();
    let mut con = s.con();
    let after: i64 = redis::cmd("PEXPIRETIME")
        .arg("copy")
        .query(&mut con)
        .unwrap();
    assert_eq!(
        before, after,
        "the relative TTL was logged as an absolute one"
    );
    assert_eq!(
        contents(&mut con, "copy").1,
        vec![b"a".to_vec(), b"b".to_vec()]
    );
    assert_eq!(
        contents(&mut con, "forever").1,
        vec![b"a".to_vec(), b"b".to_vec()]
    );
}

#[test]
fn payloads_move_between_redis_server_and_podium() {
    let Some(redis_server) = common::require_tool("redis-server") else {
        return;
    };
    let redis = Launch::prog(&redis_server).args(&["--save", ""]).start();
    let podium = Podium::start(&[]);
    let mut rc = redis.con();
    let mut pc = podium.con();
    let keys = fill(&mut rc);
    fill(&mut pc);
    for key in keys {
        let want = contents(&mut rc, key);
        // Redis's payload (listpacks, intsets, LZF strings) restored by Podium.
        let from_redis = dump(&mut rc, key).expect("redis payload");
        let copy = format!("{key}:from-redis");
        restore(&mut pc, &[copy.as_bytes(), b"0", &from_redis]).expect("podium RESTORE");
        assert_eq!(contents(&mut pc, &copy), want, "{key} from redis");
        // Podium's payload restored by Redis.
        let from_podium = dump(&mut pc, key).expect("podium payload");
        let copy = format!("{key}:from-podium");
        restore(&mut rc, &[copy.as_bytes(), b"0", &from_podium]).expect("redis RESTORE");
        assert_eq!(contents(&mut rc, &copy), want, "{key} from podium");
        // Strings get the same bytes from both (no compression involved below 21 bytes).
        if key.starts_with("s:") && want.1[0].len() <= 20 {
            assert_eq!(from_podium, from_redis, "{key} payload bytes");
        }
    }
    // A stream payload from Redis restores in Podium (streams are a Podium type too).
    let _: String = redis::cmd("XADD")
        .arg("st")
        .arg("*")
        .arg("f")
        .arg("v")
        .query(&mut rc)
        .unwrap();
    let p = dump(&mut rc, "st").unwrap();
    assert_eq!(restore(&mut pc, &[b"st", b"0", &p]).unwrap(), "OK");
    let len: i64 = redis::cmd("XLEN").arg("st").query(&mut pc).unwrap();
    assert_eq!(len, 1);
    let v: String = redis::cmd("PING").query(&mut pc).unwrap();
    assert_eq!(v, "PONG");
}

/// INFO's dump_payload_sanitizations for one connection's server.
fn sanitizations(con: &mut Connection) -> i64 {
    let info: String = redis::cmd("INFO").arg("stats").query(con).expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix("dump_payload_sanitizations:"))
        .expect("dump_payload_sanitizations in INFO stats")
        .trim()
        .parse()
        .expect("a number")
}

/// `sanitize-dump-payload` as redis-server 7.0 has it, the same steps on both servers with
/// redis-server's payloads (a hash, zset and list of listpacks, an intset, a stream):
/// - `no` (the default): no deep sanitization, none counted, and a listpack whose back-length
///   lies is accepted (the shallow check);
/// - `yes`: each listpack or intset is counted, and the lying back-length is refused;
/// - `clients`: a user with `skip-sanitize-payload` is exempt, others are not;
/// - CONFIG RESETSTAT zeroes the count.
#[test]
fn sanitize_dump_payload_checks_and_counts_as_redis() {
    let Some(redis_server) = common::require_tool("redis-server") else {
        return;
    };
    let redis = Launch::prog(&redis_server).args(&["--save", ""]).start();
    let podium = Podium::start(&[]);
    let mut rc = redis.con();
    for cmd in [
        &["HSET", "h", "a", "1", "b", "2"][..],
        &["ZADD", "z", "1", "m", "2", "n"],
        &["RPUSH", "l", "x", "y"],
        &["SADD", "s", "1", "2", "3"],
        &["XADD", "st", "1-1", "f", "v"],
    ] {
        redis::cmd(cmd[0])
            .arg(&cmd[1..])
            .query::<redis::Value>(&mut rc)
            .unwrap();
    }
    let payloads: Vec<Vec<u8>> = ["h", "z", "l", "s", "st"]
        .iter()
        .map(|k| dump(&mut rc, k).expect("redis payload"))
        .collect();
    // The hash's listpack with its first entry's back-length made wrong: type byte 16, a
    // one-byte length, the 6-byte listpack header, then "a" as 0x81 'a' and its back-length 2.
    let mut lying = payloads[0].clone();
    assert_eq!((lying[0], &lying[8..11]), (16, &[0x81, b'a', 2][..]));
    lying[10] = 3;
    let body = lying.len() - 8;
    let crc = podium::persistence::rdb::crc64(0, &lying[..body]);
    lying[body..].copy_from_slice(&crc.to_le_bytes());

    let mut seen = Vec::new();
    for (name, mut con) in [("redis-server", rc), ("podium", podium.con())] {
        let mut got = Vec::new();
        let round = |con: &mut Connection, tag: &str, got: &mut Vec<String>| {
            for (i, p) in payloads.iter().enumerate() {
                let key = format!("{tag}:{i}");
                restore(con, &[key.as_bytes(), b"0", p]).expect("RESTORE");
            }
            let r = restore(con, &[format!("{tag}:lying").as_bytes(), b"0", &lying]);
            got.push(format!(
                "{tag}: {r:?}, sanitizations {}",
                sanitizations(con)
            ));
        };
        round(&mut con, "no", &mut got);
        // redis-server takes it and then dies on the first walk that checks the entries
        // (HGETALL asserts); Podium built its hash from the decoded entries.
        if name == "podium" {
            let fields: Vec<String> = redis::cmd("HGETALL")
                .arg("no:lying")
                .query(&mut con)
                .unwrap();
            assert_eq!(fields, ["a", "1", "b", "2"]);
        }
        redis::cmd("CONFIG")
            .arg(&["SET", "sanitize-dump-payload", "yes"])
            .query::<()>(&mut con)
            .unwrap();
        round(&mut con, "yes", &mut got);
        redis::cmd("CONFIG")
            .arg(&["SET", "sanitize-dump-payload", "clients"])
            .query::<()>(&mut con)
            .unwrap();
        round(&mut con, "clients-default-user", &mut got);
        redis::cmd("ACL")
            .arg(&["SETUSER", "loader", "on", "nopass", "~*", "+@all"])
            .arg("skip-sanitize-payload")
            .query::<()>(&mut con)
            .unwrap();
        redis::cmd("AUTH")
            .arg(&["loader", "x"])
            .query::<()>(&mut con)
            .unwrap();
        round(&mut con, "clients-skipping-user", &mut got);
        redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query::<()>(&mut con)
            .unwrap();
        got.push(format!("after RESETSTAT: {}", sanitizations(&mut con)));
        seen.push((name, got));
    }
    assert_eq!(seen[1].1, seen[0].1, "podium (left) against redis-server");
    // And what that is, so that a change on both sides is noticed too.
    assert!(
        seen[0].1[0].ends_with("Ok(\"OK\"), sanitizations 0"),
        "{:?}",
        seen[0].1
    );
    assert!(
        seen[0].1[1].contains("Bad data format") && seen[0].1[1].ends_with("sanitizations 6"),
        "{:?}",
        seen[0].1
    );
    assert_eq!(seen[0].1[4], "after RESETSTAT: 0");
}
