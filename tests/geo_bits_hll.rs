//! GEO, BITOP/BITFIELD and HyperLogLog: replies, stored bytes and payloads checked against a
//! real redis-server 7.0 (needed, see `common::require_tool`), plus the keyspace events and
//! AOF records these commands produce.

use crate::common;

use common::{Launch, Podium};
use rand::{Rng, SeedableRng};
use redis::{Connection, Value};

fn call(con: &mut Connection, args: &[Vec<u8>]) -> redis::RedisResult<Value> {
    let mut c = redis::cmd(std::str::from_utf8(&args[0]).expect("ascii command name"));
    for a in &args[1..] {
        c.arg(&a[..]);
    }
    c.query(con)
}

fn words(line: &str) -> Vec<Vec<u8>> {
    line.split_whitespace()
        .map(|w| w.as_bytes().to_vec())
        .collect()
}

/// The reply, or the error's text, in a comparable form.
fn outcome(con: &mut Connection, args: &[Vec<u8>]) -> String {
    match call(con, args) {
        Ok(v) => format!("{v:?}"),
        Err(e) => format!("ERR {:?} {:?}", e.code(), e.detail()),
    }
}

/// redis-server and Podium side by side; `None` only when redis-server is missing and skipping
/// is allowed (`common::require_tool` panics otherwise).
fn pair() -> Option<(Podium, Podium)> {
    let redis_server = common::require_tool("redis-server")?;
    let redis = Launch::prog(&redis_server).args(&["--save", ""]).start();
    Some((redis, Podium::start(&[])))
}

/// Run every request on both servers; every reply must be the same.
fn same_on_both(rc: &mut Connection, pc: &mut Connection, requests: &[Vec<Vec<u8>>]) {
    for req in requests {
        let (r, p) = (outcome(rc, req), outcome(pc, req));
        assert_eq!(
            p,
            r,
            "{:?}",
            req.iter()
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
        );
    }
}

#[test]
fn geo_searches_equal_redis_server() {
    let Some((redis, podium)) = pair() else {
        return;
    };
    let (mut rc, mut pc) = (redis.con(), podium.con());
    let mut rng = rand::rngs::StdRng::seed_from_u64(20261123);
    let mut reqs: Vec<Vec<Vec<u8>>> = Vec::new();
    // Points all over the map, and a dense cluster.
    for batch in 0..12 {
        let mut line = String::from("GEOADD pts");
        for i in 0..150 {
            let (lon, lat) = if batch % 2 == 0 {
                (rng.gen_range(-180.0..180.0), rng.gen_range(-85.0..85.0))
            } else {
                (rng.gen_range(2.0..2.6), rng.gen_range(48.6..49.1))
            };
            line.push_str(&format!(" {lon:.6} {lat:.6} m{batch}_{i}"));
        }
        reqs.push(words(&line));
    }
    let units = ["m", "km", "ft", "mi"];
    let extras = [
        "",
        "ASC",
        "DESC",
        "COUNT 4",
        "COUNT 4 DESC",
        "COUNT 3 ANY",
        "WITHDIST WITHCOORD WITHHASH ASC",
        "COUNT 7 WITHDIST",
    ];
    for k in 0..300 {
        let near = k % 2 == 0;
        let (lon, lat) = if near {
            (rng.gen_range(2.0..2.6), rng.gen_range(48.6..49.1))
        } else {
            (rng.gen_range(-180.0..180.0), rng.gen_range(-85.0..85.0))
        };
        let unit = units[k % 4];
        let extra = extras[rng.gen_range(0..extras.len())];
        let by = if k % 3 == 0 {
            format!(
                "BYBOX {} {} {unit}",
                rng.gen_range(1..4000),
                rng.gen_range(1..4000)
            )
        } else {
            format!("BYRADIUS {} {unit}", rng.gen_range(1..3000))
        };
        reqs.push(words(&format!(
            "GEOSEARCH pts FROMLONLAT {lon:.5} {lat:.5} {by} {extra}"
        )));
        reqs.push(words(&format!(
            "GEORADIUS_RO pts {lon:.5} {lat:.5} {} {unit} {extra}",
            rng.gen_range(1..500)
        )));
        let store_extra = extra
            .replace("WITHDIST", "")
            .replace("WITHCOORD", "")
            .replace("WITHHASH", "");
        reqs.push(words(&format!(
            "GEOSEARCHSTORE dst pts FROMMEMBER m1_{} {by} {store_extra} STOREDIST",
            k % 150
        )));
        reqs.push(words("ZRANGE dst 0 -1 WITHSCORES"));
        reqs.push(words(&format!(
            "GEORADIUSBYMEMBER pts m3_{} 20 km STORE dst2 {store_extra}",
            k % 150
        )));
        reqs.push(words("ZRANGE dst2 0 -1 WITHSCORES"));
    }
    for line in [
        "GEOPOS pts m0_1 m1_1 nosuch",
        "GEOHASH pts m0_1 m1_1 nosuch",
        "GEODIST pts m0_1 m1_1",
        "GEODIST pts m0_1 m1_1 mi",
        "GEODIST pts m0_1 m1_1 parsec",
        "GEOSEARCH pts FROMLONLAT 2 48 BYRADIUS 10 km BYBOX 1 1 km",
        "GEOSEARCH pts BYRADIUS 10 km",
        "GEOSEARCH pts FROMLONLAT 2 48 BYRADIUS -1 km",
        "GEOSEARCH pts FROMLONLAT 2 48 BYRADIUS 1 km ANY",
        "GEOSEARCH pts FROMMEMBER nosuch BYRADIUS 1 km",
        "GEORADIUS pts 200 48 1 km",
        "GEORADIUS pts 2 48 1 km STORE x WITHDIST",
        "GEOSEARCHSTORE x pts FROMLONLAT 2 48 BYRADIUS 1 km WITHCOORD",
    ] {
        reqs.push(words(line));
    }
    same_on_both(&mut rc, &mut pc, &reqs);
}

#[test]
fn bitfield_and_bitop_equal_redis_server() {
    let Some((redis, podium)) = pair() else {
        return;
    };
    let (mut rc, mut pc) = (redis.con(), podium.con());
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut reqs: Vec<Vec<Vec<u8>>> = Vec::new();
    let ops = ["GET", "SET", "INCRBY"];
    let overflows = ["WRAP", "SAT", "FAIL"];
    for _ in 0..400 {
        let key = format!("bf{}", rng.gen_range(0..4));
        let mut line = format!("BITFIELD {key}");
        for _ in 0..rng.gen_range(1..5) {
            if rng.gen_bool(0.3) {
                line.push_str(&format!(" OVERFLOW {}", overflows[rng.gen_range(0..3)]));
            }
            let signed = rng.gen_bool(0.5);
            let bits = if signed {
                rng.gen_range(1..=64)
            } else {
                rng.gen_range(1..=63)
            };
            let ty = format!("{}{bits}", if signed { 'i' } else { 'u' });
            let offset = if rng.gen_bool(0.3) {
                format!("#{}", rng.gen_range(0..6))
            } else {
                rng.gen_range(0..200).to_string()
            };
            let op = ops[rng.gen_range(0..3)];
            line.push_str(&format!(" {op} {ty} {offset}"));
            if op != "GET" {
                let v: i64 = match rng.gen_range(0..3) {
                    0 => rng.gen_range(-300..300),
                    1 => rng.gen(),
                    _ => i64::MAX,
                };
                line.push_str(&format!(" {v}"));
            }
        }
        reqs.push(words(&line));
        reqs.push(vec![b"GET".to_vec(), key.into_bytes()]);
        let op = ["AND", "OR", "XOR", "NOT"][rng.gen_range(0..4)];
        let srcs = if op == "NOT" {
            "bf1"
        } else {
            "bf0 bf1 bf2 nosuch"
        };
        reqs.push(words(&format!("BITOP {op} dst {srcs}")));
        reqs.push(words("GET dst"));
    }
    for line in [
        "BITFIELD_RO bf0 GET u8 0 GET i64 3",
        "BITFIELD_RO bf0 SET u8 0 1",
        "BITFIELD bf0 GET u64 0",
        "BITFIELD bf0 OVERFLOW nope",
        "BITFIELD bf0 GET i8 -1",
        "BITOP NOT dst bf0 bf1",
        "BITOP NAND dst bf0",
        "BITOP AND dst nosuch1 nosuch2",
        "EXISTS dst",
    ] {
        reqs.push(words(line));
    }
    same_on_both(&mut rc, &mut pc, &reqs);
}

fn get_bytes(con: &mut Connection, key: &str) -> Vec<u8> {
    redis::cmd("GET").arg(key).query(con).expect("GET")
}

fn pfcount(con: &mut Connection, keys: &[&str]) -> i64 {
    redis::cmd("PFCOUNT").arg(keys).query(con).expect("PFCOUNT")
}

#[test]
fn hll_strings_are_redis_servers() {
    let Some((redis, podium)) = pair() else {
        return;
    };
    let (mut rc, mut pc) = (redis.con(), podium.con());
    let mut rng = rand::rngs::StdRng::seed_from_u64(99);
    // The same PFADDs give byte-identical strings, sparse and (past 3000 bytes) dense.
    for (key, n) in [("h0", 1usize), ("h1", 40), ("h2", 400), ("h3", 5000)] {
        for chunk in 0..n.div_ceil(100) {
            let elems: Vec<String> = (0..100.min(n - chunk * 100))
                .map(|_| format!("e{}", rng.gen::<u32>()))
                .collect();
            let r: i64 = redis::cmd("PFADD")
                .arg(key)
                .arg(&elems)
                .query(&mut rc)
                .unwrap();
            let p: i64 = redis::cmd("PFADD")
                .arg(key)
                .arg(&elems)
                .query(&mut pc)
                .unwrap();
            assert_eq!(p, r);
        }
        assert_eq!(get_bytes(&mut pc, key), get_bytes(&mut rc, key), "{key}");
        assert_eq!(pfcount(&mut pc, &[key]), pfcount(&mut rc, &[key]));
        // The cached cardinality is written the same way.
        assert_eq!(
            get_bytes(&mut pc, key),
            get_bytes(&mut rc, key),
            "{key} cached"
        );
    }
    assert_eq!(
        pfcount(&mut pc, &["h1", "h2", "h3"]),
        pfcount(&mut rc, &["h1", "h2", "h3"])
    );
    for con in [&mut rc, &mut pc] {
        let _: () = redis::cmd("PFMERGE")
            .arg(&["m", "h1", "h2"])
            .query(con)
            .unwrap();
    }
    assert_eq!(get_bytes(&mut pc, "m"), get_bytes(&mut rc, "m"));

    // A redis-server payload restores in Podium with the same count, and back.
    let payload: Vec<u8> = redis::cmd("DUMP").arg("h2").query(&mut rc).unwrap();
    let _: () = redis::cmd("RESTORE")
        .arg("from-redis")
        .arg(0)
        .arg(payload)
        .query(&mut pc)
        .unwrap();
    assert_eq!(pfcount(&mut pc, &["from-redis"]), pfcount(&mut rc, &["h2"]));
    let added: i64 = redis::cmd("PFADD")
        .arg("from-redis")
        .arg("new")
        .query(&mut pc)
        .unwrap();
    let payload: Vec<u8> = redis::cmd("DUMP").arg("from-redis").query(&mut pc).unwrap();
    let _: () = redis::cmd("RESTORE")
        .arg("from-podium")
        .arg(0)
        .arg(payload)
        .query(&mut rc)
        .unwrap();
    let debug = |con: &mut Connection, key: &str| -> String {
        redis::cmd("PFDEBUG")
            .arg("DECODE")
            .arg(key)
            .query(con)
            .unwrap()
    };
    assert_eq!(debug(&mut rc, "from-podium"), debug(&mut pc, "from-redis"));
    assert_eq!(
        pfcount(&mut rc, &["from-podium"]),
        pfcount(&mut pc, &["from-redis"])
    );
    assert!(added == 0 || added == 1);

    // Corruption is reported, never a crash.
    let mut reqs = vec![
        words("SET notahll hello"),
        words("PFADD notahll a"),
        words("PFCOUNT notahll"),
        words("PFDEBUG ENCODING h3"),
        words("PFDEBUG DECODE h3"),
        words("PFDEBUG NOPE h1"),
        words("PFDEBUG GETREG nosuch"),
    ];
    reqs.push(vec![
        b"SETRANGE".to_vec(),
        b"h1".to_vec(),
        b"17".to_vec(),
        vec![0x3f, 0xff, 0x80],
    ]);
    reqs.push(words("PFCOUNT h1"));
    reqs.push(words("PFADD h1 x y z"));
    reqs.push(words("PFMERGE m h1"));
    reqs.push(words("GET h1"));
    same_on_both(&mut rc, &mut pc, &reqs);
    let pong: String = redis::cmd("PING").query(&mut pc).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn events_and_aof_records() {
    let dir = std::env::temp_dir().join(format!("podium-geo-bits-hll-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let podium = Launch::podium()
        .args(&[
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--dir",
            dir.to_str().unwrap(),
            "--notify-keyspace-events",
            "KEA",
        ])
        .wait_loaded()
        .start();
    let mut sub = podium.con();
    let mut pubsub = sub.as_pubsub();
    pubsub.psubscribe("__keyevent@0__:*").unwrap();
    let mut con = podium.con();
    for line in [
        "GEOADD g 13.361389 38.115556 Palermo 15.087269 37.502669 Catania",
        "GEOSEARCHSTORE gs g FROMLONLAT 15 37 BYRADIUS 200 km",
        "GEORADIUS g 15 37 200 km STORE gr",
        "BITFIELD b SET u8 0 255",
        "BITFIELD b SET u8 0 255",
        "BITOP NOT nb b",
        "PFADD h a b c",
        "PFCOUNT h",
        "PFCOUNT h",
        "PFMERGE h2 h",
    ] {
        call(&mut con, &words(line)).unwrap();
    }
    // The unchanged BITFIELD and the PFCOUNTs raise nothing.
    let mut events = Vec::new();
    for _ in 0..7 {
        let msg = pubsub.get_message().unwrap();
        let event = msg
            .get_channel_name()
            .rsplit(':')
            .next()
            .unwrap()
            .to_string();
        let key: String = msg.get_payload().unwrap();
        events.push(format!("{event} {key}"));
    }
    assert_eq!(
        events,
        [
            "zadd g",
            "geosearchstore gs",
            "georadiusstore gr",
            "setbit b",
            "set nb",
            "pfadd h",
            "pfadd h2",
        ]
    );
    drop(pubsub);
    podium.stop();
    // The AOF: GEOADD as ZADD, the searches and BITFIELD as received, the unchanged BITFIELD
    // not at all, and the PFCOUNT that wrote the cache once.
    let mut aof = String::new();
    for entry in std::fs::read_dir(dir.join("appendonlydir")).unwrap() {
        let path = entry.unwrap().path();
        if path.to_string_lossy().contains(".incr.") {
            aof.push_str(&String::from_utf8_lossy(&std::fs::read(path).unwrap()));
        }
    }
    let count = |needle: &str| aof.matches(needle).count();
    assert_eq!(count("$4\r\nzadd\r\n"), 1);
    assert_eq!(count("$14\r\nGEOSEARCHSTORE\r\n"), 1);
    assert_eq!(count("$9\r\nGEORADIUS\r\n"), 1);
    assert_eq!(count("$8\r\nBITFIELD\r\n"), 1);
    assert_eq!(count("$7\r\nPFCOUNT\r\n"), 1);
    assert_eq!(count("$7\r\nPFMERGE\r\n"), 1);
    let _ = std::fs::remove_dir_all(&dir);
}
