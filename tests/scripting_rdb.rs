//! FUNCTION libraries in RDB files and AOF bases: written as Redis 7.0 writes them (one
//! FUNCTION2 record with the library's code each), so redis-server 7.0 loads Podium's file and
//! the other way round; DEBUG RELOAD keeps them (NOFLUSH refuses a library already loaded,
//! NOFLUSH MERGE replaces it); an AOF rewrite keeps them, with and without the RDB preamble.

use crate::common;

use common::{require_tool, Launch, Podium};
use std::path::Path;
use std::time::{Duration, Instant};

const LIB: &str = "#!lua name=mylib\n\
    redis.register_function('bump', function(keys, args) return redis.call('incr', keys[1]) end)\n\
    redis.register_function{function_name='ro', callback=function() return 'ro' end, flags={'no-writes'}}";

fn start(prog: &str, dir: &Path, extra: &[&str]) -> Podium {
    let mut args = vec![
        "--dir",
        dir.to_str().expect("UTF-8 dir"),
        "--save",
        "",
        "--enable-debug-command",
        "yes",
    ];
    args.extend_from_slice(extra);
    Launch::prog(prog)
        .args(&args)
        .log(dir)
        .wait_loaded()
        .timeout(Duration::from_secs(30))
        .start()
}

fn podium(dir: &Path, extra: &[&str]) -> Podium {
    start(env!("CARGO_BIN_EXE_podium"), dir, extra)
}

/// FUNCTION LIST WITHCODE, each library's functions sorted (redis-server lists them in its
/// hash table's order, which its random hash seed decides).
fn libraries(s: &Podium) -> Vec<Vec<String>> {
    let libs: Vec<redis::Value> = redis::cmd("FUNCTION")
        .arg("LIST")
        .arg("WITHCODE")
        .query(&mut s.con())
        .expect("FUNCTION LIST");
    libs.into_iter()
        .map(|lib| {
            let redis::Value::Array(fields) = lib else {
                panic!("a library is an array: {lib:?}")
            };
            let mut out = Vec::new();
            for field in fields {
                match field {
                    redis::Value::Array(functions) => {
                        let mut names: Vec<String> =
                            functions.iter().map(|f| format!("{f:?}")).collect();
                        names.sort();
                        out.extend(names);
                    }
                    other => out.push(format!("{other:?}")),
                }
            }
            out
        })
        .collect()
}

fn fcall(s: &Podium, f: &str, key: &str) -> redis::RedisResult<redis::Value> {
    redis::cmd("FCALL")
        .arg(f)
        .arg(1)
        .arg(key)
        .query(&mut s.con())
}

fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("podium-fn-rdb-")
        .tempdir()
        .expect("temp dir")
}

#[test]
fn libraries_cross_between_podium_and_redis_rdb_files() {
    let Some(redis_server) = require_tool("redis-server") else {
        return;
    };
    // redis-server's file into Podium.
    let from_redis = tempdir();
    let redis = start(&redis_server, from_redis.path(), &[]);
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(LIB)
        .query(&mut redis.con())
        .expect("redis FUNCTION LOAD");
    let want = libraries(&redis);
    let _: () = redis::cmd("SAVE").query(&mut redis.con()).expect("SAVE");
    drop(redis);
    let p = podium(from_redis.path(), &[]);
    assert_eq!(libraries(&p), want);
    assert_eq!(fcall(&p, "bump", "k").expect("FCALL"), redis::Value::Int(1));
    // Podium's file into redis-server.
    let from_podium = tempdir();
    let p2 = podium(from_podium.path(), &[]);
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(LIB)
        .query(&mut p2.con())
        .expect("podium FUNCTION LOAD");
    let _: () = redis::cmd("SAVE").query(&mut p2.con()).expect("SAVE");
    drop(p2);
    if let Some(check_rdb) = require_tool("redis-check-rdb") {
        let out = std::process::Command::new(check_rdb)
            .arg(from_podium.path().join("dump.rdb"))
            .output()
            .expect("redis-check-rdb runs");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("RDB looks OK"),
            "{text}"
        );
    }
    let redis = start(&redis_server, from_podium.path(), &[]);
    assert_eq!(libraries(&redis), want);
    assert_eq!(
        fcall(&redis, "bump", "k").expect("FCALL"),
        redis::Value::Int(1)
    );
}

#[test]
fn debug_reload_keeps_libraries_and_merges_on_request() {
    let dir = tempdir();
    let p = podium(dir.path(), &[]);
    let mut c = p.con();
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(LIB)
        .query(&mut c)
        .unwrap();
    let want = libraries(&p);
    let _: () = redis::cmd("DEBUG")
        .arg("RELOAD")
        .query(&mut c)
        .expect("RELOAD");
    assert_eq!(libraries(&p), want);
    // NOFLUSH loads the file over what is there: the library exists already.
    let e = redis::cmd("DEBUG")
        .arg("RELOAD")
        .arg("NOFLUSH")
        .query::<()>(&mut c)
        .expect_err("NOFLUSH over a loaded library");
    assert!(
        e.to_string().contains("Error trying to load the RDB"),
        "{e}"
    );
    // MERGE replaces it (and the keys), leaving one copy.
    let _: () = redis::cmd("DEBUG")
        .arg("RELOAD")
        .arg("NOFLUSH")
        .arg("MERGE")
        .query(&mut c)
        .expect("NOFLUSH MERGE");
    assert_eq!(libraries(&p), want);
    // A library loaded after the save survives NOSAVE NOFLUSH MERGE next to the file's.
    let other = "#!lua name=other\nredis.register_function('two', function() return 2 end)";
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(other)
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("DEBUG")
        .arg("RELOAD")
        .arg("NOSAVE")
        .arg("NOFLUSH")
        .arg("MERGE")
        .query(&mut c)
        .expect("NOSAVE NOFLUSH MERGE");
    assert_eq!(fcall(&p, "two", "k").expect("two"), redis::Value::Int(2));
    assert_eq!(
        fcall(&p, "ro", "k").expect("ro"),
        redis::Value::BulkString(b"ro".to_vec())
    );
    // A plain reload of the file (saved before `other`) flushes `other` away.
    let _: () = redis::cmd("DEBUG")
        .arg("RELOAD")
        .arg("NOSAVE")
        .query(&mut c)
        .unwrap();
    assert_eq!(libraries(&p), want);
}

fn wait_rewrite(p: &Podium) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let info: String = redis::cmd("INFO")
            .arg("persistence")
            .query(&mut p.con())
            .unwrap();
        if info.contains("aof_rewrite_in_progress:0") && !info.contains("aof_rewrite_scheduled:1") {
            return;
        }
        assert!(Instant::now() < deadline, "the rewrite did not finish");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_aof_rewrite_keeps_libraries() {
    for preamble in ["no", "yes"] {
        let dir = tempdir();
        let args = ["--appendonly", "yes", "--aof-use-rdb-preamble", preamble];
        let p = podium(dir.path(), &args);
        let mut c = p.con();
        let _: String = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg(LIB)
            .query(&mut c)
            .unwrap();
        let want = libraries(&p);
        let _: String = redis::cmd("BGREWRITEAOF").query(&mut c).unwrap();
        wait_rewrite(&p);
        drop(c);
        drop(p);
        let p = podium(dir.path(), &args);
        assert_eq!(libraries(&p), want, "aof-use-rdb-preamble {preamble}");
    }
}
