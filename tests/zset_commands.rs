//! Integration tests of the sorted-set commands: the real binary is started on a free port and
//! driven with the `redis` crate over RESP2 and RESP3. Every scenario runs twice, once with the
//! default small-set limits (listpack form) and once with `zset-max-listpack-entries 0` (the
//! skip-list form), since encoding-specific bugs (e.g. GT/LT ignored on one form) are exactly
//! what these tests are meant to catch.

use crate::common;

use common::Podium;
use redis::{Connection, RedisError, Value};
use std::thread;
use std::time::{Duration, Instant};

/// Run `f` against a server in each encoding.
fn both_encodings(f: impl Fn(&Podium)) {
    let small = Podium::start(&[]);
    f(&small);
    let large = Podium::start(&["--zset-max-listpack-entries", "0"]);
    f(&large);
}

fn q(con: &mut Connection, args: &[&str]) -> Value {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    match c.query::<Value>(con) {
        Ok(v) => v,
        Err(e) => panic!("{args:?} failed: {e}"),
    }
}

fn error_text(e: &RedisError) -> String {
    format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or(""))
}

/// The error text a command gets (panics if it succeeds).
fn qerr(con: &mut Connection, args: &[&str]) -> String {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    match c.query::<Value>(con) {
        Ok(v) => panic!("{args:?} should fail, got {v:?}"),
        Err(e) => {
            let t = error_text(&e);
            if t.trim().is_empty() {
                e.to_string()
            } else {
                t
            }
        }
    }
}

fn b(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

fn i(n: i64) -> Value {
    Value::Int(n)
}

fn d(x: f64) -> Value {
    Value::Double(x)
}

fn arr(v: Vec<Value>) -> Value {
    Value::Array(v)
}

fn bulks(items: &[&str]) -> Value {
    arr(items.iter().map(|s| b(s)).collect())
}

/// RESP2 flat member/score list, scores as bulk text.
fn flat(items: &[(&str, &str)]) -> Value {
    arr(items.iter().flat_map(|(m, s)| [b(m), b(s)]).collect())
}

/// RESP3 [member, double] pairs.
fn pairs3(items: &[(&str, f64)]) -> Value {
    arr(items.iter().map(|(m, s)| arr(vec![b(m), d(*s)])).collect())
}

fn fill(con: &mut Connection, key: &str, items: &[(&str, &str)]) {
    let mut args = vec!["zadd", key];
    for (m, s) in items {
        args.push(s);
        args.push(m);
    }
    q(con, &args);
}

#[test]
fn zadd_options_and_errors() {
    both_encodings(|s| {
        let mut c = s.con();
        assert_eq!(q(&mut c, &["zadd", "z", "1", "a", "2", "b"]), i(2));
        // NX: only adds.
        assert_eq!(q(&mut c, &["zadd", "z", "nx", "10", "a", "3", "c"]), i(1));
        assert_eq!(q(&mut c, &["zscore", "z", "a"]), b("1"));
        // XX: only updates; CH counts updates.
        assert_eq!(
            q(&mut c, &["zadd", "z", "xx", "ch", "5", "a", "9", "zz"]),
            i(1)
        );
        assert_eq!(q(&mut c, &["zscore", "z", "zz"]), Value::Nil);
        assert_eq!(q(&mut c, &["zscore", "z", "a"]), b("5"));
        // GT / LT on existing members, new members still added.
        assert_eq!(
            q(
                &mut c,
                &["zadd", "z", "gt", "ch", "4", "a", "6", "b", "7", "n"]
            ),
            i(2)
        );
        assert_eq!(q(&mut c, &["zscore", "z", "a"]), b("5"));
        assert_eq!(q(&mut c, &["zscore", "z", "b"]), b("6"));
        assert_eq!(
            q(&mut c, &["zadd", "z", "lt", "ch", "1", "a", "60", "b"]),
            i(1)
        );
        assert_eq!(q(&mut c, &["zscore", "z", "a"]), b("1"));
        assert_eq!(q(&mut c, &["zscore", "z", "b"]), b("6"));
        // INCR returns the new score, nil when an option blocks it.
        assert_eq!(q(&mut c, &["zadd", "z", "incr", "2.5", "a"]), b("3.5"));
        assert_eq!(
            q(&mut c, &["zadd", "z", "incr", "gt", "-1", "a"]),
            Value::Nil
        );
        assert_eq!(
            q(&mut c, &["zadd", "z", "incr", "nx", "1", "a"]),
            Value::Nil
        );
        assert_eq!(
            q(&mut c, &["zadd", "missing", "xx", "incr", "1", "a"]),
            Value::Nil
        );
        assert_eq!(q(&mut c, &["zadd", "missing", "xx", "1", "a"]), i(0));
        assert_eq!(q(&mut c, &["zcard", "missing"]), i(0));
        // Errors.
        assert_eq!(
            qerr(&mut c, &["zadd", "z", "nx", "xx", "1", "a"]),
            "ERR XX and NX options at the same time are not compatible"
        );
        for opts in [["gt", "lt"], ["gt", "nx"], ["lt", "nx"]] {
            assert_eq!(
                qerr(&mut c, &["zadd", "z", opts[0], opts[1], "1", "a"]),
                "ERR GT, LT, and/or NX options at the same time are not compatible"
            );
        }
        assert_eq!(
            qerr(&mut c, &["zadd", "z", "incr", "1", "a", "2", "b"]),
            "ERR INCR option supports a single increment-element pair"
        );
        assert_eq!(
            qerr(&mut c, &["zadd", "z", "1", "a", "2"]),
            "ERR syntax error"
        );
        assert_eq!(
            qerr(&mut c, &["zadd", "z", "nan", "a"]),
            "ERR value is not a valid float"
        );
        assert_eq!(
            qerr(&mut c, &["zadd", "z", "1", "a", "x", "b"]),
            "ERR value is not a valid float"
        );
        assert_eq!(q(&mut c, &["zadd", "inf", "+inf", "a"]), i(1));
        assert_eq!(
            qerr(&mut c, &["zadd", "inf", "incr", "-inf", "a"]),
            "ERR resulting score is not a number (NaN)"
        );
        assert_eq!(
            qerr(&mut c, &["zincrby", "inf", "-inf", "a"]),
            "ERR resulting score is not a number (NaN)"
        );
        assert_eq!(q(&mut c, &["zincrby", "z", "1", "b"]), b("7"));
        assert_eq!(q(&mut c, &["zincrby", "z", "-0.5", "new"]), b("-0.5"));
        assert_eq!(
            qerr(&mut c, &["zincrby", "z", "abc", "b"]),
            "ERR value is not a valid float"
        );
    });
}

#[test]
fn removal_card_score_rank() {
    both_encodings(|s| {
        let mut c = s.con();
        fill(
            &mut c,
            "z",
            &[("a", "1"), ("b", "2"), ("c", "3"), ("d", "3")],
        );
        assert_eq!(q(&mut c, &["zcard", "z"]), i(4));
        assert_eq!(
            q(&mut c, &["zmscore", "z", "a", "nope", "d"]),
            arr(vec![b("1"), Value::Nil, b("3")])
        );
        assert_eq!(q(&mut c, &["zmscore", "nokey", "a"]), arr(vec![Value::Nil]));
        assert_eq!(q(&mut c, &["zrank", "z", "c"]), i(2));
        assert_eq!(q(&mut c, &["zrevrank", "z", "c"]), i(1));
        assert_eq!(q(&mut c, &["zrank", "z", "nope"]), Value::Nil);
        assert_eq!(
            q(&mut c, &["zrevrank", "z", "a", "withscore"]),
            arr(vec![i(3), b("1")])
        );
        assert_eq!(q(&mut c, &["zrank", "z", "nope", "withscore"]), Value::Nil);
        assert_eq!(
            qerr(&mut c, &["zrank", "z", "a", "withscores"]),
            "ERR syntax error"
        );
        assert_eq!(q(&mut c, &["zrem", "z", "a", "nope", "b"]), i(2));
        assert_eq!(q(&mut c, &["zrem", "z", "c", "d"]), i(2));
        // An emptied set is gone: ZADD XX finds nothing to update, ZCARD is 0.
        assert_eq!(q(&mut c, &["zadd", "z", "xx", "1", "c"]), i(0));
        assert_eq!(q(&mut c, &["zcard", "z"]), i(0));
        assert_eq!(q(&mut c, &["zrem", "z", "c"]), i(0));

        let mut c3 = s.con3();
        fill(&mut c3, "r3", &[("a", "1.5")]);
        assert_eq!(q(&mut c3, &["zscore", "r3", "a"]), d(1.5));
        assert_eq!(q(&mut c3, &["zincrby", "r3", "1", "a"]), d(2.5));
        assert_eq!(
            q(&mut c3, &["zmscore", "r3", "a", "x"]),
            arr(vec![d(2.5), Value::Nil])
        );
        assert_eq!(
            q(&mut c3, &["zrank", "r3", "a", "withscore"]),
            arr(vec![i(0), d(2.5)])
        );
        assert_eq!(q(&mut c3, &["zrank", "r3", "x", "withscore"]), Value::Nil);
        assert_eq!(q(&mut c3, &["zadd", "r3", "incr", "1", "a"]), d(3.5));
    });
}

#[test]
fn zrange_family() {
    both_encodings(|s| {
        let mut c = s.con();
        fill(
            &mut c,
            "z",
            &[("a", "1"), ("b", "2"), ("c", "3"), ("d", "4"), ("e", "5")],
        );
        assert_eq!(
            q(&mut c, &["zrange", "z", "0", "-1"]),
            bulks(&["a", "b", "c", "d", "e"])
        );
        assert_eq!(
            q(&mut c, &["zrange", "z", "-2", "100", "withscores"]),
            flat(&[("d", "4"), ("e", "5")])
        );
        assert_eq!(
            q(&mut c, &["zrange", "z", "0", "1", "rev", "withscores"]),
            flat(&[("e", "5"), ("d", "4")])
        );
        assert_eq!(q(&mut c, &["zrevrange", "z", "0", "1"]), bulks(&["e", "d"]));
        assert_eq!(q(&mut c, &["zrange", "z", "3", "1"]), bulks(&[]));
        assert_eq!(q(&mut c, &["zrange", "nokey", "0", "-1"]), bulks(&[]));
        // BYSCORE with exclusive bounds, infinities and LIMIT.
        assert_eq!(
            q(
                &mut c,
                &["zrange", "z", "(1", "+inf", "byscore", "limit", "1", "2"]
            ),
            bulks(&["c", "d"])
        );
        assert_eq!(
            q(&mut c, &["zrange", "z", "(5", "-inf", "byscore", "rev"]),
            bulks(&["d", "c", "b", "a"])
        );
        assert_eq!(
            q(&mut c, &["zrangebyscore", "z", "-inf", "(3", "withscores"]),
            flat(&[("a", "1"), ("b", "2")])
        );
        assert_eq!(
            q(&mut c, &["zrevrangebyscore", "z", "inf", "4"]),
            bulks(&["e", "d"])
        );
        assert_eq!(
            q(
                &mut c,
                &["zrangebyscore", "z", "-inf", "inf", "limit", "3", "-1"]
            ),
            bulks(&["d", "e"])
        );
        assert_eq!(
            q(
                &mut c,
                &["zrangebyscore", "z", "-inf", "inf", "limit", "-1", "2"]
            ),
            bulks(&[])
        );
        assert_eq!(q(&mut c, &["zcount", "z", "(1", "3"]), i(2));
        assert_eq!(
            qerr(&mut c, &["zrangebyscore", "z", "x", "1"]),
            "ERR min or max is not a float"
        );
        assert_eq!(
            qerr(&mut c, &["zcount", "z", "1", "nan"]),
            "ERR min or max is not a float"
        );
        assert_eq!(
            qerr(&mut c, &["zrange", "z", "0", "1", "limit", "0", "1"]),
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX"
        );
        assert_eq!(
            qerr(&mut c, &["zrange", "z", "-", "+", "bylex", "withscores"]),
            "ERR syntax error, WITHSCORES not supported in combination with BYLEX"
        );
        assert_eq!(
            qerr(&mut c, &["zrange", "z", "0", "1", "byscore", "bylex"]),
            "ERR syntax error"
        );
        assert_eq!(
            qerr(&mut c, &["zrevrangebyscore", "z", "1", "0", "rev"]),
            "ERR syntax error"
        );
        assert_eq!(
            qerr(&mut c, &["zrange", "z", "a", "1"]),
            "ERR value is not an integer or out of range"
        );

        // Lexicographic ranges (all scores equal).
        fill(
            &mut c,
            "lex",
            &[("a", "0"), ("b", "0"), ("c", "0"), ("d", "0")],
        );
        assert_eq!(
            q(&mut c, &["zrangebylex", "lex", "[b", "+"]),
            bulks(&["b", "c", "d"])
        );
        assert_eq!(
            q(&mut c, &["zrangebylex", "lex", "(b", "[c"]),
            bulks(&["c"])
        );
        assert_eq!(
            q(
                &mut c,
                &["zrevrangebylex", "lex", "+", "-", "limit", "1", "2"]
            ),
            bulks(&["c", "b"])
        );
        assert_eq!(
            q(&mut c, &["zrange", "lex", "[c", "-", "bylex", "rev"]),
            bulks(&["c", "b", "a"])
        );
        assert_eq!(q(&mut c, &["zlexcount", "lex", "-", "(c"]), i(2));
        assert_eq!(q(&mut c, &["zrangebylex", "lex", "[d", "[a"]), bulks(&[]));
        assert_eq!(
            qerr(&mut c, &["zrangebylex", "lex", "b", "+"]),
            "ERR min or max not valid string range item"
        );
        assert_eq!(
            qerr(&mut c, &["zlexcount", "lex", "-", "+x"]),
            "ERR min or max not valid string range item"
        );

        // RESP3: WITHSCORES gives [member, double] pairs.
        let mut c3 = s.con3();
        assert_eq!(
            q(&mut c3, &["zrange", "z", "0", "1", "withscores"]),
            pairs3(&[("a", 1.0), ("b", 2.0)])
        );
        assert_eq!(
            q(&mut c3, &["zrevrange", "z", "0", "0", "withscores"]),
            pairs3(&[("e", 5.0)])
        );
        assert_eq!(
            q(&mut c3, &["zrangebyscore", "z", "5", "+inf", "withscores"]),
            pairs3(&[("e", 5.0)])
        );
    });
}

#[test]
fn zrangestore_and_remranges() {
    both_encodings(|s| {
        let mut c = s.con();
        fill(
            &mut c,
            "z",
            &[("a", "1"), ("b", "2"), ("c", "3"), ("d", "4"), ("e", "5")],
        );
        assert_eq!(q(&mut c, &["zrangestore", "dst", "z", "1", "3"]), i(3));
        assert_eq!(
            q(&mut c, &["zrange", "dst", "0", "-1", "withscores"]),
            flat(&[("b", "2"), ("c", "3"), ("d", "4")])
        );
        assert_eq!(
            q(
                &mut c,
                &[
                    "zrangestore",
                    "dst",
                    "z",
                    "5",
                    "(3",
                    "byscore",
                    "rev",
                    "limit",
                    "0",
                    "1"
                ]
            ),
            i(1)
        );
        assert_eq!(q(&mut c, &["zrange", "dst", "0", "-1"]), bulks(&["e"]));
        assert_eq!(
            qerr(
                &mut c,
                &["zrangestore", "dst", "z", "0", "-1", "withscores"]
            ),
            "ERR syntax error"
        );
        // An empty result deletes the destination.
        assert_eq!(q(&mut c, &["zrangestore", "dst", "z", "10", "20"]), i(0));
        assert_eq!(q(&mut c, &["zcard", "dst"]), i(0));
        assert_eq!(q(&mut c, &["zrangestore", "dst", "nokey", "0", "-1"]), i(0));

        assert_eq!(q(&mut c, &["zremrangebyrank", "z", "0", "0"]), i(1));
        assert_eq!(q(&mut c, &["zremrangebyscore", "z", "(2", "3"]), i(1));
        assert_eq!(
            q(&mut c, &["zrange", "z", "0", "-1"]),
            bulks(&["b", "d", "e"])
        );
        assert_eq!(
            qerr(&mut c, &["zremrangebyscore", "z", "x", "1"]),
            "ERR min or max is not a float"
        );
        assert_eq!(
            qerr(&mut c, &["zremrangebyrank", "z", "x", "1"]),
            "ERR value is not an integer or out of range"
        );
        assert_eq!(q(&mut c, &["zremrangebyrank", "z", "5", "10"]), i(0));
        fill(&mut c, "lex", &[("a", "0"), ("b", "0"), ("c", "0")]);
        assert_eq!(q(&mut c, &["zremrangebylex", "lex", "[b", "+"]), i(2));
        assert_eq!(q(&mut c, &["zremrangebylex", "lex", "-", "+"]), i(1));
        assert_eq!(q(&mut c, &["zcard", "lex"]), i(0));
        assert_eq!(q(&mut c, &["zremrangebyrank", "z", "0", "-1"]), i(3));
        assert_eq!(q(&mut c, &["zadd", "z", "xx", "1", "b"]), i(0));
    });
}

#[test]
fn set_algebra() {
    both_encodings(|s| {
        let mut c = s.con();
        fill(&mut c, "{t}a", &[("x", "1"), ("y", "2"), ("z", "3")]);
        fill(&mut c, "{t}b", &[("y", "10"), ("z", "20"), ("w", "30")]);
        assert_eq!(
            q(&mut c, &["zunion", "2", "{t}a", "{t}b", "withscores"]),
            flat(&[("x", "1"), ("y", "12"), ("z", "23"), ("w", "30")])
        );
        assert_eq!(
            q(
                &mut c,
                &[
                    "zunion",
                    "2",
                    "{t}a",
                    "{t}b",
                    "weights",
                    "2",
                    "0.5",
                    "aggregate",
                    "max",
                    "withscores"
                ]
            ),
            flat(&[("x", "2"), ("y", "5"), ("z", "10"), ("w", "15")])
        );
        assert_eq!(
            q(
                &mut c,
                &[
                    "zinter",
                    "2",
                    "{t}a",
                    "{t}b",
                    "aggregate",
                    "min",
                    "withscores"
                ]
            ),
            flat(&[("y", "2"), ("z", "3")])
        );
        assert_eq!(
            q(&mut c, &["zdiff", "2", "{t}a", "{t}b", "withscores"]),
            flat(&[("x", "1")])
        );
        assert_eq!(q(&mut c, &["zintercard", "2", "{t}a", "{t}b"]), i(2));
        assert_eq!(
            q(&mut c, &["zintercard", "2", "{t}a", "{t}b", "limit", "1"]),
            i(1)
        );
        assert_eq!(
            q(&mut c, &["zunionstore", "{t}u", "2", "{t}a", "{t}b"]),
            i(4)
        );
        assert_eq!(
            q(&mut c, &["zrange", "{t}u", "0", "-1"]),
            bulks(&["x", "y", "z", "w"])
        );
        assert_eq!(
            q(
                &mut c,
                &[
                    "zinterstore",
                    "{t}u",
                    "2",
                    "{t}a",
                    "{t}b",
                    "weights",
                    "1",
                    "-1"
                ]
            ),
            i(2)
        );
        assert_eq!(
            q(&mut c, &["zrange", "{t}u", "0", "-1", "withscores"]),
            flat(&[("z", "-17"), ("y", "-8")])
        );
        assert_eq!(
            q(&mut c, &["zdiffstore", "{t}u", "2", "{t}a", "{t}b"]),
            i(1)
        );
        // Empty results delete the destination.
        assert_eq!(
            q(&mut c, &["zinterstore", "{t}u", "2", "{t}a", "{t}none"]),
            i(0)
        );
        assert_eq!(q(&mut c, &["zcard", "{t}u"]), i(0));
        // inf + -inf is 0, as in Redis.
        fill(&mut c, "{t}p", &[("m", "+inf")]);
        fill(&mut c, "{t}n", &[("m", "-inf")]);
        assert_eq!(
            q(&mut c, &["zunion", "2", "{t}p", "{t}n", "withscores"]),
            flat(&[("m", "0")])
        );
        assert_eq!(
            q(&mut c, &["zinter", "2", "{t}p", "{t}n", "withscores"]),
            flat(&[("m", "0")])
        );
        // Errors.
        assert_eq!(
            qerr(&mut c, &["zunion", "0", "{t}a"]),
            "ERR at least 1 input key is needed for 'zunion' command"
        );
        assert_eq!(
            qerr(&mut c, &["zinterstore", "{t}d", "0", "{t}a"]),
            "ERR at least 1 input key is needed for 'zinterstore' command"
        );
        assert_eq!(
            qerr(&mut c, &["zunion", "3", "{t}a", "{t}b"]),
            "ERR syntax error"
        );
        assert_eq!(
            qerr(&mut c, &["zunion", "x", "{t}a"]),
            "ERR value is not an integer or out of range"
        );
        assert_eq!(
            qerr(&mut c, &["zunion", "1", "{t}a", "weights", "x"]),
            "ERR weight value is not a float"
        );
        assert_eq!(
            qerr(&mut c, &["zunion", "1", "{t}a", "aggregate", "avg"]),
            "ERR syntax error"
        );
        assert_eq!(
            qerr(&mut c, &["zdiff", "1", "{t}a", "weights", "1"]),
            "ERR syntax error"
        );
        assert_eq!(
            qerr(&mut c, &["zunionstore", "{t}d", "1", "{t}a", "withscores"]),
            "ERR syntax error"
        );
        assert_eq!(
            qerr(&mut c, &["zintercard", "1", "{t}a", "limit", "-1"]),
            "ERR LIMIT can't be negative"
        );
        assert_eq!(
            qerr(&mut c, &["zintercard", "0", "{t}a"]),
            "ERR at least 1 input key is needed for 'zintercard' command"
        );

        let mut c3 = s.con3();
        assert_eq!(
            q(&mut c3, &["zinter", "2", "{t}a", "{t}b", "withscores"]),
            pairs3(&[("y", 12.0), ("z", 23.0)])
        );
    });
}

#[test]
fn pops() {
    both_encodings(|s| {
        let mut c = s.con();
        fill(
            &mut c,
            "z",
            &[("a", "1"), ("b", "2"), ("c", "3"), ("d", "4")],
        );
        assert_eq!(q(&mut c, &["zpopmin", "z"]), flat(&[("a", "1")]));
        assert_eq!(
            q(&mut c, &["zpopmax", "z", "2"]),
            flat(&[("d", "4"), ("c", "3")])
        );
        assert_eq!(q(&mut c, &["zpopmin", "z", "0"]), bulks(&[]));
        assert_eq!(q(&mut c, &["zpopmin", "nokey"]), bulks(&[]));
        assert_eq!(
            qerr(&mut c, &["zpopmin", "z", "-1"]),
            "ERR value is out of range, must be positive"
        );
        assert_eq!(
            qerr(&mut c, &["zpopmin", "z", "1", "2"]),
            "ERR syntax error"
        );
        assert_eq!(q(&mut c, &["zpopmin", "z", "10"]), flat(&[("b", "2")]));
        assert_eq!(q(&mut c, &["zcard", "z"]), i(0));

        fill(&mut c, "{t}z2", &[("a", "1"), ("b", "2"), ("c", "3")]);
        assert_eq!(
            q(
                &mut c,
                &["zmpop", "2", "{t}none", "{t}z2", "max", "count", "2"]
            ),
            arr(vec![
                b("{t}z2"),
                arr(vec![arr(vec![b("c"), b("3")]), arr(vec![b("b"), b("2")])])
            ])
        );
        assert_eq!(q(&mut c, &["zmpop", "1", "{t}none", "min"]), Value::Nil);
        assert_eq!(
            qerr(&mut c, &["zmpop", "0", "{t}z2", "min"]),
            "ERR numkeys should be greater than 0"
        );
        assert_eq!(
            qerr(&mut c, &["zmpop", "1", "{t}z2", "min", "count", "0"]),
            "ERR count should be greater than 0"
        );
        assert_eq!(
            qerr(&mut c, &["zmpop", "1", "{t}z2", "middle"]),
            "ERR syntax error"
        );

        let mut c3 = s.con3();
        fill(&mut c3, "r3", &[("a", "1"), ("b", "2"), ("c", "3")]);
        assert_eq!(q(&mut c3, &["zpopmin", "r3"]), arr(vec![b("a"), d(1.0)]));
        assert_eq!(q(&mut c3, &["zpopmax", "r3", "1"]), pairs3(&[("c", 3.0)]));
        assert_eq!(
            q(&mut c3, &["zmpop", "1", "r3", "min"]),
            arr(vec![b("r3"), pairs3(&[("b", 2.0)])])
        );
        assert_eq!(q(&mut c3, &["zmpop", "1", "r3", "min"]), Value::Nil);
    });
}

#[test]
fn blocking_pops() {
    both_encodings(|s| {
        let mut c = s.con();
        // Served immediately when there is something.
        fill(&mut c, "{b}ready", &[("a", "1"), ("b", "2")]);
        assert_eq!(
            q(&mut c, &["bzpopmax", "{b}none", "{b}ready", "1"]),
            arr(vec![b("{b}ready"), b("b"), b("2")])
        );
        // Timeout.
        let t0 = Instant::now();
        assert_eq!(q(&mut c, &["bzpopmin", "{b}none", "0.2"]), Value::Nil);
        assert!(t0.elapsed() >= Duration::from_millis(150));
        assert_eq!(
            q(&mut c, &["bzmpop", "0.1", "1", "{b}none", "min"]),
            Value::Nil
        );
        // Timeout errors.
        assert_eq!(
            qerr(&mut c, &["bzpopmin", "k", "-1"]),
            "ERR timeout is negative"
        );
        assert_eq!(
            qerr(&mut c, &["bzpopmin", "k", "abc"]),
            "ERR timeout is not a float or out of range"
        );
        assert_eq!(
            qerr(&mut c, &["bzmpop", "x", "1", "k", "min"]),
            "ERR timeout is not a float or out of range"
        );

        // Woken by a ZADD from another client.
        let port = s.port;
        let waiter = thread::spawn(move || {
            let mut w = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                .unwrap()
                .get_connection()
                .unwrap();
            q(&mut w, &["bzpopmin", "{b}k1", "{b}k2", "5"])
        });
        thread::sleep(Duration::from_millis(200));
        fill(&mut c, "{b}k2", &[("m", "7"), ("n", "8")]);
        assert_eq!(
            waiter.join().unwrap(),
            arr(vec![b("{b}k2"), b("m"), b("7")])
        );
        assert_eq!(q(&mut c, &["zrange", "{b}k2", "0", "-1"]), bulks(&["n"]));

        // BZMPOP with COUNT, RESP3 client.
        let waiter = thread::spawn(move || {
            let mut w = redis::Client::open(format!("redis://127.0.0.1:{port}/?protocol=resp3"))
                .unwrap()
                .get_connection()
                .unwrap();
            q(&mut w, &["bzmpop", "5", "1", "{b}k3", "max", "count", "5"])
        });
        thread::sleep(Duration::from_millis(200));
        fill(&mut c, "{b}k3", &[("x", "1"), ("y", "2")]);
        assert_eq!(
            waiter.join().unwrap(),
            arr(vec![b("{b}k3"), pairs3(&[("y", 2.0), ("x", 1.0)])])
        );
        assert_eq!(q(&mut c, &["zcard", "{b}k3"]), i(0));

        // Inside MULTI a blocking pop does not block.
        assert_eq!(q(&mut c, &["multi"]), Value::Okay);
        q(&mut c, &["bzpopmin", "{b}empty", "0"]);
        assert_eq!(q(&mut c, &["exec"]), arr(vec![Value::Nil]));
    });
}

#[test]
fn randmember_and_scan() {
    both_encodings(|s| {
        let mut c = s.con();
        let members: Vec<String> = (0..50).map(|n| format!("m{n}")).collect();
        for (n, m) in members.iter().enumerate() {
            q(&mut c, &["zadd", "z", &n.to_string(), m]);
        }
        let one = q(&mut c, &["zrandmember", "z"]);
        assert!(
            matches!(&one, Value::BulkString(m) if members.iter().any(|x| x.as_bytes() == &m[..]))
        );
        assert_eq!(q(&mut c, &["zrandmember", "nokey"]), Value::Nil);
        assert_eq!(q(&mut c, &["zrandmember", "nokey", "3"]), bulks(&[]));
        assert_eq!(q(&mut c, &["zrandmember", "z", "0"]), bulks(&[]));
        let Value::Array(v) = q(&mut c, &["zrandmember", "z", "20"]) else {
            panic!()
        };
        let mut seen: Vec<&Value> = v.iter().collect();
        seen.sort_by_key(|x| format!("{x:?}"));
        seen.dedup();
        assert_eq!(seen.len(), 20, "distinct members");
        let Value::Array(v) = q(&mut c, &["zrandmember", "z", "-200"]) else {
            panic!()
        };
        assert_eq!(v.len(), 200);
        let Value::Array(v) = q(&mut c, &["zrandmember", "z", "100", "withscores"]) else {
            panic!()
        };
        assert_eq!(v.len(), 100);
        for p in v.chunks(2) {
            let (Value::BulkString(m), Value::BulkString(sc)) = (&p[0], &p[1]) else {
                panic!()
            };
            assert_eq!(
                format!("m{}", String::from_utf8_lossy(sc)),
                String::from_utf8_lossy(m)
            );
        }
        assert_eq!(
            qerr(&mut c, &["zrandmember", "z", "1", "withscore"]),
            "ERR syntax error"
        );
        assert!(qerr(&mut c, &["zrandmember", "z", "-9223372036854775808"])
            .contains("value is out of range"));
        let mut c3 = s.con3();
        let Value::Array(v) = q(&mut c3, &["zrandmember", "z", "-3", "withscores"]) else {
            panic!()
        };
        assert!(v.iter().all(
            |p| matches!(p, Value::Array(x) if x.len() == 2 && matches!(x[1], Value::Double(_)))
        ));

        // ZSCAN: full iteration returns every member with its score.
        let mut cursor = "0".to_string();
        let mut got = Vec::new();
        loop {
            let Value::Array(r) = q(&mut c, &["zscan", "z", &cursor, "count", "7"]) else {
                panic!()
            };
            let Value::BulkString(cur) = &r[0] else {
                panic!()
            };
            let Value::Array(items) = &r[1] else { panic!() };
            for p in items.chunks(2) {
                got.push((p[0].clone(), p[1].clone()));
            }
            cursor = String::from_utf8_lossy(cur).into_owned();
            if cursor == "0" {
                break;
            }
        }
        got.sort_by_key(|x| format!("{x:?}"));
        got.dedup();
        assert_eq!(got.len(), 50);
        let Value::Array(r) = q(
            &mut c,
            &["zscan", "z", "0", "match", "m1*", "count", "1000"],
        ) else {
            panic!()
        };
        let Value::Array(items) = &r[1] else { panic!() };
        assert_eq!(items.len(), 2 * 11);
        assert_eq!(qerr(&mut c, &["zscan", "z", "abc"]), "ERR invalid cursor");
        assert_eq!(
            qerr(&mut c, &["zscan", "z", "0", "count", "0"]),
            "ERR syntax error"
        );
        assert_eq!(
            qerr(&mut c, &["zscan", "z", "0", "bogus"]),
            "ERR syntax error"
        );
        assert_eq!(
            q(&mut c, &["zscan", "nokey", "0"]),
            arr(vec![b("0"), arr(vec![])])
        );
    });
}

#[test]
fn wrong_type_and_plain_sets() {
    both_encodings(|s| {
        let mut c = s.con();
        // A string value (via INCRBY-free path: ZADD on a list is not available here, so use SET
        // if the server knows it; otherwise skip the string part).
        if redis::cmd("set")
            .arg("str")
            .arg("x")
            .query::<Value>(&mut c)
            .is_ok()
        {
            for args in [
                vec!["zadd", "str", "1", "a"],
                vec!["zscore", "str", "a"],
                vec!["zrange", "str", "0", "-1"],
                vec!["zpopmin", "str"],
                vec!["bzpopmin", "str", "0"],
                vec!["zunion", "1", "str"],
                vec!["zrandmember", "str"],
                vec!["zscan", "str", "0"],
                vec!["zremrangebyrank", "str", "0", "1"],
            ] {
                assert!(qerr(&mut c, &args).contains("WRONGTYPE"), "{args:?}");
            }
        }
        // Plain sets count as score-1 inputs.
        if redis::cmd("sadd")
            .arg("{t}set")
            .arg("a")
            .arg("b")
            .query::<Value>(&mut c)
            .is_ok()
        {
            fill(&mut c, "{t}zs", &[("a", "5")]);
            assert_eq!(
                q(&mut c, &["zunion", "2", "{t}set", "{t}zs", "withscores"]),
                flat(&[("b", "1"), ("a", "6")])
            );
            assert_eq!(
                q(&mut c, &["zinter", "2", "{t}set", "{t}zs", "withscores"]),
                flat(&[("a", "6")])
            );
            assert_eq!(q(&mut c, &["zdiff", "2", "{t}set", "{t}zs"]), bulks(&["b"]));
        }
    });
}

/// Scores as a leaderboard would use them: many increments, top-100, rank lookups and the
/// window around a player.
#[test]
fn leaderboard_flow() {
    both_encodings(|s| {
        let mut c = s.con();
        let players = 500;
        let mut scores = vec![0i64; players];
        for round in 0..4 {
            for (p, score) in scores.iter_mut().enumerate() {
                let inc = ((p * 7919 + round * 104729) % 1000) as i64;
                *score += inc;
                assert_eq!(
                    q(
                        &mut c,
                        &["zincrby", "lb", &inc.to_string(), &format!("player:{p}")]
                    ),
                    b(&score.to_string())
                );
            }
        }
        // Expected order: score desc, then member desc (reverse of Redis's ascending order).
        let mut order: Vec<(i64, String)> = scores
            .iter()
            .enumerate()
            .map(|(p, s)| (*s, format!("player:{p}")))
            .collect();
        order.sort();
        order.reverse();
        let Value::Array(top) = q(&mut c, &["zrevrange", "lb", "0", "99", "withscores"]) else {
            panic!()
        };
        assert_eq!(top.len(), 200);
        for (k, p) in top.chunks(2).enumerate() {
            assert_eq!(p[0], b(&order[k].1));
            assert_eq!(p[1], b(&order[k].0.to_string()));
        }
        let me = 250;
        let r = order
            .iter()
            .position(|(_, m)| *m == format!("player:{me}"))
            .unwrap();
        assert_eq!(
            q(
                &mut c,
                &["zrevrank", "lb", &format!("player:{me}"), "withscore"]
            ),
            arr(vec![i(r as i64), b(&scores[me].to_string())])
        );
        // Around me: ZRANGE r-5 r+5 REV WITHSCORES.
        let lo = r.saturating_sub(5);
        let hi = r + 5;
        let Value::Array(around) = q(
            &mut c,
            &[
                "zrange",
                "lb",
                &lo.to_string(),
                &hi.to_string(),
                "rev",
                "withscores",
            ],
        ) else {
            panic!()
        };
        assert_eq!(around.len(), 2 * (hi.min(players - 1) - lo + 1));
        for (k, p) in around.chunks(2).enumerate() {
            assert_eq!(p[0], b(&order[lo + k].1));
        }
        let mut c3 = s.con3();
        let Value::Array(top3) = q(&mut c3, &["zrevrange", "lb", "0", "2", "withscores"]) else {
            panic!()
        };
        assert_eq!(top3[0], arr(vec![b(&order[0].1), d(order[0].0 as f64)]));
        assert_eq!(q(&mut c3, &["zcard", "lb"]), i(players as i64));
    });
}

/// Redis stores the small form's scores as text, so -0 reads back as 0 there, while the
/// skip-list form keeps -0 (and ZADD INCR still replies with the score it computed).
#[test]
fn negative_zero_follows_encoding() {
    let small = Podium::start(&[]);
    let mut c = small.con();
    assert_eq!(q(&mut c, &["zadd", "z", "incr", "-0", "a"]), b("-0"));
    assert_eq!(q(&mut c, &["zscore", "z", "a"]), b("0"));
    assert_eq!(q(&mut c, &["zadd", "z", "-0.0", "b"]), i(1));
    assert_eq!(
        q(&mut c, &["zrange", "z", "0", "-1", "withscores"]),
        flat(&[("a", "0"), ("b", "0")])
    );
    let large = Podium::start(&["--zset-max-listpack-entries", "0"]);
    let mut c = large.con();
    assert_eq!(q(&mut c, &["zadd", "z", "-0.0", "b"]), i(1));
    assert_eq!(q(&mut c, &["zscore", "z", "b"]), b("-0"));
    // A store whose result fits the small form goes through it.
    assert_eq!(
        q(
            &mut c,
            &["config", "set", "zset-max-listpack-entries", "128"]
        ),
        Value::Okay
    );
    assert_eq!(q(&mut c, &["zunionstore", "u", "1", "z"]), i(1));
    assert_eq!(q(&mut c, &["zscore", "u", "b"]), b("0"));
}

/// A pipelined batch of ZADD/ZINCRBY/ZREVRANK on a set large enough for the server to warm the
/// skip list before running the batch (`warm_batch`) answers exactly as the same requests sent
/// one at a time to an identical set.
#[test]
fn pipelined_batch_on_a_large_set_matches_one_at_a_time() {
    let s = Podium::start(&[]);
    let mut con = s.con();
    let n = 70_000;
    for key in ["piped", "single"] {
        for start in (0..n).step_by(1000) {
            let mut cmd = redis::cmd("ZADD");
            cmd.arg(key);
            for i in start..start + 1000 {
                cmd.arg((i * 7919) % 100_003).arg(format!("m:{i:06}"));
            }
            let _: i64 = cmd.query(&mut con).unwrap();
        }
    }
    let ops: Vec<Vec<String>> = (0..600)
        .map(|j: i64| {
            let m = format!("m:{:06}", (j * 104_729) % (n + 50));
            match j % 5 {
                0 => vec![
                    "ZADD".into(),
                    "K".into(),
                    ((j * 31) % 100_000).to_string(),
                    m,
                ],
                1 => vec!["ZINCRBY".into(), "K".into(), "-2.5".into(), m],
                2 => vec!["ZREVRANK".into(), "K".into(), m],
                3 => vec!["ZSCORE".into(), "K".into(), m],
                _ => vec!["ZRANK".into(), "K".into(), m, "WITHSCORE".into()],
            }
        })
        .collect();
    let with_key = |op: &Vec<String>, key: &str| {
        let mut c = redis::cmd(&op[0]);
        c.arg(key);
        for a in &op[2..] {
            c.arg(a);
        }
        c
    };
    let mut piped = Vec::new();
    for chunk in ops.chunks(100) {
        let mut p = redis::pipe();
        for op in chunk {
            p.add_command(with_key(op, "piped"));
        }
        let replies: Vec<Value> = p.query(&mut con).unwrap();
        piped.extend(replies);
    }
    let single: Vec<Value> = ops
        .iter()
        .map(|op| with_key(op, "single").query(&mut con).unwrap())
        .collect();
    assert_eq!(piped, single);
    let all = |con: &mut Connection, key: &str| -> Value {
        q(con, &["ZRANGE", key, "0", "-1", "WITHSCORES"])
    };
    assert_eq!(all(&mut con, "piped"), all(&mut con, "single"));
    // Batches mixing in requests of one argument (PING, MULTI, EXEC) around the warmed kinds.
    let mut p = redis::pipe();
    p.cmd("PING")
        .cmd("ZADD")
        .arg("piped")
        .arg(5)
        .arg("m:000001")
        .cmd("MULTI")
        .cmd("ZREVRANK")
        .arg("piped")
        .arg("m:000001")
        .cmd("EXEC")
        .cmd("ZINCRBY")
        .arg("piped")
        .arg(1)
        .arg("m:000001")
        .cmd("PING");
    let replies: Vec<Value> = p.query(&mut con).unwrap();
    assert_eq!(replies.len(), 7);
    assert_eq!(replies[5], b("6"));
    assert_eq!(q(&mut con, &["ZSCORE", "piped", "m:000001"]), b("6"));
}

/// A large set's nodes, towers and index live in mapped arenas outside the allocator
/// (`types::arena`): INFO used_memory (what `maxmemory` is checked against) and MEMORY USAGE
/// must still count them, and a DEL must give them back at once.
#[test]
fn used_memory_counts_a_large_set_and_del_returns_it() {
    let p = Podium::start(&[]);
    let mut con = p.con();
    let field = |con: &mut Connection, name: &str| -> i64 {
        let info: String = redis::cmd("INFO").arg("memory").query(con).unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} in {info}"))
    };
    let used = |con: &mut Connection| field(con, "used_memory");
    let before = used(&mut con);
    let n = 200_000;
    for start in (0..n).step_by(1000) {
        let mut c = redis::cmd("ZADD");
        c.arg("big");
        for i in start..start + 1000 {
            c.arg(i).arg(format!("m:{i:09}"));
        }
        let _: i64 = c.query(&mut con).unwrap();
    }
    let grown = used(&mut con) - before;
    // 32-byte nodes, a third of a 16-byte link each and the index: about 39 B per member.
    assert!(
        grown > 30 * n,
        "used_memory grew by {grown} for {n} members"
    );
    assert!(
        grown < 60 * n,
        "used_memory grew by {grown} for {n} members"
    );
    // The allocator's own figures include the arenas too (so the fragmentation ratios do not
    // count them as memory outside any allocator).
    let allocated = field(&mut con, "allocator_allocated");
    assert!(allocated > 30 * n, "allocator_allocated {allocated}");
    let usage: i64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg("big")
        .query(&mut con)
        .unwrap();
    assert!(usage > 30 * n, "MEMORY USAGE {usage}");
    let _: i64 = redis::cmd("DEL").arg("big").query(&mut con).unwrap();
    let after = used(&mut con) - before;
    assert!(
        after < 2 * n,
        "used_memory still {after} above the start after DEL"
    );
}
