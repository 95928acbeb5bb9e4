//! The server log in redis-server's format, the startup lines tools wait for, the Unix socket
//! listener, and `propagation-error-behavior` on AOF replay.

use crate::common;

use common::Launch;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

fn read_log(path: &std::path::Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Wait until the log holds `needle` (the server writes lines as they happen).
fn wait_for(path: &std::path::Path, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = read_log(path);
        if text.contains(needle) || Instant::now() > deadline {
            return text;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A server started with `args` and a log file in a directory of its own (kept with it).
fn start_logging(args: &[&str]) -> (tempfile::TempDir, std::path::PathBuf, common::Podium) {
    let dir = tempfile::tempdir().unwrap();
    let logfile = dir.path().join("podium.log");
    let mut all = vec!["--logfile", logfile.to_str().unwrap()];
    all.extend_from_slice(args);
    let srv = Launch::podium().args(&all).start();
    (dir, logfile, srv)
}

#[test]
fn startup_lines_are_redis_format_and_carry_the_pid() {
    let (_dir, logfile, srv) = start_logging(&["--always-show-logo", "yes"]);
    let pid = srv.pid();
    let text = wait_for(&logfile, "Ready to accept connections");
    // Redis's harness waits for " PID: <pid>" and "Ready to accept connections".
    assert!(text.contains(&format!(" PID: {pid}")), "{text}");
    assert!(text.contains(&format!("Port: {}", srv.port)), "{text}");
    let ready = text
        .lines()
        .find(|l| l.ends_with("Ready to accept connections"))
        .unwrap_or_else(|| panic!("no ready line in {text}"));
    // "<pid>:M dd Mon yyyy HH:MM:SS.mmm * Ready to accept connections"
    let prefix = format!("{pid}:M ");
    assert!(ready.starts_with(&prefix), "{ready}");
    let fields: Vec<&str> = ready[prefix.len()..].splitn(6, ' ').collect();
    assert_eq!(fields.len(), 6, "{ready}");
    assert!(fields[0].parse::<u8>().is_ok(), "day in {ready}");
    assert!(fields[2].parse::<u16>().is_ok(), "year in {ready}");
    assert_eq!(fields[3].len(), 12, "time in {ready}");
    assert_eq!(fields[4], "*", "{ready}");
    assert!(!text.contains('\x1b'), "no colour codes in a log file");
    assert!(text.contains(" # Server initialized"), "{text}");
    // loglevel changes at run time: after `warning`, notice lines stop.
    let mut con = srv.con();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("loglevel")
        .arg("warning")
        .query(&mut con)
        .unwrap();
    srv.stop();
    let text = read_log(&logfile);
    assert!(
        !text.contains("ready to exit"),
        "a notice line was written at loglevel warning: {text}"
    );
}

#[test]
fn without_the_logo_a_summary_line_is_logged() {
    let (_dir, logfile, srv) = start_logging(&[]);
    let text = wait_for(&logfile, "Ready to accept connections");
    assert!(
        text.contains(&format!("Running mode=standalone, port={}.", srv.port)),
        "{text}"
    );
    assert!(!text.contains(" PID: "), "{text}");
}

/// `watchdog-period`: a command that runs longer than the period gets one stack trace of its
/// thread in the log (Redis's markers, DEBUG's handler among the frames); short commands none.
#[test]
fn the_watchdog_logs_the_stack_of_a_stalled_command() {
    let (_dir, logfile, srv) = start_logging(&["--enable-debug-command", "yes"]);
    wait_for(&logfile, "Ready to accept connections");
    let mut con = srv.con();
    let set = |con: &mut redis::Connection, v: &str| {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("watchdog-period")
            .arg(v)
            .query(con)
            .unwrap();
    };
    // As Redis: under two cron periods (hz 10: 200 ms) the period is raised to that.
    set(&mut con, "50");
    let got: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("watchdog-period")
        .query(&mut con)
        .unwrap();
    assert_eq!(got[1], "200");
    for _ in 0..50 {
        let _: String = redis::cmd("PING").query(&mut con).unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(!read_log(&logfile).contains("WATCHDOG"));
    let _: () = redis::cmd("DEBUG")
        .arg("SLEEP")
        .arg("0.8")
        .query(&mut con)
        .unwrap();
    let text = wait_for(&logfile, "\n--------\n");
    let report = &text[text.find("--- WATCHDOG TIMER EXPIRED ---").expect(&text)..];
    assert!(report.contains("debugCommand"), "{report}");
    assert!(report.contains("--------\n"), "{report}");
    assert_eq!(text.matches("WATCHDOG TIMER EXPIRED").count(), 1, "{text}");
    // Off again: a stall is not reported.
    set(&mut con, "0");
    let _: () = redis::cmd("DEBUG")
        .arg("SLEEP")
        .arg("0.5")
        .query(&mut con)
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(read_log(&logfile).matches("WATCHDOG").count(), 1);
}

#[test]
fn a_taken_port_is_logged_as_redis_does() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_podium"))
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Redis's harness retries on another port when it sees this line.
    assert!(
        stdout.contains(&format!("Failed listening on port {port} (TCP), aborting.")),
        "{stdout}"
    );
}

#[test]
fn unix_socket_serves_clients_and_is_removed_at_exit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("podium.sock");
    let srv = Launch::podium()
        .args(&[
            "--unixsocket",
            path.to_str().unwrap(),
            "--unixsocketperm",
            "700",
        ])
        .start();
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    let mut s = std::os::unix::net::UnixStream::connect(&path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"SET k v\r\nCLIENT INFO\r\n").unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("resp=") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("+OK\r\n"), "{text}");
    assert!(
        text.contains(&format!("addr={}:0", path.display())),
        "{text}"
    );
    let mut con = srv.con();
    let v: String = redis::cmd("GET").arg("k").query(&mut con).unwrap();
    assert_eq!(v, "v", "the Unix socket client wrote the same keyspace");
    srv.stop();
    assert!(!path.exists(), "the socket file is removed at exit");
}

#[test]
fn unixsocketperm_must_be_octal() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_podium"))
        .args(["--port", "0", "--unixsocketperm", "9"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("octal"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An AOF whose replay produces an error reply: logged with Redis's CRITICAL line; with
/// `propagation-error-behavior panic` the server stops instead of serving diverged data.
#[test]
fn propagation_error_behavior_on_aof_replay() {
    for behavior in ["ignore", "panic"] {
        let dir = tempfile::tempdir().unwrap();
        let aofdir = dir.path().join("appendonlydir");
        std::fs::create_dir(&aofdir).unwrap();
        // INCR of a non-integer string fails on replay.
        let aof = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\nabc\r\n*2\r\n$4\r\nINCR\r\n$1\r\nk\r\n";
        std::fs::write(aofdir.join("appendonly.aof.1.incr.aof"), aof).unwrap();
        std::fs::write(
            aofdir.join("appendonly.aof.manifest"),
            "file appendonly.aof.1.incr.aof seq 1 type i\n",
        )
        .unwrap();
        let logfile = dir.path().join("podium.log");
        let launch = Launch::podium().args(&[
            "--dir",
            dir.path().to_str().unwrap(),
            "--appendonly",
            "yes",
            "--logfile",
            logfile.to_str().unwrap(),
            "--propagation-error-behavior",
            behavior,
        ]);
        if behavior == "ignore" {
            let srv = launch.wait_loaded().start();
            let v: String = redis::cmd("GET").arg("k").query(&mut srv.con()).unwrap();
            assert_eq!(v, "abc");
            let text = wait_for(&logfile, "AOF-loading-client");
            assert!(
                text.contains("== CRITICAL == This server is sending an error to its AOF-loading-client: 'ERR value is not an integer or out of range' after processing the command 'incr'"),
                "{text}"
            );
        } else {
            // The server exits during the load (run directly: the launcher would take the
            // exit for a port clash and retry).
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            drop(launch);
            let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_podium"))
                .args([
                    "--port",
                    &port.to_string(),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--dir",
                    dir.path().to_str().unwrap(),
                    "--appendonly",
                    "yes",
                    "--logfile",
                    logfile.to_str().unwrap(),
                    "--propagation-error-behavior",
                    "panic",
                ])
                .spawn()
                .unwrap();
            let deadline = Instant::now() + Duration::from_secs(10);
            while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let status = child.try_wait().unwrap();
            let _ = child.kill();
            assert!(
                status.is_some_and(|s| !s.success()),
                "panic mode kept serving after a failed replay"
            );
            let text = wait_for(&logfile, "panicked");
            assert!(
                text.contains("This server panicked sending an error to its AOF-loading-client after processing the command 'incr'"),
                "{text}"
            );
        }
    }
}
