//! What the server does with the AOF directory it finds at startup: a damaged manifest or AOF
//! is refused with Redis's message naming the problem (never loaded in part), a Redis 6
//! single-file AOF is upgraded (also after an interrupted upgrade), an empty start creates a
//! base file before it serves anyone, and what the log holds survives: timestamp annotations, expiries already past,
//! function libraries and file names with spaces.

use crate::common;

use common::{Launch, Podium};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("podium-aofm-")
        .tempdir()
        .expect("tempdir")
}

fn aof_dir(dir: &Path) -> PathBuf {
    dir.join("appendonlydir")
}

fn resp(parts: &[&str]) -> Vec<u8> {
    let mut v = format!("*{}\r\n", parts.len()).into_bytes();
    for p in parts {
        v.extend_from_slice(format!("${}\r\n{}\r\n", p.len(), p).as_bytes());
    }
    v
}

/// Start with `appendonly yes` on `dir`; Err(log) when the server exits instead.
fn start(dir: &Path, extra: &[&str]) -> Result<Podium, String> {
    let mut args = vec![
        "--dir",
        dir.to_str().expect("UTF-8 dir"),
        "--appendonly",
        "yes",
    ];
    args.extend_from_slice(extra);
    Launch::podium()
        .args(&args)
        .log(&dir.join("server"))
        .wait_loaded()
        .timeout(Duration::from_secs(20))
        .try_start()
}

/// Write the AOF directory: its files, then the manifest text.
fn layout(dir: &Path, files: &[(&str, Vec<u8>)], manifest: &str) {
    let d = aof_dir(dir);
    std::fs::create_dir_all(&d).expect("mkdir");
    for (name, data) in files {
        std::fs::write(d.join(name), data).expect("write AOF file");
    }
    std::fs::write(d.join("appendonly.aof.manifest"), manifest).expect("write manifest");
}

/// The server must refuse to start; its log must hold every one of `expected`.
fn assert_refused(dir: &Path, expected: &[&str]) {
    match start(dir, &[]) {
        Ok(_) => panic!("the server started; expected a refusal naming {expected:?}"),
        Err(log) => {
            for e in expected {
                assert!(log.contains(e), "log lacks {e:?}:\n{log}");
            }
        }
    }
}

fn base_and_incr() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("appendonly.aof.1.base.aof", resp(&["SET", "k1", "v1"])),
        ("appendonly.aof.1.incr.aof", resp(&["SET", "k2", "v2"])),
    ]
}

#[test]
fn damaged_manifests_are_refused_with_redis_reasons() {
    let cases: &[(&str, &[&str])] = &[
        (
            "file appendonly.aof.1.base.aof seq 1 type b\n\nfile appendonly.aof.1.incr.aof seq 1 type i\n",
            &["Invalid AOF manifest file format", "at line 2"],
        ),
        (
            "file appendonly.aof.1.incr.aof seq 2 type i\nfile appendonly.aof.1.base.aof seq 1 type i\n",
            &["Found a non-monotonic sequence number", "at line 2"],
        ),
        (
            "file appendonly.aof.1.base.aof seq 1 type b\nfile appendonly.aof.1.base.aof seq 2 type b\n",
            &["Found duplicate base file information"],
        ),
        (
            "file appendonly.aof.1.base.aof seq 1 type x\n",
            &["Unknown AOF file type", ">>> 'file appendonly.aof.1.base.aof seq 1 type x'"],
        ),
        (
            "filx appendonly.aof.1.base.aof seq 1 type b\n",
            &["Invalid AOF manifest file format"],
        ),
        (
            "file appendonly.aof.1.base.aof seq 1 type b\nfile appendonly.aof.1.incr.aof type i\n",
            &["Invalid AOF manifest file format", "at line 2"],
        ),
        (
            "file appendonly.aof.1.base.aof seq 1 type b\nfile appendonly.aof.1.incr.aof seq 1 type i newkey\n",
            &["Invalid AOF manifest file format"],
        ),
        ("", &["Found an empty AOF manifest"]),
        (
            "file ../appendonly.aof.1.base.aof seq 1 type b\n",
            &["File can't be a path, just a filename"],
        ),
    ];
    for (manifest, expected) in cases {
        let tmp = tempdir();
        layout(tmp.path(), &base_and_incr(), manifest);
        assert_refused(tmp.path(), expected);
    }
    // A line longer than Redis reads (1024 bytes).
    let tmp = tempdir();
    let long = "file appendonly.aof.1.base.aof seq 1 type b ".repeat(30) + "\n";
    layout(tmp.path(), &base_and_incr(), &long);
    assert_refused(
        tmp.path(),
        &["The AOF manifest file contains too long line"],
    );
}

#[test]
fn a_listed_file_that_is_missing_is_named() {
    let tmp = tempdir();
    layout(
        tmp.path(),
        &base_and_incr(),
        "file appendonly.aof.1.base.aof seq 1 type b\nfile appendonly.aof.1.incr.aof seq 1 type i\nfile appendonly.aof.2.incr.aof seq 2 type i\n",
    );
    assert_refused(
        tmp.path(),
        &["appendonly.aof.2.incr.aof length. stat: No such file or directory"],
    );
}

#[test]
fn damaged_aof_files_are_refused_with_redis_messages() {
    let mut bad = resp(&["SET", "foo", "hello"]);
    bad.extend_from_slice(b"!!!");
    bad.extend(resp(&["SET", "foo", "hello"]));
    let mut unknown = resp(&["SET", "foo", "hello"]);
    unknown.extend(resp(&["BLA", "foo", "hello"]));
    let mut short = resp(&["SET", "foo", "hello"]);
    let cut = resp(&["SET", "bar", "world"]);
    short.extend_from_slice(&cut[..cut.len() - 1]);
    let mut multi = resp(&["SET", "foo", "hello"]);
    multi.extend(resp(&["MULTI"]));
    multi.extend(resp(&["SET", "bar", "world"]));
    let cases: Vec<(Vec<u8>, &[&str], &str)> = vec![
        (
            bad,
            &["Bad file format reading the append only file"],
            "yes",
        ),
        (
            unknown,
            &["Unknown command 'BLA' reading the append only file"],
            "yes",
        ),
        (
            short,
            &["Unexpected end of file reading the append only file"],
            "no",
        ),
        (
            multi,
            &[
                "Revert incomplete MULTI/EXEC transaction",
                "Unexpected end of file reading the append only file",
            ],
            "no",
        ),
    ];
    for (data, expected, truncated) in cases {
        let tmp = tempdir();
        layout(
            tmp.path(),
            &[("appendonly.aof.1.incr.aof", data)],
            "file appendonly.aof.1.incr.aof seq 1 type i\n",
        );
        match start(tmp.path(), &["--aof-load-truncated", truncated]) {
            Ok(_) => panic!("started; expected {expected:?}"),
            Err(log) => {
                for e in expected {
                    assert!(log.contains(e), "log lacks {e:?}:\n{log}");
                }
            }
        }
    }
}

#[test]
fn an_interrupted_upgrade_is_completed() {
    let tmp = tempdir();
    let mut old = resp(&["SET", "k1", "v1"]);
    old.extend(resp(&["SET", "k2", "v2"]));
    std::fs::write(tmp.path().join("appendonly.aof"), &old).expect("old AOF");
    // The manifest was written, the file not yet moved.
    layout(tmp.path(), &[], "file appendonly.aof seq 1 type b\n");
    let srv = start(tmp.path(), &[]).expect("start");
    let mut c = srv.con();
    let v: String = redis::cmd("GET").arg("k2").query(&mut c).expect("GET");
    assert_eq!(v, "v2");
    assert!(!tmp.path().join("appendonly.aof").exists());
    assert!(aof_dir(tmp.path()).join("appendonly.aof").exists());
    let manifest = std::fs::read_to_string(aof_dir(tmp.path()).join("appendonly.aof.manifest"))
        .expect("manifest");
    assert_eq!(
        manifest,
        "file appendonly.aof seq 1 type b\nfile appendonly.aof.1.incr.aof seq 1 type i\n"
    );
}

#[test]
fn an_empty_start_creates_a_base_in_the_configured_format() {
    for (preamble, base) in [
        ("yes", "appendonly.aof.1.base.rdb"),
        ("no", "appendonly.aof.1.base.aof"),
    ] {
        let tmp = tempdir();
        let srv = start(tmp.path(), &["--aof-use-rdb-preamble", preamble]).expect("start");
        let manifest = std::fs::read_to_string(aof_dir(tmp.path()).join("appendonly.aof.manifest"))
            .expect("manifest");
        assert_eq!(
            manifest,
            format!("file {base} seq 1 type b\nfile appendonly.aof.1.incr.aof seq 1 type i\n")
        );
        assert!(aof_dir(tmp.path()).join(base).exists());
        drop(srv);
    }
}

#[test]
fn an_expiry_already_past_in_the_log_still_applies_to_what_follows() {
    // Redis keeps the key while loading, so the RPUSH after PEXPIREAT adds to the expired list
    // and the whole list is gone once loaded.
    let tmp = tempdir();
    let mut data = resp(&["RPUSH", "list", "foo"]);
    data.extend(resp(&["PEXPIREAT", "list", "1000"]));
    data.extend(resp(&["RPUSH", "list", "bar"]));
    layout(
        tmp.path(),
        &[("appendonly.aof.1.incr.aof", data)],
        "file appendonly.aof.1.incr.aof seq 1 type i\n",
    );
    let srv = start(tmp.path(), &[]).expect("start");
    let n: i64 = redis::cmd("LLEN")
        .arg("list")
        .query(&mut srv.con())
        .expect("LLEN");
    assert_eq!(n, 0);
}

fn wait_rewrite(c: &mut redis::Connection) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let info: String = redis::cmd("INFO")
            .arg("persistence")
            .query(c)
            .expect("INFO");
        if info.contains("aof_rewrite_in_progress:0") && info.contains("aof_rewrite_scheduled:0") {
            return;
        }
        assert!(Instant::now() < deadline, "rewrite did not finish");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn manifest_names(dir: &Path, filename: &str, typ: &str) -> Vec<String> {
    let text = std::fs::read_to_string(aof_dir(dir).join(format!("{filename}.manifest")))
        .expect("manifest");
    text.lines()
        .filter(|l| l.ends_with(&format!("type {typ}")))
        .map(|l| l.to_string())
        .collect()
}

#[test]
fn timestamp_annotations_are_written_and_read() {
    let tmp = tempdir();
    let srv = start(tmp.path(), &["--aof-use-rdb-preamble", "no"]).expect("start");
    let mut c = srv.con();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("aof-timestamp-enabled")
        .arg("yes")
        .query(&mut c)
        .expect("CONFIG SET");
    let _: () = redis::cmd("SET")
        .arg("foo")
        .arg("bar")
        .query(&mut c)
        .expect("SET");
    let incr = aof_dir(tmp.path()).join("appendonly.aof.1.incr.aof");
    let text = std::fs::read(&incr).expect("incr file");
    assert!(
        text.starts_with(b"#TS:"),
        "{}",
        String::from_utf8_lossy(&text)
    );
    let _: String = redis::cmd("BGREWRITEAOF")
        .query(&mut c)
        .expect("BGREWRITEAOF");
    wait_rewrite(&mut c);
    let base = aof_dir(tmp.path()).join("appendonly.aof.2.base.aof");
    let text = std::fs::read(&base).expect("base file");
    assert!(
        text.starts_with(b"#TS:"),
        "{}",
        String::from_utf8_lossy(&text)
    );
    drop(c);
    srv.stop();
    let srv = start(tmp.path(), &["--aof-use-rdb-preamble", "no"]).expect("restart");
    let v: String = redis::cmd("GET")
        .arg("foo")
        .query(&mut srv.con())
        .expect("GET");
    assert_eq!(v, "bar");
}

#[test]
fn function_libraries_survive_a_resp_rewrite() {
    let tmp = tempdir();
    let srv = start(
        tmp.path(),
        &[
            "--aof-use-rdb-preamble",
            "no",
            "--enable-debug-command",
            "yes",
        ],
    )
    .expect("start");
    let mut c = srv.con();
    // As Redis's aofrw suite: logging off, so only the rewrite's base holds the library (and
    // the FLUSH below is not logged after it).
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendonly")
        .arg("no")
        .query(&mut c)
        .expect("CONFIG SET");
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("#!lua name=test\nredis.register_function('test', function() return 1 end)")
        .query(&mut c)
        .expect("FUNCTION LOAD");
    let _: String = redis::cmd("BGREWRITEAOF")
        .query(&mut c)
        .expect("BGREWRITEAOF");
    wait_rewrite(&mut c);
    let _: () = redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query(&mut c)
        .expect("FLUSH");
    let _: () = redis::cmd("DEBUG")
        .arg("LOADAOF")
        .query(&mut c)
        .expect("LOADAOF");
    let n: i64 = redis::cmd("FCALL")
        .arg("test")
        .arg(0)
        .query(&mut c)
        .expect("FCALL");
    assert_eq!(n, 1);
}

#[test]
fn a_file_name_with_spaces_is_quoted_in_the_manifest() {
    let tmp = tempdir();
    let name = " my file.aof ";
    let srv = start(tmp.path(), &["--appendfilename", name]).expect("start");
    let mut c = srv.con();
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query(&mut c)
        .expect("SET");
    let _: String = redis::cmd("BGREWRITEAOF")
        .query(&mut c)
        .expect("BGREWRITEAOF");
    wait_rewrite(&mut c);
    assert_eq!(
        manifest_names(tmp.path(), name, "b"),
        ["file \" my file.aof .2.base.rdb\" seq 2 type b"]
    );
    drop(c);
    srv.stop();
    let srv = start(tmp.path(), &["--appendfilename", name]).expect("restart");
    let v: String = redis::cmd("GET")
        .arg("k")
        .query(&mut srv.con())
        .expect("GET");
    assert_eq!(v, "v");
}

#[test]
fn turning_appendonly_off_stops_a_running_rewrite() {
    let tmp = tempdir();
    let srv = start(tmp.path(), &["--aof-use-rdb-preamble", "no"]).expect("start");
    let mut c = srv.con();
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query(&mut c)
        .expect("SET");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("rdb-key-save-delay")
        .arg("10000000")
        .query(&mut c)
        .expect("CONFIG SET");
    let _: String = redis::cmd("BGREWRITEAOF")
        .query(&mut c)
        .expect("BGREWRITEAOF");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendonly")
        .arg("no")
        .query(&mut c)
        .expect("CONFIG SET appendonly no");
    // Stopped long before the 10 s the key's pause would take.
    let started = Instant::now();
    wait_rewrite(&mut c);
    assert!(started.elapsed() < Duration::from_secs(5));
    let log = std::fs::read_dir(tmp.path())
        .expect("dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect::<String>();
    assert!(log.contains("Killing running AOF rewrite child"), "{log}");
    // No temporary file is left behind.
    let temps = std::fs::read_dir(aof_dir(tmp.path()))
        .expect("aof dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("temp-"))
        .count();
    assert_eq!(temps, 0);
}

/// A first start with `appendonly yes` has nothing to load, only the AOF's files to create;
/// like Redis, whose event loop starts after that, it serves no one until they exist. The
/// first command of a client that connected as early as it could (the moment the port
/// listens, as Redis's own harness does once the log shows the PID) must be served, never
/// answered `-LOADING`.
#[test]
fn a_first_start_with_appendonly_serves_the_earliest_client() {
    use std::io::{Read, Write};
    for _ in 0..10 {
        let tmp = tempdir();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        // Killed and waited for on drop, also when an assertion below fails.
        struct Killed(std::process::Child);
        impl Drop for Killed {
            fn drop(&mut self) {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
        let _child = Killed(
            std::process::Command::new(env!("CARGO_BIN_EXE_podium"))
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--dir", tmp.path().to_str().expect("UTF-8 dir")])
                .args(["--appendonly", "yes", "--appendfsync", "always"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("spawn podium"),
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut sock = loop {
            match std::net::TcpStream::connect(("127.0.0.1", port)) {
                Ok(s) => break s,
                Err(_) if Instant::now() < deadline => std::thread::yield_now(),
                Err(e) => panic!("podium did not listen on {port}: {e}"),
            }
        };
        sock.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("read timeout");
        sock.write_all(&resp(&["SET", "k", "v"])).expect("send");
        let mut reply = [0u8; 64];
        let n = sock.read(&mut reply).expect("reply");
        assert_eq!(
            String::from_utf8_lossy(&reply[..n]),
            "+OK\r\n",
            "the first command after the port listened"
        );
    }
}
