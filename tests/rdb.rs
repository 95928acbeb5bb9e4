//! RDB snapshots end to end: files written by redis-server 7.0 loaded by Podium and the other
//! way round (every type and encoding, expiries, several databases), SAVE/BGSAVE/SHUTDOWN,
//! save points, -MISCONF after a failed BGSAVE, a damaged file refused, and BGSAVE taking one
//! instant while clients write.

use crate::common;

use common::{require_tool, Launch, Podium};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("podium-rdb-")
        .tempdir()
        .expect("temp dir")
}

/// Start `prog` on `dir` with its log in `<dir>.<port>.log`, once it has loaded its data. The
/// tests move `dir` and `dbfilename` at run time, which both servers allow only with
/// `enable-protected-configs`.
fn start_prog(prog: &str, dir: &Path, extra: &[&str]) -> Result<Podium, String> {
    let mut args = vec![
        "--dir",
        dir.to_str().expect("UTF-8 dir"),
        "--enable-protected-configs",
        "yes",
    ];
    args.extend_from_slice(extra);
    Launch::prog(prog)
        .args(&args)
        .log(dir)
        .wait_loaded()
        .timeout(Duration::from_secs(30))
        .try_start()
}

fn podium(dir: &Path, extra: &[&str]) -> Result<Podium, String> {
    start_prog(env!("CARGO_BIN_EXE_podium"), dir, extra)
}

/// `prog` is the redis-server `require_tool` found.
fn redis_server(prog: &str, dir: &Path, extra: &[&str]) -> Podium {
    start_prog(prog, dir, extra).expect("redis-server starts")
}

/// One key's type, contents (sets and hashes sorted) and whether it has a TTL.
type Dataset = BTreeMap<(usize, Vec<u8>), (String, Vec<Vec<u8>>, bool)>;

fn dataset(srv: &Podium, dbs: usize) -> Dataset {
    let mut out = BTreeMap::new();
    for db in 0..dbs {
        let mut c = srv.con_db(db);
        let keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(&mut c).expect("KEYS");
        for k in keys {
            let t: String = redis::cmd("TYPE").arg(&k).query(&mut c).expect("TYPE");
            let mut items: Vec<Vec<u8>> = match t.as_str() {
                "string" => vec![redis::cmd("GET").arg(&k).query(&mut c).expect("GET")],
                "list" => redis::cmd("LRANGE")
                    .arg(&k)
                    .arg(0)
                    .arg(-1)
                    .query(&mut c)
                    .expect("LRANGE"),
                "set" => redis::cmd("SMEMBERS")
                    .arg(&k)
                    .query(&mut c)
                    .expect("SMEMBERS"),
                "hash" => {
                    let m: Vec<(Vec<u8>, Vec<u8>)> = redis::cmd("HGETALL")
                        .arg(&k)
                        .query(&mut c)
                        .expect("HGETALL");
                    m.into_iter()
                        .map(|(f, v)| [f, b"=".to_vec(), v].concat())
                        .collect()
                }
                "zset" => redis::cmd("ZRANGE")
                    .arg(&k)
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES")
                    .query(&mut c)
                    .expect("ZRANGE"),
                other => panic!("unexpected type {other}"),
            };
            if t == "set" || t == "hash" {
                items.sort();
            }
            let ttl: i64 = redis::cmd("PTTL").arg(&k).query(&mut c).expect("PTTL");
            out.insert((db, k), (t, items, ttl > 0));
        }
    }
    out
}

/// Every type in its small and large encodings, integers, long compressible strings,
/// expiries, three databases.
fn fill(srv: &Podium) {
    let mut c = srv.con();
    let q = |c: &mut redis::Connection, args: &[&str]| {
        redis::cmd(args[0])
            .arg(&args[1..])
            .query::<redis::Value>(c)
            .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    };
    q(&mut c, &["SET", "s:short", "hello"]);
    q(&mut c, &["SET", "s:int8", "12"]);
    q(&mut c, &["SET", "s:int16", "-3000"]);
    q(&mut c, &["SET", "s:int32", "70000000"]);
    q(&mut c, &["SET", "s:int64", "12345678901234"]);
    q(&mut c, &["SET", "s:leading0", "0012"]);
    q(&mut c, &["SET", "s:empty", ""]);
    let long = "podium-".repeat(300);
    q(&mut c, &["SET", "s:lzf", &long]);
    let noise: String = (0..500u32)
        .map(|i| char::from(b'!' + ((i.wrapping_mul(2_654_435_761) >> 7) % 90) as u8))
        .collect();
    q(&mut c, &["SET", "s:noise", &noise]);
    q(&mut c, &["SET", "s:ttl", "v", "PX", "100000000"]);
    q(
        &mut c,
        &["RPUSH", "l:small", "a", "1", "-7", "300", "70000", &long],
    );
    let many: Vec<String> = (0..3000).map(|i| format!("item-{i}")).collect();
    let mut args = vec!["RPUSH", "l:large"];
    args.extend(many.iter().map(String::as_str));
    q(&mut c, &args);
    q(
        &mut c,
        &["SADD", "set:int", "1", "-5", "100000", "9999999999"],
    );
    q(&mut c, &["SADD", "set:str", "a", "b", "c"]);
    let mut args = vec!["SADD", "set:large"];
    args.extend(many.iter().map(String::as_str));
    q(&mut c, &args);
    let ints: Vec<String> = (0..1000).map(|i| (i * 7).to_string()).collect();
    let mut args = vec!["SADD", "set:intlarge"];
    args.extend(ints.iter().map(String::as_str));
    q(&mut c, &args);
    q(
        &mut c,
        &["HSET", "h:small", "f", "v", "n", "42", "long", &long],
    );
    let mut args = vec!["HSET", "h:large"];
    for m in &many[..500] {
        args.push(m);
        args.push("value");
    }
    q(&mut c, &args);
    q(
        &mut c,
        &[
            "ZADD", "z:small", "1", "a", "2.5", "b", "-inf", "c", "inf", "d", "0", "12",
        ],
    );
    let scores: Vec<String> = (0..2000)
        .map(|i| format!("{}", f64::from(i) * 0.37 - 100.0))
        .collect();
    let mut args = vec!["ZADD", "z:large"];
    for (i, s) in scores.iter().enumerate() {
        args.push(s);
        args.push(&many[i]);
    }
    q(&mut c, &args);
    q(&mut c, &["PEXPIRE", "z:large", "200000000"]);
    let mut c3 = srv.con_db(3);
    q(&mut c3, &["SET", "db3:s", "three"]);
    q(&mut c3, &["ZADD", "db3:z", "1", "x"]);
    let mut c15 = srv.con_db(15);
    q(&mut c15, &["HSET", "db15:h", "a", "b"]);
    q(&mut c15, &["SET", "db15:ttl", "x", "EX", "500000"]);
}

fn cmd(srv: &Podium, args: &[&str]) -> redis::RedisResult<redis::Value> {
    redis::cmd(args[0]).arg(&args[1..]).query(&mut srv.con())
}

fn status(srv: &Podium, args: &[&str]) -> String {
    match cmd(srv, args) {
        Ok(redis::Value::Okay) => "OK".into(),
        Ok(redis::Value::SimpleString(s)) => s,
        Ok(other) => format!("{other:?}"),
        Err(e) => format!("ERR {e}"),
    }
}

fn info_field(srv: &Podium, name: &str) -> String {
    let info: String = redis::cmd("INFO")
        .arg("persistence")
        .query(&mut srv.con())
        .expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in INFO"))
        .trim()
        .to_string()
}

fn wait_bgsave(srv: &Podium) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while info_field(srv, "rdb_bgsave_in_progress") != "0" {
        assert!(Instant::now() < deadline, "BGSAVE did not finish");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn redis_dump_loads_into_podium_and_podium_save_loads_into_redis() {
    let Some(redis_bin) = require_tool("redis-server") else {
        return;
    };
    let from_redis = tempdir();
    let redis = redis_server(&redis_bin, from_redis.path(), &["--save", ""]);
    fill(&redis);
    let want = dataset(&redis, 16);
    assert!(want.len() > 20);
    assert_eq!(status(&redis, &["SAVE"]), "OK");
    drop(redis);
    // Podium loads Redis's file (listpacks, quicklists, intsets, LZF, expiries, 3 dbs).
    let p = podium(from_redis.path(), &["--save", ""]).expect("podium loads redis's dump.rdb");
    assert_eq!(dataset(&p, 16), want);
    assert_eq!(
        info_field(&p, "rdb_last_load_keys_loaded"),
        want.len().to_string()
    );
    // Podium's own SAVE: redis-check-rdb accepts it, redis-server loads the same values.
    let from_podium = tempdir();
    assert_eq!(
        status(
            &p,
            &[
                "CONFIG",
                "SET",
                "dir",
                from_podium.path().to_str().expect("dir")
            ]
        ),
        "OK"
    );
    assert_eq!(status(&p, &["SAVE"]), "OK");
    drop(p);
    let file = from_podium.path().join("dump.rdb");
    if let Some(check_rdb) = require_tool("redis-check-rdb") {
        let out = Command::new(check_rdb)
            .arg(&file)
            .output()
            .expect("redis-check-rdb runs");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("RDB looks OK"),
            "{text}"
        );
    }
    let redis = redis_server(&redis_bin, from_podium.path(), &["--save", ""]);
    assert_eq!(dataset(&redis, 16), want);
    drop(redis);
    // Without compression or checksum as well.
    let plain = tempdir();
    std::fs::copy(&file, plain.path().join("dump.rdb")).expect("copy");
    let p = podium(
        plain.path(),
        &["--rdbcompression", "no", "--rdbchecksum", "no"],
    )
    .expect("start");
    assert_eq!(status(&p, &["SAVE"]), "OK");
    drop(p);
    let redis = redis_server(&redis_bin, plain.path(), &["--save", ""]);
    assert_eq!(dataset(&redis, 16), want);
}

#[test]
fn bgsave_writes_one_instant_while_clients_write() {
    let dir = tempdir();
    let p = podium(dir.path(), &["--save", ""]).expect("start");
    // Enough keys that the child takes a while (rdb-key-save-delay stretches it further).
    let mut c = p.con();
    let mut pipe = redis::pipe();
    for i in 0..20_000 {
        pipe.cmd("SET").arg(format!("k{i}")).arg(i).ignore();
    }
    pipe.query::<()>(&mut c).expect("fill");
    assert_eq!(
        status(&p, &["CONFIG", "SET", "rdb-key-save-delay", "20"]),
        "OK"
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let mut c = p.con();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _: () = redis::pipe()
                        .atomic()
                        .cmd("INCR")
                        .arg("counter")
                        .ignore()
                        .cmd("RPUSH")
                        .arg("log")
                        .arg(format!("w{w}-{n}"))
                        .ignore()
                        .query(&mut c)
                        .expect("MULTI/EXEC");
                    n += 1;
                }
                n
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    let started = Instant::now();
    assert_eq!(status(&p, &["BGSAVE"]), "Background saving started");
    assert!(status(&p, &["BGSAVE"]).contains("already in progress"));
    assert!(status(&p, &["SAVE"]).contains("already in progress"));
    let total: u64 = info_field(&p, "current_save_keys_total")
        .parse()
        .expect("number");
    assert!(total >= 20_000, "current_save_keys_total {total}");
    // Other clients are served while the child writes.
    let mut pings = 0;
    while info_field(&p, "rdb_bgsave_in_progress") == "1" {
        let t = Instant::now();
        assert_eq!(status(&p, &["PING"]), "PONG");
        assert!(t.elapsed() < Duration::from_millis(500));
        pings += 1;
        std::thread::sleep(Duration::from_millis(10));
        assert!(started.elapsed() < Duration::from_secs(60));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let written: u64 = writers.into_iter().map(|w| w.join().expect("writer")).sum();
    assert!(
        pings > 5,
        "the save finished too fast to show anything ({pings} pings)"
    );
    assert_eq!(info_field(&p, "rdb_last_bgsave_status"), "ok");
    assert_ne!(info_field(&p, "rdb_last_cow_size"), "");
    let final_counter: u64 = redis::cmd("GET")
        .arg("counter")
        .query(&mut p.con())
        .expect("GET");
    assert_eq!(final_counter, written);
    drop(p);
    // The file holds one instant: the counter and the list written in one MULTI agree, and
    // the snapshot is older than the end state.
    let p = podium(dir.path(), &["--save", ""]).expect("restart");
    let mut c = p.con();
    let counter: Option<u64> = redis::cmd("GET").arg("counter").query(&mut c).expect("GET");
    let len: u64 = redis::cmd("LLEN").arg("log").query(&mut c).expect("LLEN");
    assert_eq!(counter.unwrap_or(0), len);
    assert!(len < written, "snapshot {len} vs final {written}");
    let dbsize: u64 = redis::cmd("DBSIZE").query(&mut c).expect("DBSIZE");
    assert!(dbsize >= 20_000);
}

#[test]
fn shutdown_saves_as_redis() {
    let dir = tempdir();
    let file = dir.path().join("dump.rdb");
    // No save points: SHUTDOWN writes nothing, SHUTDOWN SAVE does.
    let p = podium(dir.path(), &["--save", ""]).expect("start");
    cmd(&p, &["SET", "a", "1"]).expect("SET");
    let _ = cmd(&p, &["SHUTDOWN"]);
    std::thread::sleep(Duration::from_millis(300));
    assert!(!file.exists());
    let p = podium(dir.path(), &["--save", ""]).expect("start");
    cmd(&p, &["SET", "a", "2"]).expect("SET");
    let _ = cmd(&p, &["SHUTDOWN", "SAVE"]);
    let mut p = p;
    p.child.wait().expect("exits");
    assert!(file.exists());
    // Save points: SIGTERM saves; SHUTDOWN NOSAVE does not.
    let p = podium(dir.path(), &["--save", "3600 1"]).expect("start");
    let mut c = p.con();
    let v: String = redis::cmd("GET").arg("a").query(&mut c).expect("GET");
    assert_eq!(v, "2");
    cmd(&p, &["SET", "a", "3"]).expect("SET");
    p.stop();
    let p = podium(dir.path(), &["--save", "3600 1"]).expect("start");
    let v: String = redis::cmd("GET").arg("a").query(&mut p.con()).expect("GET");
    assert_eq!(v, "3");
    cmd(&p, &["SET", "a", "4"]).expect("SET");
    let _ = cmd(&p, &["SHUTDOWN", "NOSAVE"]);
    let mut p = p;
    p.child.wait().expect("exits");
    let p = podium(dir.path(), &["--save", ""]).expect("start");
    let v: String = redis::cmd("GET").arg("a").query(&mut p.con()).expect("GET");
    assert_eq!(v, "3");
}

#[test]
fn save_points_bgsave_and_failures_refuse_writes() {
    let dir = tempdir();
    let p = podium(dir.path(), &["--save", "1 2"]).expect("start");
    assert_eq!(info_field(&p, "rdb_changes_since_last_save"), "0");
    cmd(&p, &["SET", "a", "1"]).expect("SET");
    cmd(&p, &["SET", "b", "1"]).expect("SET");
    assert_eq!(info_field(&p, "rdb_changes_since_last_save"), "2");
    let deadline = Instant::now() + Duration::from_secs(10);
    while info_field(&p, "rdb_saves") == "0" {
        assert!(Instant::now() < deadline, "the save point did not fire");
        std::thread::sleep(Duration::from_millis(50));
    }
    wait_bgsave(&p);
    assert!(dir.path().join("dump.rdb").exists());
    assert_eq!(info_field(&p, "rdb_changes_since_last_save"), "0");
    let lastsave: i64 = redis::cmd("LASTSAVE")
        .query(&mut p.con())
        .expect("LASTSAVE");
    assert!(lastsave > 0);
    // A BGSAVE that cannot write its file: status err, -MISCONF for writes, reads still served.
    std::fs::create_dir(dir.path().join("blocked.rdb")).expect("mkdir");
    assert_eq!(
        status(&p, &["CONFIG", "SET", "dbfilename", "blocked.rdb"]),
        "OK"
    );
    assert_eq!(status(&p, &["BGSAVE"]), "Background saving started");
    wait_bgsave(&p);
    assert_eq!(info_field(&p, "rdb_last_bgsave_status"), "err");
    let e = status(&p, &["SET", "x", "1"]);
    assert!(e.contains("MISCONF"), "{e}");
    assert!(status(&p, &["GET", "a"]).contains('1'));
    // With stop-writes-on-bgsave-error no, writes go through.
    assert_eq!(
        status(&p, &["CONFIG", "SET", "stop-writes-on-bgsave-error", "no"]),
        "OK"
    );
    assert_eq!(status(&p, &["SET", "x", "1"]), "OK");
    assert_eq!(
        status(&p, &["CONFIG", "SET", "stop-writes-on-bgsave-error", "yes"]),
        "OK"
    );
    // A successful SAVE clears the error.
    assert_eq!(
        status(&p, &["CONFIG", "SET", "dbfilename", "dump.rdb"]),
        "OK"
    );
    assert_eq!(status(&p, &["SAVE"]), "OK");
    assert_eq!(info_field(&p, "rdb_last_bgsave_status"), "ok");
    assert_eq!(status(&p, &["SET", "x", "2"]), "OK");
    // Syntax.
    assert!(status(&p, &["BGSAVE", "now"]).contains("syntax error"));
}

#[test]
fn damaged_or_unsupported_files_are_refused_with_the_offset() {
    let dir = tempdir();
    let p = podium(dir.path(), &["--save", ""]).expect("start");
    for i in 0..200 {
        cmd(&p, &["SET", &format!("key{i}"), &"v".repeat(i)]).expect("SET");
    }
    assert_eq!(status(&p, &["SAVE"]), "OK");
    drop(p);
    let file = dir.path().join("dump.rdb");
    let good = std::fs::read(&file).expect("read");
    // Truncated: refused, and the log says where.
    std::fs::write(&file, &good[..good.len() / 2]).expect("write");
    let e = podium(dir.path(), &["--save", ""]).err().expect("refused");
    assert!(e.contains("offset"), "{e}");
    // One flipped byte in a value: the checksum refuses it.
    let mut bad = good.clone();
    let at = good.len() - 30;
    bad[at] ^= 0x20;
    std::fs::write(&file, &bad).expect("write");
    let e = podium(dir.path(), &["--save", ""]).err().expect("refused");
    assert!(e.contains("checksum") || e.contains("offset"), "{e}");
}

/// Streams of every shape redis-server can hold: several nodes, tombstones, an empty stream
/// with a last ID, consumer groups with pending entries and idle consumers.
fn fill_streams(srv: &Podium) {
    cmd(srv, &["CONFIG", "SET", "stream-node-max-entries", "10"]).expect("CONFIG");
    for i in 1..=95 {
        let id = format!("{i}-1");
        let v = i.to_string();
        if i % 9 == 0 {
            cmd(
                srv,
                &["XADD", "s", &id, "other", &v, "more", &"x".repeat(i)],
            )
            .expect("XADD");
        } else {
            cmd(srv, &["XADD", "s", &id, "item", &v]).expect("XADD");
        }
    }
    cmd(srv, &["XDEL", "s", "3-1", "50-1", "95-1"]).expect("XDEL");
    cmd(srv, &["XGROUP", "CREATE", "s", "g1", "0"]).expect("XGROUP");
    cmd(srv, &["XGROUP", "CREATE", "s", "g2", "$"]).expect("XGROUP");
    cmd(
        srv,
        &[
            "XREADGROUP",
            "GROUP",
            "g1",
            "alice",
            "COUNT",
            "7",
            "STREAMS",
            "s",
            ">",
        ],
    )
    .expect("XREADGROUP");
    cmd(
        srv,
        &[
            "XREADGROUP",
            "GROUP",
            "g1",
            "bob",
            "COUNT",
            "3",
            "STREAMS",
            "s",
            ">",
        ],
    )
    .expect("XREADGROUP");
    cmd(srv, &["XACK", "s", "g1", "2-1", "4-1"]).expect("XACK");
    cmd(srv, &["XGROUP", "CREATECONSUMER", "s", "g2", "idle"]).expect("XGROUP");
    cmd(srv, &["XADD", "empty", "7-7", "f", "v"]).expect("XADD");
    cmd(srv, &["XDEL", "empty", "7-7"]).expect("XDEL");
    cmd(srv, &["XGROUP", "CREATE", "mk", "g", "$", "MKSTREAM"]).expect("XGROUP");
}

/// What a stream looks like through XINFO STREAM FULL and XRANGE (the seen-times of
/// consumers left out: a load does not change them, but the servers' clocks differ).
fn stream_view(srv: &Podium, key: &str) -> String {
    let full = cmd(srv, &["XINFO", "STREAM", key, "FULL", "COUNT", "0"]).expect("XINFO");
    let range = cmd(srv, &["XRANGE", key, "-", "+"]).expect("XRANGE");
    let text = format!("{full:?} {range:?}");
    // Drop the seen-time numbers.
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(i) = rest.find("seen-time") {
        out.push_str(&rest[..i]);
        let after = &rest[i..];
        let j = after.find("pel-count").unwrap_or(after.len());
        rest = &after[j..];
    }
    out.push_str(rest);
    out
}

#[test]
fn streams_cross_load_between_redis_and_podium() {
    let Some(redis_bin) = require_tool("redis-server") else {
        return;
    };
    let rdir = tempdir();
    let redis = redis_server(&redis_bin, rdir.path(), &["--save", ""]);
    fill_streams(&redis);
    let keys = ["s", "empty", "mk"];
    let want: Vec<String> = keys.iter().map(|k| stream_view(&redis, k)).collect();
    let dumps: Vec<redis::Value> = keys
        .iter()
        .map(|k| cmd(&redis, &["DUMP", k]).expect("DUMP"))
        .collect();
    assert_eq!(status(&redis, &["SAVE"]), "OK");
    drop(redis);
    let p = podium(rdir.path(), &["--save", ""]).expect("podium loads redis's streams");
    let got: Vec<String> = keys.iter().map(|k| stream_view(&p, k)).collect();
    assert_eq!(got, want);
    // Redis's DUMP payloads restore into the same streams.
    for (k, d) in keys.iter().zip(&dumps) {
        let redis::Value::BulkString(payload) = d else {
            panic!("DUMP of {k}: {d:?}")
        };
        let name = format!("{k}-restored");
        redis::cmd("RESTORE")
            .arg(&name)
            .arg(0)
            .arg(payload)
            .query::<()>(&mut p.con())
            .expect("RESTORE");
        assert_eq!(stream_view(&p, &name), stream_view(&p, k));
    }
    // Podium's file loads into redis-server with the same streams.
    let pdir = tempdir();
    let dir = pdir.path().to_str().expect("dir");
    assert_eq!(status(&p, &["CONFIG", "SET", "dir", dir]), "OK");
    assert_eq!(status(&p, &["SAVE"]), "OK");
    drop(p);
    if let Some(check_rdb) = require_tool("redis-check-rdb") {
        let out = Command::new(check_rdb)
            .arg(pdir.path().join("dump.rdb"))
            .output()
            .expect("redis-check-rdb runs");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("RDB looks OK"),
            "{text}"
        );
    }
    let redis = redis_server(
        &redis_bin,
        pdir.path(),
        &["--save", "", "--sanitize-dump-payload", "yes"],
    );
    let back: Vec<String> = keys.iter().map(|k| stream_view(&redis, k)).collect();
    assert_eq!(back, want);
}

/// Issue 36: Redis's Sentinel suite points `dir` at `/` and `dbfilename` at an existing
/// directory so that BGSAVE fails. The failure must be a warning in the server's log (the
/// suite counts anything on a node's standard error as a fault) naming a temporary file in
/// `dir`; with `dbfilename ""` the temporary file must still be in `dir`, not in the directory
/// above it.
#[test]
fn a_failed_save_logs_its_temporary_file_in_dir_and_nothing_on_stderr() {
    let top = tempdir();
    let data = top.path().join("data");
    std::fs::create_dir(&data).expect("mkdir data");
    std::fs::create_dir(data.join("sub")).expect("mkdir sub");
    let logfile = top.path().join("server.log");
    let p = podium(&data, &["--logfile", logfile.to_str().expect("UTF-8 path")]).expect("start");
    let data_abs = std::fs::canonicalize(&data).expect("canonical dir");
    let console = data.with_extension(format!("{}.log", p.port));
    cmd(&p, &["SET", "k", "v"]).expect("SET");

    // The final name is a directory: the rename fails.
    assert_eq!(status(&p, &["CONFIG", "SET", "dbfilename", "sub"]), "OK");
    assert_eq!(status(&p, &["BGSAVE"]), "Background saving started");
    wait_bgsave(&p);
    assert_eq!(info_field(&p, "rdb_last_bgsave_status"), "err");
    // And with no file name at all, in the foreground and in the background.
    assert_eq!(status(&p, &["CONFIG", "SET", "dbfilename", ""]), "OK");
    assert!(status(&p, &["SAVE"]).starts_with("ERR"));
    assert_eq!(status(&p, &["BGSAVE"]), "Background saving started");
    wait_bgsave(&p);
    assert_eq!(info_field(&p, "rdb_last_bgsave_status"), "err");

    let log = std::fs::read_to_string(&logfile).expect("server log");
    let moved: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("Error moving temp DB file temp-"))
        .collect();
    assert_eq!(moved.len(), 3, "one line per failed save:\n{log}");
    let root = format!("(in server root dir {})", data_abs.display());
    assert!(
        moved[0].contains(":C ") && moved[0].contains(" # "),
        "a child's warning: {}",
        moved[0]
    );
    assert!(
        moved[0].contains(&format!(
            "on the final destination sub {root}: Is a directory"
        )),
        "{}",
        moved[0]
    );
    for line in &moved[1..] {
        assert!(
            line.contains(&format!(
                "on the final destination  {root}: No such file or directory"
            )),
            "{line}"
        );
    }
    assert!(log.contains("Background saving error"), "{log}");
    // Nothing left behind, in `dir` or above it.
    for d in [&data, &top.path().to_path_buf()] {
        for e in std::fs::read_dir(d).expect("read dir") {
            let name = e.expect("entry").file_name();
            let name = name.to_string_lossy();
            assert!(!name.starts_with("temp-"), "{name} left in {}", d.display());
        }
    }
    drop(p);
    // With a log file, the console (standard output and error) stays silent.
    let out = std::fs::read_to_string(&console).unwrap_or_default();
    assert!(
        !out.contains("temp-") && !out.contains("saving"),
        "written to the console: {out}"
    );
}
