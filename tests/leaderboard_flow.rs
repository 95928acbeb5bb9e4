//! End-to-end leaderboard service scenario against the real binary: 100,000 players loaded
//! with pipelined ZADD/HSET, then the read path a leaderboard service sends per request
//! (top 100, my rank, my rank with score, the around-me window, my score, the profiles of the
//! window) inside MULTI/EXEC, every value checked against an in-test model; the same reads in
//! RESP3 for their reply shapes; and the write path (ZINCRBY into the global and a weekly
//! board, EXPIRE ... NX on the weekly key) with the ranks it must move.

use crate::common;

use common::Podium;
use redis::{Connection, Value};
use std::collections::HashMap;
use std::time::Instant;

const N: usize = 100_000;
const GLOBAL: &str = "leaderboard:global";
const WEEKLY: &str = "leaderboard:weekly:2026-W47";
const WEEK_TTL: i64 = 691_200;
const COUNTRIES: [&str; 8] = ["US", "DE", "JP", "BR", "IN", "FR", "KR", "GB"];

// ---------------------------------------------------------------------------------------------
// The model.

/// Deterministic score of player `i`: multiples of 0.25 (exact in binary, so the text is the
/// same under `%.17g` and Rust's shortest formatting), some negative, with many ties (four
/// residues share a bucket), so the member tie-break is exercised throughout the board.
fn score_of(i: usize) -> f64 {
    let base = (i as u64 * 7919) % 1_000_003;
    (base / 4) as f64 * 0.25 - 1000.0
}

fn member(i: usize) -> String {
    format!("player:{i}")
}

fn profile(i: usize) -> [(String, String); 3] {
    [
        ("name".into(), format!("player-{i}")),
        ("level".into(), (i % 50).to_string()),
        ("country".into(), COUNTRIES[i % COUNTRIES.len()].into()),
    ]
}

/// Redis's score text in RESP2 (`%.17g`); equal to Rust's shortest form for our scores.
fn fmt_score(s: f64) -> String {
    let t = format!("{s}");
    assert!(t.parse::<f64>().unwrap() == s);
    t
}

#[derive(Clone)]
struct Entry {
    score: f64,
    member: String,
    id: usize,
}

/// The board in ZREVRANGE order: score descending, ties by member bytes descending.
struct Board {
    entries: Vec<Entry>,
    rank: HashMap<String, usize>,
}

impl Board {
    fn new(mut entries: Vec<Entry>) -> Board {
        entries.sort_by(|a, b| {
            b.score
                .partial_cmp(&a.score)
                .unwrap()
                .then_with(|| b.member.as_bytes().cmp(a.member.as_bytes()))
        });
        let rank = entries
            .iter()
            .enumerate()
            .map(|(r, e)| (e.member.clone(), r))
            .collect();
        Board { entries, rank }
    }

    fn incr(&self, member: &str, by: f64) -> Board {
        let mut entries = self.entries.clone();
        match entries.iter_mut().find(|e| e.member == member) {
            Some(e) => e.score += by,
            None => entries.push(Entry {
                score: by,
                member: member.to_string(),
                id: member.trim_start_matches("player:").parse().unwrap(),
            }),
        }
        Board::new(entries)
    }

    fn score(&self, member: &str) -> f64 {
        self.entries[self.rank[member]].score
    }
}

// ---------------------------------------------------------------------------------------------
// Reply helpers.

fn text(v: &Value, what: &str) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).unwrap(),
        Value::SimpleString(s) => s.clone(),
        other => panic!("{what}: expected a string, got {other:?}"),
    }
}

fn int(v: &Value, what: &str) -> i64 {
    match v {
        Value::Int(n) => *n,
        other => panic!("{what}: expected an integer, got {other:?}"),
    }
}

fn double(v: &Value, what: &str) -> f64 {
    match v {
        Value::Double(d) => *d,
        other => panic!("{what}: expected a RESP3 double, got {other:?}"),
    }
}

fn array<'a>(v: &'a Value, what: &str) -> &'a [Value] {
    match v {
        Value::Array(a) => a,
        other => panic!("{what}: expected an array, got {other:?}"),
    }
}

/// RESP2 `WITHSCORES` reply: a flat array member, score-text, member, score-text ...
fn check_flat_withscores(v: &Value, want: &[Entry], what: &str) {
    let a = array(v, what);
    assert_eq!(a.len(), want.len() * 2, "{what}: reply length");
    for (k, e) in want.iter().enumerate() {
        assert_eq!(
            text(&a[2 * k], what),
            e.member,
            "{what}: member at offset {k}"
        );
        assert_eq!(
            text(&a[2 * k + 1], what),
            fmt_score(e.score),
            "{what}: score of {}",
            e.member
        );
    }
}

/// RESP3 `WITHSCORES` reply: an array of [member, double] pairs.
fn check_pairs_withscores(v: &Value, want: &[Entry], what: &str) {
    let a = array(v, what);
    assert_eq!(a.len(), want.len(), "{what}: reply length");
    for (k, e) in want.iter().enumerate() {
        let pair = array(&a[k], what);
        assert_eq!(pair.len(), 2, "{what}: pair {k}");
        assert_eq!(
            text(&pair[0], what),
            e.member,
            "{what}: member at offset {k}"
        );
        assert_eq!(
            double(&pair[1], what),
            e.score,
            "{what}: score of {}",
            e.member
        );
    }
}

fn check_profile_resp2(v: &Value, id: usize, what: &str) {
    let a = array(v, what);
    assert_eq!(a.len(), 6, "{what}: HGETALL profile:{id} length");
    let got: HashMap<String, String> = a
        .chunks(2)
        .map(|p| (text(&p[0], what), text(&p[1], what)))
        .collect();
    let want: HashMap<String, String> = profile(id).into_iter().collect();
    assert_eq!(got, want, "{what}: HGETALL profile:{id}");
}

fn check_profile_resp3(v: &Value, id: usize, what: &str) {
    let m = match v {
        Value::Map(m) => m,
        other => panic!("{what}: HGETALL in RESP3 must be a map, got {other:?}"),
    };
    assert_eq!(m.len(), 3, "{what}: HGETALL profile:{id} size");
    let got: HashMap<String, String> = m
        .iter()
        .map(|(k, v)| (text(k, what), text(v, what)))
        .collect();
    let want: HashMap<String, String> = profile(id).into_iter().collect();
    assert_eq!(got, want, "{what}: HGETALL profile:{id}");
}

// ---------------------------------------------------------------------------------------------
// The scenario.

fn load(con: &mut Connection) -> Board {
    for chunk in (0..N).collect::<Vec<_>>().chunks(10_000) {
        let mut p = redis::pipe();
        for batch in chunk.chunks(1000) {
            let mut c = redis::cmd("ZADD");
            c.arg(GLOBAL);
            for &i in batch {
                c.arg(fmt_score(score_of(i))).arg(member(i));
            }
            p.add_command(c);
        }
        for &i in chunk {
            let mut c = redis::cmd("HSET");
            c.arg(format!("profile:{i}"));
            for (f, v) in profile(i) {
                c.arg(f).arg(v);
            }
            p.add_command(c);
        }
        let replies: Vec<Value> = p.query(con).unwrap();
        let (zadds, hsets) = replies.split_at(chunk.len() / 1000);
        for r in zadds {
            assert_eq!(
                int(r, "ZADD"),
                1000,
                "every ZADD batch adds 1000 new members"
            );
        }
        for r in hsets {
            assert_eq!(int(r, "HSET"), 3, "every HSET creates 3 fields");
        }
    }
    let card: i64 = redis::cmd("ZCARD").arg(GLOBAL).query(con).unwrap();
    assert_eq!(card, N as i64);
    Board::new(
        (0..N)
            .map(|i| Entry {
                score: score_of(i),
                member: member(i),
                id: i,
            })
            .collect(),
    )
}

/// The ranks whose players the read path is exercised for: the top, the bottom and a
/// deterministic spread of the middle.
fn sample_ranks() -> Vec<usize> {
    let mut ranks: Vec<usize> = (0..=5).collect();
    ranks.extend([6, 94, 95, 99, 100, 104, 105, 999, 1000, N / 2]);
    ranks.extend((N - 6)..N);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while ranks.len() < 200 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        ranks.push((x % N as u64) as usize);
    }
    ranks
}

/// The window an application shows around rank `r`: r-5 ..= r+5, start clamped at 0.
fn window(r: usize) -> (usize, usize) {
    (r.saturating_sub(5), r + 5)
}

fn read_path_resp2(con: &mut Connection, board: &Board, r: usize) {
    let e = &board.entries[r];
    let (lo, hi) = window(r);
    let win = &board.entries[lo..=hi.min(N - 1)];
    let mut p = redis::pipe();
    p.atomic();
    p.cmd("ZREVRANGE")
        .arg(GLOBAL)
        .arg(0)
        .arg(99)
        .arg("WITHSCORES");
    p.cmd("ZREVRANK").arg(GLOBAL).arg(&e.member);
    p.cmd("ZREVRANK")
        .arg(GLOBAL)
        .arg(&e.member)
        .arg("WITHSCORE");
    p.cmd("ZRANGE")
        .arg(GLOBAL)
        .arg(lo)
        .arg(hi)
        .arg("REV")
        .arg("WITHSCORES");
    p.cmd("ZSCORE").arg(GLOBAL).arg(&e.member);
    for w in win {
        p.cmd("HGETALL").arg(format!("profile:{}", w.id));
    }
    let replies: Vec<Value> = p.query(con).unwrap();
    let what = format!("rank {r} ({})", e.member);
    assert_eq!(replies.len(), 5 + win.len(), "{what}: EXEC reply length");
    check_flat_withscores(
        &replies[0],
        &board.entries[..100],
        &format!("{what}: ZREVRANGE 0 99"),
    );
    assert_eq!(int(&replies[1], &what), r as i64, "{what}: ZREVRANK");
    let rs = array(&replies[2], &what);
    assert_eq!(rs.len(), 2, "{what}: ZREVRANK WITHSCORE");
    assert_eq!(
        int(&rs[0], &what),
        r as i64,
        "{what}: ZREVRANK WITHSCORE rank"
    );
    assert_eq!(
        text(&rs[1], &what),
        fmt_score(e.score),
        "{what}: ZREVRANK WITHSCORE score"
    );
    check_flat_withscores(&replies[3], win, &format!("{what}: ZRANGE {lo} {hi} REV"));
    assert_eq!(
        text(&replies[4], &what),
        fmt_score(e.score),
        "{what}: ZSCORE"
    );
    for (w, v) in win.iter().zip(&replies[5..]) {
        check_profile_resp2(v, w.id, &what);
    }
}

fn read_path_resp3(con: &mut Connection, board: &Board, r: usize) {
    let e = &board.entries[r];
    let (lo, hi) = window(r);
    let win = &board.entries[lo..=hi.min(N - 1)];
    let mut p = redis::pipe();
    p.atomic();
    p.cmd("ZREVRANGE")
        .arg(GLOBAL)
        .arg(0)
        .arg(99)
        .arg("WITHSCORES");
    p.cmd("ZREVRANK").arg(GLOBAL).arg(&e.member);
    p.cmd("ZREVRANK")
        .arg(GLOBAL)
        .arg(&e.member)
        .arg("WITHSCORE");
    p.cmd("ZRANGE")
        .arg(GLOBAL)
        .arg(lo)
        .arg(hi)
        .arg("REV")
        .arg("WITHSCORES");
    p.cmd("ZSCORE").arg(GLOBAL).arg(&e.member);
    for w in win {
        p.cmd("HGETALL").arg(format!("profile:{}", w.id));
    }
    let replies: Vec<Value> = p.query(con).unwrap();
    let what = format!("RESP3 rank {r} ({})", e.member);
    assert_eq!(replies.len(), 5 + win.len(), "{what}: EXEC reply length");
    check_pairs_withscores(
        &replies[0],
        &board.entries[..100],
        &format!("{what}: ZREVRANGE 0 99"),
    );
    assert_eq!(int(&replies[1], &what), r as i64, "{what}: ZREVRANK");
    let rs = array(&replies[2], &what);
    assert_eq!(rs.len(), 2, "{what}: ZREVRANK WITHSCORE");
    assert_eq!(
        int(&rs[0], &what),
        r as i64,
        "{what}: ZREVRANK WITHSCORE rank"
    );
    assert_eq!(
        double(&rs[1], &what),
        e.score,
        "{what}: ZREVRANK WITHSCORE score"
    );
    check_pairs_withscores(&replies[3], win, &format!("{what}: ZRANGE {lo} {hi} REV"));
    assert_eq!(double(&replies[4], &what), e.score, "{what}: ZSCORE");
    for (w, v) in win.iter().zip(&replies[5..]) {
        check_profile_resp3(v, w.id, &what);
    }
}

/// The whole board, read back in pages, equals the model.
fn check_whole_board(con: &mut Connection, board: &Board, key: &str) {
    let n = board.entries.len();
    let card: i64 = redis::cmd("ZCARD").arg(key).query(con).unwrap();
    assert_eq!(card, n as i64, "ZCARD {key}");
    let mut p = redis::pipe();
    let page = 10_000;
    for start in (0..n).step_by(page) {
        p.cmd("ZREVRANGE")
            .arg(key)
            .arg(start)
            .arg(start + page - 1)
            .arg("WITHSCORES");
    }
    let replies: Vec<Value> = p.query(con).unwrap();
    for (k, v) in replies.iter().enumerate() {
        let start = k * page;
        let end = (start + page).min(n);
        check_flat_withscores(
            v,
            &board.entries[start..end],
            &format!("{key} page {start}"),
        );
    }
}

#[test]
fn leaderboard_service_flow() {
    let t0 = Instant::now();
    let srv = Podium::start(&[]);
    let mut con = srv.con();

    // 1. Load.
    let board = load(&mut con);
    check_whole_board(&mut con, &board, GLOBAL);
    let ties = board
        .entries
        .windows(2)
        .filter(|w| w[0].score == w[1].score)
        .count();
    assert!(
        ties > 1000,
        "the scores must exercise the member tie-break ({ties} ties)"
    );

    // 2. The read path, RESP2, one MULTI/EXEC per request.
    let ranks = sample_ranks();
    for &r in &ranks {
        read_path_resp2(&mut con, &board, r);
    }
    // A member that is not on the board.
    let mut p = redis::pipe();
    p.atomic();
    p.cmd("ZREVRANK").arg(GLOBAL).arg("player:nobody");
    p.cmd("ZREVRANK")
        .arg(GLOBAL)
        .arg("player:nobody")
        .arg("WITHSCORE");
    p.cmd("ZSCORE").arg(GLOBAL).arg("player:nobody");
    p.cmd("ZRANGE")
        .arg(GLOBAL)
        .arg(N)
        .arg(N + 10)
        .arg("REV")
        .arg("WITHSCORES");
    let replies: Vec<Value> = p.query(&mut con).unwrap();
    assert_eq!(
        replies,
        vec![Value::Nil, Value::Nil, Value::Nil, Value::Array(vec![])]
    );

    // 3. The same reads in RESP3.
    let mut con3 = srv.con3();
    for r in [0, 3, 7, 4242, N / 2, N - 3, N - 1] {
        read_path_resp3(&mut con3, &board, r);
    }

    // 4. The write path: score events go to the global and the weekly board in one
    // transaction, and the weekly key gets its TTL only once (EXPIRE ... NX).
    let top = board.entries[0].score;
    let events: Vec<(String, f64)> = vec![
        // From the middle to a new first place.
        (
            board.entries[50_000].member.clone(),
            top - board.entries[50_000].score + 0.25,
        ),
        // Down onto exactly the score of rank 300: tie broken by member bytes.
        (
            board.entries[10].member.clone(),
            board.entries[300].score - board.entries[10].score,
        ),
        // From the bottom to exactly the top score.
        (
            board.entries[N - 1].member.clone(),
            top - board.entries[N - 1].score,
        ),
        // Small moves in the middle.
        (board.entries[777].member.clone(), -0.25),
        (board.entries[12_345].member.clone(), 1.5),
    ];
    let mut global = board;
    let mut weekly = Board::new(Vec::new());
    for (round, batch) in [&events[..3], &events[3..]].into_iter().enumerate() {
        let mut p = redis::pipe();
        p.atomic();
        for (m, by) in batch {
            p.cmd("ZINCRBY").arg(GLOBAL).arg(fmt_score(*by)).arg(m);
            p.cmd("ZINCRBY").arg(WEEKLY).arg(fmt_score(*by)).arg(m);
        }
        p.cmd("EXPIRE").arg(WEEKLY).arg(WEEK_TTL).arg("NX");
        let replies: Vec<Value> = p.query(&mut con).unwrap();
        assert_eq!(replies.len(), batch.len() * 2 + 1);
        for (k, (m, by)) in batch.iter().enumerate() {
            global = global.incr(m, *by);
            weekly = weekly.incr(m, *by);
            assert_eq!(
                text(&replies[2 * k], "ZINCRBY global"),
                fmt_score(global.score(m)),
                "{m}"
            );
            assert_eq!(
                text(&replies[2 * k + 1], "ZINCRBY weekly"),
                fmt_score(weekly.score(m)),
                "{m}"
            );
        }
        let set = int(replies.last().unwrap(), "EXPIRE NX");
        assert_eq!(
            set,
            if round == 0 { 1 } else { 0 },
            "EXPIRE NX in round {round}"
        );
    }
    for (m, _) in &events {
        let (r, wr): (i64, i64) = redis::pipe()
            .cmd("ZREVRANK")
            .arg(GLOBAL)
            .arg(m)
            .cmd("ZREVRANK")
            .arg(WEEKLY)
            .arg(m)
            .query(&mut con)
            .unwrap();
        assert_eq!(r, global.rank[m] as i64, "global rank of {m} after ZINCRBY");
        assert_eq!(
            wr, weekly.rank[m] as i64,
            "weekly rank of {m} after ZINCRBY"
        );
    }
    assert_eq!(
        global.rank[&events[0].0], 0,
        "the model's own premise: the climber leads"
    );
    check_whole_board(&mut con, &global, GLOBAL);
    check_whole_board(&mut con, &weekly, WEEKLY);
    for &r in &[0, 1, 2, 5, 295, 300, 305, 777, 12_345, N - 1] {
        read_path_resp2(&mut con, &global, r);
    }
    let ttl: i64 = redis::cmd("TTL").arg(WEEKLY).query(&mut con).unwrap();
    assert!(
        ttl > WEEK_TTL - 10 && ttl <= WEEK_TTL,
        "TTL {WEEKLY} = {ttl}"
    );
    let gttl: i64 = redis::cmd("TTL").arg(GLOBAL).query(&mut con).unwrap();
    assert_eq!(gttl, -1, "the global board never expires");

    eprintln!("leaderboard_service_flow: {:?}", t0.elapsed());
}
