//! Scripts written to crash, hang or spy: one test per class of Lua bug that Redis has had
//! to patch (the CVE named in each test), plus the classes Podium's interpreter closes beyond
//! Redis (deep patterns, loops inside one C call). Each test runs the attack against the real
//! binary and then checks that the server still answers and that the attack had no effect.
//! Before the patched interpreter (vendor/lua-src), the tests marked "crashed" killed the
//! process; the ones marked "hung" never returned.

use crate::common;

use common::Podium;
use redis::{Connection, Value};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

fn eval(con: &mut Connection, script: &str) -> redis::RedisResult<Value> {
    redis::cmd("EVAL").arg(script).arg(0).query(con)
}

fn eval_err(con: &mut Connection, script: &str) -> String {
    match eval(con, script) {
        Ok(v) => panic!("{script}: expected an error, got {v:?}"),
        Err(e) => format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or(""))
            .trim()
            .to_string(),
    }
}

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

/// The server is alive and serves a plain command and a script.
fn still_serving(s: &Podium) {
    let mut con = s.con();
    let pong: String = redis::cmd("PING").query(&mut con).expect("the server died");
    assert_eq!(pong, "PONG");
    assert_eq!(eval(&mut con, "return 1 + 1").unwrap(), Value::Int(2));
}

/// CVE-2025-46817: unpack's element count overflowed, and the interpreter pushed billions of
/// values past its stack (crashed: SIGSEGV in hashnum).
#[test]
fn unpack_over_the_whole_int_range_is_an_error() {
    let s = Podium::start(&[]);
    let mut con = s.con();
    for script in [
        "return unpack({1,2,3}, -2147483648, 2147483647)",
        "return unpack({1,2,3}, -2147483648, -1)",
        "return unpack({1,2,3}, 0, 2147483647)",
        "return unpack({}, 1, 1e6)",
    ] {
        let e = eval_err(&mut con, script);
        assert!(e.contains("too many results to unpack"), "{script}: {e}");
    }
    // Ranges the stack can hold still unpack, as before.
    assert_eq!(
        eval(&mut con, "return {unpack({1,2,3}, 2, 3)}").unwrap(),
        Value::Array(vec![Value::Int(2), Value::Int(3)])
    );
    assert_eq!(
        eval(&mut con, "return select('#', unpack({}, 1, 7000))").unwrap(),
        Value::Int(7000)
    );
    still_serving(&s);
}

/// CVE-2025-49844: the parser's chunk name was not anchored, so a collection during parsing
/// could free it. Many compilations under a collector forced to run at every step, with
/// chunk names that exist nowhere else, must all succeed.
#[test]
fn parsing_under_constant_collection_is_safe() {
    let s = Podium::start(&[]);
    let mut con = s.con();
    let script = r#"
        collectgarbage('setpause', 1)
        collectgarbage('setstepmul', 1000)
        local ok = 0
        for i = 1, 2000 do
          local src = 'local t = {' .. string.rep('"s' .. i .. '",', 50) .. '} return #t'
          local f = loadstring(src, 'chunk' .. i .. string.rep('n', i % 97))
          if f and f() == 50 then ok = ok + 1 end
          local g, e = loadstring('return (' .. i, 'bad' .. i)
          if g == nil and string.find(e, 'bad' .. i, 1, true) then ok = ok + 1 end
        end
        collectgarbage('setpause', 200)
        collectgarbage('setstepmul', 200)
        return ok
    "#;
    assert_eq!(eval(&mut con, script).unwrap(), Value::Int(4000));
    // The published trigger: a reader that, called again after it ended the chunk (Lua 5.1
    // calls it again, and so does Redis), collects garbage while the default chunk name is
    // referenced by nothing else. Redis's answer: the reader ran three times, and the error
    // names the chunk intact.
    for _ in 0..50 {
        assert_eq!(
            eval(
                &mut con,
                "local n = 0 \
                 local f = load(function() n = n + 1 \
                   if n == 1 then return nil end \
                   if n == 2 then collectgarbage('collect') return \"error('x')\" end end) \
                 return {n, tostring(select(2, pcall(f)))}"
            )
            .unwrap(),
            Value::Array(vec![Value::Int(3), bulk("(load):1: x")])
        );
    }
    still_serving(&s);
}

/// CVE-2025-46819: a long bracket of 2^30 '=' overflowed the lexer's length arithmetic, and
/// the string it built held memory from past its buffer (or the process died). The chunk is
/// streamed through a reader, so no gigabyte string is made: brackets that deep are refused.
#[test]
fn long_brackets_too_deep_are_refused() {
    let s = Podium::start(&[]);
    let mut con = s.con();
    let script = r#"
        local piece = string.rep('=', 1048576)
        local n = 0
        local reader = function()
          n = n + 1
          if n == 1 then return 'return [' end
          if n <= 1025 then return piece end
          if n == 1026 then return '[leak]' end
          if n <= 2050 then return piece end
          if n == 2051 then return ']' end
          return nil
        end
        local f, e = load(reader, '=deep')
        if f then return {'loaded', #f()} end
        return {'refused', e}
    "#;
    match eval(&mut con, script).unwrap() {
        Value::Array(items) => {
            assert_eq!(items[0], bulk("refused"), "{items:?}");
            let Value::BulkString(e) = &items[1] else {
                panic!("{items:?}")
            };
            let e = String::from_utf8_lossy(e);
            assert!(
                e.starts_with("deep:1: invalid long string delimiter"),
                "{e}"
            );
        }
        other => panic!("{other:?}"),
    }
    // A bracket of ordinary depth still makes a long string.
    assert_eq!(
        eval(
            &mut con,
            "return loadstring('return [' .. string.rep('=', 1000) .. '[ab]' .. \
             string.rep('=', 1000) .. ']')()"
        )
        .unwrap(),
        bulk("ab")
    );
    still_serving(&s);
}

/// CVE-2025-46819: the lexer could read past the end of the script text. Unterminated long
/// strings and comments, a lone `[=`, an escape at the very end, and the same ends reached
/// through loadstring: every one is a syntax error with Redis's text, never a read beyond it.
#[test]
fn truncated_tokens_are_syntax_errors() {
    let s = Podium::start(&[]);
    let mut con = s.con();
    for (script, expect) in [
        ("return [[abc", "unfinished long string"),
        ("return [==[abc]=", "unfinished long string"),
        ("--[==[ comment", "unfinished long comment"),
        ("return [=", "invalid long string delimiter"),
        ("return [==", "invalid long string delimiter"),
        ("return 'abc\\", "unfinished string"),
        ("return \"abc", "unfinished string"),
        ("return 1e", "malformed number"),
        ("return 0x", "malformed number"),
    ] {
        let e = eval_err(&mut con, script);
        assert!(
            e.starts_with("ERR Error compiling script") && e.contains(expect),
            "{script}: {e}"
        );
    }
    // Through loadstring, with the text ending at every byte of such tokens.
    let script = r#"
        local errors = 0
        for _, text in ipairs({"[==[abc]==]", "'a\\z'", "--[[x]]", "0x1p4", "[=[", "'\\"}) do
          for n = 1, #text do
            local f, e = loadstring('return ' .. string.sub(text, 1, n))
            if f == nil then errors = errors + 1 end
          end
        end
        return errors
    "#;
    match eval(&mut con, script).unwrap() {
        Value::Int(n) => assert!(n > 10, "{n}"),
        other => panic!("{other:?}"),
    }
    still_serving(&s);
}

/// CVE-2025-46818: a script could change what the metatables of basic types do (the string
/// metatable and its `__index`, the string library), and so run code inside another user's
/// script. Every route is refused, and another user's script sees the stock behaviour.
#[test]
fn one_users_script_cannot_change_basic_types_for_another() {
    let s = Podium::start(&[]);
    let mut admin = s.con();
    for user in ["mallory", "alice"] {
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg(user)
            .arg("on")
            .arg(">pw")
            .arg("~*")
            .arg("+@all")
            .query::<()>(&mut admin)
            .unwrap();
    }
    let login = |user: &str| {
        let mut c = s.con();
        redis::cmd("AUTH")
            .arg(user)
            .arg("pw")
            .query::<()>(&mut c)
            .unwrap();
        c
    };
    let mut mallory = login("mallory");
    for attack in [
        "getmetatable('').__index = {upper = function() return 'pwned' end}",
        "getmetatable('').__index.upper = function() return 'pwned' end",
        "getmetatable('').__metatable = 'x'",
        "rawset(getmetatable(''), '__index', {})",
        "rawset(getmetatable('').__index, 'upper', nil)",
        "string.upper = function() return 'pwned' end",
        "rawset(string, 'format', nil)",
        "setmetatable(string, {})",
        "table.insert(string, 1)",
        "getmetatable(_G).__index = function() return 1 end",
        "_G.string = {}",
    ] {
        let e = eval_err(&mut mallory, attack);
        assert!(
            e.contains("readonly table") || e.contains("Attempt to modify"),
            "{attack}: {e}"
        );
    }
    // setmetatable on a string is not possible in Lua at all.
    let e = eval_err(&mut mallory, "setmetatable('', {})");
    assert!(e.contains("table expected"), "{e}");
    // Another user, on another connection (and so possibly another worker's Lua state), and
    // the same user again: strings, the string library and globals behave as stock.
    for con in [&mut login("alice"), &mut mallory] {
        assert_eq!(
            eval(
                con,
                "return {('abc'):upper(), string.format('%d', 7), type(string.gsub), \
                 tostring(getmetatable('').__index == string)}"
            )
            .unwrap(),
            Value::Array(vec![bulk("ABC"), bulk("7"), bulk("function"), bulk("true")])
        );
    }
    still_serving(&s);
}

/// CVE-2024-46981: objects of a Lua state outlived SCRIPT FLUSH and were collected later in
/// a state that no longer matched them. Scripts leave tables, closures, coroutines and
/// strings behind, with the collector stopped; SCRIPT FLUSH (both modes) then drops the
/// state while other clients run scripts, and later scripts work on fresh states.
#[test]
fn script_flush_with_live_objects_is_safe() {
    let s = Podium::start(&[]);
    let port = s.port;
    let leaver = r#"
        collectgarbage('stop')
        local keep = {}
        for i = 1, 2000 do
          keep[i] = { f = function() return i end, s = string.rep('x', i % 50),
                      c = coroutine.create(function() coroutine.yield(i) end) }
          coroutine.resume(keep[i].c)
        end
        return #keep
    "#;
    let workers: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(move || {
                let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                    .unwrap()
                    .get_connection()
                    .unwrap();
                for _ in 0..20 {
                    assert_eq!(eval(&mut c, leaver).unwrap(), Value::Int(2000));
                }
            })
        })
        .collect();
    let mut con = s.con();
    for i in 0..20 {
        let mode = if i % 2 == 0 { "SYNC" } else { "ASYNC" };
        redis::cmd("SCRIPT")
            .arg("FLUSH")
            .arg(mode)
            .query::<()>(&mut con)
            .unwrap();
        assert_eq!(eval(&mut con, leaver).unwrap(), Value::Int(2000));
    }
    for w in workers {
        w.join().expect("a script client failed");
    }
    // A new state's collector runs: garbage made now is collected.
    assert_eq!(
        eval(
            &mut con,
            "local before = collectgarbage('count') \
             for i = 1, 20000 do local t = {i} end \
             collectgarbage('collect') \
             return collectgarbage('count') < before + 200 and 1 or 0"
        )
        .unwrap(),
        Value::Int(1)
    );
    still_serving(&s);
}

/// CVE-2024-31449: bit.tohex with the smallest int as its digit count overflowed the stack
/// buffer in Redis's C library. Podium's library answers as patched Redis does.
#[test]
fn bit_tohex_with_extreme_counts() {
    let s = Podium::start(&[]);
    let mut con = s.con();
    for (script, expect) in [
        ("return bit.tohex(65535, -2147483648)", "0000FFFF"),
        ("return bit.tohex(65535, 2147483647)", "0000ffff"),
        ("return bit.tohex(-1, -2147483647)", "FFFFFFFF"),
        ("return bit.tohex(255, -2)", "FF"),
        ("return bit.tohex(255, 3)", "0ff"),
    ] {
        assert_eq!(eval(&mut con, script).unwrap(), bulk(expect), "{script}");
    }
    still_serving(&s);
}

/// CVE-2022-24834: cjson.encode sized its output in a 32-bit int, and strings whose escapes
/// grow them six-fold overflowed it. Escapes expand exactly, nesting is bounded both ways.
#[test]
fn cjson_escapes_and_nesting_are_bounded() {
    let s = Podium::start(&[]);
    let mut con = s.con();
    // 4 MiB of control characters: each becomes \u00XX (six bytes).
    assert_eq!(
        eval(
            &mut con,
            "return #cjson.encode(string.rep(string.char(1), 4194304))"
        )
        .unwrap(),
        Value::Int(6 * 4194304 + 2)
    );
    assert_eq!(
        eval(&mut con, "return cjson.encode('\"\\\\/' .. string.char(0))").unwrap(),
        bulk("\"\\\"\\\\\\/\\u0000\"")
    );
    let e = eval_err(
        &mut con,
        "local t = {} for i = 1, 100000 do t = {t} end return cjson.encode(t)",
    );
    assert!(
        e.contains("Cannot serialise, excessive nesting (1001)"),
        "{e}"
    );
    let e = eval_err(
        &mut con,
        "return cjson.decode(string.rep('[', 100000) .. string.rep(']', 100000))",
    );
    assert!(
        e.contains("Found too many nested data structures (1001)"),
        "{e}"
    );
    still_serving(&s);
}

/// CVE-2021-32626: cmsgpack (and Redis's reply conversion) pushed values onto the Lua stack
/// without checking room. Too many values, too deep an input, and too deep a reply are
/// errors with Redis's texts.
#[test]
fn msgpack_and_replies_check_the_lua_stack() {
    let s = Podium::start(&[]);
    let mut con = s.con();
    let e = eval_err(
        &mut con,
        "return #{cmsgpack.unpack(string.rep(string.char(0), 100000))}",
    );
    assert!(
        e.contains("stack overflow (too many return values at once"),
        "{e}"
    );
    let e = eval_err(
        &mut con,
        "return cmsgpack.unpack(string.rep(string.char(0x91), 100000) .. string.char(0))",
    );
    assert!(
        e.contains("stack overflow (in function mp_decode_to_lua_array)"),
        "{e}"
    );
    // A deep table is packed (cmsgpack stops descending at 16 levels, as Redis's does).
    assert_eq!(
        eval(
            &mut con,
            "local t = {} for i = 1, 100000 do t = {t} end return #cmsgpack.pack(t)"
        )
        .unwrap(),
        Value::Int(17)
    );
    // A table deeper than the Lua stack: the levels Redis reaches (7,995), then its error.
    let mut raw = s.raw();
    let script = "local t = {} for i = 1, 100000 do t = {t} end return t";
    write!(
        raw,
        "*3\r\n$4\r\nEVAL\r\n${}\r\n{script}\r\n$1\r\n0\r\n",
        script.len()
    )
    .unwrap();
    let mut reply = Vec::new();
    let tail = b"-ERR reached lua stack limit\r\n";
    let mut chunk = [0u8; 65536];
    while !reply.ends_with(tail) {
        let n = raw.read(&mut chunk).expect("the nested reply");
        assert!(n > 0, "connection closed");
        reply.extend_from_slice(&chunk[..n]);
    }
    assert_eq!(reply.len(), 7995 * 4 + tail.len());
    assert!(reply.chunks(4).take(7995).all(|c| c == b"*1\r\n"));
    // Thousands of arguments to a library function (each one a reference mlua holds while
    // converting them: 8,000 of those made mlua panic inside the script). Redis's texts.
    let e = eval_err(
        &mut con,
        "local t = {} for i = 1, 7990 do t[i] = {} end return cmsgpack.pack(unpack(t))",
    );
    assert!(
        e.contains("Too many arguments for MessagePack pack."),
        "{e}"
    );
    assert_eq!(
        eval(
            &mut con,
            "local t = {} for i = 1, 3999 do t[i] = {} end return #cmsgpack.pack(unpack(t))"
        )
        .unwrap(),
        Value::Int(3999)
    );
    let e = eval_err(
        &mut con,
        "local t = {} for i = 1, 7990 do t[i] = 'x' .. i end return redis.sha1hex(unpack(t))",
    );
    assert!(e.starts_with("ERR wrong number of arguments"), "{e}");
    assert_eq!(
        eval(
            &mut con,
            "local t = {} for i = 1, 7990 do t[i] = 'x' .. i end \
             return #struct.pack(string.rep('s', 7990), unpack(t))"
        )
        .unwrap(),
        Value::Int(46833)
    );
    // Deep maps whose keys are strings or tables: two references per level.
    for input in ["string.char(0x81, 0xa1, 0x61)", "string.char(0x81, 0x90)"] {
        assert_eq!(
            eval(
                &mut con,
                &format!(
                    "local t = cmsgpack.unpack(string.rep({input}, 3990) .. string.char(0)) \
                     return type(t)"
                )
            )
            .unwrap(),
            bulk("table")
        );
    }
    // Many values through unpack_limit's offsets at the edges of the int range.
    let e = eval_err(
        &mut con,
        "return cmsgpack.unpack_limit(string.rep(string.char(1), 10), 3, -2147483648)",
    );
    assert!(e.contains("Invalid request to unpack with offset"), "{e}");
    still_serving(&s);
}

/// CVE-2020-14147: struct's size and count parsing overflowed. Sizes past the int range, and
/// more results than the stack holds, are errors.
#[test]
fn struct_sizes_and_counts_are_checked() {
    let s = Podium::start(&[]);
    let mut con = s.con();
    for (script, expect) in [
        (
            "return struct.unpack('i9999999999', 'aaaa')",
            "integral size overflow",
        ),
        (
            "return struct.pack('i33', 1)",
            "integral size 33 is larger than limit of 32",
        ),
        (
            "return struct.unpack('c2147483647', 'a')",
            "data string too short",
        ),
        (
            "return struct.pack('!2147483647i', 1)",
            "alignment 2147483647 is not a power of 2",
        ),
        (
            "return #{struct.unpack(string.rep('b', 100000), string.rep('a', 100000))}",
            "stack overflow (too many results)",
        ),
    ] {
        let e = eval_err(&mut con, script);
        assert!(e.contains(expect), "{script}: {e}");
    }
    still_serving(&s);
}

/// Bytecode: Lua 5.1 trusts precompiled chunks, and crafted ones read and write outside the
/// VM. The interpreter parses text only, whichever way a chunk arrives.
#[test]
fn precompiled_chunks_are_refused_everywhere() {
    let s = Podium::start(&[]);
    let mut con = s.con();
    let script = r#"
        local code = string.dump(function() return 42 end)
        local f1, e1 = loadstring(code)
        local sent = false
        local f2, e2 = load(function() if sent then return nil end sent = true return code end)
        return {tostring(f1), e1, tostring(f2), e2}
    "#;
    match eval(&mut con, script).unwrap() {
        Value::Array(items) => {
            assert_eq!(items[0], bulk("nil"));
            assert_eq!(items[2], bulk("nil"));
            for e in [&items[1], &items[3]] {
                let Value::BulkString(e) = e else {
                    panic!("{e:?}")
                };
                assert!(String::from_utf8_lossy(e).contains("unexpected symbol"));
            }
        }
        other => panic!("{other:?}"),
    }
    let e = eval_err(&mut con, "\x1bLua");
    assert!(e.starts_with("ERR Error compiling script"), "{e}");
    still_serving(&s);
}

/// Beyond Redis: string matching recursed once per optional or repeated pattern item that
/// matched, so a long pattern overflowed the C stack (crashed). Past 20,000 levels the match
/// is an error.
#[test]
fn deep_patterns_are_an_error_not_a_stack_overflow() {
    let s = Podium::start(&[]);
    let mut con = s.con();
    for script in [
        "return string.find(string.rep('a', 1000000), string.rep('a?', 1000000))",
        "return string.match(string.rep('a', 300000), string.rep('a-', 300000) .. '$')",
        "return string.gsub(string.rep('a', 100000), '()' .. string.rep('.?', 100000), 'x')",
    ] {
        let e = eval_err(&mut con, script);
        assert!(e.contains("pattern too complex"), "{script}: {e}");
    }
    // Patterns within the bound match as before.
    assert_eq!(
        eval(
            &mut con,
            "return {string.find(string.rep('a', 19000), string.rep('a?', 19000))}"
        )
        .unwrap(),
        Value::Array(vec![Value::Int(1), Value::Int(19000)])
    );
    still_serving(&s);
}

/// Beyond Redis: a script stuck inside one C call (backtracking that takes exponential time,
/// string.rep of an empty string two billion times, table.insert at a far position) never
/// reached the VM's count hook, so SCRIPT KILL could not stop it (hung). The library loops
/// now run the hook, and the script is killed like any other.
#[test]
fn script_kill_stops_a_script_stuck_in_a_library_call() {
    let s = Podium::start(&[]);
    let port = s.port;
    for script in [
        "return string.find(string.rep('a', 60), string.rep('a*', 60) .. 'b')",
        "return #string.rep('', 2147483647)",
        "local t = {} table.insert(t, -2147483647, 1) return 1",
        "local t = {} for i = 1, 200000 do t[i] = (i * 7919) % 200000 end \
         for r = 1, 1000 do table.sort(t, nil) table.sort(t, function(a, b) return a > b end) end \
         return 1",
    ] {
        let runner = std::thread::spawn(move || {
            let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                .unwrap()
                .get_connection()
                .unwrap();
            let started = Instant::now();
            let r = eval(&mut c, script);
            (r, started.elapsed())
        });
        let mut con = s.con();
        // Wait until the script is running (other clients get -BUSY), then kill it.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            std::thread::sleep(Duration::from_millis(50));
            match redis::cmd("SCRIPT").arg("KILL").query::<()>(&mut con) {
                Ok(()) => break,
                Err(e) if e.to_string().contains("NOTBUSY") => {
                    assert!(Instant::now() < deadline, "{script}: never busy");
                }
                Err(e) => panic!("{script}: SCRIPT KILL: {e}"),
            }
        }
        let (r, took) = runner.join().unwrap();
        let e = r.expect_err(script);
        assert!(
            e.to_string()
                .contains("Script killed by user with SCRIPT KILL"),
            "{script}: {e}"
        );
        assert!(took < Duration::from_secs(20), "{script}: {took:?}");
        still_serving(&s);
    }
}
