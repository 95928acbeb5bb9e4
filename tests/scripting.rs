//! Lua scripting against the real binary: EVAL/EVALSHA/SCRIPT, reply conversions both ways,
//! Redis 7.0's error texts, atomicity inside MULTI, the AOF (effects, not scripts), and a long
//! script answered with -BUSY and stopped with SCRIPT KILL.

use crate::common;

use common::{Launch, Podium};
use redis::{Connection, Value};
use std::time::Duration;

fn eval(
    con: &mut Connection,
    script: &str,
    keys: &[&str],
    args: &[&str],
) -> redis::RedisResult<Value> {
    redis::cmd("EVAL")
        .arg(script)
        .arg(keys.len())
        .arg(keys)
        .arg(args)
        .query(con)
}

fn err(r: redis::RedisResult<Value>) -> String {
    let e = r.expect_err("an error");
    format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or(""))
        .trim()
        .to_string()
}

/// EVAL `script` (no keys) on a connection of its own, in a thread; its reply when it ends.
fn eval_in_thread(
    port: u16,
    script: &'static str,
) -> std::thread::JoinHandle<redis::RedisResult<Value>> {
    std::thread::spawn(move || {
        let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?.get_connection()?;
        redis::cmd("EVAL").arg(script).arg(0).query(&mut c)
    })
}

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

#[test]
fn replies_convert_both_ways_as_in_redis() {
    let s = Podium::start(&[]);
    let mut con = s.con();
    assert_eq!(eval(&mut con, "return 1", &[], &[]).unwrap(), Value::Int(1));
    assert_eq!(
        eval(&mut con, "return 3.99", &[], &[]).unwrap(),
        Value::Int(3)
    );
    assert_eq!(
        eval(&mut con, "return -3.99", &[], &[]).unwrap(),
        Value::Int(-3)
    );
    assert_eq!(
        eval(&mut con, "return true", &[], &[]).unwrap(),
        Value::Int(1)
    );
    assert_eq!(
        eval(&mut con, "return false", &[], &[]).unwrap(),
        Value::Nil
    );
    assert_eq!(
        eval(&mut con, "return {1, 'two', {3}, false, nil, 5}", &[], &[]).unwrap(),
        Value::Array(vec![
            Value::Int(1),
            bulk("two"),
            Value::Array(vec![Value::Int(3)]),
            Value::Nil
        ]),
        "false is nil; the array stops at the first real nil"
    );
    assert_eq!(
        eval(&mut con, "return {ok='FINE'}", &[], &[]).unwrap(),
        Value::SimpleString("FINE".into())
    );
    assert_eq!(
        err(eval(&mut con, "return {err='My Error'}", &[], &[])),
        "My Error"
    );
    assert_eq!(
        err(eval(&mut con, "return redis.error_reply('oops')", &[], &[])),
        "ERR oops"
    );
    assert_eq!(
        eval(&mut con, "return KEYS[1] .. ARGV[2]", &["a"], &["b", "c"]).unwrap(),
        bulk("ac")
    );
    // Command replies seen by the script: status as {ok=}, nil as false, integers as numbers.
    let v = eval(
        &mut con,
        "local s = redis.call('set', KEYS[1], 'v')
         local n = redis.call('get', 'missing')
         local i = redis.call('incr', 'counter')
         return {s['ok'], tostring(n), i + 1, redis.call('get', KEYS[1])}",
        &["k"],
        &[],
    )
    .unwrap();
    assert_eq!(
        v,
        Value::Array(vec![bulk("OK"), bulk("false"), Value::Int(2), bulk("v")])
    );
    // The leaderboard idiom from the design articles: an atomic "around me" window.
    let v = eval(
        &mut con,
        "redis.call('zadd', KEYS[1], 10, 'a', 20, 'b', 30, 'c', 40, 'd')
         local r = redis.call('zrevrank', KEYS[1], ARGV[1])
         return redis.call('zrange', KEYS[1], math.max(r - 1, 0), r + 1, 'REV', 'WITHSCORES')",
        &["lb"],
        &["c"],
    )
    .unwrap();
    assert_eq!(
        v,
        Value::Array(
            ["d", "40", "c", "30", "b", "20"]
                .iter()
                .map(|s| bulk(s))
                .collect()
        )
    );
    assert_eq!(
        eval(&mut con, "return redis.sha1hex('')", &[], &[]).unwrap(),
        bulk("da39a3ee5e6b4b0d3255bfef95601890afd80709")
    );
}

/// A RESP2 double (ZINCRBY's, ZSCORE's) reaches Lua as the string Redis writes for it,
/// whole or not, of either sign, at the edges of the whole-number path (1e15).
#[test]
fn scores_reach_lua_as_their_text() {
    let s = Podium::start(&[]);
    let mut con = s.con();
    let script = "local s = redis.call('zincrby', KEYS[1], ARGV[1], 'm') \
                  return {type(s), s, redis.call('zscore', KEYS[1], 'm')}";
    for (incr, text) in [
        ("7", "7"),
        ("-12", "-5"),
        ("5", "0"),
        ("0.25", "0.25"),
        ("-1.5", "-1.25"),
        ("999999999999999.25", "999999999999998"),
        ("1", "999999999999999"),
        ("1", "1000000000000000"),
        ("1e300", "1.0000000000000001e+300"),
    ] {
        let got = eval(&mut con, script, &["z"], &[incr]).unwrap();
        assert_eq!(
            got,
            Value::Array(vec![bulk("string"), bulk(text), bulk(text)]),
            "after ZINCRBY {incr}"
        );
    }
}

#[test]
fn errors_read_as_redis_7() {
    let s = Podium::start(&[]);
    let mut con = s.con();
    redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query::<()>(&mut con)
        .unwrap();
    let incr = "return redis.call('incr', KEYS[1])";
    let sha = "2bab3b661081db58bd2341920e0ba7cf5dc77b25"; // SHA1 of `incr` above
    assert_eq!(
        err(eval(&mut con, incr, &["k"], &[])),
        format!("ERR value is not an integer or out of range script: {sha}, on @user_script:1.")
    );
    assert_eq!(
        err(eval(
            &mut con,
            "return redis.pcall('incr', KEYS[1])",
            &["k"],
            &[]
        )),
        "ERR value is not an integer or out of range"
    );
    // pcall around redis.call sees the error's text.
    assert_eq!(
        eval(
            &mut con,
            "local ok, e = pcall(redis.call, 'incr', 'k') return e",
            &[],
            &[]
        )
        .unwrap(),
        bulk("ERR value is not an integer or out of range")
    );
    for (script, want) in [
        (
            "return +",
            "ERR Error compiling script (new function): user_script:1: unexpected symbol near '+'",
        ),
        (
            "return redis.call('nosuch')",
            "ERR Unknown Redis command called from script",
        ),
        (
            "return redis.call('get')",
            "ERR Wrong number of args calling Redis command from script",
        ),
        (
            "return redis.call('multi')",
            "ERR This Redis command is not allowed from script",
        ),
        (
            "return redis.call('get', {})",
            "ERR Lua redis lib command arguments must be strings or integers",
        ),
        (
            "return nosuch",
            "ERR user_script:1: Script attempted to access nonexistent global variable 'nosuch'",
        ),
        (
            "x = 1",
            "ERR user_script:1: Attempt to modify a readonly table",
        ),
        ("error('boom')", "ERR user_script:1: boom"),
    ] {
        let got = err(eval(&mut con, script, &[], &[]));
        assert!(got.starts_with(want), "{script}: {got}");
    }
    assert_eq!(
        err(redis::cmd("EVAL")
            .arg("return 1")
            .arg(3)
            .arg("a")
            .query(&mut con)),
        "ERR Number of keys can't be greater than number of args"
    );
    assert_eq!(
        err(redis::cmd("EVAL").arg("return 1").arg(-1).query(&mut con)),
        "ERR Number of keys can't be negative"
    );
    assert_eq!(
        err(redis::cmd("EVAL_RO")
            .arg("return redis.call('set','x','y')")
            .arg(0)
            .query(&mut con))
        .split(" script:")
        .next()
        .unwrap(),
        "ERR Write commands are not allowed from read-only scripts."
    );
}

#[test]
fn evalsha_and_the_script_cache() {
    let s = Podium::start(&[]);
    let mut con = s.con();
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg("return 'loaded'")
        .query(&mut con)
        .unwrap();
    assert_eq!(sha, "b534286061d4b9e4026607613b95c06c06015ae8");
    let v: String = redis::cmd("EVALSHA")
        .arg(&sha)
        .arg(0)
        .query(&mut con)
        .unwrap();
    assert_eq!(v, "loaded");
    // EVAL caches what it ran.
    eval(&mut con, "return 1", &[], &[]).unwrap();
    let exists: Vec<i64> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg("e0e1f9fabfc9d4800c877a703b823ac0578ff8db")
        .arg("ffffffffffffffffffffffffffffffffffffffff")
        .query(&mut con)
        .unwrap();
    assert_eq!(exists, vec![1, 0]);
    redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query::<()>(&mut con)
        .unwrap();
    assert_eq!(
        err(redis::cmd("EVALSHA").arg(&sha).arg(0).query(&mut con)),
        "NOSCRIPT No matching script. Please use EVAL."
    );
    assert_eq!(
        err(redis::cmd("SCRIPT").arg("KILL").query(&mut con)),
        "NOTBUSY No scripts in execution right now."
    );
}

#[test]
fn scripts_are_atomic_and_logged_as_their_effects() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let args = ["--appendonly", "yes", "--appendfsync", "always", "--dir", d];
    let s = Launch::podium().args(&args).wait_loaded().start();
    let mut con = s.con();
    // Random and time-dependent choices are logged as what they did, so the replay matches.
    eval(
        &mut con,
        "for i = 1, 50 do redis.call('zincrby', KEYS[1], math.random(100), 'm' .. i) end
         redis.call('select', 3)
         redis.call('set', 'in-db-3', 'x')
         return redis.call('expire', 'in-db-3', 1000)",
        &["lb"],
        &[],
    )
    .unwrap();
    // SELECT inside the script did not move the caller.
    let n: i64 = redis::cmd("ZCARD").arg("lb").query(&mut con).unwrap();
    assert_eq!(n, 50);
    // Inside MULTI the script runs as one queued command.
    redis::cmd("MULTI").query::<()>(&mut con).unwrap();
    redis::cmd("EVAL")
        .arg("return redis.call('incrby', KEYS[1], 5)")
        .arg(1)
        .arg("c")
        .query::<()>(&mut con)
        .unwrap();
    redis::cmd("INCR").arg("c").query::<()>(&mut con).unwrap();
    let r: Vec<i64> = redis::cmd("EXEC").query(&mut con).unwrap();
    assert_eq!(r, vec![5, 6]);
    let before: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg("lb")
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(&mut con)
        .unwrap();
    s.kill9();
    let s = Launch::podium().args(&args).wait_loaded().start();
    let mut con = s.con();
    let after: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg("lb")
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(&mut con)
        .unwrap();
    assert_eq!(after, before);
    let c: i64 = redis::cmd("GET").arg("c").query(&mut con).unwrap();
    assert_eq!(c, 6);
    let mut db3 = s.con_db(3);
    let ttl: i64 = redis::cmd("TTL").arg("in-db-3").query(&mut db3).unwrap();
    assert!(ttl > 990 && ttl <= 1000, "{ttl}");
    // The log holds the effects in MULTI/EXEC, never the script.
    let mut log = Vec::new();
    for e in std::fs::read_dir(dir.path().join("appendonlydir")).unwrap() {
        log.extend(std::fs::read(e.unwrap().path()).unwrap());
    }
    let text = String::from_utf8_lossy(&log).to_ascii_lowercase();
    assert!(text.contains("zincrby") && text.contains("multi") && !text.contains("eval"));
}

#[test]
fn a_long_script_gets_busy_replies_and_script_kill() {
    a_long_script_can_be_killed("2");
}

/// With one worker thread (`threads 1`, or a process confined to one core) too: the script
/// hands the worker's role to another thread, as on several. (The single-threaded scheduler
/// Podium used on one core could not, and a runaway script held the server for good.)
#[test]
fn a_long_script_can_be_killed_with_one_thread() {
    a_long_script_can_be_killed("1");
}

fn a_long_script_can_be_killed(threads: &str) {
    let s = Podium::start(&["--threads", threads]);
    let mut con = s.con();
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("lua-time-limit")
        .arg(10)
        .query::<()>(&mut con)
        .unwrap();
    let port = s.port;
    let runner = eval_in_thread(port, "while true do end");
    std::thread::sleep(Duration::from_millis(300));
    assert!(err(redis::cmd("GET").arg("x").query(&mut con))
        .starts_with("BUSY Redis is busy running a script"));
    // MULTI is allowed while busy; a command queued then aborts the transaction.
    redis::cmd("MULTI").query::<()>(&mut con).unwrap();
    assert!(err(redis::cmd("INCR").arg("x").query(&mut con)).starts_with("BUSY"));
    // (From another connection: this one is inside MULTI, where SCRIPT KILL would be queued.)
    let mut other = s.con();
    redis::cmd("SCRIPT")
        .arg("KILL")
        .query::<()>(&mut other)
        .unwrap();
    let killed = runner.join().unwrap();
    assert!(err(killed).starts_with("ERR Script killed by user with SCRIPT KILL..."));
    assert!(err(redis::cmd("EXEC").query(&mut con)).starts_with("EXECABORT"));
    // A script that wrote cannot be killed.
    let runner = eval_in_thread(port, "redis.call('set', 'w', 1) local function now() local t = redis.call('time') return t[1] + t[2] / 1e6 end local t0 = now() while now() - t0 < 1.5 do end return 1");
    std::thread::sleep(Duration::from_millis(300));
    let e = err(redis::cmd("SCRIPT").arg("KILL").query(&mut con));
    assert!(e.starts_with("UNKILLABLE"), "{e}");
    assert_eq!(runner.join().unwrap().unwrap(), Value::Int(1));
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
}

/// EVAL `script` with no keys; the error text or the reply.
fn run(con: &mut Connection, script: &str) -> Result<Value, String> {
    eval(con, script, &[], &[]).map_err(|e| {
        format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or(""))
            .trim()
            .to_string()
    })
}

/// The error of `script` up to Redis's " script: <sha>" suffix.
fn run_err(con: &mut Connection, script: &str) -> String {
    let e = run(con, script).expect_err(script);
    e.split(" script: ").next().unwrap_or("").to_string()
}

#[test]
fn bytecode_is_refused_everywhere() {
    let s = Podium::start(&[]);
    let mut con = s.con();
    // EVAL of a binary chunk: Redis 7.0's text-only parser fails on the ESC byte.
    assert_eq!(
        run_err(&mut con, "\x1bLuaQ\x00\x01\x04\x08\x04\x08\x00garbage"),
        "ERR Error compiling script (new function): user_script:1: unexpected symbol near 'char(27)'"
    );
    // loadstring / load of string.dump's output (the text redis-server 7.0.15 gives).
    assert_eq!(
        run(
            &mut con,
            "local f, e = loadstring(string.dump(function() return 1 end)) return {tostring(f), e}"
        )
        .unwrap(),
        Value::Array(vec![
            bulk("nil"),
            bulk("[string \"\x1bLuaQ\"]:1: unexpected symbol near 'char(27)'")
        ])
    );
    let v = run(
        &mut con,
        "local done = false
         local f, e = load(function()
           if done then return nil end
           done = true
           return string.dump(function() return 1 end)
         end)
         return {tostring(f), e}",
    )
    .unwrap();
    assert_eq!(
        v,
        Value::Array(vec![
            bulk("nil"),
            bulk("(load):1: unexpected symbol near 'char(27)'")
        ])
    );
    // Text still loads.
    assert_eq!(
        run(&mut con, "return loadstring('return 7')()").unwrap(),
        Value::Int(7)
    );
    // A corrupted bytecode chunk (which once made Lua ask for 2^48 bytes) is just refused.
    let mut chunk = b"\x1bLuaQ\x00\x01\x04\x08\x04\x08\x00".to_vec();
    chunk.extend_from_slice(&[0xff; 64]);
    let script = format!(
        "return loadstring({})",
        chunk
            .iter()
            .map(|b| format!("string.char({b})"))
            .collect::<Vec<_>>()
            .join("..")
    );
    assert_eq!(run(&mut con, &script).unwrap(), Value::Nil);
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn globals_redis_removes_are_absent() {
    let s = Podium::start(&[]);
    let mut con = s.con();
    for name in [
        "dofile", "loadfile", "print", "getfenv", "setfenv", "newproxy", "module", "require", "os",
        "io", "debug", "package",
    ] {
        assert_eq!(
            run_err(&mut con, &format!("return type({name})")),
            format!(
                "ERR user_script:1: Script attempted to access nonexistent global variable '{name}'"
            )
        );
    }
    // What is left is exactly Redis 7.0.15's list.
    let v = run(
        &mut con,
        "local t = {} for k in pairs(_G) do t[#t+1] = k end table.sort(t) return t",
    )
    .unwrap();
    let Value::Array(names) = v else {
        panic!("{v:?}")
    };
    let names: Vec<String> = names
        .into_iter()
        .map(|n| match n {
            Value::BulkString(b) => String::from_utf8(b).unwrap(),
            other => panic!("{other:?}"),
        })
        .collect();
    for expected in [
        "ARGV",
        "KEYS",
        "_G",
        "_VERSION",
        "assert",
        "collectgarbage",
        "coroutine",
        "error",
        "gcinfo",
        "getmetatable",
        "ipairs",
        "load",
        "loadstring",
        "math",
        "next",
        "pairs",
        "pcall",
        "rawequal",
        "rawget",
        "rawset",
        "redis",
        "select",
        "setmetatable",
        "string",
        "table",
        "tonumber",
        "tostring",
        "type",
        "unpack",
        "xpcall",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} in {names:?}"
        );
    }
    assert!(!names.iter().any(|n| n == "print" || n == "setfenv"));
}

#[test]
fn the_environment_cannot_be_broken_for_the_next_script() {
    let s = Podium::start(&[]);
    let mut con = s.con();
    // Each attempt gets Redis 7.0.15's error (checked side by side with redis-server).
    for (script, want) in [
        (
            "redis.call = nil",
            "ERR user_script:1: Attempt to modify a readonly table",
        ),
        (
            "rawset(_G, 'x', 1)",
            "ERR Attempt to modify a readonly table",
        ),
        (
            "setmetatable(_G, nil)",
            "ERR Attempt to modify a readonly table",
        ),
        (
            "string.x = 1",
            "ERR user_script:1: Attempt to modify a readonly table",
        ),
        (
            "table.insert(string, 'x')",
            "ERR Attempt to modify a readonly table",
        ),
        (
            "getmetatable('').__index = {}",
            "ERR user_script:1: Attempt to modify a readonly table",
        ),
        (
            "getmetatable(_G).__index = nil",
            "ERR user_script:1: Attempt to modify a readonly table",
        ),
        (
            "math.random = nil",
            "ERR user_script:1: Attempt to modify a readonly table",
        ),
        (
            "_G.redis = {}",
            "ERR user_script:1: Attempt to modify a readonly table",
        ),
        (
            "coroutine.x = 1",
            "ERR user_script:1: Attempt to modify a readonly table",
        ),
        (
            "rawset(redis, 'call', 1)",
            "ERR Attempt to modify a readonly table",
        ),
        (
            "setmetatable(string, {})",
            "ERR Attempt to modify a readonly table",
        ),
    ] {
        assert_eq!(run_err(&mut con, script), want, "{script}");
    }
    // Nothing was left behind: redis.call, strings and globals work as before.
    redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query::<()>(&mut con)
        .unwrap();
    assert_eq!(
        run(
            &mut con,
            "return {redis.call('get', 'k'), ('ab'):upper(), type(rawget(_G, 'x'))}"
        )
        .unwrap(),
        Value::Array(vec![bulk("v"), bulk("AB"), bulk("nil")])
    );
    // KEYS and ARGV are the script's own.
    assert_eq!(
        eval(
            &mut con,
            "KEYS[1] = 'changed' table.insert(ARGV, 'more') return #ARGV",
            &["a"],
            &["b"]
        )
        .unwrap(),
        Value::Int(2)
    );
    assert_eq!(
        eval(&mut con, "return {KEYS[1], #ARGV}", &["a"], &["b"]).unwrap(),
        Value::Array(vec![bulk("a"), Value::Int(1)])
    );
    // Library tables still iterate (through the read-only views).
    assert_eq!(
        run(
            &mut con,
            "local n = 0 for k, v in pairs(string) do n = n + 1 end return n > 10"
        )
        .unwrap(),
        Value::Int(1)
    );
    // A script that stops the collector does not leave it stopped.
    run(&mut con, "collectgarbage('stop') return 1").unwrap();
    assert_eq!(
        run(&mut con, "local before = collectgarbage('count') for i = 1, 20000 do local t = {i} end return collectgarbage('count') < before + 2000").unwrap(),
        Value::Int(1)
    );
}

#[test]
fn functions_load_call_and_persist() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let args = ["--appendonly", "yes", "--appendfsync", "always", "--dir", d];
    let s = Launch::podium().args(&args).wait_loaded().start();
    let mut con = s.con();
    let lib = "#!lua name=lb\n\
        redis.register_function('bump', function(keys, args) return redis.call('zincrby', keys[1], args[1], args[2]) end)\n\
        redis.register_function{function_name='top', callback=function(keys) return redis.call('zrange', keys[1], 0, 0, 'REV') end, flags={'no-writes'}, description='leader'}";
    let name: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(lib)
        .query(&mut con)
        .unwrap();
    assert_eq!(name, "lb");
    assert_eq!(
        err(redis::cmd("FUNCTION").arg("LOAD").arg(lib).query(&mut con)),
        "ERR Library 'lb' already exists"
    );
    let v: String = redis::cmd("FCALL")
        .arg("bump")
        .arg(1)
        .arg("board")
        .arg(5)
        .arg("ann")
        .query(&mut con)
        .unwrap();
    assert_eq!(v, "5");
    let top: Vec<String> = redis::cmd("FCALL_RO")
        .arg("top")
        .arg(1)
        .arg("board")
        .query(&mut con)
        .unwrap();
    assert_eq!(top, vec!["ann"]);
    // A function without no-writes cannot run through FCALL_RO.
    assert_eq!(
        err(redis::cmd("FCALL_RO")
            .arg("bump")
            .arg(1)
            .arg("board")
            .arg(1)
            .arg("x")
            .query(&mut con)),
        "ERR Can not execute a script with write flag using *_ro command."
    );
    // Errors read as Redis 7.0's (checked side by side with redis-server 7.0.15).
    for (payload, want) in [
        ("return 1", "ERR Missing library metadata"),
        ("#!lua\n", "ERR Library name was not given"),
        ("#!lua name=x\nreturn 1", "ERR No functions registered"),
        (
            "#!lua name=x\nredis.call('ping')",
            "ERR Error registering functions: ERR user_function:2: Script attempted to access nonexistent global variable 'call'",
        ),
        (
            "#!lua name=x\nredis.register_function('bump', function() end)",
            "ERR Function bump already exists",
        ),
    ] {
        let got = err(redis::cmd("FUNCTION").arg("LOAD").arg(payload).query(&mut con));
        assert!(got.starts_with(want), "{payload}: {got}");
    }
    assert_eq!(
        err(redis::cmd("FCALL").arg("nosuch").arg(0).query(&mut con)),
        "ERR Function not found"
    );
    // Libraries come back from the AOF.
    s.kill9();
    let s = Launch::podium().args(&args).wait_loaded().start();
    let mut con = s.con();
    let v: String = redis::cmd("FCALL")
        .arg("bump")
        .arg(1)
        .arg("board")
        .arg(1)
        .arg("ann")
        .query(&mut con)
        .unwrap();
    assert_eq!(v, "6");
    redis::cmd("FUNCTION")
        .arg("DELETE")
        .arg("lb")
        .query::<()>(&mut con)
        .unwrap();
    assert_eq!(
        err(redis::cmd("FCALL").arg("bump").arg(0).query(&mut con)),
        "ERR Function not found"
    );
}

#[test]
fn embedded_libraries_answer_as_redis() {
    let s = Podium::start(&[]);
    let mut con = s.con();
    // Expected values from redis-server 7.0.15.
    assert_eq!(
        run(
            &mut con,
            "return {bit.tohex(65535, -4), bit.tohex(-1), bit.tobit(2^32+3), bit.lshift(1, 31), bit.rshift(-1, 28), bit.arshift(-256, 4), bit.rol(0x12345678, 12), bit.bswap(0x12345678), bit.bor(1,2,4,8,16,32,64,128)}"
        )
        .unwrap(),
        Value::Array(vec![
            bulk("FFFF"),
            bulk("ffffffff"),
            Value::Int(3),
            Value::Int(-2147483648),
            Value::Int(15),
            Value::Int(-16),
            Value::Int(1164411171),
            Value::Int(2018915346),
            Value::Int(255)
        ])
    );
    assert_eq!(
        run(
            &mut con,
            "return cjson.encode({1, 2.5, 'a/b', true, {x = 1e20}, cjson.null})"
        )
        .unwrap(),
        bulk("[1,2.5,\"a\\/b\",true,{\"x\":1e+20},null]")
    );
    assert_eq!(
        run(&mut con, "local t = cjson.decode('{\"a\":[1,2,{\"b\":null}],\"c\":\"\\\\u00e9\"}') return {t.a[2], tostring(t.a[3].b == cjson.null), t.c}").unwrap(),
        Value::Array(vec![Value::Int(2), bulk("true"), bulk("é")])
    );
    assert_eq!(
        run_err(&mut con, "return cjson.decode('[1,2')"),
        "ERR user_script:1: Expected comma or array end but found T_END at character 5"
    );
    assert_eq!(
        run_err(&mut con, "return cjson.encode({[1]=1, [100]=2})"),
        "ERR user_script:1: Cannot serialise table: excessively sparse array"
    );
    // A script's cjson settings do not outlive it.
    run(&mut con, "cjson.encode_max_depth(1) return 1").unwrap();
    assert_eq!(
        run(&mut con, "return cjson.encode({{1}})").unwrap(),
        bulk("[[1]]")
    );
}

#[test]
fn a_script_out_of_memory_gets_an_error_and_the_server_lives_on() {
    // The server under a 768 MiB address-space limit (`ulimit -v`), so that a script asking
    // for a 1 GiB string meets a real allocation failure: the script gets Lua's memory error,
    // the process does not abort, and the same Lua state runs the next script.
    let dir = tempfile::tempdir().unwrap();
    let wrapper = dir.path().join("podium-limited");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nulimit -v 786432\nexec '{}' \"$@\"\n",
            env!("CARGO_BIN_EXE_podium")
        ),
    )
    .unwrap();
    let mut perms = std::fs::metadata(&wrapper).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&wrapper, perms).unwrap();
    let s = Launch::prog(wrapper.to_str().unwrap())
        .args(&["--save", ""])
        .start();
    let mut con = s.con();
    let e = run_err(&mut con, "return #string.rep('x', 1024 * 1024 * 1024)");
    assert!(e.contains("not enough memory"), "{e}");
    assert_eq!(
        run(&mut con, "return #string.rep('x', 1000)").unwrap(),
        Value::Int(1000)
    );
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn script_flush_rebuilds_the_lua_state_cleanly() {
    // Each SCRIPT FLUSH drops every thread's Lua state and the next script builds a new one
    // (mlua's state with Podium's allocator swapped in, swapped back before it is closed).
    let s = Podium::start(&[]);
    let mut con = s.con();
    for i in 0..50 {
        assert_eq!(
            run(&mut con, &format!("return {i} + #string.rep('x', 100000)")).unwrap(),
            Value::Int(i + 100000)
        );
        let ok: String = redis::cmd("SCRIPT").arg("FLUSH").query(&mut con).unwrap();
        assert_eq!(ok, "OK");
    }
}
