//! DEBUG DIGEST, DIGEST-VALUE and POPULATE against a real redis-server 7.0: the same commands
//! on both servers must give the same digests (Redis's tests compare datasets this way), and
//! DEBUG RELOAD must keep the digest.

use crate::common;

use common::{require_tool, Launch, Podium};

fn start(prog: &str) -> Podium {
    Launch::prog(prog)
        .args(&["--save", "", "--enable-debug-command", "yes"])
        .start()
}

fn run(c: &mut redis::Connection, args: &[&str]) -> redis::Value {
    redis::cmd(args[0])
        .arg(&args[1..])
        .query::<redis::Value>(c)
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn digest(c: &mut redis::Connection) -> String {
    redis::cmd("DEBUG")
        .arg("DIGEST")
        .query(c)
        .expect("DEBUG DIGEST")
}

/// Every type in small and large encodings, integers, expiries, two databases.
fn fill(srv: &Podium) {
    let mut c = srv.con();
    let many: Vec<String> = (0..300).map(|i| format!("m{i}")).collect();
    let ints: Vec<String> = (0..600).map(|i| (i * 7 - 1000).to_string()).collect();
    let mut cmds: Vec<Vec<String>> = vec![
        vec!["SET".into(), "s".into(), "hello".into()],
        vec!["SET".into(), "n".into(), "12345".into()],
        vec!["SET".into(), "f".into(), "1.5".into()],
        vec![
            "SET".into(),
            "ttl".into(),
            "x".into(),
            "EX".into(),
            "1000".into(),
        ],
        vec![
            "RPUSH".into(),
            "l".into(),
            "a".into(),
            "1".into(),
            "b".into(),
        ],
        vec![
            "SADD".into(),
            "si".into(),
            "1".into(),
            "-7".into(),
            "300".into(),
        ],
        vec!["SADD".into(), "ss".into(), "x".into(), "y".into()],
        vec![
            "ZADD".into(),
            "z".into(),
            "1".into(),
            "a".into(),
            "2.5".into(),
            "b".into(),
            "-inf".into(),
            "c".into(),
            "0.1".into(),
            "12".into(),
        ],
        vec![
            "HSET".into(),
            "h".into(),
            "f".into(),
            "v".into(),
            "n".into(),
            "1".into(),
        ],
        vec!["PEXPIRE".into(), "h".into(), "900000".into()],
    ];
    let mut big_l = vec!["RPUSH".to_string(), "bl".into()];
    big_l.extend(many.iter().cloned());
    let mut big_s = vec!["SADD".to_string(), "bs".into()];
    big_s.extend(many.iter().cloned());
    let mut big_i = vec!["SADD".to_string(), "bi".into()];
    big_i.extend(ints.iter().cloned());
    let mut big_z = vec!["ZADD".to_string(), "bz".into()];
    for (i, m) in many.iter().enumerate() {
        big_z.push(format!("{}", i as f64 / 3.0));
        big_z.push(m.clone());
    }
    let mut big_h = vec!["HSET".to_string(), "bh".into()];
    for m in &many {
        big_h.push(m.clone());
        big_h.push(format!("value-of-{m}"));
    }
    cmds.extend([big_l, big_s, big_i, big_z, big_h]);
    for cmd in &cmds {
        let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
        run(&mut c, &args);
    }
    let mut c5 = srv.con_db(5);
    run(&mut c5, &["SET", "s", "hello"]);
    run(&mut c5, &["ZINCRBY", "z", "3", "m"]);
}

#[test]
fn digests_equal_redis_servers_for_the_same_data() {
    let Some(redis_server) = require_tool("redis-server") else {
        return;
    };
    let podium = start(env!("CARGO_BIN_EXE_podium"));
    let redis = start(&redis_server);
    let (mut pc, mut rc) = (podium.con(), redis.con());
    assert_eq!(digest(&mut pc), "0".repeat(40));
    assert_eq!(digest(&mut rc), "0".repeat(40));

    fill(&podium);
    fill(&redis);
    let p = digest(&mut pc);
    assert_ne!(p, "0".repeat(40));
    assert_eq!(p, digest(&mut rc), "DEBUG DIGEST");

    let keys = [
        "s", "n", "f", "ttl", "l", "si", "ss", "z", "h", "bl", "bs", "bi", "bz", "bh", "none",
    ];
    let values = |c: &mut redis::Connection| -> redis::Value {
        redis::cmd("DEBUG")
            .arg("DIGEST-VALUE")
            .arg(&keys[..])
            .query(c)
            .expect("DIGEST-VALUE")
    };
    assert_eq!(values(&mut pc), values(&mut rc), "DEBUG DIGEST-VALUE");

    // A change of order in a list, of a score, of a TTL's presence changes the digest.
    for c in [&mut pc, &mut rc] {
        run(c, &["LSET", "l", "0", "b"]);
        run(c, &["LSET", "l", "2", "a"]);
    }
    let after_lset = digest(&mut pc);
    assert_ne!(after_lset, p);
    assert_eq!(after_lset, digest(&mut rc));
    for c in [&mut pc, &mut rc] {
        run(c, &["PERSIST", "ttl"]);
        run(c, &["ZINCRBY", "bz", "0.5", "m7"]);
    }
    assert_eq!(digest(&mut pc), digest(&mut rc));

    // POPULATE: Redis's names and values, existing keys kept, sizes cut or padded.
    for c in [&mut pc, &mut rc] {
        run(c, &["SET", "key:3", "mine"]);
        run(c, &["DEBUG", "POPULATE", "20"]);
        run(c, &["DEBUG", "POPULATE", "5", "cut", "3"]);
        run(c, &["DEBUG", "POPULATE", "5", "pad", "40"]);
    }
    assert_eq!(digest(&mut pc), digest(&mut rc), "after POPULATE");
    let get = |c: &mut redis::Connection, k: &str| -> Vec<u8> {
        redis::cmd("GET").arg(k).query(c).expect("GET")
    };
    assert_eq!(get(&mut pc, "key:3"), b"mine");
    assert_eq!(get(&mut pc, "key:19"), b"value:19");
    assert_eq!(get(&mut pc, "cut:4"), b"val");
    let mut padded = b"value:2".to_vec();
    padded.resize(40, 0);
    assert_eq!(get(&mut pc, "pad:2"), padded);
    for arg in ["-1", "x"] {
        let p: redis::RedisResult<String> =
            redis::cmd("DEBUG").arg("POPULATE").arg(arg).query(&mut pc);
        let r: redis::RedisResult<String> =
            redis::cmd("DEBUG").arg("POPULATE").arg(arg).query(&mut rc);
        assert_eq!(
            p.expect_err("refused").to_string(),
            r.expect_err("refused").to_string()
        );
    }

    // DEBUG RELOAD keeps the dataset, so the digest.
    let before = digest(&mut pc);
    let reloaded: String = redis::cmd("DEBUG")
        .arg("RELOAD")
        .query(&mut pc)
        .expect("DEBUG RELOAD");
    assert_eq!(reloaded, "OK");
    assert_eq!(digest(&mut pc), before);
}
