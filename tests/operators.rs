//! The operators' surface: configuration files as Redis's (Debian's stock redis.conf,
//! include, refusals, CONFIG REWRITE), the process (daemonize, pidfile, supervised systemd,
//! tcp-backlog, unixsocket), and the introspection commands (SLOWLOG, LATENCY ...).

use crate::common;

use common::{Launch, Podium};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("timed out waiting for {what}");
}

fn pid_alive(pid: i32) -> bool {
    // SAFETY: kill with signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

/// Run podium with `args` expecting it to refuse to start; its stderr.
fn refused(args: &[&str]) -> String {
    // A directive that is accepted would leave the server running: the child is waited for
    // with a deadline and killed past it, so such a regression fails here instead of hanging.
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_podium"))
        .args(args)
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run podium");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for podium") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?} started and was still running after 10 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(!status.success(), "{args:?} started");
    let mut err = String::new();
    if let Some(mut stderr) = child.stderr.take() {
        std::io::Read::read_to_string(&mut stderr, &mut err).expect("read stderr");
    }
    err
}

#[test]
fn debian_stock_redis_conf_starts_daemonized_and_cleans_its_pidfile() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let pidfile = dir.path().join("redis.pid");
    let logfile = dir.path().join("redis.log");
    let fixture = include_str!("fixtures/debian-redis.conf");
    // Only where it listens and writes change; everything else is Debian's file as shipped
    // (daemonize yes among it).
    let conf: String = fixture
        .lines()
        .map(|l| match l.split_whitespace().next() {
            Some("port") => format!("port {port}"),
            Some("dir") => format!("dir {}", dir.path().display()),
            Some("logfile") => format!("logfile {}", logfile.display()),
            Some("pidfile") => format!("pidfile {}", pidfile.display()),
            _ => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    let conf_path = dir.path().join("redis.conf");
    std::fs::write(&conf_path, conf).unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_podium"))
        .arg(&conf_path)
        .stdin(Stdio::null())
        .status()
        .expect("run podium");
    // daemonize yes: the command returns at once, the server goes on in the background.
    assert!(status.success());
    // The file is created, then written (as Redis writes it): wait for the number.
    let read_pid = || {
        std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|t| t.trim().parse::<i32>().ok())
    };
    wait_for("the pid in the pidfile", Duration::from_secs(10), || {
        read_pid().is_some()
    });
    let pid = read_pid().expect("pid");
    assert!(pid_alive(pid));
    let mut con = None;
    wait_for("the server", Duration::from_secs(10), || {
        con = redis::Client::open(format!("redis://127.0.0.1:{port}"))
            .and_then(|c| c.get_connection())
            .ok();
        con.is_some()
    });
    let mut con = con.unwrap();
    let info: String = redis::cmd("INFO").arg("server").query(&mut con).unwrap();
    assert!(info.contains(&format!("process_id:{pid}\r\n")), "{info}");
    assert!(info.contains(&format!("config_file:{}", conf_path.display())));
    let cfg: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("client-output-buffer-limit")
        .query(&mut con)
        .unwrap();
    // Debian gives one class per line: all three are kept.
    assert_eq!(
        cfg[1],
        "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60"
    );
    let cfg: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("hash-max-listpack-entries")
        .query(&mut con)
        .unwrap();
    assert_eq!(cfg[1], "512");
    let _: Result<(), _> = redis::cmd("SHUTDOWN").query::<()>(&mut con);
    wait_for("the exit", Duration::from_secs(10), || !pid_alive(pid));
    assert!(!pidfile.exists(), "the pidfile is removed at exit");
}

#[test]
fn refused_directives_say_why() {
    let e = refused(&["--syslog-enabled", "yes"]);
    assert!(e.contains("syslog is not supported"), "{e}");
    let e = refused(&["--loadmodule", "/nonexistent/module.so"]);
    assert!(e.contains("modules"), "{e}");
    // TLS is built; a TLS port with no certificate stops the start as it stops Redis's.
    let e = refused(&["--tls-port", "6380"]);
    assert!(e.contains("Failed to configure TLS"), "{e}");
    let e = refused(&["--proto-max-bulk-len", "1000"]);
    assert!(e.contains("between 1048576 and"), "{e}");
    let e = refused(&["--client-query-buffer-limit", "512kb"]);
    assert!(e.contains("between 1048576 and"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("m.conf");
    std::fs::write(&f, "port 0\nloadmodule /x.so\n").unwrap();
    let e = refused(&[f.to_str().unwrap()]);
    assert!(e.contains("modules are not supported"), "{e}");
    let e = refused(&["--nosuchdirective", "1"]);
    assert!(e.contains("unknown directive"), "{e}");
}

#[test]
fn include_and_config_rewrite_keep_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let inc = dir.path().join("extra.conf");
    std::fs::write(&inc, "slowlog-max-len 42\n").unwrap();
    let main = dir.path().join("main.conf");
    let text = format!(
        "# the operator's notes\nbind 127.0.0.1\ninclude {}\n\n# memory\nmaxmemory 10mb\nsave 60 1\nsave 300 10\n",
        inc.display()
    );
    std::fs::write(&main, &text).unwrap();
    let srv = Launch::podium().config_file(main.to_str().unwrap()).start();
    let mut con = srv.con();
    let v: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("slowlog-max-len")
        .query(&mut con)
        .unwrap();
    assert_eq!(v[1], "42", "included file applied");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("2gb")
        .arg("save")
        .arg("900 1")
        .arg("maxmemory-policy")
        .arg("allkeys-lru")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("CONFIG").arg("REWRITE").query(&mut con).unwrap();
    let new = std::fs::read_to_string(&main).unwrap();
    let expected_head = format!(
        "# the operator's notes\nbind 127.0.0.1\ninclude {}\n\n# memory\nmaxmemory 2gb\nsave 900 1\n\n",
        inc.display()
    );
    assert!(new.starts_with(&expected_head), "{new}");
    assert!(new.contains("# Generated by CONFIG REWRITE\n"), "{new}");
    assert!(new.contains("\nmaxmemory-policy allkeys-lru\n"), "{new}");
    // The command-line port is written too (it differs from the default).
    assert!(new.contains(&format!("\nport {}\n", srv.port)), "{new}");
    // Rewrites with nothing changed settle: as Redis, the file's final newline becomes one
    // empty line once, and then the text stays as it is.
    let _: () = redis::cmd("CONFIG").arg("REWRITE").query(&mut con).unwrap();
    let second = std::fs::read_to_string(&main).unwrap();
    assert_eq!(second, new.clone() + "\n");
    let _: () = redis::cmd("CONFIG").arg("REWRITE").query(&mut con).unwrap();
    assert_eq!(std::fs::read_to_string(&main).unwrap(), second);
}

#[test]
fn config_rewrite_without_a_file_is_refused() {
    let srv = Podium::start(&[]);
    let mut con = srv.con();
    let e = redis::cmd("CONFIG")
        .arg("REWRITE")
        .query::<()>(&mut con)
        .unwrap_err();
    assert!(e.to_string().contains("without a config file"), "{e}");
    let e = redis::cmd("CONFIG")
        .arg("SET")
        .arg("proto-max-bulk-len")
        .arg("100")
        .query::<()>(&mut con)
        .unwrap_err();
    assert!(e.to_string().contains("between 1048576"), "{e}");
}

#[test]
fn unixsocket_serves_with_its_permissions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("podium.sock");
    let srv = Podium::start(&[
        "--unixsocket",
        path.to_str().unwrap(),
        "--unixsocketperm",
        "700",
    ]);
    let mut con = redis::Client::open(format!("redis+unix://{}", path.display()))
        .unwrap()
        .get_connection()
        .unwrap();
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut con).unwrap();
    let v: String = redis::cmd("GET").arg("k").query(&mut srv.con()).unwrap();
    assert_eq!(v, "v");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    let perm: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("unixsocketperm")
        .query(&mut con)
        .unwrap();
    assert_eq!(perm[1], "700");
}

#[test]
fn tcp_backlog_is_the_listen_backlog() {
    let srv = Podium::start(&["--tcp-backlog", "37"]);
    let out = Command::new("ss")
        .args(["-Hltn", &format!("sport = :{}", srv.port)])
        .output()
        .expect("ss");
    let text = String::from_utf8_lossy(&out.stdout);
    // For a listening socket, ss prints the backlog as Send-Q (third column).
    let backlog: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    assert_eq!(backlog, vec!["37"], "{text}");
}

#[test]
fn supervised_systemd_notifies_ready_and_stopping() {
    use std::os::unix::net::UnixDatagram;
    let dir = tempfile::tempdir().unwrap();
    let sock_path = dir.path().join("notify");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_podium"))
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--supervised",
            "systemd",
            "--save",
            "",
        ])
        .env("NOTIFY_SOCKET", &sock_path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut buf = [0u8; 256];
    let n = sock.recv(&mut buf).expect("a READY notification");
    let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(msg.contains("READY=1\n"), "{msg}");
    assert!(
        msg.contains("STATUS=Ready to accept connections\n"),
        "{msg}"
    );
    let mut con = redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .get_connection()
        .unwrap();
    let _ = redis::cmd("SHUTDOWN").query::<()>(&mut con);
    let n = sock.recv(&mut buf).expect("a STOPPING notification");
    assert_eq!(&buf[..n], b"STOPPING=1\n");
    let status = child.wait().unwrap();
    assert!(status.success());
    assert!(Path::new(&sock_path).exists());
}

#[test]
fn slowlog_latency_errorstats_and_cluster_section() {
    let srv = Podium::start(&["--enable-debug-command", "yes"]);
    let mut con = srv.con();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg("100000")
        .arg("latency-monitor-threshold")
        .arg("50")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg("slowpoke")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut con).unwrap();
    let _: () = redis::cmd("DEBUG")
        .arg("SLEEP")
        .arg("0.15")
        .query(&mut con)
        .unwrap();
    let len: i64 = redis::cmd("SLOWLOG").arg("LEN").query(&mut con).unwrap();
    assert_eq!(len, 1, "only the slow command is logged");
    let entries: redis::Value = redis::cmd("SLOWLOG").arg("GET").query(&mut con).unwrap();
    let redis::Value::Array(entries) = entries else {
        panic!("{entries:?}")
    };
    let redis::Value::Array(e) = &entries[0] else {
        panic!()
    };
    assert_eq!(e.len(), 6);
    let redis::Value::Int(dur) = e[2] else {
        panic!()
    };
    assert!(dur >= 150_000, "{dur}");
    assert_eq!(
        e[3],
        redis::Value::Array(vec![
            redis::Value::BulkString(b"DEBUG".to_vec()),
            redis::Value::BulkString(b"SLEEP".to_vec()),
            redis::Value::BulkString(b"0.15".to_vec()),
        ])
    );
    assert_eq!(e[5], redis::Value::BulkString(b"slowpoke".to_vec()));
    let latest: Vec<(String, i64, i64, i64)> =
        redis::cmd("LATENCY").arg("LATEST").query(&mut con).unwrap();
    assert_eq!(latest.len(), 1);
    assert_eq!(latest[0].0, "command");
    assert!(latest[0].2 >= 150 && latest[0].3 >= 150, "{latest:?}");
    let hist: Vec<(i64, i64)> = redis::cmd("LATENCY")
        .arg("HISTORY")
        .arg("command")
        .query(&mut con)
        .unwrap();
    assert_eq!(hist.len(), 1);
    let _: () = redis::cmd("SLOWLOG").arg("RESET").query(&mut con).unwrap();
    let len: i64 = redis::cmd("SLOWLOG").arg("LEN").query(&mut con).unwrap();
    assert_eq!(len, 0);
    // Errorstats count error replies by kind (from a baseline: the client library's CLIENT
    // SETINFO on connecting is an unknown subcommand in Redis 7.0, and counted).
    let errors_before = {
        let info: String = redis::cmd("INFO")
            .arg("errorstats")
            .query(&mut con)
            .unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("errorstat_ERR:count="))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    let _ = redis::cmd("NOSUCHCOMMAND").query::<()>(&mut con);
    let _ = redis::cmd("INCR").arg("k").query::<()>(&mut con);
    let _: () = redis::cmd("SADD")
        .arg("s")
        .arg("m")
        .query(&mut con)
        .unwrap();
    let _ = redis::cmd("GET").arg("s").query::<()>(&mut con);
    let info: String = redis::cmd("INFO").query(&mut con).unwrap();
    assert!(
        info.contains(&format!("errorstat_ERR:count={}\r\n", errors_before + 2)),
        "{info}"
    );
    assert!(info.contains("errorstat_WRONGTYPE:count=1\r\n"), "{info}");
    assert!(
        info.contains("# Cluster\r\ncluster_enabled:0\r\n"),
        "{info}"
    );
    let info: String = redis::cmd("INFO")
        .arg("latencystats")
        .query(&mut con)
        .unwrap();
    assert!(info.contains("latency_percentiles_usec_set:p50="), "{info}");
    // DEBUG is refused unless enabled.
    let plain = Podium::start(&[]);
    let e = redis::cmd("DEBUG")
        .arg("SLEEP")
        .arg("0")
        .query::<()>(&mut plain.con())
        .unwrap_err();
    assert!(e.to_string().contains("DEBUG command not allowed"), "{e}");
}

fn info_field(con: &mut redis::Connection, field: &str) -> i64 {
    let info: String = redis::cmd("INFO").query(con).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in INFO"))
}

/// Set maxmemory to what is in use now plus `headroom` bytes.
fn limit_memory(con: &mut redis::Connection, headroom: i64, policy: &str) -> i64 {
    let used = info_field(con, "used_memory");
    let max = used + headroom;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(max)
        .arg("maxmemory-policy")
        .arg(policy)
        .query(con)
        .unwrap();
    max
}

#[test]
fn allkeys_lru_evicts_cold_keys_and_keeps_hot_ones() {
    let srv = Podium::start(&[]);
    let mut con = srv.con();
    let value = "x".repeat(1000);
    limit_memory(&mut con, 3 << 20, "allkeys-lru");
    for i in 0..1000 {
        let _: () = redis::cmd("SET")
            .arg(format!("cold:{i}"))
            .arg(&value)
            .query(&mut con)
            .unwrap();
    }
    assert_eq!(info_field(&mut con, "evicted_keys"), 0);
    std::thread::sleep(Duration::from_millis(2100));
    for i in 0..200 {
        let _: Option<String> = redis::cmd("GET")
            .arg(format!("cold:{i}"))
            .query(&mut con)
            .unwrap();
    }
    // More than fits (about 2,900 keys of this size fit the limit; fewer than the 800 cold
    // ones must go): every write must still succeed, by evicting.
    for i in 0..2300 {
        let _: () = redis::cmd("SET")
            .arg(format!("new:{i}"))
            .arg(&value)
            .query(&mut con)
            .unwrap();
    }
    let evicted = info_field(&mut con, "evicted_keys");
    assert!(evicted > 100, "{evicted}");
    let max = info_field(&mut con, "maxmemory");
    let used = info_field(&mut con, "used_memory");
    assert!(used <= max + (64 << 10), "{used} > {max}");
    // The recently read keys were idle the least among the old ones: most survive, while
    // most of the untouched old keys are gone.
    let mut hot = 0;
    let mut cold = 0;
    for i in 0..1000 {
        let there: bool = redis::cmd("EXISTS")
            .arg(format!("cold:{i}"))
            .query(&mut con)
            .unwrap();
        if there && i < 200 {
            hot += 1;
        } else if there {
            cold += 1;
        }
    }
    assert!(
        hot >= 190 && cold + evicted as usize >= 790,
        "hot survivors {hot}/200, cold {cold}/800, evicted {evicted}"
    );
    let idle: i64 = redis::cmd("OBJECT")
        .arg("IDLETIME")
        .arg("new:2299")
        .query(&mut con)
        .unwrap();
    assert!(idle <= 1, "{idle}");
}

#[test]
fn volatile_policies_only_evict_keys_with_a_ttl_and_noeviction_refuses() {
    let srv = Podium::start(&[]);
    let mut con = srv.con();
    let value = "y".repeat(1000);
    for i in 0..500 {
        let _: () = redis::cmd("SET")
            .arg(format!("keep:{i}"))
            .arg(&value)
            .query(&mut con)
            .unwrap();
        let _: () = redis::cmd("SET")
            .arg(format!("ttl:{i}"))
            .arg(&value)
            .arg("EX")
            .arg(1000 + i)
            .query(&mut con)
            .unwrap();
    }
    limit_memory(&mut con, 0, "volatile-ttl");
    for i in 0..100 {
        let _: () = redis::cmd("SET")
            .arg(format!("more:{i}"))
            .arg(&value)
            .query(&mut con)
            .unwrap();
    }
    let mut keep = 0;
    for i in 0..500 {
        let there: bool = redis::cmd("EXISTS")
            .arg(format!("keep:{i}"))
            .query(&mut con)
            .unwrap();
        keep += there as usize;
    }
    assert_eq!(
        keep, 500,
        "keys without a TTL are never evicted by volatile-ttl"
    );
    // The soonest to expire go first (by sampling: compare the first and last fifths).
    let survivors = |con: &mut redis::Connection, range: std::ops::Range<i32>| {
        range
            .filter(|i| {
                redis::cmd("EXISTS")
                    .arg(format!("ttl:{i}"))
                    .query::<bool>(con)
                    .unwrap()
            })
            .count()
    };
    let early = survivors(&mut con, 0..100);
    let late = survivors(&mut con, 400..500);
    assert!(
        early < 60 && late > 90,
        "early {early}/100, late {late}/100"
    );
    // Once no key can be evicted: -OOM, as with noeviction.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("noeviction")
        .query(&mut con)
        .unwrap();
    // Redis checks the limit before a command runs: writes go through while the memory is
    // still under it (the evictions above stopped just under), and the first write that
    // finds it over gets -OOM.
    let mut refused = None;
    for i in 0..10_000 {
        if let Err(e) = redis::cmd("SET")
            .arg(format!("x:{i}"))
            .arg(&value)
            .query::<()>(&mut con)
        {
            refused = Some(e);
            break;
        }
    }
    let e = refused.expect("a write over maxmemory under noeviction is refused");
    assert!(e.to_string().contains("OOM"), "{e}");
    // Reads still work.
    let v: String = redis::cmd("GET").arg("keep:1").query(&mut con).unwrap();
    assert_eq!(v.len(), 1000);
}

#[test]
fn allkeys_lfu_tracks_frequency() {
    let srv = Podium::start(&["--maxmemory-policy", "allkeys-lfu"]);
    let mut con = srv.con();
    let _: () = redis::cmd("SET").arg("f").arg("1").query(&mut con).unwrap();
    let f0: i64 = redis::cmd("OBJECT")
        .arg("FREQ")
        .arg("f")
        .query(&mut con)
        .unwrap();
    assert_eq!(f0, 5, "new keys start at LFU_INIT_VAL");
    for _ in 0..2000 {
        let _: String = redis::cmd("GET").arg("f").query(&mut con).unwrap();
    }
    let f1: i64 = redis::cmd("OBJECT")
        .arg("FREQ")
        .arg("f")
        .query(&mut con)
        .unwrap();
    assert!(f1 > 10 && f1 < 255, "{f1}");
    let e = redis::cmd("OBJECT")
        .arg("IDLETIME")
        .arg("f")
        .query::<i64>(&mut con)
        .unwrap_err();
    assert!(
        e.to_string().contains("LFU maxmemory policy is selected"),
        "{e}"
    );
}

#[test]
fn a_request_in_small_pieces_parses_in_linear_time() {
    use std::io::{Read, Write};
    let srv = Podium::start(&[]);
    let n = 200_000;
    let mut req = format!("*{}\r\n$4\r\nSADD\r\n$1\r\ns\r\n", n + 2).into_bytes();
    for i in 0..n {
        let m = i.to_string();
        req.extend_from_slice(format!("${}\r\n{m}\r\n", m.len()).as_bytes());
    }
    let mut s = srv.raw();
    s.set_nodelay(true).unwrap();
    let started = Instant::now();
    for piece in req.chunks(512) {
        s.write_all(piece).unwrap();
    }
    let mut reply = [0u8; 32];
    let got = s.read(&mut reply).unwrap();
    assert_eq!(&reply[..got], format!(":{n}\r\n").as_bytes());
    // Re-parsing from the start on each of the ~5000 reads took seconds; now it is the cost of
    // one pass.
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn output_buffer_hard_limit_closes_the_client() {
    use std::io::{Read, Write};
    let srv = Podium::start(&["--client-output-buffer-limit", "normal", "1mb", "0", "0"]);
    let mut con = srv.con();
    let big = "z".repeat(2 << 20);
    let _: () = redis::cmd("SET")
        .arg("big")
        .arg(&big)
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("small")
        .arg("ok")
        .query(&mut con)
        .unwrap();
    let small: String = redis::cmd("GET").arg("small").query(&mut con).unwrap();
    assert_eq!(small, "ok");
    let mut s = srv.raw();
    s.write_all(b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n").unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    assert!(
        got.is_empty(),
        "{} bytes of a reply over the hard limit were sent",
        got.len()
    );
    let v: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("client-output-buffer-limit")
        .query(&mut con)
        .unwrap();
    assert_eq!(
        v[1],
        "normal 1048576 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60"
    );
}

/// A negative count asks for that many random picks: under a hard output-buffer limit the
/// reply stops growing at the limit and the client is closed, whatever the count (as Redis,
/// unit/obuf-limits); with no hard limit, counts past 2^24 are refused rather than built.
#[test]
fn repeated_random_picks_stop_at_the_hard_limit() {
    use std::io::{Read, Write};
    let srv = Podium::start(&[]);
    let mut con = srv.con();
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg("h")
        .arg("f")
        .arg("v")
        .ignore()
        .cmd("SADD")
        .arg("s")
        .arg("m")
        .ignore()
        .cmd("ZADD")
        .arg("z")
        .arg(1)
        .arg("m")
        .ignore()
        .query(&mut con)
        .unwrap();
    let cmds = [
        "HRANDFIELD h -999999999",
        "HRANDFIELD h -999999999 WITHVALUES",
        "SRANDMEMBER s -999999999",
        "ZRANDMEMBER z -999999999",
        "ZRANDMEMBER z -999999999 WITHSCORES",
    ];
    for c in cmds {
        let args: Vec<&str> = c.split(' ').collect();
        let e = redis::cmd(args[0])
            .arg(&args[1..])
            .query::<Vec<String>>(&mut con);
        assert_eq!(
            e.unwrap_err().detail(),
            Some("value is out of range"),
            "{c}"
        );
    }
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("client-output-buffer-limit")
        .arg("normal 1000000 0 0")
        .query(&mut con)
        .unwrap();
    for c in cmds {
        let mut s = srv.raw();
        s.write_all(format!("{c}\r\n").as_bytes()).unwrap();
        let mut got = Vec::new();
        let _ = s.read_to_end(&mut got);
        assert!(got.is_empty(), "{c}: {} bytes sent", got.len());
    }
    // Within the limit the picks are all there.
    let picks: Vec<String> = redis::cmd("HRANDFIELD")
        .arg("h")
        .arg(-1000)
        .query(&mut con)
        .unwrap();
    assert_eq!(picks.len(), 1000);
}

fn client_field(con: &mut redis::Connection, name: &str, field: &str) -> Option<u64> {
    let list: String = redis::cmd("CLIENT").arg("LIST").query(con).unwrap();
    let line = list
        .lines()
        .find(|l| l.contains(&format!(" name={name} ")))?;
    line.split(' ')
        .find_map(|kv| kv.strip_prefix(&format!("{field}=")))
        .and_then(|v| v.parse().ok())
}

#[test]
fn output_of_a_client_that_does_not_read_grows_and_meets_the_soft_limit() {
    use std::io::Write;
    let srv = Podium::start(&["--client-output-buffer-limit", "normal", "0", "4mb", "1"]);
    let mut con = srv.con();
    let _: () = redis::cmd("SET")
        .arg("v")
        .arg("x".repeat(100_000))
        .query(&mut con)
        .unwrap();
    let mut s = srv.raw();
    s.write_all(b"CLIENT SETNAME slow\r\n").unwrap();
    wait_for("the client's name", Duration::from_secs(5), || {
        client_field(&mut con, "slow", "omem").is_some()
    });
    // Pipelined GETs the client never reads: the socket buffers fill, then the server's
    // output buffer grows (it keeps reading and running the commands, as Redis does).
    let get = b"*2\r\n$3\r\nGET\r\n$1\r\nv\r\n".repeat(10);
    let started = Instant::now();
    let mut seen = 0;
    while started.elapsed() < Duration::from_secs(10) {
        if s.write_all(&get).is_err() {
            break;
        }
        match client_field(&mut con, "slow", "omem") {
            Some(omem) => seen = seen.max(omem),
            // Closed: over the soft limit for more than its second.
            None => break,
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(seen >= 1_000_000, "omem never grew: {seen}");
    wait_for(
        "the soft limit to close the client",
        Duration::from_secs(5),
        || client_field(&mut con, "slow", "omem").is_none(),
    );
    // Over it for a second at least before being closed.
    assert!(started.elapsed() >= Duration::from_secs(1));
}

#[test]
fn debug_segfault_writes_a_crash_report_and_dies_of_the_signal() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let logfile = dir.path().join("crash.log");
    let mut srv = Podium::start(&[
        "--enable-debug-command",
        "yes",
        "--logfile",
        logfile.to_str().unwrap(),
    ]);
    let mut con = srv.con();
    let r: redis::RedisResult<()> = redis::cmd("DEBUG").arg("SEGFAULT").query(&mut con);
    assert!(r.is_err(), "the connection ends with the process");
    let status = srv.child.wait().expect("wait for the crashed server");
    assert_eq!(status.signal(), Some(libc::SIGSEGV), "{status:?}");
    let log = std::fs::read_to_string(&logfile).unwrap();
    assert!(log.contains("=== REDIS BUG REPORT START"), "{log}");
    assert!(log.contains("crashed by signal: 11 (SIGSEGV)"), "{log}");
    assert!(log.contains("------ STACK TRACE ------"), "{log}");
    assert!(log.contains("REDIS BUG REPORT END"), "{log}");
}

#[test]
fn client_pause_write_holds_writes_until_unpause() {
    let srv = Podium::start(&[]);
    let mut admin = srv.con();
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("v1")
        .query(&mut admin)
        .unwrap();
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(60_000)
        .arg("WRITE")
        .query(&mut admin)
        .unwrap();
    let mut writer = srv.con();
    let held = std::thread::spawn(move || {
        let r: String = redis::cmd("SET")
            .arg("k")
            .arg("v2")
            .query(&mut writer)
            .unwrap();
        r
    });
    // Reads go on; the write waits, counted as a blocked client.
    wait_for("the held write", Duration::from_secs(5), || {
        let info: String = redis::cmd("INFO").arg("clients").query(&mut admin).unwrap();
        info.contains("blocked_clients:1")
    });
    let v: String = redis::cmd("GET").arg("k").query(&mut admin).unwrap();
    assert_eq!(v, "v1");
    assert!(!held.is_finished());
    let _: () = redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query(&mut admin)
        .unwrap();
    assert_eq!(held.join().unwrap(), "OK");
    let v: String = redis::cmd("GET").arg("k").query(&mut admin).unwrap();
    assert_eq!(v, "v2");
}

#[test]
fn config_set_port_moves_the_listener_and_a_taken_port_is_refused() {
    let srv = Podium::start(&[]);
    let mut con = srv.con();
    let new_port = free_port();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("port")
        .arg(new_port)
        .query(&mut con)
        .unwrap();
    let mut moved = connect_port(new_port);
    let pong: String = redis::cmd("PING").query(&mut moved).unwrap();
    assert_eq!(pong, "PONG");
    assert!(std::net::TcpStream::connect(("127.0.0.1", srv.port)).is_err());
    // A port someone else holds: refused, and the server stays where it was.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_port = taken.local_addr().unwrap().port();
    let e = redis::cmd("CONFIG")
        .arg("SET")
        .arg("port")
        .arg(taken_port)
        .query::<()>(&mut moved)
        .unwrap_err();
    assert!(
        e.to_string().contains("Unable to listen on this port"),
        "{e}"
    );
    let port: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("port")
        .query(&mut moved)
        .unwrap();
    assert_eq!(port[1], new_port.to_string());
    let mut again = connect_port(new_port);
    let pong: String = redis::cmd("PING").query(&mut again).unwrap();
    assert_eq!(pong, "PONG");
}

fn connect_port(port: u16) -> redis::Connection {
    redis::Client::open(format!("redis://127.0.0.1:{port}/0"))
        .expect("client")
        .get_connection_with_timeout(Duration::from_secs(5))
        .expect("connect")
}

/// `proc-title-template` sets what `ps` and /proc/<pid>/cmdline show, as Redis's does, and a
/// template with an unknown variable is refused.
#[test]
fn the_process_title_follows_proc_title_template() {
    let srv = Podium::start(&["--save", ""]);
    let cmdline = || {
        let raw = std::fs::read(format!("/proc/{}/cmdline", srv.pid())).expect("cmdline");
        String::from_utf8_lossy(&raw)
            .trim_end_matches('\0')
            .to_string()
    };
    let port = srv.port;
    let title = cmdline();
    assert!(
        title.ends_with(&format!("podium 127.0.0.1:{port}")),
        "default title: {title:?}"
    );
    let mut c = srv.con();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("proc-title-template")
        .arg("TEST {title} {listen-addr} {port} {tls-port} {config-file} {{x}")
        .query(&mut c)
        .unwrap();
    let title = cmdline();
    let words: Vec<&str> = title.split(' ').collect();
    assert_eq!(words[0], "TEST", "{title:?}");
    assert!(words[1].ends_with("/podium"), "{title:?}");
    assert_eq!(
        &words[2..],
        &[
            &format!("127.0.0.1:{port}")[..],
            &port.to_string(),
            "0",
            "-",
            "{x}"
        ],
        "{title:?}"
    );
    let err = redis::cmd("CONFIG")
        .arg("SET")
        .arg("proc-title-template")
        .arg("{invalid-var}")
        .query::<()>(&mut c)
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("template format is invalid or contains unknown variables"),
        "{err}"
    );
    srv.stop();
}

/// `jemalloc-bg-thread` (Redis's default yes) runs jemalloc's purging threads, and CONFIG SET
/// stops and restarts them: counted by thread name in /proc.
#[test]
fn jemalloc_bg_thread_starts_and_stops_the_purging_threads() {
    let srv = Podium::start(&[]);
    let purgers = || {
        std::fs::read_dir(format!("/proc/{}/task", srv.pid()))
            .map(|tasks| {
                tasks
                    .flatten()
                    .filter(|t| {
                        std::fs::read_to_string(t.path().join("comm"))
                            .is_ok_and(|c| c.trim() == "jemalloc_bg_thd")
                    })
                    .count()
            })
            .unwrap_or(0)
    };
    wait_for("purging threads at start", Duration::from_secs(5), || {
        purgers() > 0
    });
    let mut c = srv.con();
    for (value, running) in [("no", false), ("yes", true)] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("jemalloc-bg-thread")
            .arg(value)
            .query(&mut c)
            .unwrap();
        wait_for(
            &format!("purging threads after jemalloc-bg-thread {value}"),
            Duration::from_secs(5),
            || (purgers() > 0) == running,
        );
    }
}
