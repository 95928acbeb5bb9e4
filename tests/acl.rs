//! ACL users end to end: AUTH and HELLO AUTH, requirepass as the default user's password,
//! command/key/channel permissions with Redis's NOPERM texts (top level, inside MULTI, at
//! EXEC, inside scripts), the ACL LOG, DELUSER disconnecting clients, `user` directives and
//! `aclfile` with ACL SAVE/LOAD, and `rename-command`. The same exchanges are compared with
//! redis-server (needed: without it the test fails unless PODIUM_ALLOW_SKIP=1).

use crate::common;

use common::{require_tool, Launch, Podium};
use redis::{Connection, Value};

fn q(con: &mut Connection, args: &[&str]) -> Result<Value, String> {
    redis::cmd(args[0])
        .arg(&args[1..])
        .query::<Value>(con)
        .map_err(|e| e.to_string())
}

fn ok(con: &mut Connection, args: &[&str]) {
    q(con, args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
}

fn err(con: &mut Connection, args: &[&str]) -> String {
    match q(con, args) {
        Ok(v) => panic!("{args:?} succeeded: {v:?}"),
        Err(e) => e,
    }
}

fn text(v: Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
        Value::SimpleString(s) => s,
        Value::Okay => "OK".into(),
        other => format!("{other:?}"),
    }
}

/// The exchanges compared with redis-server: each step's reply (or error) as text.
fn scenario(port: u16) -> Vec<String> {
    let url = format!("redis://127.0.0.1:{port}/");
    let mut admin = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let mut out = Vec::new();
    let mut step = |con: &mut Connection, args: &[&str]| {
        out.push(match q(con, args) {
            Ok(v) => text(v),
            Err(e) => format!("ERR: {e}"),
        })
    };
    step(
        &mut admin,
        &[
            "ACL",
            "SETUSER",
            "alice",
            "on",
            ">pw",
            "~lb:*",
            "+@read",
            "+@sortedset",
            "-@dangerous",
        ],
    );
    let mut alice = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    step(&mut alice, &["AUTH", "alice", "wrong"]);
    step(&mut alice, &["AUTH", "alice", "pw"]);
    step(&mut alice, &["ACL", "WHOAMI"]);
    step(&mut alice, &["ZADD", "lb:1", "1", "a"]);
    step(&mut alice, &["ZADD", "other", "1", "a"]);
    step(&mut alice, &["SET", "lb:x", "1"]);
    step(&mut alice, &["ZSCORE", "lb:1", "a"]);
    step(&mut admin, &["ACL", "DRYRUN", "alice", "GET", "lb:1"]);
    step(&mut admin, &["ACL", "DRYRUN", "alice", "GET", "x"]);
    step(&mut admin, &["ACL", "DRYRUN", "alice", "SET", "lb:1", "v"]);
    step(&mut admin, &["ACL", "DRYRUN", "nobody", "GET", "x"]);
    step(&mut admin, &["ACL", "SETUSER", "bad", "+nosuch"]);
    step(
        &mut admin,
        &["ACL", "SETUSER", "bad", "~x", "allkeys", "~y"],
    );
    step(&mut admin, &["ACL", "SETUSER", "bad", "#1234"]);
    step(&mut admin, &["ACL", "SETUSER", "bad", "(", "+get"]);
    step(&mut admin, &["ACL", "SETUSER", "bad", "+config|get|x"]);
    step(&mut admin, &["ACL", "SETUSER", "has space"]);
    step(&mut admin, &["ACL", "DELUSER", "default"]);
    step(&mut admin, &["ACL", "CAT", "nosuch"]);
    step(&mut admin, &["ACL", "GENPASS", "0"]);
    step(&mut admin, &["ACL", "SAVE"]);
    step(
        &mut admin,
        &[
            "ACL",
            "SETUSER",
            "sel",
            "on",
            "nopass",
            "-@all",
            "(+get ~g*)",
            "(+set ~s*)",
        ],
    );
    step(&mut admin, &["ACL", "DRYRUN", "sel", "GET", "g1"]);
    step(&mut admin, &["ACL", "DRYRUN", "sel", "GET", "s1"]);
    step(&mut admin, &["ACL", "DRYRUN", "sel", "SET", "s1", "v"]);
    step(
        &mut admin,
        &["ACL", "SETUSER", "rw", "%R~r*", "%W~w*", "+@all"],
    );
    step(
        &mut admin,
        &["ACL", "DRYRUN", "rw", "ZUNIONSTORE", "w", "2", "r1", "r2"],
    );
    step(
        &mut admin,
        &["ACL", "DRYRUN", "rw", "ZUNIONSTORE", "w", "2", "r1", "w2"],
    );
    step(&mut admin, &["ACL", "DRYRUN", "rw", "SET", "w", "v", "GET"]);
    step(&mut admin, &["ACL", "DRYRUN", "rw", "COPY", "r1", "w1"]);
    step(&mut admin, &["ACL", "GETUSER"]);
    step(&mut admin, &["ACL", "HELP", "extra"]);
    // SORT's BY and GET patterns need read access to every key.
    step(&mut admin, &["RPUSH", "mylist", "1"]);
    step(
        &mut admin,
        &[
            "ACL", "SETUSER", "sorter", "on", "nopass", "+sort", "~mylist",
        ],
    );
    let mut sorter = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    step(&mut sorter, &["AUTH", "sorter", "x"]);
    step(&mut sorter, &["SORT", "mylist", "BY", "v*"]);
    step(&mut sorter, &["SORT", "mylist", "GET", "#"]);
    step(&mut sorter, &["SORT", "mylist", "BY", "nosort"]);
    step(&mut admin, &["ACL", "SETUSER", "sorter", "%R~*"]);
    step(&mut sorter, &["SORT", "mylist", "BY", "v*"]);
    step(
        &mut admin,
        &["ACL", "DELUSER", "bad", "sel", "rw", "sorter"],
    );
    step(&mut admin, &["ACL", "USERS"]);
    out
}

#[test]
fn matches_redis_server() {
    let podium = Podium::start(&[]);
    let ours = scenario(podium.port);
    let Some(redis_server) = require_tool("redis-server") else {
        // Skipping allowed: Podium's replies are still checked against the expected texts.
        assert!(ours[1].contains("WRONGPASS"), "{ours:?}");
        return;
    };
    let redis = Launch::prog(&redis_server).args(&["--save", ""]).start();
    let theirs = scenario(redis.port);
    for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
        assert_eq!(a, b, "step {i}");
    }
    assert_eq!(ours.len(), theirs.len());
}

#[test]
fn requirepass_is_the_default_users_password() {
    let srv = Podium::start(&[]);
    let mut con = srv.con();
    ok(&mut con, &["CONFIG", "SET", "requirepass", "s3cret"]);
    let mut other = srv.con();
    assert!(err(&mut other, &["GET", "x"]).contains("NOAUTH"));
    assert!(err(&mut other, &["AUTH", "nope"]).contains("WRONGPASS"));
    ok(&mut other, &["AUTH", "s3cret"]);
    ok(&mut other, &["AUTH", "default", "s3cret"]);
    // HELLO AUTH authenticates and switches protocol at once.
    let mut third = srv.con();
    let hello = q(&mut third, &["HELLO", "2", "AUTH", "default", "s3cret"]).unwrap();
    assert!(format!("{hello:?}").contains("proto"));
    // The password is not in ACL LIST: only its hash.
    let list = text(q(&mut other, &["ACL", "LIST"]).unwrap());
    let list = format!("{list:?}");
    assert!(!list.contains("s3cret"), "{list}");
    // Back to no password.
    ok(&mut other, &["CONFIG", "SET", "requirepass", ""]);
    let mut fourth = srv.con();
    ok(&mut fourth, &["GET", "x"]);
}

#[test]
fn multi_exec_and_scripts_are_checked() {
    let srv = Podium::start(&[]);
    let mut admin = srv.con();
    ok(
        &mut admin,
        &[
            "ACL",
            "SETUSER",
            "u",
            "on",
            ">p",
            "~k*",
            "+@all",
            "-flushall",
        ],
    );
    let mut u = srv.con();
    ok(&mut u, &["AUTH", "u", "p"]);
    // Queued commands are checked when queued: the transaction is then aborted.
    ok(&mut u, &["MULTI"]);
    assert!(err(&mut u, &["SET", "nope", "1"]).contains("NOPERM"));
    let e = err(&mut u, &["EXEC"]);
    assert!(
        e.contains("Transaction discarded because of previous errors"),
        "{e}"
    );
    // And again at EXEC, when the rules changed in between.
    ok(&mut u, &["MULTI"]);
    ok(&mut u, &["SET", "k1", "1"]);
    ok(&mut admin, &["ACL", "SETUSER", "u", "-set"]);
    let exec = q(&mut u, &["EXEC"]);
    let shown = format!("{exec:?}");
    assert!(
        shown.contains("ACLs rules changed between the moment the transaction was accumulated and the EXEC call"),
        "{shown}"
    );
    let got: Option<String> = redis::cmd("GET").arg("k1").query(&mut admin).unwrap();
    assert_eq!(got, None);
    // Scripts call commands through the same check.
    let e = err(&mut u, &["EVAL", "return redis.call('get', 'other')", "0"]);
    assert!(
        e.contains("The user executing the script can't access at least one of the keys"),
        "{e}"
    );
    // Everything above is in the ACL LOG, newest first.
    let log = format!("{:?}", q(&mut admin, &["ACL", "LOG"]).unwrap());
    assert!(
        log.contains("lua") && log.contains("multi") && log.contains("nope"),
        "{log}"
    );
}

#[test]
fn deleting_a_user_disconnects_its_clients() {
    let srv = Podium::start(&[]);
    let mut admin = srv.con();
    ok(
        &mut admin,
        &["ACL", "SETUSER", "gone", "on", "nopass", "+@all", "~*"],
    );
    let mut u = srv.con();
    ok(&mut u, &["AUTH", "gone", "x"]);
    ok(&mut u, &["PING"]);
    ok(&mut admin, &["ACL", "DELUSER", "gone"]);
    assert!(q(&mut u, &["PING"]).is_err());
}

/// The CLIENT LIST lines whose `name=` is `name`.
fn clients_named(con: &mut Connection, name: &str) -> Vec<String> {
    let list = text(q(con, &["CLIENT", "LIST"]).unwrap());
    list.lines()
        .filter(|l| l.contains(&format!(" name={name} ")))
        .map(str::to_string)
        .collect()
}

/// Wait up to 2 s for no client named `name` to be listed.
fn gone_from_client_list(con: &mut Connection, name: &str) -> bool {
    for _ in 0..200 {
        if clients_named(con, name).is_empty() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    false
}

#[test]
fn client_list_names_the_user_and_deleted_users_clients_go_at_once() {
    let srv = Podium::start(&[]);
    let mut admin = srv.con();
    ok(
        &mut admin,
        &["ACL", "SETUSER", "ana", "on", ">pw", "+@all", "~*"],
    );
    let mut u = srv.con();
    ok(&mut u, &["AUTH", "ana", "pw"]);
    ok(&mut u, &["CLIENT", "SETNAME", "victim"]);
    let lines = clients_named(&mut admin, "victim");
    assert_eq!(lines.len(), 1);
    assert!(lines[0].contains(" user=ana "), "{}", lines[0]);
    // CLIENT KILL USER names a user that must exist.
    let e = err(&mut admin, &["CLIENT", "KILL", "USER", "nobody"]);
    assert!(e.contains("No such user 'nobody'"), "{e}");
    // The client is gone from CLIENT LIST without sending anything more (Redis frees it at
    // once, not at its next command).
    ok(&mut admin, &["ACL", "DELUSER", "ana"]);
    assert!(gone_from_client_list(&mut admin, "victim"));
    // ACL SETUSER that only changes a password keeps the clients (as Redis 7.0).
    ok(
        &mut admin,
        &["ACL", "SETUSER", "bo", "on", ">pw", "+@all", "~*"],
    );
    let mut b = srv.con();
    ok(&mut b, &["AUTH", "bo", "pw"]);
    ok(&mut admin, &["ACL", "SETUSER", "bo", "resetpass", ">other"]);
    ok(&mut b, &["PING"]);
}

#[test]
fn subscribers_losing_channel_permission_are_disconnected() {
    let srv = Podium::start(&[]);
    let mut admin = srv.con();
    ok(
        &mut admin,
        &[
            "ACL",
            "SETUSER",
            "ps",
            "on",
            ">pw",
            "+@all",
            "~*",
            "resetchannels",
            "&news.*",
            "&sport",
        ],
    );
    // A subscriber whose channel stays allowed survives; one whose pattern is revoked goes.
    let mut keep = srv.con();
    ok(&mut keep, &["AUTH", "ps", "pw"]);
    ok(&mut keep, &["CLIENT", "SETNAME", "keeper"]);
    let mut pubsub = srv.con();
    ok(&mut pubsub, &["AUTH", "ps", "pw"]);
    ok(&mut pubsub, &["CLIENT", "SETNAME", "reader"]);
    let _: Value = redis::cmd("PSUBSCRIBE")
        .arg("news.*")
        .query(&mut pubsub)
        .unwrap();
    let _: Value = redis::cmd("SUBSCRIBE")
        .arg("sport")
        .query(&mut keep)
        .unwrap();
    // Adding a channel: nothing is revoked.
    ok(&mut admin, &["ACL", "SETUSER", "ps", "&more"]);
    assert_eq!(clients_named(&mut admin, "reader").len(), 1);
    // `news.*` goes: the pattern subscriber is disconnected, the `sport` one stays.
    ok(
        &mut admin,
        &[
            "ACL",
            "SETUSER",
            "ps",
            "resetchannels",
            "&sport",
            "&news.local",
        ],
    );
    assert!(gone_from_client_list(&mut admin, "reader"));
    assert_eq!(clients_named(&mut admin, "keeper").len(), 1);
}

#[test]
fn acllog_max_len_bounds_the_log() {
    let srv = Podium::start(&["--acllog-max-len", "2"]);
    let mut admin = srv.con();
    for user in ["a", "b", "c"] {
        let mut c = srv.con();
        let _ = q(&mut c, &["AUTH", user, "x"]);
    }
    match q(&mut admin, &["ACL", "LOG"]).unwrap() {
        Value::Array(entries) => assert_eq!(entries.len(), 2),
        other => panic!("{other:?}"),
    }
    ok(&mut admin, &["ACL", "LOG", "RESET"]);
    assert_eq!(
        q(&mut admin, &["ACL", "LOG"]).unwrap(),
        Value::Array(vec![])
    );
}

#[test]
fn users_from_the_config_file_and_aclfile() {
    let tmp = tempfile::tempdir().unwrap();
    let conf = tmp.path().join("p.conf");
    std::fs::write(
        &conf,
        "bind 127.0.0.1\nuser default on nopass ~* &* +@all\nuser reader on >r ~* +@read\n",
    )
    .unwrap();
    let srv = Launch::podium().config_file(conf.to_str().unwrap()).start();
    let mut con = srv.con();
    let users = format!("{:?}", q(&mut con, &["ACL", "USERS"]).unwrap());
    assert!(users.contains("reader"), "{users}");
    assert!(err(&mut con, &["ACL", "SAVE"]).contains("not configured to use an ACL file"));
    drop(srv);

    // An ACL file: loaded at startup, saved and reloaded.
    let aclfile = tmp.path().join("users.acl");
    std::fs::write(&aclfile, "user w on >pw ~* +@write\n").unwrap();
    let srv = Podium::start(&["--aclfile", aclfile.to_str().unwrap()]);
    let mut con = srv.con();
    let mut w = srv.con();
    ok(&mut w, &["AUTH", "w", "pw"]);
    ok(&mut con, &["ACL", "SETUSER", "extra", "on", "nopass"]);
    ok(&mut con, &["ACL", "SAVE"]);
    let saved = std::fs::read_to_string(&aclfile).unwrap();
    assert!(saved.contains("user extra on nopass"), "{saved}");
    assert!(!saved.contains(">pw") && saved.contains("#"), "{saved}");
    std::fs::write(&aclfile, "user only on nopass +@all ~*\nbogus line\n").unwrap();
    let e = err(&mut con, &["ACL", "LOAD"]);
    assert!(e.contains("should start with user keyword"), "{e}");
    std::fs::write(&aclfile, "user only on nopass +@all ~*\n").unwrap();
    ok(&mut con, &["ACL", "LOAD"]);
    let users = format!("{:?}", q(&mut con, &["ACL", "USERS"]).unwrap());
    assert!(
        users.contains("only") && !users.contains("extra"),
        "{users}"
    );

    // Both at once is refused at startup, as Redis.
    std::fs::write(
        &conf,
        format!("bind 127.0.0.1\nuser x on\naclfile {}\n", aclfile.display()),
    )
    .unwrap();
    let r = Launch::podium()
        .config_file(conf.to_str().unwrap())
        .log(&tmp.path().join("both"))
        .try_start();
    let log = r.err().expect("must not start");
    assert!(log.contains("but not both"), "{log}");
}

#[test]
fn rename_command_renames_and_disables() {
    let tmp = tempfile::tempdir().unwrap();
    let conf = tmp.path().join("r.conf");
    std::fs::write(
        &conf,
        "bind 127.0.0.1\nrename-command flushall \"\"\nrename-command set put\n",
    )
    .unwrap();
    let srv = Launch::podium().config_file(conf.to_str().unwrap()).start();
    let mut con = srv.con();
    assert!(err(&mut con, &["FLUSHALL"]).contains("unknown command"));
    assert!(err(&mut con, &["SET", "a", "1"]).contains("unknown command"));
    ok(&mut con, &["PUT", "a", "1"]);
    let v: String = redis::cmd("GET").arg("a").query(&mut con).unwrap();
    assert_eq!(v, "1");
    // Renaming a command that does not exist is a startup error.
    std::fs::write(&conf, "bind 127.0.0.1\nrename-command nosuch x\n").unwrap();
    let r = Launch::podium()
        .config_file(conf.to_str().unwrap())
        .log(&tmp.path().join("bad"))
        .try_start();
    let log = r.err().expect("must not start");
    assert!(log.contains("No such command in rename-command"), "{log}");
}
