//! Cluster mode against the real binaries: a three-node Podium cluster made by
//! `redis-cli --cluster create`, MOVED / ASK / CROSSSLOT routing, nodes.conf after a restart,
//! a mixed cluster of Podium and redis-server 7.0 nodes whose CLUSTER NODES agree, and
//! replicas (CLUSTER REPLICATE, `--cluster-replicas`, Podium and redis-server following
//! each other).
//!
//! Nodes listen on fixed ports (each test its own block, the bus port set with
//! `cluster-port` so it stays in the block): the cluster's addresses are in nodes.conf and
//! in every node's table, so they cannot be picked afresh on a retry as other tests do.

use crate::common;

use common::require_tool;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A node process, killed on drop.
pub(crate) struct Node {
    child: Child,
    pub(crate) port: u16,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn podium_bin() -> String {
    env!("CARGO_BIN_EXE_podium").to_string()
}

/// Start `bin` in cluster mode on `port` (bus on port + 1000) with its files in `dir`.
pub(crate) fn start(bin: &str, port: u16, dir: &Path) -> Node {
    start_with(bin, port, dir, &[])
}

/// [`start`] with more arguments.
fn start_with(bin: &str, port: u16, dir: &Path, extra: &[&str]) -> Node {
    std::fs::create_dir_all(dir).expect("node dir");
    let log = std::fs::File::create(dir.join("log")).expect("log");
    let child = Command::new(bin)
        .current_dir(dir)
        .args([
            "--port",
            &port.to_string(),
            "--cluster-port",
            &(port + 1000).to_string(),
            "--bind",
            "127.0.0.1",
            "--cluster-enabled",
            "yes",
            "--cluster-node-timeout",
            "3000",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args(extra)
        .stdout(Stdio::from(log.try_clone().expect("log")))
        .stderr(Stdio::from(log))
        .spawn()
        .expect("spawn node");
    let node = Node { child, port };
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(mut c) = redis::Client::open(format!("redis://127.0.0.1:{port}"))
            .and_then(|c| c.get_connection())
        {
            if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                return node;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!(
        "{bin} did not start on {port}: {}",
        std::fs::read_to_string(dir.join("log")).unwrap_or_default()
    );
}

pub(crate) fn con(port: u16) -> redis::Connection {
    redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .and_then(|c| c.get_connection())
        .expect("connect")
}

pub(crate) fn cmd(port: u16, args: &[&str]) -> redis::RedisResult<redis::Value> {
    let mut c = con(port);
    let mut k = redis::cmd(args[0]);
    for a in &args[1..] {
        k.arg(*a);
    }
    k.query(&mut c)
}

pub(crate) fn text(port: u16, args: &[&str]) -> String {
    match cmd(port, args).expect("command") {
        redis::Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
        redis::Value::VerbatimString { text, .. } => text,
        redis::Value::SimpleString(s) => s,
        redis::Value::Int(i) => i.to_string(),
        v => format!("{v:?}"),
    }
}

fn err_text(r: redis::RedisResult<redis::Value>) -> String {
    let e = r.expect_err("an error reply");
    format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or(""))
        .trim()
        .to_string()
}

pub(crate) fn wait_for(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("timed out waiting for {what}");
}

pub(crate) fn cluster_ok(port: u16) -> bool {
    text(port, &["CLUSTER", "INFO"]).contains("cluster_state:ok")
}

/// CLUSTER NODES as a set of (id, address, role, master, slots) lines, without the flags
/// that differ by point of view (myself, ping times, link state).
pub(crate) fn nodes_view(port: u16) -> Vec<String> {
    let mut v: Vec<String> = text(port, &["CLUSTER", "NODES"])
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let role = f[2].replace("myself,", "");
            format!("{} {} {} {} {}", f[0], f[1], role, f[3], f[8..].join(" "))
        })
        .collect();
    v.sort();
    v
}

fn create(nodes: &[&Node]) {
    create_with_replicas(nodes, 0)
}

fn create_with_replicas(nodes: &[&Node], replicas: usize) {
    let cli = require_tool("redis-cli").expect("redis-cli");
    let addrs: Vec<String> = nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port))
        .collect();
    let out = Command::new(cli)
        .args(["--cluster", "create"])
        .args(&addrs)
        .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
        .output()
        .expect("redis-cli --cluster create");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("[OK] All 16384 slots covered"),
        "redis-cli --cluster create: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_podium_cluster_made_by_redis_cli_routes_and_restarts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ports = [28101u16, 28102, 28103];
    let mut nodes: Vec<Node> = ports
        .iter()
        .map(|&p| start(&podium_bin(), p, &dir.path().join(p.to_string())))
        .collect();
    create(&nodes.iter().collect::<Vec<_>>());
    for &p in &ports {
        wait_for("cluster_state:ok", 30, || cluster_ok(p));
    }
    wait_for("CLUSTER NODES to agree", 30, || {
        let first = nodes_view(ports[0]);
        first.len() == 3 && ports.iter().all(|&p| nodes_view(p) == first)
    });
    // "foo" is slot 12182: the node serving it answers, the others redirect there.
    assert_eq!(text(ports[0], &["CLUSTER", "KEYSLOT", "foo"]), "12182");
    let owner = *ports
        .iter()
        .find(|&&p| cmd(p, &["SET", "foo", "bar"]).is_ok())
        .expect("one node serves foo");
    for &p in ports.iter().filter(|&&p| p != owner) {
        assert_eq!(
            err_text(cmd(p, &["GET", "foo"])),
            format!("MOVED 12182 127.0.0.1:{owner}")
        );
    }
    assert_eq!(
        err_text(cmd(owner, &["MSET", "foo", "1", "bar", "2"])),
        "CROSSSLOT Keys in request don't hash to the same slot"
    );
    assert_eq!(
        err_text(cmd(owner, &["SELECT", "1"])),
        "ERR SELECT is not allowed in cluster mode"
    );
    assert_eq!(text(owner, &["CLUSTER", "COUNTKEYSINSLOT", "12182"]), "1");
    assert_eq!(
        format!(
            "{:?}",
            cmd(owner, &["CLUSTER", "GETKEYSINSLOT", "12182", "10"]).unwrap()
        ),
        format!(
            "{:?}",
            redis::Value::Array(vec![redis::Value::BulkString(b"foo".to_vec())])
        )
    );
    // ASK: the owner migrates slot 12182 to another node; a key not here is asked for there.
    let target = *ports.iter().find(|&&p| p != owner).expect("another node");
    let target_id = text(target, &["CLUSTER", "MYID"]);
    let owner_id = text(owner, &["CLUSTER", "MYID"]);
    cmd(
        target,
        &["CLUSTER", "SETSLOT", "12182", "IMPORTING", &owner_id],
    )
    .unwrap();
    cmd(
        owner,
        &["CLUSTER", "SETSLOT", "12182", "MIGRATING", &target_id],
    )
    .unwrap();
    // "{foo}x" hashes to foo's slot and does not exist.
    assert_eq!(
        err_text(cmd(owner, &["GET", "{foo}x"])),
        format!("ASK 12182 127.0.0.1:{target}")
    );
    assert_eq!(text(owner, &["GET", "foo"]), "bar");
    let mut c = con(target);
    redis::cmd("ASKING").query::<()>(&mut c).unwrap();
    assert_eq!(
        redis::cmd("SET")
            .arg("{foo}x")
            .arg("1")
            .query::<String>(&mut c)
            .unwrap(),
        "OK"
    );
    // ASKING covers one command: the next one on the same connection is redirected.
    let next: redis::RedisResult<redis::Value> = redis::cmd("GET").arg("{foo}x").query(&mut c);
    assert!(
        err_text(next).starts_with("MOVED 12182"),
        "ASKING lasted past its command"
    );
    // Without ASKING the importing node redirects to the owner.
    assert!(err_text(cmd(target, &["GET", "{foo}x"])).starts_with("MOVED 12182"));
    cmd(owner, &["CLUSTER", "SETSLOT", "12182", "STABLE"]).unwrap();
    cmd(target, &["CLUSTER", "SETSLOT", "12182", "STABLE"]).unwrap();
    // nodes.conf brings a restarted node back with its ID, slots and peers.
    let i = ports.iter().position(|&p| p == owner).unwrap();
    let id_before = text(owner, &["CLUSTER", "MYID"]);
    let view_before = nodes_view(owner);
    drop(nodes.remove(i));
    let conf = std::fs::read_to_string(dir.path().join(owner.to_string()).join("nodes.conf"))
        .expect("nodes.conf");
    assert!(conf.contains("myself,master"), "{conf}");
    assert!(conf.contains("vars currentEpoch"), "{conf}");
    nodes.insert(
        i,
        start(&podium_bin(), owner, &dir.path().join(owner.to_string())),
    );
    assert_eq!(text(owner, &["CLUSTER", "MYID"]), id_before);
    wait_for("the restarted node to rejoin", 30, || {
        cluster_ok(owner) && nodes_view(owner) == view_before
    });
}

#[test]
fn podium_and_redis_server_nodes_form_one_cluster() {
    let Some(redis_server) = require_tool("redis-server") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let nodes = [
        start(&podium_bin(), 28201, &dir.path().join("a")),
        start(&redis_server, 28202, &dir.path().join("b")),
        start(&podium_bin(), 28203, &dir.path().join("c")),
    ];
    create(&nodes.iter().collect::<Vec<_>>());
    for n in &nodes {
        wait_for("cluster_state:ok on every node", 30, || cluster_ok(n.port));
    }
    wait_for("CLUSTER NODES to agree", 30, || {
        let first = nodes_view(nodes[0].port);
        first.len() == 3 && nodes.iter().all(|n| nodes_view(n.port) == first)
    });
    // Keys route across both kinds of node.
    for i in 0..50 {
        let key = format!("key:{i}");
        let slot: u16 = text(nodes[0].port, &["CLUSTER", "KEYSLOT", &key])
            .parse()
            .unwrap();
        let redis_slot: u16 = text(nodes[1].port, &["CLUSTER", "KEYSLOT", &key])
            .parse()
            .unwrap();
        assert_eq!(slot, redis_slot);
        let served: Vec<bool> = nodes
            .iter()
            .map(|n| cmd(n.port, &["SET", &key, "v"]).is_ok())
            .collect();
        assert_eq!(served.iter().filter(|s| **s).count(), 1, "{key}");
    }
    // PUBLISH crosses the bus from a Podium node to a redis-server subscriber.
    let mut sub = con(nodes[1].port);
    let mut ps = sub.as_pubsub();
    ps.subscribe("news").unwrap();
    ps.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    cmd(nodes[0].port, &["PUBLISH", "news", "hello"]).unwrap();
    let msg = ps.get_message().expect("the message reaches redis-server");
    assert_eq!(msg.get_payload::<String>().unwrap(), "hello");
}

fn current_epoch(port: u16) -> u64 {
    text(port, &["CLUSTER", "INFO"])
        .lines()
        .find_map(|l| l.strip_prefix("cluster_current_epoch:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("cluster_current_epoch")
}

pub(crate) fn myid(port: u16) -> String {
    text(port, &["CLUSTER", "MYID"])
}

/// The replication role line of ROLE: "master", or "slave <port> <state>".
pub(crate) fn role(port: u16) -> String {
    match cmd(port, &["ROLE"]).expect("ROLE") {
        redis::Value::Array(v) => v
            .iter()
            .filter_map(|x| match x {
                redis::Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
                redis::Value::Int(i) => Some(i.to_string()),
                _ => None,
            })
            .filter(|s| s != "127.0.0.1")
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
        v => format!("{v:?}"),
    }
}

/// GET `key` on `port` after READONLY, on one connection.
fn readonly_get(port: u16, key: &str) -> redis::RedisResult<Option<String>> {
    let mut c = con(port);
    redis::cmd("READONLY").query::<()>(&mut c)?;
    redis::cmd("GET").arg(key).query(&mut c)
}

/// Six Podium nodes made into 3 masters with a replica each by redis-cli, once every node
/// sees them so, with foo=bar written; and the port of the master serving foo.
fn three_masters_three_replicas(ports: &[u16], dir: &Path) -> (Vec<Node>, u16) {
    let nodes: Vec<Node> = ports
        .iter()
        .map(|&p| start(&podium_bin(), p, &dir.join(p.to_string())))
        .collect();
    create_with_replicas(&nodes.iter().collect::<Vec<_>>(), 1);
    wait_for("every node to see 3 masters and 3 replicas", 30, || {
        ports.iter().all(|&p| {
            let v = nodes_view(p);
            cluster_ok(p)
                && v.iter().filter(|l| l.contains(" master ")).count() == 3
                && v.iter().filter(|l| l.contains(" slave ")).count() == 3
        })
    });
    let owner = *ports
        .iter()
        .find(|&&p| cmd(p, &["SET", "foo", "bar"]).is_ok())
        .expect("one master serves foo");
    (nodes, owner)
}

#[test]
fn replicas_made_by_redis_cli_follow_their_masters_and_serve_readonly_reads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ports = [28301u16, 28302, 28303, 28304, 28305, 28306];
    let (mut nodes, owner) = three_masters_three_replicas(&ports, dir.path());
    let replicas = match cmd(owner, &["CLUSTER", "REPLICAS", &myid(owner)]).unwrap() {
        redis::Value::Array(v) => v,
        v => panic!("{v:?}"),
    };
    assert_eq!(replicas.len(), 1);
    let line = match &replicas[0] {
        redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        v => panic!("{v:?}"),
    };
    let f: Vec<&str> = line.split(' ').collect();
    assert_eq!(f[2], "slave");
    assert_eq!(f[3], myid(owner));
    let replica: u16 = f[1].split([':', '@']).nth(1).unwrap().parse().unwrap();
    wait_for("the replica's link to be up", 30, || {
        role(replica) == format!("slave {owner} connected")
    });
    // Without READONLY a replica redirects to its master; with it, it serves reads.
    assert_eq!(
        err_text(cmd(replica, &["GET", "foo"])),
        format!("MOVED 12182 127.0.0.1:{owner}")
    );
    wait_for("the write to reach the replica", 10, || {
        readonly_get(replica, "foo").ok().flatten().as_deref() == Some("bar")
    });
    let mut c = con(replica);
    redis::cmd("READONLY").query::<()>(&mut c).unwrap();
    let e = redis::cmd("SET").arg("foo").arg("x").query::<()>(&mut c);
    assert_eq!(
        err_text(e.map(|_| redis::Value::Nil)),
        format!("MOVED 12182 127.0.0.1:{owner}")
    );
    // CLUSTER REPLICATE's checks, in Redis's order and words.
    let other_master = *ports
        .iter()
        .find(|&&p| p != owner && role(p).starts_with("master"))
        .unwrap();
    assert_eq!(
        err_text(cmd(owner, &["CLUSTER", "REPLICATE", "nosuchnode"])),
        "ERR Unknown node nosuchnode"
    );
    assert_eq!(
        err_text(cmd(owner, &["CLUSTER", "REPLICATE", &myid(owner)])),
        "ERR Can't replicate myself"
    );
    assert_eq!(
        err_text(cmd(owner, &["CLUSTER", "REPLICATE", &myid(replica)])),
        "ERR I can only replicate a master, not a replica."
    );
    assert_eq!(
        err_text(cmd(owner, &["CLUSTER", "REPLICATE", &myid(other_master)])),
        "ERR To set a master the node must be empty and without assigned slots."
    );
    // A replica may switch masters: it follows the other one and everyone learns it.
    let replica_id = myid(replica);
    assert_eq!(
        cmd(replica, &["CLUSTER", "REPLICATE", &myid(other_master)]),
        Ok(redis::Value::Okay)
    );
    wait_for("the replica to follow its new master", 30, || {
        role(replica) == format!("slave {other_master} connected")
            && nodes_view(owner)
                .iter()
                .any(|l| l.starts_with(&replica_id) && l.contains(&myid(other_master)))
    });
    // A replica stays one across a restart (nodes.conf), and resynchronizes.
    let i = ports.iter().position(|&p| p == replica).unwrap();
    nodes.remove(i);
    let restarted = start(
        &podium_bin(),
        replica,
        &dir.path().join(replica.to_string()),
    );
    assert_eq!(myid(replica), replica_id);
    wait_for("the restarted replica to resync", 30, || {
        role(replica) == format!("slave {other_master} connected")
    });
    nodes.push(restarted);
}

#[test]
fn podium_and_redis_server_replicate_each_other_in_one_cluster() {
    let Some(redis_server) = require_tool("redis-server") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let masters = [
        start(&podium_bin(), 28401, &dir.path().join("a")),
        start(&redis_server, 28402, &dir.path().join("b")),
        start(&podium_bin(), 28403, &dir.path().join("c")),
    ];
    create(&masters.iter().collect::<Vec<_>>());
    let podium_replica = start(&podium_bin(), 28404, &dir.path().join("d"));
    let redis_replica = start(&redis_server, 28405, &dir.path().join("e"));
    for r in [&podium_replica, &redis_replica] {
        cmd(r.port, &["CLUSTER", "MEET", "127.0.0.1", "28401", "29401"]).unwrap();
    }
    wait_for("the new nodes to know every master", 30, || {
        [28404, 28405].iter().all(|&p| nodes_view(p).len() == 5)
    });
    // Podium follows redis-server, redis-server follows Podium.
    cmd(28404, &["CLUSTER", "REPLICATE", &myid(28402)]).unwrap();
    cmd(28405, &["CLUSTER", "REPLICATE", &myid(28401)]).unwrap();
    wait_for("both links up and every node to agree", 60, || {
        role(28404) == "slave 28402 connected"
            && role(28405) == "slave 28401 connected"
            && [28401u16, 28402, 28403, 28404, 28405].iter().all(|&p| {
                let v = nodes_view(p);
                cluster_ok(p) && v.iter().filter(|l| l.contains(" slave ")).count() == 2
            })
    });
    let mut written = [0usize; 2];
    for i in 0..40 {
        let key = format!("key:{i}");
        let owner = [28401u16, 28402, 28403]
            .into_iter()
            .find(|&p| cmd(p, &["SET", &key, &i.to_string()]).is_ok())
            .expect("a master serves the key");
        let replica = match owner {
            28401 => 28405,
            28402 => 28404,
            _ => continue,
        };
        written[(replica - 28404) as usize] += 1;
        wait_for("the key to reach the other kind of replica", 10, || {
            readonly_get(replica, &key).ok().flatten() == Some(i.to_string())
        });
    }
    assert!(written.iter().all(|&n| n > 0), "{written:?}");
}

#[test]
fn a_replica_takes_over_when_its_master_dies_and_the_old_master_comes_back_as_its_replica() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ports = [28501u16, 28502, 28503, 28504, 28505, 28506];
    let (mut nodes, owner) = three_masters_three_replicas(&ports, dir.path());
    let owner_id = myid(owner);
    // A replica's first full sync waits repl-diskless-sync-delay (5 s) before its link is up.
    let connected = || {
        ports
            .iter()
            .copied()
            .find(|&p| role(p) == format!("slave {owner} connected"))
    };
    wait_for("a replica of the master to be connected", 30, || {
        connected().is_some()
    });
    let replica = connected().expect("the master has a replica");
    wait_for("the write to reach the replica", 10, || {
        readonly_get(replica, "foo").ok().flatten().as_deref() == Some("bar")
    });
    let epoch_before = current_epoch(replica);
    // The master dies: its replica wins the election and serves its slots.
    let i = ports.iter().position(|&p| p == owner).unwrap();
    drop(nodes.remove(i));
    let others: Vec<u16> = ports.iter().copied().filter(|&p| p != owner).collect();
    wait_for(
        "the replica to be promoted and the cluster ok again",
        60,
        || {
            role(replica).starts_with("master")
                && others.iter().all(|&p| {
                    cluster_ok(p)
                        && text(p, &["CLUSTER", "NODES"]).lines().any(|l| {
                            l.starts_with(&owner_id) && l.contains("fail") && !l.contains("fail?")
                        })
                })
        },
    );
    assert_eq!(text(replica, &["GET", "foo"]), "bar");
    assert!(current_epoch(replica) > epoch_before);
    for &p in others.iter().filter(|&&p| p != replica) {
        assert_eq!(
            err_text(cmd(p, &["GET", "foo"])),
            format!("MOVED 12182 127.0.0.1:{replica}")
        );
    }
    // The old master restarts, learns its slots went to a newer epoch and follows the new
    // master.
    nodes.push(start(
        &podium_bin(),
        owner,
        &dir.path().join(owner.to_string()),
    ));
    wait_for(
        "the old master to become the new master's replica",
        60,
        || role(owner) == format!("slave {replica} connected"),
    );
    assert_eq!(readonly_get(owner, "foo").unwrap().as_deref(), Some("bar"));
}

/// My own line of CLUSTER NODES: "ip:port@cport" (the hostname part left out).
fn my_address(port: u16) -> String {
    let nodes = text(port, &["CLUSTER", "NODES"]);
    let line = nodes
        .lines()
        .find(|l| l.contains("myself"))
        .expect("a myself line");
    let addr = line.split(' ').nth(1).expect("an address field");
    addr.split(',').next().unwrap_or(addr).to_string()
}

/// The address `port` has for the node `id`.
fn address_of(port: u16, id: &str) -> Option<String> {
    let nodes = text(port, &["CLUSTER", "NODES"]);
    let line = nodes.lines().find(|l| l.starts_with(id))?;
    let addr = line.split(' ').nth(1)?;
    Some(addr.split(',').next().unwrap_or(addr).to_string())
}

#[test]
fn config_set_of_the_announced_address_shows_at_once_and_reaches_a_redis_peer() {
    let Some(redis_server) = require_tool("redis-server") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let podium = start(&podium_bin(), 28601, &dir.path().join("a"));
    let redis = start(&redis_server, 28602, &dir.path().join("b"));
    cmd(
        podium.port,
        &["CLUSTER", "MEET", "127.0.0.1", "28602", "29602"],
    )
    .unwrap();
    let id = myid(podium.port);
    wait_for("the redis-server node to know the Podium node", 30, || {
        address_of(redis.port, &id).as_deref() == Some("127.0.0.1:28601@29601")
    });
    // As Redis: the announced client port replaces the listening one in my own entry at
    // once, and the peers learn it from the next ping.
    let _ = cmd(
        podium.port,
        &["CONFIG", "SET", "cluster-announce-port", "28651"],
    )
    .unwrap();
    assert_eq!(my_address(podium.port), "127.0.0.1:28651@29601");
    wait_for("redis-server to see the announced port", 30, || {
        address_of(redis.port, &id).as_deref() == Some("127.0.0.1:28651@29601")
    });
    // Back to 0: the listening port again.
    let _ = cmd(
        podium.port,
        &["CONFIG", "SET", "cluster-announce-port", "0"],
    )
    .unwrap();
    assert_eq!(my_address(podium.port), "127.0.0.1:28601@29601");
    wait_for("redis-server to see the listening port again", 30, || {
        address_of(redis.port, &id).as_deref() == Some("127.0.0.1:28601@29601")
    });
    // An announced IP shows as given; cleared, the address is learned again from a peer.
    let _ = cmd(
        podium.port,
        &["CONFIG", "SET", "cluster-announce-ip", "127.0.0.9"],
    )
    .unwrap();
    assert_eq!(my_address(podium.port), "127.0.0.9:28601@29601");
    let _ = cmd(podium.port, &["CONFIG", "SET", "cluster-announce-ip", ""]).unwrap();
    wait_for("my address learned again", 30, || {
        my_address(podium.port) == "127.0.0.1:28601@29601"
    });
}

#[test]
fn keys_of_a_slot_lost_to_a_newer_claim_are_deleted_on_the_replica_too() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = start(&podium_bin(), 28701, &dir.path().join("a"));
    let b = start(&podium_bin(), 28702, &dir.path().join("b"));
    let r = start(&podium_bin(), 28703, &dir.path().join("r"));
    cmd(a.port, &["CLUSTER", "ADDSLOTSRANGE", "0", "8191"]).unwrap();
    cmd(b.port, &["CLUSTER", "ADDSLOTSRANGE", "8192", "16383"]).unwrap();
    for p in [b.port, r.port] {
        cmd(p, &["CLUSTER", "MEET", "127.0.0.1", "28701", "29701"]).unwrap();
    }
    wait_for("three nodes known everywhere", 30, || {
        [a.port, b.port, r.port]
            .iter()
            .all(|&p| nodes_view(p).len() == 3)
    });
    cmd(r.port, &["CLUSTER", "REPLICATE", &myid(a.port)]).unwrap();
    wait_for("the replica's link and cluster_state:ok", 60, || {
        role(r.port) == "slave 28701 connected" && cluster_ok(a.port) && cluster_ok(b.port)
    });
    // Keys of one slot A serves ({lost} hashes to 6235), and one key of another slot.
    let slot: u16 = text(a.port, &["CLUSTER", "KEYSLOT", "{lost}"])
        .parse()
        .unwrap();
    assert!(slot <= 8191, "{slot}");
    for i in 0..20 {
        cmd(a.port, &["SET", &format!("{{lost}}:{i}"), "v"]).unwrap();
    }
    cmd(a.port, &["SET", "kept", "v"]).unwrap();
    let kept_slot: u16 = text(a.port, &["CLUSTER", "KEYSLOT", "kept"])
        .parse()
        .unwrap();
    assert!(kept_slot <= 8191 && kept_slot != slot, "{kept_slot}");
    wait_for("the keys on the replica", 10, || {
        text(r.port, &["DBSIZE"]) == "21"
    });
    // B claims the slot with a newer epoch: A drops its keys there (Redis's dirty slots), and
    // its replica is told by the DELs in A's stream.
    cmd(
        b.port,
        &[
            "CLUSTER",
            "SETSLOT",
            &slot.to_string(),
            "NODE",
            &myid(b.port),
        ],
    )
    .unwrap();
    cmd(b.port, &["CLUSTER", "BUMPEPOCH"]).unwrap();
    wait_for("A to drop the lost slot's keys", 30, || {
        text(a.port, &["DBSIZE"]) == "1"
    });
    wait_for("the replica to drop them too", 10, || {
        text(r.port, &["DBSIZE"]) == "1"
    });
    assert_eq!(readonly_get(r.port, "kept").unwrap().as_deref(), Some("v"));
}

/// Replica migration (cluster-allow-replica-migration yes): when a master loses its only
/// replica, a replica of the master that has two moves to it, and the first master keeps
/// one, with cluster-migration-barrier 1 (the default); with 2, none moves.
#[test]
fn a_replica_migrates_to_a_master_left_without_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ports = [28801u16, 28802, 28803, 28804, 28805, 28806];
    let (mut nodes, rich) = three_masters_three_replicas(&ports, dir.path());
    let rich_id = myid(rich);
    // A seventh node joins as a second replica of `rich`.
    let extra = 28807u16;
    nodes.push(start(&podium_bin(), extra, &dir.path().join("extra")));
    text(
        extra,
        &[
            "CLUSTER",
            "MEET",
            "127.0.0.1",
            &ports[0].to_string(),
            &(ports[0] + 1000).to_string(),
        ],
    );
    wait_for("the new node to know the cluster", 30, || {
        nodes_view(extra).len() == 7
    });
    text(extra, &["CLUSTER", "REPLICATE", &rich_id]);
    wait_for("the new replica to be connected", 30, || {
        role(extra) == format!("slave {rich} connected")
    });
    // Another master's only replica dies.
    let masters: Vec<u16> = ports
        .iter()
        .copied()
        .filter(|&p| role(p).starts_with("master"))
        .collect();
    let poor = *masters
        .iter()
        .find(|&&p| p != rich)
        .expect("another master");
    let poor_replica = *ports
        .iter()
        .find(|&&p| role(p).starts_with(&format!("slave {poor} ")))
        .expect("the other master's replica");
    let poor_replica_id = myid(poor_replica);
    let all_ports: Vec<u16> = ports.iter().copied().chain([extra]).collect();
    // With a barrier of 2, `rich` (two replicas) has none to spare.
    for &p in &all_ports {
        text(p, &["CONFIG", "SET", "cluster-migration-barrier", "2"]);
    }
    let i = nodes.iter().position(|n| n.port == poor_replica).unwrap();
    drop(nodes.remove(i));
    let rich_replicas = [extra]
        .into_iter()
        .chain(ports.iter().copied())
        .filter(|&p| p != poor_replica)
        .filter(|&p| role(p).starts_with(&format!("slave {rich} ")))
        .collect::<Vec<_>>();
    assert_eq!(rich_replicas.len(), 2, "{rich_replicas:?}");
    wait_for("the dead replica to be marked failed", 30, || {
        text(rich_replicas[0], &["CLUSTER", "NODES"])
            .lines()
            .any(|l| l.starts_with(&poor_replica_id) && l.contains("fail"))
    });
    // Longer than the 5 s an orphaned master waits before a replica may move to it.
    std::thread::sleep(Duration::from_secs(8));
    for &p in &rich_replicas {
        assert_eq!(
            role(p),
            format!("slave {rich} connected"),
            "no replica migrates past cluster-migration-barrier 2"
        );
    }
    // With the default barrier of 1, a replica of `rich` moves to `poor`, and `rich` keeps
    // the other.
    for &p in &all_ports {
        if p != poor_replica {
            text(p, &["CONFIG", "SET", "cluster-migration-barrier", "1"]);
        }
    }
    wait_for("a replica to migrate to the orphaned master", 60, || {
        rich_replicas
            .iter()
            .any(|&p| role(p) == format!("slave {poor} connected"))
    });
    let stayed = rich_replicas
        .iter()
        .filter(|&&p| role(p).starts_with(&format!("slave {rich} ")))
        .count();
    assert_eq!(stayed, 1, "one replica stays with its master");
    let moved = rich_replicas
        .iter()
        .copied()
        .find(|&p| role(p).starts_with(&format!("slave {poor} ")))
        .unwrap();
    let log = std::fs::read_to_string(
        dir.path()
            .join(if moved == extra {
                "extra".to_string()
            } else {
                moved.to_string()
            })
            .join("log"),
    )
    .unwrap();
    assert!(log.contains("Migrating to orphaned master"), "{log}");
}

/// A master whose last slot is resharded away becomes a replica of the node that took it
/// (cluster-allow-replica-migration yes, as Redis 7.0); with `no` it stays an empty master.
#[test]
fn a_master_resharded_empty_becomes_a_replica_of_the_receiver() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ports = [28811u16, 28812, 28813];
    let nodes: Vec<Node> = ports
        .iter()
        .map(|&p| start(&podium_bin(), p, &dir.path().join(p.to_string())))
        .collect();
    create(&nodes.iter().collect::<Vec<_>>());
    wait_for("the cluster to be ok everywhere", 30, || {
        ports.iter().all(|&p| cluster_ok(p))
    });
    // The third master keeps its slots when emptied: it may not migrate.
    text(
        ports[2],
        &["CONFIG", "SET", "cluster-allow-replica-migration", "no"],
    );
    let cli = require_tool("redis-cli").expect("redis-cli");
    let reshard = |from: u16, to: u16| {
        let out = Command::new(&cli)
            .args(["--cluster", "reshard", &format!("127.0.0.1:{}", ports[0])])
            .args(["--cluster-from", &myid(from), "--cluster-to", &myid(to)])
            .args(["--cluster-slots", "16384", "--cluster-yes"])
            .output()
            .expect("redis-cli --cluster reshard");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    };
    reshard(ports[0], ports[1]);
    wait_for("the emptied master to follow the receiver", 30, || {
        role(ports[0]) == format!("slave {} connected", ports[1])
    });
    reshard(ports[2], ports[1]);
    wait_for("the third master's slots to move", 30, || {
        text(ports[1], &["CLUSTER", "INFO"]).contains("cluster_slots_assigned:16384")
            && !text(ports[2], &["CLUSTER", "NODES"])
                .lines()
                .any(|l| l.contains("myself") && l.split(' ').count() > 8)
    });
    std::thread::sleep(Duration::from_secs(2));
    assert!(role(ports[2]).starts_with("master"), "{}", role(ports[2]));
}

/// CLUSTER FAILOVER on a replica, as Redis 7.0: the default form pauses the master's writes,
/// waits for the replica to reach the master's offset, and swaps their roles with nothing
/// lost; TAKEOVER swaps them back without asking anyone; a master refuses the command.
#[test]
fn manual_failover_and_takeover_swap_master_and_replica() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ports = [28821u16, 28822, 28823, 28824, 28825, 28826];
    let (_nodes, owner) = three_masters_three_replicas(&ports, dir.path());
    let connected = || {
        ports
            .iter()
            .copied()
            .find(|&p| role(p) == format!("slave {owner} connected"))
    };
    wait_for("the master's replica to be connected", 30, || {
        connected().is_some()
    });
    let replica = connected().expect("a replica");
    assert_eq!(
        err_text(cmd(owner, &["CLUSTER", "FAILOVER"])),
        "ERR You should send CLUSTER FAILOVER to a replica"
    );
    // Writes up to the failover: each acknowledged one must be on the new master.
    for i in 0..200 {
        text(owner, &["SET", &format!("{{foo}}{i}"), &i.to_string()]);
    }
    cmd(replica, &["CLUSTER", "FAILOVER"]).expect("CLUSTER FAILOVER");
    wait_for("the manual failover to swap the roles", 30, || {
        role(replica).starts_with("master") && role(owner) == format!("slave {replica} connected")
    });
    for i in 0..200 {
        assert_eq!(
            text(replica, &["GET", &format!("{{foo}}{i}")]),
            i.to_string()
        );
    }
    let epoch = current_epoch(replica);
    // TAKEOVER: the old master takes its slots back at once, with an epoch of its own.
    cmd(owner, &["CLUSTER", "FAILOVER", "TAKEOVER"]).expect("CLUSTER FAILOVER TAKEOVER");
    wait_for("the takeover to swap the roles back", 30, || {
        role(owner).starts_with("master") && role(replica) == format!("slave {owner} connected")
    });
    assert!(current_epoch(owner) > epoch);
    assert_eq!(text(owner, &["GET", "foo"]), "bar");
    let log = std::fs::read_to_string(dir.path().join(replica.to_string()).join("log")).unwrap();
    assert!(
        log.contains("All master replication stream processed, manual failover can start."),
        "{log}"
    );
}

/// One master holding every slot and its replica, made by hand (redis-cli wants three
/// masters): the nodes, once the replica is connected.
fn master_and_replica(ports: [u16; 2], dir: &Path) -> (Node, Node) {
    let master = start(&podium_bin(), ports[0], &dir.join("master"));
    let replica = start(&podium_bin(), ports[1], &dir.join("replica"));
    text(master.port, &["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]);
    text(
        replica.port,
        &[
            "CLUSTER",
            "MEET",
            "127.0.0.1",
            &ports[0].to_string(),
            &(ports[0] + 1000).to_string(),
        ],
    );
    let master_id = myid(master.port);
    wait_for("the replica to know the master", 30, || {
        text(replica.port, &["CLUSTER", "NODES"]).contains(&master_id)
    });
    text(replica.port, &["CLUSTER", "REPLICATE", &master_id]);
    wait_for("the replica to be connected", 30, || {
        role(replica.port) == format!("slave {} connected", master.port)
            && cluster_ok(replica.port)
            && cluster_ok(master.port)
    });
    (master, replica)
}

/// The replicas CLUSTER SLOTS lists for the one range of a single-master cluster.
fn replicas_in_slots(port: u16) -> usize {
    match cmd(port, &["CLUSTER", "SLOTS"]).expect("CLUSTER SLOTS") {
        redis::Value::Array(ranges) => match ranges.first() {
            Some(redis::Value::Array(r)) => r.len().saturating_sub(3),
            _ => 0,
        },
        v => panic!("CLUSTER SLOTS: {v:?}"),
    }
}

/// A replica redirects what may write, as Redis's getNodeByQuery judges it: a script that
/// declares no `no-writes` flag, even from a READONLY client, gets -MOVED; a `no-writes`
/// script is served. A replica restarted from its own RDB (its role from nodes.conf) keeps
/// its master's replication ID and continues by partial resynchronization, and lists
/// itself in CLUSTER SLOTS once it has its master's data.
#[test]
fn a_replica_redirects_writing_scripts_and_resumes_its_stream_after_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (master, replica) = master_and_replica([28831, 28832], dir.path());
    text(master.port, &["SET", "a", "1"]);
    wait_for("the write to reach the replica", 30, || {
        readonly_get(replica.port, "a").ok().flatten().as_deref() == Some("1")
    });
    let mut c = con(replica.port);
    redis::cmd("READONLY").query::<()>(&mut c).unwrap();
    let writing: redis::RedisResult<redis::Value> = redis::cmd("EVAL")
        .arg("#!lua\nreturn redis.call('del', KEYS[1])")
        .arg(1)
        .arg("a")
        .query(&mut c);
    let e = writing.expect_err("a writing script is redirected");
    assert_eq!(e.code(), Some("MOVED"), "{e:?}");
    let reading: String = redis::cmd("EVAL")
        .arg("#!lua flags=no-writes\nreturn redis.call('get', KEYS[1])")
        .arg(1)
        .arg("a")
        .query(&mut c)
        .expect("a no-writes script runs on the replica");
    assert_eq!(reading, "1");
    // Once the master hears the replica's offset (the next ping), both list it.
    wait_for(
        "the master to list its replica in CLUSTER SLOTS",
        30,
        || replicas_in_slots(master.port) == 1,
    );
    assert_eq!(
        replicas_in_slots(replica.port),
        1,
        "the replica lists itself"
    );

    // Restarted from its own RDB: a partial resynchronization, not a full one.
    text(replica.port, &["SAVE"]);
    let port = replica.port;
    drop(replica);
    let full_before = info_field(master.port, "sync_full");
    let replica = start(&podium_bin(), port, &dir.path().join("replica"));
    wait_for("the restarted replica to be connected", 30, || {
        role(replica.port) == format!("slave {} connected", master.port)
    });
    assert_eq!(info_field(master.port, "sync_full"), full_before);
    assert_eq!(info_field(master.port, "sync_partial_ok"), "1");
}

fn info_field(port: u16, field: &str) -> String {
    let info = text(port, &["INFO", "everything"]);
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in INFO"))
        .trim()
        .to_string()
}

/// Sharded Pub/Sub follows the slots (Redis's removeChannelsInSlot): when a slot moves to
/// another master, a client subscribed to a shard channel of it gets a sunsubscribe push
/// with the shard channels it has left, and its other channels stay. CONFIG SET of
/// cluster-preferred-endpoint-type shows in CLUSTER SLOTS at once.
#[test]
fn shard_channels_of_a_slot_that_moves_away_are_unsubscribed() {
    use std::io::{BufRead, BufReader, Write};
    let dir = tempfile::tempdir().expect("tempdir");
    let a = start(&podium_bin(), 28841, &dir.path().join("a"));
    let b = start(&podium_bin(), 28842, &dir.path().join("b"));
    text(a.port, &["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]);
    text(b.port, &["CLUSTER", "MEET", "127.0.0.1", "28841", "29841"]);
    wait_for("both nodes to know each other", 30, || {
        nodes_view(a.port).len() == 2
            && nodes_view(b.port).len() == 2
            // `a` too: a master stays cluster_state:fail for its first 2 s (Redis's
            // writable delay), which under load can outlast b's joining.
            && cluster_ok(a.port)
            && cluster_ok(b.port)
    });
    // ch3 and ch7 hash to different slots.
    let slot_of = |ch: &str| text(a.port, &["CLUSTER", "KEYSLOT", ch]);
    assert_ne!(slot_of("ch3"), slot_of("ch7"));
    let sock = std::net::TcpStream::connect(("127.0.0.1", a.port)).expect("connect");
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut w = sock.try_clone().unwrap();
    let mut r = BufReader::new(sock);
    // One RESP2 push of three elements, its lines joined by spaces.
    let read_push = |r: &mut BufReader<std::net::TcpStream>| {
        let mut line = || {
            let mut l = String::new();
            r.read_line(&mut l).expect("a push");
            l.trim_end().to_string()
        };
        let mut lines = vec![line()];
        for _ in 0..3 {
            let head = line();
            let bulk = head.starts_with('$');
            lines.push(head);
            if bulk {
                lines.push(line());
            }
        }
        lines.join(" ")
    };
    w.write_all(b"SSUBSCRIBE ch3\r\nSSUBSCRIBE ch7\r\n")
        .unwrap();
    assert_eq!(read_push(&mut r), "*3 $10 ssubscribe $3 ch3 :1");
    assert_eq!(read_push(&mut r), "*3 $10 ssubscribe $3 ch7 :2");
    let slot = slot_of("ch3");
    let b_id = myid(b.port);
    text(b.port, &["CLUSTER", "SETSLOT", &slot, "NODE", &b_id]);
    text(a.port, &["CLUSTER", "SETSLOT", &slot, "NODE", &b_id]);
    assert_eq!(read_push(&mut r), "*3 $12 sunsubscribe $3 ch3 :1");
    // ch7 still delivers; ch3 is now b's.
    assert_eq!(text(a.port, &["SPUBLISH", "ch7", "hi"]), "1");
    assert_eq!(read_push(&mut r), "*3 $8 smessage $3 ch7 $2 hi");
    let e = err_text(cmd(a.port, &["SPUBLISH", "ch3", "hi"]));
    assert!(e.starts_with("MOVED"), "{e}");
    // The connection forgot ch3: unsubscribing everything confirms ch7 alone.
    w.write_all(b"SUNSUBSCRIBE\r\n").unwrap();
    assert_eq!(read_push(&mut r), "*3 $12 sunsubscribe $3 ch7 :0");

    text(
        a.port,
        &["CONFIG", "SET", "cluster-announce-hostname", "a.example"],
    );
    text(
        a.port,
        &[
            "CONFIG",
            "SET",
            "cluster-preferred-endpoint-type",
            "hostname",
        ],
    );
    // a's ranges name it by its hostname now.
    let redis::Value::Array(ranges) = cmd(a.port, &["CLUSTER", "SLOTS"]).unwrap() else {
        panic!("CLUSTER SLOTS is an array");
    };
    let endpoint = ranges
        .iter()
        .find_map(|range| match range {
            redis::Value::Array(r) => match &r[2] {
                redis::Value::Array(node) if node[1] == redis::Value::Int(28841) => {
                    Some(format!("{:?}", node[0]))
                }
                _ => None,
            },
            _ => None,
        })
        .expect("a range of a's");
    assert!(endpoint.contains("a.example"), "{endpoint}");
}

/// What follows a slot as it moves, beside the routing of new requests: a client blocked on a
/// key of the slot is unblocked with MOVED (and every blocked client with CLUSTERDOWN once
/// the cluster is down); MIGRATE hands keys to a node that imports the slot before the slot is
/// its own (RESTORE-ASKING); a script without `allow-cross-slot-keys` stays in one slot; DEBUG
/// CLUSTERLINK KILL closes a bus link, which the cron opens again.
#[test]
fn blocked_clients_migrate_and_scripts_follow_slots() {
    use std::io::{BufRead, BufReader, Write};
    let dir = tempfile::tempdir().expect("tempdir");
    let debug = ["--enable-debug-command", "yes"];
    let a = start_with(&podium_bin(), 28861, &dir.path().join("a"), &debug);
    let b = start(&podium_bin(), 28862, &dir.path().join("b"));
    text(a.port, &["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]);
    text(b.port, &["CLUSTER", "MEET", "127.0.0.1", "28861", "29861"]);
    wait_for("both nodes to know each other", 30, || {
        nodes_view(a.port).len() == 2
            && nodes_view(b.port).len() == 2
            // `a` too: a master stays cluster_state:fail for its first 2 s (Redis's
            // writable delay), which under load can outlast b's joining.
            && cluster_ok(a.port)
            && cluster_ok(b.port)
    });
    let (a_id, b_id) = (myid(a.port), myid(b.port));
    let slot = text(a.port, &["CLUSTER", "KEYSLOT", "queue"]);

    // A client blocked on `queue` at a.
    let sock = std::net::TcpStream::connect(("127.0.0.1", a.port)).expect("connect");
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut w = sock.try_clone().unwrap();
    let mut r = BufReader::new(sock);
    w.write_all(b"BLPOP queue 0\r\n").unwrap();
    wait_for("the client to block", 10, || {
        info_field(a.port, "blocked_clients") == "1"
    });

    // The slot moves to b with its keys, by hand as redis-cli does it.
    cmd(a.port, &["RPUSH", "list{queue}", "x"]).unwrap();
    text(b.port, &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &a_id]);
    text(a.port, &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &b_id]);
    assert_eq!(
        cmd(
            a.port,
            &[
                "MIGRATE",
                "127.0.0.1",
                "28862",
                "",
                "0",
                "5000",
                "KEYS",
                "list{queue}"
            ]
        ),
        Ok(redis::Value::Okay)
    );
    text(b.port, &["CLUSTER", "SETSLOT", &slot, "NODE", &b_id]);
    text(a.port, &["CLUSTER", "SETSLOT", &slot, "NODE", &b_id]);
    assert_eq!(text(b.port, &["LINDEX", "list{queue}", "0"]), "x");
    let mut line = String::new();
    r.read_line(&mut line).expect("the blocked client's reply");
    assert_eq!(line, format!("-MOVED {slot} 127.0.0.1:28862\r\n"));
    assert_eq!(info_field(a.port, "blocked_clients"), "0");

    // Scripts: a shebang script stays in one slot; an old-style EVAL may cross slots.
    let crossing = "#!lua\nredis.call('set','foo','1')\nredis.call('set','bar','2')\nreturn 1";
    let owner_of = |key: &str| {
        [a.port, b.port]
            .into_iter()
            .find(|&p| cmd(p, &["GET", key]).is_ok())
            .expect("a node serves the key")
    };
    assert_eq!(owner_of("foo"), a.port);
    assert_eq!(owner_of("bar"), a.port);
    let e = err_text(cmd(a.port, &["EVAL", crossing, "0"]));
    assert!(
        e.starts_with("ERR Script attempted to access keys that do not hash to the same slot"),
        "{e}"
    );
    let declared = "#!lua\nredis.call('set','foo','1')\nreturn 1";
    let e = err_text(cmd(a.port, &["EVAL", declared, "1", "bar"]));
    assert!(e.contains("do not hash to the same slot"), "{e}");
    let old_style = "redis.call('set','foo','1') redis.call('set','bar','2') return 1";
    assert_eq!(text(a.port, &["EVAL", old_style, "0"]), "1");
    let flagged = format!("#!lua flags=allow-cross-slot-keys\n{old_style}");
    assert_eq!(text(a.port, &["EVAL", &flagged, "0"]), "1");

    // A bus link killed by DEBUG comes back.
    let links = |p: u16| match cmd(p, &["CLUSTER", "LINKS"]).unwrap() {
        redis::Value::Array(v) => v.len(),
        v => panic!("{v:?}"),
    };
    wait_for("a link each way", 10, || links(a.port) == 2);
    assert_eq!(
        err_text(cmd(a.port, &["DEBUG", "CLUSTERLINK", "KILL", "to", "0000"])),
        "ERR Unknown node 0000"
    );
    assert_eq!(
        cmd(a.port, &["DEBUG", "CLUSTERLINK", "KILL", "all", &b_id]),
        Ok(redis::Value::Okay)
    );
    wait_for("the links to come back", 10, || links(a.port) == 2);

    // b stops answering: a's cluster fails, and a client blocked there hears so.
    w.write_all(b"BLPOP other 0\r\n").unwrap();
    let other_slot = text(a.port, &["CLUSTER", "KEYSLOT", "other"]);
    assert_ne!(other_slot, slot);
    wait_for("the client to block", 10, || {
        info_field(a.port, "blocked_clients") == "1"
    });
    drop(b);
    let mut line = String::new();
    r.get_ref()
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    r.read_line(&mut line).expect("the blocked client's reply");
    assert_eq!(line, "-CLUSTERDOWN The cluster is down\r\n");
}

/// A write to a slot this node is migrating is routed (the key is here, so it is served here)
/// and then waits for the key's lock while a MIGRATE of that key holds it. Once the MIGRATE
/// moved and deleted the key, the write must not run here: it would create the key again in
/// a slot that is leaving, and what it acknowledged would be lost with the slot's last keys
/// (the mixed cluster's reshard under writes lost three increments so). It gets -ASK (the
/// routing is checked again under the lock), as from Redis, which decides and runs in one
/// step. Keys of one slot move one MIGRATE at a time while four clients increment the key
/// being moved, following -ASK as a cluster client does; afterwards no key is left here and
/// every acknowledged increment is on the target.
#[test]
fn a_write_racing_a_migrate_of_its_key_is_asked_to_the_target() {
    write_race_with_migrate(28863, false);
}

/// The same race with each increment in MULTI/EXEC: EXEC's queued keys are routed again
/// under its locks, and a redirected EXEC is discarded (as Redis answers it).
#[test]
fn a_transaction_racing_a_migrate_of_its_key_is_asked_to_the_target() {
    write_race_with_migrate(28865, true);
}

/// One INCR at the migrating node `ca` (in MULTI/EXEC when `in_multi`): Ok(true) when it was
/// acknowledged there, Err(()) when it was redirected with -ASK (or its transaction aborted
/// for a queued command's -ASK), Ok(false) for -TRYAGAIN.
fn incr_at_source(ca: &mut redis::Connection, k: &str, in_multi: bool) -> Result<bool, ()> {
    let outcome = |r: redis::RedisResult<redis::Value>| match r {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == redis::ErrorKind::Ask => Err(()),
        Err(e) if e.kind() == redis::ErrorKind::TryAgain => Ok(false),
        Err(e) if e.code() == Some("EXECABORT") => Err(()),
        Err(e) => panic!("INCR {k}: {e}"),
    };
    if !in_multi {
        return outcome(redis::cmd("INCR").arg(k).query(ca));
    }
    redis::cmd("MULTI").query::<()>(ca).expect("MULTI");
    let queued: redis::RedisResult<redis::Value> = redis::cmd("INCR").arg(k).query(ca);
    let exec: redis::RedisResult<redis::Value> = redis::cmd("EXEC").query(ca);
    match queued {
        // Refused as it was queued: EXEC then aborts, and the client follows the -ASK.
        Err(e) if e.kind() == redis::ErrorKind::Ask => {
            assert!(
                exec.is_err(),
                "EXEC after a refused queued command: {exec:?}"
            );
            Err(())
        }
        Err(e) if e.kind() == redis::ErrorKind::TryAgain => Ok(false),
        Err(e) => panic!("INCR {k} queued: {e}"),
        Ok(_) => outcome(exec),
    }
}

fn write_race_with_migrate(port: u16, in_multi: bool) {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = start(&podium_bin(), port, &dir.path().join("a"));
    let b = start(&podium_bin(), port + 1, &dir.path().join("b"));
    text(a.port, &["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]);
    let bus = (port + 1000).to_string();
    let a_port = port.to_string();
    text(b.port, &["CLUSTER", "MEET", "127.0.0.1", &a_port, &bus]);
    wait_for("both nodes to know each other", 30, || {
        nodes_view(a.port).len() == 2
            && nodes_view(b.port).len() == 2
            // `a` too: a master stays cluster_state:fail for its first 2 s (Redis's
            // writable delay), which under load can outlast b's joining.
            && cluster_ok(a.port)
            && cluster_ok(b.port)
    });
    let (a_id, b_id) = (myid(a.port), myid(b.port));
    let slot = text(a.port, &["CLUSTER", "KEYSLOT", "{race}"]);
    const KEYS: usize = 600;
    let key = |i: usize| format!("{{race}}{i}");
    for i in 0..KEYS {
        cmd(a.port, &["SET", &key(i), "0"]).unwrap();
    }
    text(b.port, &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &a_id]);
    text(a.port, &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &b_id]);

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let moving = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let writers: Vec<_> = (0..4)
        .map(|_| {
            let (stop, moving) = (stop.clone(), moving.clone());
            let (a_port, b_port) = (a.port, b.port);
            std::thread::spawn(move || {
                let (mut ca, mut cb) = (con(a_port), con(b_port));
                let mut acked = vec![0i64; KEYS];
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let i = moving.load(std::sync::atomic::Ordering::Relaxed);
                    let k = format!("{{race}}{i}");
                    let ok = match incr_at_source(&mut ca, &k, in_multi) {
                        Ok(acked) => acked,
                        Err(()) => {
                            let (_, v): ((), i64) = redis::pipe()
                                .cmd("ASKING")
                                .cmd("INCR")
                                .arg(&k)
                                .query(&mut cb)
                                .expect("INCR at the target after -ASK");
                            v > 0
                        }
                    };
                    if ok {
                        acked[i] += 1;
                    }
                }
                acked
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    for i in 0..KEYS {
        moving.store(i, std::sync::atomic::Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(2));
        let moved = cmd(
            a.port,
            &[
                "MIGRATE",
                "127.0.0.1",
                &b.port.to_string(),
                &key(i),
                "0",
                "5000",
            ],
        )
        .unwrap();
        assert_eq!(moved, redis::Value::Okay, "MIGRATE {}", key(i));
    }
    std::thread::sleep(Duration::from_millis(100));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut acked = vec![0i64; KEYS];
    for w in writers {
        for (sum, n) in acked.iter_mut().zip(w.join().expect("writer")) {
            *sum += n;
        }
    }
    let left = text(a.port, &["CLUSTER", "COUNTKEYSINSLOT", &slot]);
    assert_eq!(
        left, "0",
        "keys created again at the migrating node after their MIGRATE"
    );
    let mut cb = con(b.port);
    for (i, &n) in acked.iter().enumerate() {
        let v: i64 = redis::pipe()
            .cmd("ASKING")
            .ignore()
            .cmd("GET")
            .arg(key(i))
            .query::<(Option<i64>,)>(&mut cb)
            .expect("GET at the target")
            .0
            .unwrap_or(0);
        assert_eq!(v, n, "{}: acknowledged increments", key(i));
    }
}
