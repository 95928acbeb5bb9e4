//! Streams end to end: entries, consumer groups and a blocked XREADGROUP through a client
//! library, and the AOF (as commands are logged, and after a rewrite) bringing back the same
//! stream, groups and pending entries after a restart.

use crate::common;

use common::{Launch, Podium};
use std::time::Duration;

fn start(dir: &std::path::Path, extra: &[&str]) -> Podium {
    let mut args = vec!["--dir", dir.to_str().expect("UTF-8 dir"), "--save", ""];
    args.extend_from_slice(extra);
    Launch::podium()
        .args(&args)
        .wait_loaded()
        .timeout(Duration::from_secs(30))
        .start()
}

fn q(p: &Podium, args: &[&str]) -> redis::Value {
    redis::cmd(args[0])
        .arg(&args[1..])
        .query(&mut p.con())
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// The state a restart must reproduce (XPENDING's summary: no idle times in it).
fn view(p: &Podium) -> String {
    format!(
        "{:?} {:?} {:?} {:?}",
        q(p, &["XRANGE", "s", "-", "+"]),
        q(p, &["XINFO", "GROUPS", "s"]),
        q(p, &["XPENDING", "s", "g"]),
        q(p, &["XINFO", "STREAM", "s"]),
    )
}

fn fill(p: &Podium) {
    for i in 1..=20 {
        q(p, &["XADD", "s", "*", "n", &i.to_string()]);
    }
    q(p, &["XADD", "s", "MAXLEN", "~", "15", "*", "n", "21"]);
    q(p, &["XDEL", "s", "0-1"]);
    q(p, &["XGROUP", "CREATE", "s", "g", "0"]);
    q(
        p,
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "a",
            "COUNT",
            "4",
            "STREAMS",
            "s",
            ">",
        ],
    );
    q(
        p,
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "b",
            "NOACK",
            "COUNT",
            "2",
            "STREAMS",
            "s",
            ">",
        ],
    );
    q(p, &["XGROUP", "CREATECONSUMER", "s", "g", "c"]);
}

#[test]
fn entries_groups_and_a_blocked_reader() {
    let dir = tempfile::tempdir().expect("dir");
    let p = start(dir.path(), &[]);
    fill(&p);
    let len: i64 = redis::cmd("XLEN")
        .arg("s")
        .query(&mut p.con())
        .expect("XLEN");
    assert_eq!(len, 21);
    let t: String = redis::cmd("TYPE")
        .arg("s")
        .query(&mut p.con())
        .expect("TYPE");
    assert_eq!(t, "stream");
    // A blocked group reader (of a group with nothing new) is served by the next XADD.
    q(&p, &["XGROUP", "CREATE", "s", "fresh", "$"]);
    let mut reader = p.con();
    let waiter = std::thread::spawn(move || {
        redis::cmd("XREADGROUP")
            .arg(&["GROUP", "fresh", "z", "BLOCK", "5000", "STREAMS", "s", ">"])
            .query::<redis::Value>(&mut reader)
            .expect("XREADGROUP")
    });
    // Let it block (the consumer must not exist before it is served).
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let info: String = redis::cmd("INFO")
            .arg("clients")
            .query(&mut p.con())
            .expect("INFO");
        if info.contains("blocked_clients:1") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never blocked");
        std::thread::sleep(Duration::from_millis(10));
    }
    q(&p, &["XADD", "s", "*", "n", "new"]);
    let got = format!("{:?}", waiter.join().expect("reader"));
    assert!(got.contains("new"), "{got}");
    let pending = format!("{:?}", q(&p, &["XPENDING", "s", "fresh"]));
    assert!(pending.contains("\"z\""), "{pending}");
    // Errors are Redis's.
    let e = redis::cmd("XADD")
        .arg(&["s", "1-1", "f", "v"])
        .query::<redis::Value>(&mut p.con())
        .expect_err("an old ID");
    assert!(
        e.to_string()
            .contains("equal or smaller than the target stream top item"),
        "{e}"
    );
}

#[test]
fn the_aof_and_its_rewrite_bring_streams_back() {
    let dir = tempfile::tempdir().expect("dir");
    let p = start(dir.path(), &["--appendonly", "yes"]);
    fill(&p);
    let want = view(&p);
    p.stop();
    // Replaying the logged commands (XADD with generated IDs, XCLAIM, XGROUP SETID ...).
    let p = start(dir.path(), &["--appendonly", "yes"]);
    assert_eq!(view(&p), want);
    // After BGREWRITEAOF (XADD + XSETID + XGROUP CREATE + XCLAIM per pending entry).
    q(&p, &["BGREWRITEAOF"]);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let info: String = redis::cmd("INFO")
            .arg("persistence")
            .query(&mut p.con())
            .expect("INFO");
        if info.contains("aof_rewrite_in_progress:0") && info.contains("aof_rewrite_scheduled:0") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "rewrite never ended");
        std::thread::sleep(Duration::from_millis(20));
    }
    p.stop();
    let p = start(dir.path(), &["--appendonly", "yes"]);
    assert_eq!(view(&p), want);
}
