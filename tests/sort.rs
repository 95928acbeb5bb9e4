//! SORT and SORT_RO against the real binary: orders, BY/GET patterns, LIMIT, STORE, errors,
//! and the AOF replay of a stored result.

use crate::common;

use common::{Launch, Podium};
use redis::Connection;

fn sort(con: &mut Connection, args: &[&str]) -> redis::RedisResult<Vec<Option<String>>> {
    redis::cmd("SORT").arg(args).query(con)
}

fn strings(v: Vec<Option<String>>) -> Vec<String> {
    v.into_iter()
        .map(|s| s.unwrap_or_else(|| "(nil)".into()))
        .collect()
}

#[test]
fn orders_patterns_and_limits() {
    let s = Podium::start(&[]);
    let mut con = s.con();
    redis::pipe()
        .cmd("RPUSH")
        .arg("l")
        .arg(&["3", "1", "2", "10", "-1", " 5", ""])
        .cmd("MSET")
        .arg(&["w_1", "30", "w_2", "10", "w_3", "20", "w_10", "5"])
        .cmd("HSET")
        .arg("h_1")
        .arg("f")
        .arg("one")
        .cmd("HSET")
        .arg("h_2")
        .arg("f")
        .arg("two")
        .cmd("ZADD")
        .arg("z")
        .arg(&["1", "b", "2", "a", "3", "c"])
        .cmd("SADD")
        .arg("s")
        .arg(&["c", "a", "b"])
        .query::<()>(&mut con)
        .unwrap();
    let cases: &[(&[&str], &[&str])] = &[
        // An empty string reads as 0 (strtod), " 5" as 5.
        (&["l"], &["-1", "", "1", "2", "3", " 5", "10"]),
        (&["l", "DESC"], &["10", " 5", "3", "2", "1", "", "-1"]),
        (&["l", "ALPHA"], &["", " 5", "-1", "1", "10", "2", "3"]),
        (&["l", "LIMIT", "1", "3"], &["", "1", "2"]),
        (&["l", "LIMIT", "6", "10"], &["10"]),
        (&["l", "LIMIT", "7", "10"], &[]),
        (
            &["l", "LIMIT", "-5", "-1"],
            &["-1", "", "1", "2", "3", " 5", "10"],
        ),
        // Missing BY keys count as 0; ties are ordered by the element.
        (&["l", "BY", "w_*"], &["", " 5", "-1", "10", "2", "3", "1"]),
        (
            &["l", "BY", "w_*", "GET", "#", "GET", "w_*"],
            &[
                "", "(nil)", " 5", "(nil)", "-1", "(nil)", "10", "5", "2", "10", "3", "20", "1",
                "30",
            ],
        ),
        (
            &["l", "BY", "nosort", "GET", "h_*->f", "LIMIT", "1", "2"],
            &["one", "two"],
        ),
        (
            &["l", "BY", "nosort", "DESC"],
            &["", " 5", "-1", "10", "2", "1", "3"],
        ),
        (
            &["l", "BY", "h_*->f", "ALPHA", "LIMIT", "5", "2"],
            &["1", "2"],
        ),
        (
            &["z", "BY", "nosort", "DESC", "LIMIT", "0", "2"],
            &["c", "a"],
        ),
        (&["z", "ALPHA", "DESC"], &["c", "b", "a"]),
        (&["s", "ALPHA"], &["a", "b", "c"]),
        (&["missing"], &[]),
    ];
    for (args, want) in cases {
        let got = strings(sort(&mut con, args).unwrap());
        assert_eq!(got, *want, "SORT {args:?}");
    }
    let ro: Vec<String> = redis::cmd("SORT_RO")
        .arg("l")
        .arg("LIMIT")
        .arg(0)
        .arg(2)
        .query(&mut con)
        .unwrap();
    assert_eq!(ro, vec!["-1", ""]);
}

#[test]
fn errors_match_redis() {
    let s = Podium::start(&[]);
    let mut con = s.con();
    redis::pipe()
        .cmd("RPUSH")
        .arg("words")
        .arg(&["a", "1"])
        .cmd("RPUSH")
        .arg("nan")
        .arg(&["nan"])
        .cmd("HSET")
        .arg("h")
        .arg("f")
        .arg("v")
        .query::<()>(&mut con)
        .unwrap();
    let err = |con: &mut Connection, cmd: &str, args: &[&str]| -> String {
        let r: redis::RedisResult<redis::Value> = redis::cmd(cmd).arg(args).query(con);
        let e = r.expect_err("an error");
        format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or(""))
            .trim()
            .to_string()
    };
    let conv = "ERR One or more scores can't be converted into double";
    assert_eq!(err(&mut con, "SORT", &["words"]), conv);
    assert_eq!(err(&mut con, "SORT", &["nan"]), conv);
    assert!(err(&mut con, "SORT", &["h"]).starts_with("WRONGTYPE"));
    assert_eq!(
        err(&mut con, "SORT", &["words", "LIMIT", "x", "1"]),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(err(&mut con, "SORT", &["words", "GET"]), "ERR syntax error");
    assert_eq!(
        err(&mut con, "SORT", &["words", "bogus"]),
        "ERR syntax error"
    );
    assert_eq!(
        err(&mut con, "SORT_RO", &["words", "STORE", "d"]),
        "ERR syntax error"
    );
    // COMMAND GETKEYS names the key and the last STORE destination.
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg(&[
            "GETKEYS", "SORT", "abc", "STORE", "x", "BY", "p", "STORE", "def",
        ])
        .query(&mut con)
        .unwrap();
    assert_eq!(keys, vec!["abc", "def"]);
}

#[test]
fn store_writes_a_list_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let args = ["--appendonly", "yes", "--dir", d];
    let s = Launch::podium().args(&args).wait_loaded().start();
    let mut con = s.con();
    redis::pipe()
        .cmd("SADD")
        .arg("s")
        .arg(&["9", "3", "12", "x1"])
        .cmd("SET")
        .arg("w_x1")
        .arg("1")
        .query::<()>(&mut con)
        .unwrap();
    let n: i64 = redis::cmd("SORT")
        .arg(&["s", "BY", "w_*", "GET", "#", "GET", "w_*", "STORE", "out"])
        .query(&mut con)
        .unwrap();
    assert_eq!(n, 8);
    let stored: Vec<String> = redis::cmd("LRANGE")
        .arg(&["out", "0", "-1"])
        .query(&mut con)
        .unwrap();
    assert_eq!(stored, vec!["12", "", "3", "", "9", "", "x1", "1"]);
    // A set sorted BY nosort into a key is still sorted, so a replay stores the same list.
    let n: i64 = redis::cmd("SORT")
        .arg(&["s", "BY", "nosort", "STORE", "plain"])
        .query(&mut con)
        .unwrap();
    assert_eq!(n, 4);
    let plain: Vec<String> = redis::cmd("LRANGE")
        .arg(&["plain", "0", "-1"])
        .query(&mut con)
        .unwrap();
    assert_eq!(plain, vec!["12", "3", "9", "x1"]);
    // An empty result deletes the destination.
    redis::cmd("SET")
        .arg("gone")
        .arg("v")
        .query::<()>(&mut con)
        .unwrap();
    let n: i64 = redis::cmd("SORT")
        .arg(&["missing", "STORE", "gone"])
        .query(&mut con)
        .unwrap();
    assert_eq!(n, 0);
    s.stop();
    let s = Launch::podium().args(&args).wait_loaded().start();
    let mut con = s.con();
    let again: Vec<String> = redis::cmd("LRANGE")
        .arg(&["out", "0", "-1"])
        .query(&mut con)
        .unwrap();
    assert_eq!(again, stored);
    let again: Vec<String> = redis::cmd("LRANGE")
        .arg(&["plain", "0", "-1"])
        .query(&mut con)
        .unwrap();
    assert_eq!(again, plain);
    let exists: i64 = redis::cmd("EXISTS").arg("gone").query(&mut con).unwrap();
    assert_eq!(exists, 0);
}
