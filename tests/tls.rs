//! TLS end to end, with real TLS clients and peers: redis-cli `--tls`, `openssl s_client`,
//! redis-py (Debian's python3-redis) and a TLS-built redis-server 7.0, all against certificates
//! made at test time with the `openssl` tool (a CA, a server pair, a client pair, a second
//! server pair for rotation, and a pair from an unknown CA). Checks a leaderboard flow over a
//! TLS-only server (`port 0`), mutual TLS under each `tls-auth-clients` mode, a plain-text
//! client on the TLS port (no reply, then the connection closes; the server serves on), plain
//! and TLS listeners side by side, certificate rotation by CONFIG SET (new connections see the
//! new certificate, open ones go on, a bad key file is refused and changes nothing), replication
//! over TLS in both pairings with redis-server, and `tls-protocols` (a bad value stops the
//! start; a TLSv1.3-only server refuses TLSv1.2).
//!
//! The server under test is Podium's binary, or the program named by `PODIUM_TLS_TEST_BIN`
//! (read only by this file): `PODIUM_TLS_TEST_BIN=/usr/bin/redis-server cargo test --release
//! --test tls` runs the same checks against Redis itself, which is how they were validated.
//! External tools (redis-cli, openssl, redis-server, python3 with redis-py) are required as
//! `common::require_tool` says: missing, the test fails unless `PODIUM_ALLOW_SKIP=1`.

use crate::common;

use common::require_tool;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The variable naming another server program to run these tests against.
const BIN_VAR: &str = "PODIUM_TLS_TEST_BIN";

/// Ports tried before giving up on a start (each one is a new spawn).
const ATTEMPTS: usize = 5;

/// How long one client command (redis-cli, openssl, python3) may run.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(20);

fn server_bin() -> String {
    std::env::var(BIN_VAR).unwrap_or_else(|_| env!("CARGO_BIN_EXE_podium").to_string())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a free port")
        .port()
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out waiting for {what}");
}

// ---------------------------------------------------------------------------------------------
// Running client programs.

/// What a client program did: `status` is `None` when it was killed for running too long.
struct Ran {
    what: String,
    status: Option<ExitStatus>,
    stdout: String,
    stderr: String,
}

impl Ran {
    fn ok(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    /// Stdout, after checking the program exited with status 0.
    fn stdout_ok(&self) -> &str {
        assert!(self.ok(), "{self}");
        &self.stdout
    }
}

impl std::fmt::Display for Ran {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}\n  status: {:?}\n  stdout: {:?}\n  stderr: {:?}",
            self.what, self.status, self.stdout, self.stderr
        )
    }
}

/// Run `cmd` with `input` on its stdin (or /dev/null), killing it after `timeout`.
fn run(mut cmd: Command, input: Option<&[u8]>, timeout: Duration) -> Ran {
    let what = format!("{cmd:?}");
    cmd.stdin(if input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {what}: {e}"));
    if let Some(data) = input {
        let mut stdin = child.stdin.take().expect("piped stdin");
        let data = data.to_vec();
        // A program that exits before reading all of it closes the pipe: not an error here.
        std::thread::spawn(move || {
            let _ = stdin.write_all(&data);
        });
    }
    let out = collect(child.stdout.take());
    let err = collect(child.stderr.take());
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    Ran {
        what,
        status,
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
    }
}

/// A thread reading `r` to its end, as text.
fn collect<R: Read + Send + 'static>(r: Option<R>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut r) = r {
            let _ = r.read_to_end(&mut buf);
        }
        String::from_utf8_lossy(&buf).into_owned()
    })
}

// ---------------------------------------------------------------------------------------------
// Certificates.

/// The certificates of one test, in a directory removed when it is dropped.
struct Certs {
    dir: tempfile::TempDir,
}

impl Certs {
    fn path(&self, name: &str) -> String {
        self.dir
            .path()
            .join(name)
            .to_str()
            .expect("UTF-8 temp path")
            .to_string()
    }
}

const CA_CNF: &str = "\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = podium-test-ca
[v3_ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
";

const SERVER_EXT: &str = "\
basicConstraints = CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1,DNS:localhost
";

const CLIENT_EXT: &str = "\
basicConstraints = CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = clientAuth
";

/// Make, with the `openssl` tool, RSA 2048 keys and certificates valid for ten years:
/// `ca.crt` (CN podium-test-ca); `server.crt`/`server.key` (CN podium-server, serverAuth,
/// SAN 127.0.0.1 and localhost) and `server2.crt`/`server2.key` (CN podium-server2, the same
/// otherwise), `client.crt`/`client.key` (CN podium-client, clientAuth), all signed by the CA;
/// and `rogue.crt`/`rogue.key` (CN podium-rogue, clientAuth), signed by `rogue-ca.crt`
/// (CN podium-test-rogue-ca), a CA no server trusts.
fn make_certs(openssl: &str) -> Certs {
    let certs = Certs {
        dir: tempfile::tempdir().expect("certificate dir"),
    };
    for (name, text) in [
        ("ca.cnf", CA_CNF),
        ("server.ext", SERVER_EXT),
        ("client.ext", CLIENT_EXT),
    ] {
        std::fs::write(certs.dir.path().join(name), text).expect("write openssl config");
    }
    // Arguments separated by spaces (none of them holds one).
    let sh = |args: String| {
        let mut cmd = Command::new(openssl);
        cmd.args(args.split(' ')).current_dir(certs.dir.path());
        let ran = run(cmd, None, Duration::from_secs(60));
        assert!(ran.ok(), "certificate generation failed: {ran}");
    };
    for ca in ["ca", "rogue-ca"] {
        sh(format!(
            "req -x509 -new -newkey rsa:2048 -nodes -sha256 -days 3650 -config ca.cnf \
             -extensions v3_ca -keyout {ca}.key -out {ca}.crt -subj /CN=podium-test-{ca}"
        ));
    }
    for (serial, (name, ext, ca)) in [
        ("server", "server.ext", "ca"),
        ("server2", "server.ext", "ca"),
        ("client", "client.ext", "ca"),
        ("rogue", "client.ext", "rogue-ca"),
    ]
    .into_iter()
    .enumerate()
    {
        sh(format!(
            "req -new -newkey rsa:2048 -nodes -config ca.cnf -keyout {name}.key \
             -out {name}.csr -subj /CN=podium-{name}"
        ));
        sh(format!(
            "x509 -req -sha256 -days 3650 -in {name}.csr -CA {ca}.crt -CAkey {ca}.key \
             -set_serial {} -extfile {ext} -out {name}.crt",
            1000 + serial
        ));
    }
    certs
}

// ---------------------------------------------------------------------------------------------
// The tools, the certificates, and servers started with them.

/// What every test here needs: redis-cli and openssl, and the certificates made with openssl.
struct Ctx {
    cli: String,
    openssl: String,
    certs: Certs,
}

/// Which client certificate a client presents.
#[derive(Clone, Copy)]
enum As {
    /// client.crt, signed by the trusted CA.
    Client,
    /// None at all.
    NoCert,
    /// rogue.crt, signed by a CA the server does not trust.
    Rogue,
}

impl Ctx {
    /// `None` (skip) only when a tool is missing and `PODIUM_ALLOW_SKIP=1`.
    fn new() -> Option<Ctx> {
        let cli = require_tool("redis-cli")?;
        let openssl = require_tool("openssl")?;
        let certs = make_certs(&openssl);
        Some(Ctx {
            cli,
            openssl,
            certs,
        })
    }

    fn path(&self, name: &str) -> String {
        self.certs.path(name)
    }

    /// `redis-cli --tls` to `port` as the client certificate, `args` as the command.
    fn cli(&self, port: u16, args: &[&str]) -> Ran {
        self.cli_as(As::Client, port, args, None)
    }

    /// The same, with the reply text checked to be exactly `want`.
    fn expect(&self, port: u16, args: &[&str], want: &str) {
        let ran = self.cli(port, args);
        assert_eq!(ran.stdout_ok(), want, "{ran}");
    }

    /// `redis-cli --tls` presenting `who`'s certificate; commands read from `input` if given.
    fn cli_as(&self, who: As, port: u16, args: &[&str], input: Option<&str>) -> Ran {
        let mut cmd = Command::new(&self.cli);
        cmd.args(["--tls", "--cacert", &self.path("ca.crt")]);
        match who {
            As::Client => {
                cmd.args(["--cert", &self.path("client.crt")])
                    .args(["--key", &self.path("client.key")]);
            }
            As::Rogue => {
                cmd.args(["--cert", &self.path("rogue.crt")])
                    .args(["--key", &self.path("rogue.key")]);
            }
            As::NoCert => {}
        }
        cmd.args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(args);
        run(cmd, input.map(str::as_bytes), CLIENT_TIMEOUT)
    }

    /// PING answered with PONG for `who`.
    fn pong(&self, who: As, port: u16) -> bool {
        let ran = self.cli_as(who, port, &["PING"], None);
        ran.ok() && ran.stdout == "PONG\n"
    }

    /// A new connection by `openssl s_client` (verifying the server against the CA, presenting
    /// the client certificate), closed at once; its report of the session.
    fn s_client(&self, port: u16, extra: &[&str]) -> Ran {
        let mut cmd = Command::new(&self.openssl);
        cmd.args(["s_client", "-connect", &format!("127.0.0.1:{port}")])
            .args(["-CAfile", &self.path("ca.crt")])
            .args(["-cert", &self.path("client.crt")])
            .args(["-key", &self.path("client.key")])
            .arg("-verify_return_error")
            .args(extra);
        run(cmd, None, CLIENT_TIMEOUT)
    }

    /// Start `prog` serving TLS on a free port with the server certificate, the CA, and no
    /// plain listener (`--port 0`), or with one on a second free port when `plain`; `extra`
    /// come last. Ready when `INFO server` over TLS names the child's pid.
    fn start(&self, prog: &str, plain: bool, extra: &[&str]) -> Server {
        let mut last = String::new();
        for _ in 0..ATTEMPTS {
            let dir = tempfile::tempdir().expect("server dir");
            let log = dir.path().join("server.log");
            let tls_port = free_port();
            let port = if plain { free_port() } else { 0 };
            let out = std::fs::File::create(&log).expect("create server log");
            let err = out.try_clone().expect("clone log handle");
            let mut cmd = Command::new(prog);
            cmd.current_dir(dir.path())
                .args(["--bind", "127.0.0.1", "--save", ""])
                .args(["--port", &port.to_string()])
                .args(["--tls-port", &tls_port.to_string()])
                .args(["--tls-cert-file", &self.path("server.crt")])
                .args(["--tls-key-file", &self.path("server.key")])
                .args(["--tls-ca-cert-file", &self.path("ca.crt")])
                .args(extra)
                .stdin(Stdio::null())
                .stdout(Stdio::from(out))
                .stderr(Stdio::from(err));
            let child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {prog}: {e}"));
            let mut srv = Server {
                child,
                tls_port,
                port,
                log,
                _dir: dir,
            };
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                if let Ok(Some(status)) = srv.child.try_wait() {
                    let text = srv.log_text();
                    if !text.contains("Address already in use") {
                        panic!("{prog} {extra:?} exited with {status} at start: {text}");
                    }
                    last = format!("exited with {status}: {text}");
                    break;
                }
                let ran = self.cli(tls_port, &["INFO", "server"]);
                if let Some(owner) = ran
                    .stdout
                    .lines()
                    .find_map(|l| l.strip_prefix("process_id:"))
                    .map(|s| s.trim().to_string())
                {
                    if owner == srv.child.id().to_string() {
                        return srv;
                    }
                    last = format!("TLS port {tls_port} is served by process {owner}");
                    break;
                }
                if Instant::now() > deadline {
                    panic!(
                        "{prog} {extra:?} not ready on TLS port {tls_port}: {ran}\nlog: {}",
                        srv.log_text()
                    );
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("{prog} {extra:?}: no start in {ATTEMPTS} attempts; last: {last}");
    }
}

/// A started server, killed (and waited for) on drop.
struct Server {
    child: Child,
    tls_port: u16,
    /// The plain port, 0 when there is none.
    port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Server {
    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A TLS connection held open by `openssl s_client -quiet`, speaking RESP through its stdin
/// and stdout.
struct Held {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl Held {
    fn open(cx: &Ctx, port: u16) -> Held {
        let mut child = Command::new(&cx.openssl)
            .args(["s_client", "-quiet", "-verify_return_error"])
            .args(["-connect", &format!("127.0.0.1:{port}")])
            .args(["-CAfile", &cx.path("ca.crt")])
            .args(["-cert", &cx.path("client.crt")])
            .args(["-key", &cx.path("client.key")])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn openssl s_client");
        let stdin = child.stdin.take().expect("s_client stdin");
        let stdout = child.stdout.take().expect("s_client stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Held {
            child,
            stdin,
            lines,
        }
    }

    /// Send `args` as a RESP command; the first line of the reply (without CRLF).
    fn call(&mut self, args: &[&str]) -> String {
        let mut req = format!("*{}\r\n", args.len());
        for a in args {
            req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        self.stdin
            .write_all(req.as_bytes())
            .and_then(|()| self.stdin.flush())
            .expect("write to the held connection");
        self.line()
    }

    fn line(&mut self) -> String {
        let line = self
            .lines
            .recv_timeout(Duration::from_secs(10))
            .expect("a reply line on the held connection");
        line.trim_end_matches('\r').to_string()
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The subject line of the server certificate in `s_client`'s report, e.g.
/// `subject=CN = podium-server`.
fn peer_subject(ran: &Ran) -> String {
    ran.stdout
        .lines()
        .find(|l| l.starts_with("subject="))
        .unwrap_or_else(|| panic!("no subject in s_client's report: {ran}"))
        .to_string()
}

// ---------------------------------------------------------------------------------------------
// The tests.

/// A leaderboard's commands through redis-cli over TLS against a TLS-only server (`port 0`),
/// each reply checked exactly; several commands on one connection; and a request and a reply
/// each larger than one TLS record (16 KiB).
#[test]
fn leaderboard_flow_over_tls_with_redis_cli() {
    let Some(cx) = Ctx::new() else { return };
    let srv = cx.start(&server_bin(), false, &[]);
    let p = srv.tls_port;
    cx.expect(
        p,
        &[
            "ZADD", "lb", "100", "alice", "250", "bob", "175", "carol", "250", "dave",
        ],
        "4\n",
    );
    cx.expect(p, &["ZINCRBY", "lb", "80", "alice"], "180\n");
    cx.expect(p, &["ZINCRBY", "lb", "0.5", "carol"], "175.5\n");
    cx.expect(
        p,
        &["ZREVRANGE", "lb", "0", "9", "WITHSCORES"],
        "dave\n250\nbob\n250\nalice\n180\ncarol\n175.5\n",
    );
    cx.expect(p, &["ZREVRANK", "lb", "alice"], "2\n");
    cx.expect(p, &["ZREVRANK", "lb", "dave"], "0\n");
    cx.expect(p, &["ZREVRANK", "lb", "nobody"], "\n");
    cx.expect(
        p,
        &["HSET", "player:alice", "name", "Alice", "country", "SE"],
        "2\n",
    );
    cx.expect(
        p,
        &["HGETALL", "player:alice"],
        "name\nAlice\ncountry\nSE\n",
    );
    cx.expect(p, &["EXPIRE", "lb", "3600"], "1\n");
    let ttl: i64 = cx
        .cli(p, &["TTL", "lb"])
        .stdout_ok()
        .trim()
        .parse()
        .expect("TTL is an integer");
    assert!((3590..=3600).contains(&ttl), "TTL {ttl}");
    cx.expect(p, &["ZSCORE", "lb", "nobody"], "\n");

    // Several commands on one connection (redis-cli reads them from stdin).
    let ran = cx.cli_as(
        As::Client,
        p,
        &[],
        Some("ZSCORE lb dave\nZCARD lb\nZINCRBY lb -30 dave\nZREVRANK lb dave\nPING\n"),
    );
    assert_eq!(ran.stdout_ok(), "250\n4\n220\n1\nPONG\n", "{ran}");

    // 1000 members in one request (~20 KB) and all of them back in one reply.
    let mut zadd = vec!["ZADD".to_string(), "big".to_string()];
    let mut want = String::new();
    for i in 0..1000 {
        let score = i as f64 * 0.5;
        zadd.push(score.to_string());
        zadd.push(format!("member:{i:04}"));
        want.push_str(&format!("member:{i:04}\n{score}\n"));
    }
    let zadd: Vec<&str> = zadd.iter().map(String::as_str).collect();
    cx.expect(p, &zadd, "1000\n");
    cx.expect(p, &["ZRANGE", "big", "0", "-1", "WITHSCORES"], &want);
    cx.expect(p, &["DBSIZE"], "3\n");
}

/// Mutual TLS: under `tls-auth-clients yes` (the default) a client without a certificate, or
/// with one from an unknown CA, is refused (no PONG, redis-cli fails); `no` lets a client
/// without a certificate in; `optional` lets one with or without a certificate in, but still
/// refuses a certificate that does not verify.
#[test]
fn client_certificates_under_each_tls_auth_clients_mode() {
    let Some(cx) = Ctx::new() else { return };
    let srv = cx.start(&server_bin(), false, &[]);
    let p = srv.tls_port;
    let refused = |who: As| {
        let ran = cx.cli_as(who, p, &["PING"], None);
        assert!(
            !ran.ok() && !ran.stdout.contains("PONG"),
            "expected a refused connection: {ran}"
        );
    };
    cx.expect(
        p,
        &["CONFIG", "GET", "tls-auth-clients"],
        "tls-auth-clients\nyes\n",
    );
    assert!(cx.pong(As::Client, p));
    refused(As::NoCert);
    refused(As::Rogue);

    cx.expect(p, &["CONFIG", "SET", "tls-auth-clients", "no"], "OK\n");
    cx.expect(
        p,
        &["CONFIG", "GET", "tls-auth-clients"],
        "tls-auth-clients\nno\n",
    );
    assert!(cx.pong(As::NoCert, p));
    assert!(cx.pong(As::Client, p));

    cx.expect(
        p,
        &["CONFIG", "SET", "tls-auth-clients", "optional"],
        "OK\n",
    );
    cx.expect(
        p,
        &["CONFIG", "GET", "tls-auth-clients"],
        "tls-auth-clients\noptional\n",
    );
    assert!(cx.pong(As::NoCert, p));
    assert!(cx.pong(As::Client, p));
    refused(As::Rogue);

    cx.expect(p, &["CONFIG", "SET", "tls-auth-clients", "yes"], "OK\n");
    refused(As::NoCert);
    assert!(cx.pong(As::Client, p));
}

/// Plain-text RESP sent to the TLS port gets not one byte back and the connection is closed
/// (Redis: OpenSSL reads a 5-byte record header, fails with "wrong version number", nothing is
/// written); the server serves TLS afterwards. Then a server with both `port` and `tls-port`
/// serves both, one keyspace.
#[test]
fn plain_text_on_the_tls_port_and_both_listeners() {
    let Some(cx) = Ctx::new() else { return };
    let srv = cx.start(&server_bin(), false, &[]);
    for _ in 0..3 {
        let mut s = TcpStream::connect(("127.0.0.1", srv.tls_port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("read timeout");
        s.write_all(b"*1\r\n$4\r\nPING\r\n").expect("write");
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        let end = loop {
            match s.read(&mut buf) {
                Ok(0) => break "EOF".to_string(),
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) => break format!("{:?}", e.kind()),
            }
        };
        assert!(
            got.is_empty(),
            "plain client got {:?}",
            String::from_utf8_lossy(&got)
        );
        assert!(
            end == "EOF" || end == "ConnectionReset",
            "the server should close the connection, got {end}"
        );
    }
    assert!(
        cx.pong(As::Client, srv.tls_port),
        "TLS after plain-text clients"
    );
    drop(srv);

    let srv = cx.start(&server_bin(), true, &[]);
    assert_ne!(srv.port, 0);
    let mut plain = redis::Client::open(format!("redis://127.0.0.1:{}/", srv.port))
        .expect("client")
        .get_connection_with_timeout(Duration::from_secs(5))
        .expect("plain connection");
    let pong: String = redis::cmd("PING").query(&mut plain).expect("plain PING");
    assert_eq!(pong, "PONG");
    let _: () = redis::cmd("ZADD")
        .arg("lb")
        .arg(7)
        .arg("plain")
        .query(&mut plain)
        .expect("plain ZADD");
    cx.expect(srv.tls_port, &["ZADD", "lb", "9", "tls"], "1\n");
    cx.expect(
        srv.tls_port,
        &["ZRANGE", "lb", "0", "-1", "WITHSCORES"],
        "plain\n7\ntls\n9\n",
    );
    let members: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg("lb")
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(&mut plain)
        .expect("plain ZRANGE");
    assert_eq!(
        members,
        vec![("plain".to_string(), 7.0), ("tls".to_string(), 9.0)]
    );
    let ports = cx.cli(srv.tls_port, &["CONFIG", "GET", "*port"]);
    let ports = ports.stdout_ok();
    assert!(
        ports.contains(&format!("\ntls-port\n{}\n", srv.tls_port))
            || ports.starts_with(&format!("tls-port\n{}\n", srv.tls_port)),
        "{ports}"
    );
    assert!(
        ports.contains(&format!("\nport\n{}\n", srv.port))
            || ports.starts_with(&format!("port\n{}\n", srv.port)),
        "{ports}"
    );
}

const REDIS_PY_SCRIPT: &str = r#"
import sys, redis
port, ca, crt, key = sys.argv[1:5]
r = redis.Redis(host="127.0.0.1", port=int(port), ssl=True, ssl_ca_certs=ca,
                ssl_certfile=crt, ssl_keyfile=key, socket_timeout=10)
print("ping", r.ping())
for i in range(50):
    r.zincrby("lb", i % 7 + 0.5, "p%d" % (i % 10))
print("top", r.zrevrange("lb", 0, 3, withscores=True))
print("rank", r.zrevrank("lb", "p0"), r.zscore("lb", "p0"))
p = r.pipeline(transaction=True)
p.zincrby("lb", 100, "p3")
p.zrevrank("lb", "p3")
p.zscore("lb", "p3")
p.expire("lb", 60)
print("multi", p.execute())
p = r.pipeline(transaction=False)
for i in range(1000):
    p.zadd("big", {"m%04d" % i: i * 0.25})
p.zcard("big")
res = p.execute()
print("pipeline", sum(res[:-1]), res[-1])
print("tail", r.zrevrange("big", 0, 2, withscores=True))
print("count", len(r.zrange("big", 0, -1, withscores=True)))
"#;

/// redis-py over TLS (server verified against the CA, client certificate presented): ZINCRBY,
/// ZREVRANGE WITHSCORES, a MULTI/EXEC pipeline and a 1000-command pipeline, output checked
/// exactly.
#[test]
fn redis_py_over_tls() {
    let Some(cx) = Ctx::new() else { return };
    let Some(python) = common::python_with("redis", "drives the server with redis-py over TLS")
    else {
        return;
    };
    let srv = cx.start(&server_bin(), false, &[]);
    let mut cmd = Command::new(&python);
    cmd.args(["-c", REDIS_PY_SCRIPT])
        .arg(srv.tls_port.to_string())
        .args([
            cx.path("ca.crt"),
            cx.path("client.crt"),
            cx.path("client.key"),
        ]);
    let ran = run(cmd, None, Duration::from_secs(60));
    // Member p(k) gets the increments i % 7 + 0.5 for i = k, k+10, ..., k+40.
    let want = "\
ping True
top [(b'p6', 20.5), (b'p3', 19.5), (b'p7', 18.5), (b'p0', 18.5)]
rank 3 18.5
multi [119.5, 0, 119.5, True]
pipeline 1000 1000
tail [(b'm0999', 249.75), (b'm0998', 249.5), (b'm0997', 249.25)]
count 1000
";
    assert_eq!(ran.stdout_ok(), want, "{ran}");
}

/// CONFIG SET of tls-cert-file and tls-key-file (together) switches the certificate for new
/// connections, while one opened before goes on; a missing key file is refused with Redis's
/// error and leaves the configuration and the service as they were.
#[test]
fn certificate_rotation_by_config_set() {
    let Some(cx) = Ctx::new() else { return };
    let srv = cx.start(&server_bin(), false, &[]);
    let p = srv.tls_port;

    let before = cx.s_client(p, &[]);
    assert!(before.ok(), "{before}");
    assert_eq!(peer_subject(&before), "subject=CN = podium-server");
    assert!(
        before.stdout.contains("Verify return code: 0 (ok)"),
        "{before}"
    );
    // OpenSSL completes the chain from tls-ca-cert-file: the CA is sent after the leaf.
    assert!(
        before.stdout.contains(" 0 s:CN = podium-server\n")
            && before.stdout.contains(" 1 s:CN = podium-test-ca\n"),
        "{before}"
    );

    let mut held = Held::open(&cx, p);
    assert_eq!(held.call(&["PING"]), "+PONG");
    assert_eq!(held.call(&["SET", "k", "before"]), "+OK");

    let (crt2, key2) = (cx.path("server2.crt"), cx.path("server2.key"));
    cx.expect(
        p,
        &[
            "CONFIG",
            "SET",
            "tls-cert-file",
            &crt2,
            "tls-key-file",
            &key2,
        ],
        "OK\n",
    );
    cx.expect(
        p,
        &["CONFIG", "GET", "tls-cert-file"],
        &format!("tls-cert-file\n{crt2}\n"),
    );

    let after = cx.s_client(p, &[]);
    assert!(after.ok(), "{after}");
    assert_eq!(peer_subject(&after), "subject=CN = podium-server2");
    assert!(
        after.stdout.contains("Verify return code: 0 (ok)"),
        "{after}"
    );

    // The connection opened before the change still works, both ways.
    assert_eq!(held.call(&["PING"]), "+PONG");
    assert_eq!(held.call(&["SET", "k", "after"]), "+OK");
    assert_eq!(held.call(&["GET", "k"]), "$5");
    assert_eq!(held.line(), "after");
    cx.expect(p, &["GET", "k"], "after\n");

    // A key file that does not exist: refused, nothing changes.
    cx.expect(
        p,
        &[
            "CONFIG",
            "SET",
            "tls-key-file",
            "/nonexistent/podium-test.key",
        ],
        "ERR CONFIG SET failed (possibly related to argument 'tls-key-file') - Unable to \
         update TLS configuration. Check server logs.\n\n",
    );
    cx.expect(
        p,
        &["CONFIG", "GET", "tls-key-file"],
        &format!("tls-key-file\n{key2}\n"),
    );
    // A certificate that does not match the key in use: refused too.
    let crt1 = cx.path("server.crt");
    let ran = cx.cli(p, &["CONFIG", "SET", "tls-cert-file", &crt1]);
    assert!(
        ran.stdout_ok()
            .contains("Unable to update TLS configuration"),
        "{ran}"
    );
    cx.expect(
        p,
        &["CONFIG", "GET", "tls-cert-file"],
        &format!("tls-cert-file\n{crt2}\n"),
    );

    let still = cx.s_client(p, &[]);
    assert!(still.ok(), "{still}");
    assert_eq!(peer_subject(&still), "subject=CN = podium-server2");
    assert!(cx.pong(As::Client, p));
    assert_eq!(held.call(&["PING"]), "+PONG");
}

/// Data for a replication check: a sorted set of 300 members (scores with fractions that do
/// not round-trip in short decimal, some negative) and `strings` strings, written by redis-cli
/// over TLS, `from` being the first member's index.
fn write_data(cx: &Ctx, port: u16, from: usize, to: usize) {
    let mut zadd = vec!["ZADD".to_string(), "board".to_string()];
    for i in from..to {
        zadd.push((i as f64 * 0.1 - 7.0).to_string());
        zadd.push(format!("player:{i}"));
    }
    let zadd: Vec<&str> = zadd.iter().map(String::as_str).collect();
    cx.expect(port, &zadd, &format!("{}\n", to - from));
    for i in from..to {
        if i % 50 == 0 {
            cx.expect(
                port,
                &["SET", &format!("s{i}"), &format!("value {i}")],
                "OK\n",
            );
        }
    }
}

fn info_field(cx: &Ctx, port: u16, field: &str) -> String {
    let ran = cx.cli(port, &["INFO", "replication"]);
    ran.stdout
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or("")
        .trim()
        .to_string()
}

/// What a replica must hold like its master: the board (as ZRANGE ... WITHSCORES prints it),
/// the key count, and the strings.
fn snapshot(cx: &Ctx, port: u16) -> String {
    let mut text = cx
        .cli(port, &["ZRANGE", "board", "0", "-1", "WITHSCORES"])
        .stdout;
    text.push_str(&cx.cli(port, &["DBSIZE"]).stdout);
    text.push_str(
        &cx.cli(port, &["MGET", "s0", "s50", "s100", "s150", "s200", "s250"])
            .stdout,
    );
    text
}

/// A master (`master_prog`) and a replica (`replica_prog`, started with `--tls-replication
/// yes --replicaof`, presenting the client certificate) that speak only TLS: data written
/// before the replica starts, while it synchronizes and once it is up all reach it.
fn tls_replication(cx: &Ctx, master_prog: &str, replica_prog: &str) {
    let master = cx.start(master_prog, false, &["--repl-diskless-sync-delay", "0"]);
    let m = master.tls_port;
    write_data(cx, m, 0, 150);
    let mport = m.to_string();
    let replica = cx.start(
        replica_prog,
        false,
        &[
            "--tls-replication",
            "yes",
            "--tls-client-cert-file",
            &cx.path("client.crt"),
            "--tls-client-key-file",
            &cx.path("client.key"),
            "--replicaof",
            "127.0.0.1",
            &mport,
        ],
    );
    let r = replica.tls_port;
    write_data(cx, m, 150, 250);
    wait_until("master_link_status:up on the replica", || {
        info_field(cx, r, "master_link_status") == "up"
    });
    write_data(cx, m, 250, 300);
    assert_eq!(info_field(cx, r, "role"), "slave");
    assert_eq!(info_field(cx, m, "connected_slaves"), "1");
    let want = snapshot(cx, m);
    assert_eq!(want.lines().count(), 600 + 1 + 6, "{want}");
    wait_until("the replica to hold the master's data", || {
        snapshot(cx, r) == want
    });
    cx.expect(r, &["DBSIZE"], "7\n");
    let ran = cx.cli(r, &["SET", "x", "1"]);
    assert!(ran.stdout_ok().starts_with("READONLY"), "{ran}");
    // Offsets agree once caught up.
    wait_until("the offsets to agree", || {
        info_field(cx, m, "master_repl_offset") == info_field(cx, r, "master_repl_offset")
    });
    drop(replica);
    drop(master);
}

/// The server under test as a TLS replica of a redis-server 7.0 TLS master.
#[test]
fn replica_over_tls_of_a_redis_server_master() {
    let Some(cx) = Ctx::new() else { return };
    let Some(redis_server) = require_tool("redis-server") else {
        return;
    };
    tls_replication(&cx, &redis_server, &server_bin());
}

/// A redis-server 7.0 TLS replica of the server under test as a TLS master.
#[test]
fn redis_server_replica_over_tls_of_this_master() {
    let Some(cx) = Ctx::new() else { return };
    let Some(redis_server) = require_tool("redis-server") else {
        return;
    };
    tls_replication(&cx, &server_bin(), &redis_server);
}

/// `tls-protocols TLSv9` at startup: the server exits with status 1 and serves nothing. A
/// TLSv1.3-only server refuses a TLSv1.2 handshake and takes a TLSv1.3 one.
#[test]
fn tls_protocols_bad_value_stops_the_start_and_a_good_one_restricts() {
    let Some(cx) = Ctx::new() else { return };
    let dir = tempfile::tempdir().expect("server dir");
    let tls_port = free_port();
    let mut cmd = Command::new(server_bin());
    cmd.current_dir(dir.path())
        .args(["--bind", "127.0.0.1", "--save", "", "--port", "0"])
        .args(["--tls-port", &tls_port.to_string()])
        .args(["--tls-cert-file", &cx.path("server.crt")])
        .args(["--tls-key-file", &cx.path("server.key")])
        .args(["--tls-ca-cert-file", &cx.path("ca.crt")])
        .args(["--tls-protocols", "TLSv9"]);
    let ran = run(cmd, None, Duration::from_secs(20));
    assert_eq!(
        ran.status.and_then(|s| s.code()),
        Some(1),
        "the start must fail: {ran}"
    );
    assert!(
        !cx.pong(As::Client, tls_port),
        "nothing may serve on {tls_port} after a failed start"
    );

    let srv = cx.start(&server_bin(), false, &["--tls-protocols", "TLSv1.3"]);
    cx.expect(
        srv.tls_port,
        &["CONFIG", "GET", "tls-protocols"],
        "tls-protocols\nTLSv1.3\n",
    );
    let v12 = cx.s_client(srv.tls_port, &["-tls1_2"]);
    assert!(!v12.ok(), "a TLSv1.2 handshake must fail: {v12}");
    let v13 = cx.s_client(srv.tls_port, &["-tls1_3"]);
    assert!(v13.ok(), "{v13}");
    assert!(v13.stdout.contains("TLSv1.3"), "{v13}");
    assert!(cx.pong(As::Client, srv.tls_port));
}

/// MIGRATE over TLS (`tls-cluster yes`, as Redis's MIGRATE connects with the cluster's
/// connection type): from the server under test to `target_prog`, both TLS-only; the keys
/// arrive with their values and TTLs and leave the source, and a second MIGRATE reuses the
/// cached TLS connection.
fn migrate_over_tls(cx: &Ctx, target_prog: &str) {
    let client_cert = cx.path("client.crt");
    let client_key = cx.path("client.key");
    let source = cx.start(
        &server_bin(),
        false,
        &[
            "--tls-cluster",
            "yes",
            "--tls-client-cert-file",
            &client_cert,
            "--tls-client-key-file",
            &client_key,
        ],
    );
    let target = cx.start(target_prog, false, &[]);
    let (s, t) = (source.tls_port, target.tls_port);
    let tport = t.to_string();
    cx.expect(s, &["ZADD", "board", "10", "alice", "7.5", "bob"], "2\n");
    cx.expect(
        s,
        &["SET", "profile:alice", "level 3", "EX", "1000"],
        "OK\n",
    );
    cx.expect(s, &["SET", "profile:bob", "level 1"], "OK\n");
    cx.expect(
        s,
        &["MIGRATE", "127.0.0.1", &tport, "board", "0", "5000"],
        "OK\n",
    );
    cx.expect(
        s,
        &[
            "MIGRATE",
            "127.0.0.1",
            &tport,
            "",
            "0",
            "5000",
            "KEYS",
            "profile:alice",
            "profile:bob",
        ],
        "OK\n",
    );
    cx.expect(s, &["DBSIZE"], "0\n");
    cx.expect(
        t,
        &["ZRANGE", "board", "0", "-1", "WITHSCORES"],
        "bob\n7.5\nalice\n10\n",
    );
    cx.expect(
        t,
        &["MGET", "profile:alice", "profile:bob"],
        "level 3\nlevel 1\n",
    );
    let ttl = cx.cli(t, &["TTL", "profile:alice"]);
    let secs: i64 = ttl.stdout_ok().trim().parse().expect("a TTL");
    assert!((990..=1000).contains(&secs), "{ttl}");
    let info = cx.cli(s, &["INFO", "stats"]);
    assert!(
        info.stdout_ok().contains("migrate_cached_sockets:1"),
        "{info}"
    );
}

#[test]
fn migrate_over_tls_to_a_redis_server_target() {
    let Some(cx) = Ctx::new() else { return };
    let Some(redis_server) = require_tool("redis-server") else {
        return;
    };
    migrate_over_tls(&cx, &redis_server);
}

#[test]
fn migrate_over_tls_to_this_server() {
    let Some(cx) = Ctx::new() else { return };
    migrate_over_tls(&cx, &server_bin());
}

/// A plain (non-TLS) connection to `port`, for what a TLS cluster tells a plain client.
fn plain_text(port: u16, args: &[&str]) -> String {
    let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .and_then(|c| c.get_connection())
        .expect("plain connection");
    let mut k = redis::cmd(args[0]);
    for a in &args[1..] {
        k.arg(*a);
    }
    match k.query::<redis::Value>(&mut c) {
        Ok(redis::Value::BulkString(b)) => String::from_utf8_lossy(&b).into_owned(),
        Ok(redis::Value::VerbatimString { text, .. }) => text,
        Ok(v) => format!("{v:?}"),
        Err(e) => format!("{e}"),
    }
}

/// `tls-cluster yes`: three Podium and three redis-server nodes, each with a TLS port, a
/// plaintext port and a TLS bus, made one cluster by `redis-cli --tls --cluster create
/// --cluster-replicas 1` and checked by `--cluster check`. Both kinds name the TLS ports to a
/// TLS client and the plaintext ones to a plain client (CLUSTER NODES, MOVED), as Redis's
/// use_pport does; keys written through `redis-cli --tls -c` reach every master; and the bus
/// port speaks TLS, refusing a peer without a certificate the CA signed.
#[test]
fn a_tls_cluster_of_podium_and_redis_server_nodes() {
    let Some(cx) = Ctx::new() else { return };
    let Some(redis_server) = require_tool("redis-server") else {
        return;
    };
    let podium = server_bin();
    let mut nodes = Vec::new();
    let mut buses = Vec::new();
    for i in 0..6 {
        let prog = if i % 2 == 0 { &podium } else { &redis_server };
        let bus = free_port();
        let bus_text = bus.to_string();
        let node = cx.start(
            prog,
            true,
            &[
                "--cluster-enabled",
                "yes",
                "--cluster-port",
                &bus_text,
                "--cluster-node-timeout",
                "3000",
                "--tls-cluster",
                "yes",
                "--tls-replication",
                "yes",
                "--tls-client-cert-file",
                &cx.path("client.crt"),
                "--tls-client-key-file",
                &cx.path("client.key"),
            ],
        );
        nodes.push(node);
        buses.push(bus);
    }
    let addrs: Vec<String> = nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.tls_port))
        .collect();
    let mut create = vec!["--cluster", "create"];
    create.extend(addrs.iter().map(String::as_str));
    create.extend(["--cluster-replicas", "1", "--cluster-yes"]);
    let made = cx.cli(nodes[0].tls_port, &create);
    assert!(made.ok(), "{made}");
    for n in &nodes {
        wait_until("cluster_state:ok on every node", || {
            cx.cli(n.tls_port, &["CLUSTER", "INFO"])
                .stdout
                .contains("cluster_state:ok")
        });
    }
    wait_until("redis-cli --cluster check to be clean", || {
        let check = cx.cli(nodes[1].tls_port, &["--cluster", "check", &addrs[1]]);
        check.ok()
            && check.stdout.contains("[OK] All 16384 slots covered")
            && !check.stdout.contains("[ERR]")
            && !check.stdout.contains("[WARNING]")
    });

    // Ports as each kind of node names them, to a TLS client and to a plain one.
    for (i, asked) in nodes.iter().enumerate() {
        let over_tls = cx.cli(asked.tls_port, &["CLUSTER", "NODES"]);
        let over_plain = plain_text(asked.port, &["CLUSTER", "NODES"]);
        for (n, bus) in nodes.iter().zip(&buses) {
            let tls_addr = format!(" 127.0.0.1:{}@{bus}", n.tls_port);
            let plain_addr = format!(" 127.0.0.1:{}@{bus}", n.port);
            assert!(
                over_tls.stdout_ok().contains(&tls_addr),
                "node {i}: {over_tls}"
            );
            assert!(over_plain.contains(&plain_addr), "node {i}: {over_plain}");
        }
    }

    // Keys written through the TLS cluster client land on every master; MOVED names the
    // owner's TLS port to a TLS client and its plaintext port to a plain client.
    let masters: Vec<&Server> = nodes
        .iter()
        .filter(|n| cx.cli(n.tls_port, &["ROLE"]).stdout.starts_with("master"))
        .collect();
    assert_eq!(masters.len(), 3);
    for i in 0..60 {
        let key = format!("board:{i}");
        let set = cx.cli(nodes[0].tls_port, &["-c", "ZINCRBY", &key, "5", "alice"]);
        assert_eq!(set.stdout_ok(), "5\n", "{set}");
    }
    for m in &masters {
        let dbsize = cx.cli(m.tls_port, &["DBSIZE"]);
        let keys: u32 = dbsize.stdout_ok().trim().parse().expect("DBSIZE");
        assert!(keys > 0, "a master without keys: {dbsize}");
    }
    for asked in [masters[0], masters[1]] {
        let key = (0..)
            .map(|i| format!("board:{i}"))
            .find(|k| {
                cx.cli(asked.tls_port, &["ZSCORE", k, "alice"])
                    .stdout
                    .starts_with("MOVED")
            })
            .expect("a key another master serves");
        let moved_tls = cx.cli(asked.tls_port, &["ZSCORE", &key, "alice"]);
        let moved_plain = plain_text(asked.port, &["ZSCORE", &key, "alice"]);
        let owner = masters
            .iter()
            .find(|m| {
                moved_tls
                    .stdout
                    .trim_end()
                    .ends_with(&format!(":{}", m.tls_port))
            })
            .unwrap_or_else(|| panic!("MOVED to no master's TLS port: {moved_tls}"));
        assert!(
            moved_plain.contains(&format!("127.0.0.1:{}", owner.port)),
            "plain client: {moved_plain}"
        );
    }

    // The bus is TLS: the CA's client certificate gets through the handshake (the server's
    // certificate is shown); no certificate is refused in it (TLS 1.2, where the server asks
    // for the certificate during the handshake).
    for (n, bus) in nodes.iter().zip(&buses).step_by(2) {
        let with_cert = cx.s_client(*bus, &["-tls1_2"]);
        assert!(with_cert.ok(), "bus of {}: {with_cert}", n.tls_port);
        assert!(
            peer_subject(&with_cert).contains("podium-server"),
            "{with_cert}"
        );
        let mut no_cert = Command::new(&cx.openssl);
        no_cert
            .args(["s_client", "-connect", &format!("127.0.0.1:{bus}")])
            .args([
                "-CAfile",
                &cx.path("ca.crt"),
                "-tls1_2",
                "-verify_return_error",
            ]);
        let refused = run(no_cert, None, CLIENT_TIMEOUT);
        assert!(!refused.ok(), "a bus peer without a certificate: {refused}");
    }
}
