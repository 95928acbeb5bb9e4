//! Security of the network edge and of CONFIG: protected configs (`dir`, `dbfilename`),
//! `enable-debug-command` / `enable-protected-configs` (no | yes | local), the cross-protocol
//! guard (POST / Host:), protected mode and the default `bind`. A client that is not local is
//! made by binding the client socket to 127.0.0.2 before connecting to 127.0.0.1.

use crate::common;

use common::{Launch, Podium};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Redis's protected-mode refusal, as sent.
const DENIED: &str = "-DENIED Redis is running in protected mode because protected mode is enabled and no password is set for the default user. In this mode connections are only accepted from the loopback interface. If you want to connect from external computers to Redis you may adopt one of the following solutions: 1) Just disable protected mode sending the command 'CONFIG SET protected-mode no' from the loopback interface by connecting to Redis from the same host the server is running, however MAKE SURE Redis is not publicly accessible from internet if you do so. Use CONFIG REWRITE to make this change permanent. 2) Alternatively you can just disable the protected mode by editing the Redis configuration file, and setting the protected mode option to 'no', and then restarting the server. 3) If you started the server manually just for testing, restart it with the '--protected-mode no' option. 4) Setup a an authentication password for the default user. NOTE: You only need to do one of the above things in order for the server to start accepting connections from the outside.\r\n";

/// A connection to `to` whose source address is `from` (port chosen by the system).
fn connect_from(from: [u8; 4], to: SocketAddr) -> TcpStream {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.bind(&SocketAddr::from((from, 0)).into())
        .expect("bind the client socket to the source address");
    sock.connect(&to.into()).expect("connect");
    let s: TcpStream = sock.into();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

fn local(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// A RESP request.
fn req(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    out
}

/// Send bytes, then read until the server closes (or 5 s pass).
fn until_closed(s: &mut TcpStream, bytes: &[u8]) -> String {
    s.write_all(bytes).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Send one request and read one line of reply.
fn line(s: &mut TcpStream, args: &[&str]) -> String {
    s.write_all(&req(args)).unwrap();
    let mut out = Vec::new();
    let mut b = [0u8; 1];
    while !out.ends_with(b"\r\n") {
        match s.read(&mut b) {
            Ok(1) => out.push(b[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&out).trim_end().to_string()
}

fn config_set(con: &mut redis::Connection, name: &str, value: &str) -> Result<(), String> {
    redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query::<()>(con)
        .map_err(|e| e.to_string())
}

#[test]
fn protected_configs_are_refused_by_default() {
    let srv = Podium::start(&[]);
    let mut con = srv.con();
    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("new").join("path");
    let err = config_set(&mut con, "dir", target.to_str().unwrap()).unwrap_err();
    assert!(
        err.contains(
            "CONFIG SET failed (possibly related to argument 'dir') - can't set protected config"
        ),
        "{err}"
    );
    let err = config_set(&mut con, "dbfilename", "x.rdb").unwrap_err();
    assert!(err.contains("can't set protected config"), "{err}");
    // All or nothing: a valid parameter next to a refused one is not applied.
    let err = redis::cmd("CONFIG")
        .arg(&["SET", "maxmemory", "1mb", "dir", "/tmp"])
        .query::<()>(&mut con)
        .unwrap_err()
        .to_string();
    assert!(err.contains("argument 'dir'"), "{err}");
    let mm: Vec<String> = redis::cmd("CONFIG")
        .arg(&["GET", "maxmemory"])
        .query(&mut con)
        .unwrap();
    assert_eq!(mm[1], "0");
    // Turning AOF on writes under the unchanged dir; nothing was created at the target.
    assert!(!target.exists() && !tmp.path().join("new").exists());
    // The switches themselves are immutable.
    for name in [
        "enable-protected-configs",
        "enable-debug-command",
        "enable-module-command",
    ] {
        let err = config_set(&mut con, name, "yes").unwrap_err();
        assert!(err.contains("can't set immutable config"), "{name}: {err}");
    }
}

#[test]
fn dir_must_exist_and_is_never_created() {
    let tmp = tempfile::tempdir().unwrap();
    let srv = Podium::start(&["--enable-protected-configs", "yes"]);
    let mut con = srv.con();
    let missing = tmp.path().join("a").join("b");
    let err = config_set(&mut con, "dir", missing.to_str().unwrap()).unwrap_err();
    assert!(
        err.contains(
            "CONFIG SET failed (possibly related to argument 'dir') - No such file or directory"
        ),
        "{err}"
    );
    assert!(!tmp.path().join("a").exists());
    let file = tmp.path().join("plain");
    std::fs::write(&file, b"x").unwrap();
    let err = config_set(&mut con, "dir", file.to_str().unwrap()).unwrap_err();
    assert!(err.contains("Not a directory"), "{err}");
    // An existing directory is accepted, reported as the absolute working directory, and the
    // AOF goes there (its own directory is the one level created).
    let real = tmp.path().canonicalize().unwrap();
    config_set(&mut con, "dir", real.to_str().unwrap()).unwrap();
    let dir: Vec<String> = redis::cmd("CONFIG")
        .arg(&["GET", "dir"])
        .query(&mut con)
        .unwrap();
    assert_eq!(dir[1], real.to_str().unwrap());
    config_set(&mut con, "appendonly", "yes").unwrap();
    // The AOF is written by a background rewrite: wait for its directory.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !real.join("appendonlydir").is_dir() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(real.join("appendonlydir").is_dir());
    // dbfilename is a file name, not a path.
    let err = config_set(&mut con, "dbfilename", "../x.rdb").unwrap_err();
    assert!(
        err.contains("dbfilename can't be a path, just a filename"),
        "{err}"
    );
    config_set(&mut con, "dbfilename", "other.rdb").unwrap();
}

#[test]
fn missing_dir_at_startup_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope");
    let r = Launch::podium()
        .args(&["--dir", missing.to_str().unwrap()])
        .log(&tmp.path().join("log"))
        .try_start();
    let log = r.err().expect("the server must not start");
    assert!(log.contains("No such file or directory"), "{log}");
    assert!(!missing.exists());
}

#[test]
fn protected_configs_local_means_loopback_only() {
    let srv = Podium::start(&[
        "--enable-protected-configs",
        "local",
        "--protected-mode",
        "no",
    ]);
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().to_str().unwrap();
    let mut far = connect_from([127, 0, 0, 2], local(srv.port));
    let reply = line(&mut far, &["CONFIG", "SET", "dir", path]);
    assert_eq!(
        reply,
        "-ERR CONFIG SET failed (possibly related to argument 'dir') - can't set protected config"
    );
    let mut near = connect_from([127, 0, 0, 1], local(srv.port));
    assert_eq!(line(&mut near, &["CONFIG", "SET", "dir", path]), "+OK");
}

#[test]
fn cross_protocol_request_closes_before_the_rest_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("log");
    let srv = Launch::podium().log(&base).start();
    let mut s = srv.raw();
    let mut bytes = req(&["SET", "before", "1"]);
    bytes.extend_from_slice(b"POST / HTTP/1.1\r\nHost: example.com\r\nContent-Length: 20\r\n\r\n");
    bytes.extend_from_slice(&req(&["SET", "after", "1"]));
    let got = until_closed(&mut s, &bytes);
    // The connection is closed without a reply to what came before in that read (Redis drops
    // the pending output of a client it closes for this).
    assert_eq!(got, "");
    let mut con = srv.con();
    let before: Option<String> = redis::cmd("GET").arg("before").query(&mut con).unwrap();
    let after: Option<String> = redis::cmd("GET").arg("after").query(&mut con).unwrap();
    assert_eq!(before.as_deref(), Some("1"));
    assert_eq!(after, None);
    // `Host:` alone, as a RESP command, closes too.
    let mut s = srv.raw();
    assert_eq!(until_closed(&mut s, &req(&["host:", "x"])), "");
    let log = std::fs::read_to_string(base.with_extension(format!("{}.log", srv.port))).unwrap();
    assert!(
        log.contains("Possible SECURITY ATTACK detected. It looks like somebody is sending POST or Host: commands to Redis."),
        "{log}"
    );
}

#[test]
fn protected_mode_refuses_non_loopback_clients_without_password() {
    let srv = Podium::start(&[]);
    let mut far = connect_from([127, 0, 0, 2], local(srv.port));
    assert_eq!(until_closed(&mut far, &req(&["PING"])), DENIED);
    let mut near = connect_from([127, 0, 0, 1], local(srv.port));
    assert_eq!(line(&mut near, &["PING"]), "+PONG");
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query(&mut srv.con())
        .unwrap();
    assert!(info.contains("rejected_connections:1"), "{info}");
    // protected-mode no, at run time, lets it in.
    config_set(&mut srv.con(), "protected-mode", "no").unwrap();
    let mut far = connect_from([127, 0, 0, 2], local(srv.port));
    assert_eq!(line(&mut far, &["PING"]), "+PONG");
}

#[test]
fn protected_mode_admits_anyone_once_a_password_is_set() {
    let srv = Podium::start(&[]);
    config_set(&mut srv.con(), "requirepass", "secret").unwrap();
    let mut far = connect_from([127, 0, 0, 2], local(srv.port));
    assert_eq!(
        line(&mut far, &["PING"]),
        "-NOAUTH Authentication required."
    );
    assert_eq!(line(&mut far, &["AUTH", "secret"]), "+OK");
}

#[test]
fn default_bind_is_every_address() {
    // No bind in the file and none on the command line: Redis 7.0's `* -::*`.
    let tmp = tempfile::tempdir().unwrap();
    let conf = tmp.path().join("empty.conf");
    std::fs::write(&conf, "# nothing\n").unwrap();
    let srv = Launch::podium().config_file(conf.to_str().unwrap()).start();
    let bind: Vec<String> = redis::cmd("CONFIG")
        .arg(&["GET", "bind"])
        .query(&mut srv.con())
        .unwrap();
    assert_eq!(bind[1], "* -::*");
    // Listening on 0.0.0.0: another address reaches it (the kernel picks 127.0.0.1 as the
    // source, which is local) ...
    let mut other = TcpStream::connect(("127.0.0.2", srv.port)).unwrap();
    other
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    assert_eq!(line(&mut other, &["PING"]), "+PONG");
    // ... and a client from 127.0.0.2 is not local.
    let to = SocketAddr::from(([127, 0, 0, 2], srv.port));
    let mut far = connect_from([127, 0, 0, 2], to);
    assert_eq!(until_closed(&mut far, &req(&["PING"])), DENIED);
    // IPv6 loopback too, where the machine has IPv6 (the `-` makes it optional).
    if std::net::TcpListener::bind("[::1]:0").is_ok() {
        let mut v6 = TcpStream::connect(("::1", srv.port)).unwrap();
        v6.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(line(&mut v6, &["PING"]), "+PONG");
    }
}

#[test]
fn bind_takes_several_addresses_and_optional_ones() {
    let srv = Podium::start(&["--bind", "127.0.0.1", "127.0.0.3", "-10.254.254.254"]);
    let mut a = TcpStream::connect(("127.0.0.3", srv.port)).unwrap();
    a.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(line(&mut a, &["PING"]), "+PONG");
    // A source of 127.0.0.2 is not 127.0.0.1: protected mode refuses it.
    let mut far = connect_from([127, 0, 0, 2], SocketAddr::from(([127, 0, 0, 3], srv.port)));
    assert_eq!(until_closed(&mut far, &req(&["PING"])), DENIED);
    // Not bound to 127.0.0.4.
    assert!(TcpStream::connect(("127.0.0.4", srv.port)).is_err());
    // An address the machine lacks, without `-`, is a startup error.
    let tmp = tempfile::tempdir().unwrap();
    let r = Launch::podium()
        .args(&["--bind", "127.0.0.1", "10.254.254.254"])
        .log(&tmp.path().join("log"))
        .try_start();
    let log = r.err().expect("binding a missing address must fail");
    assert!(log.contains("Cannot assign requested address"), "{log}");
}
