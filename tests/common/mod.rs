//! The one way the integration tests start a server (`podium`, or `redis-server` for the
//! compatibility tests) on a free local port and connect to it.
//!
//! Tests run in parallel, so a port found free may be taken by another test before our server
//! binds it. A start is therefore only done when our own child is still running AND the server
//! answering on the port is ours (`INFO server` reports `process_id` equal to the child's pid);
//! if the child exits because the port was taken, or another process answers there, the start
//! is retried on a new port.
//!
//! [`require_tool`] is the one way a test finds an external program (redis-server and Redis's
//! other tools): a missing one fails the test unless `PODIUM_ALLOW_SKIP=1`.
//!
//! Each test binary compiles this module and uses part of it.
#![allow(dead_code)]

use redis::Connection;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Ports tried before giving up (each one is a new spawn).
const ATTEMPTS: usize = 5;

/// A started server, killed (and waited for) on drop.
pub struct Podium {
    pub child: Child,
    pub port: u16,
    /// The working directory given to a server started without `--dir`, so that no test reads
    /// or leaves a dump.rdb or AOF in the repository (a config file's own `dir` still wins).
    _scratch: Option<tempfile::TempDir>,
}

impl Podium {
    /// Start the podium binary with `--port P --bind 127.0.0.1` and `args`, output discarded.
    pub fn start(args: &[&str]) -> Podium {
        Launch::podium().args(args).start()
    }

    /// A connection to database 0.
    pub fn con(&self) -> Connection {
        self.con_db(0)
    }

    pub fn con_db(&self, db: usize) -> Connection {
        connect(&format!("redis://127.0.0.1:{}/{db}", self.port))
    }

    /// A connection speaking RESP3.
    pub fn con3(&self) -> Connection {
        connect(&format!("redis://127.0.0.1:{}/?protocol=resp3", self.port))
    }

    /// A plain socket with a 5 s read timeout.
    pub fn raw(&self) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("read timeout");
        s
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL and wait.
    pub fn kill9(self) {
        drop(self);
    }

    /// SIGTERM and wait for a clean exit.
    pub fn stop(mut self) {
        // SAFETY: kill(2) on our own child's pid only sends a signal; no memory is involved.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        panic!("server did not exit on SIGTERM");
    }
}

impl Drop for Podium {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn connect(url: &str) -> Connection {
    redis::Client::open(url)
        .expect("client")
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a free port")
        .port()
}

/// How to start a server: `prog [config] --port P [--bind 127.0.0.1] args...`.
pub struct Launch {
    prog: String,
    config: Option<String>,
    args: Vec<String>,
    log: Option<PathBuf>,
    wait_loaded: bool,
    timeout: Duration,
}

impl Launch {
    /// Podium with no save points (`--save ""`; a test's own `--save` adds them back), so a
    /// SIGTERM'd test server does not leave a dump.rdb behind that the next one would load.
    pub fn podium() -> Launch {
        Launch::prog(env!("CARGO_BIN_EXE_podium")).args(&["--save", ""])
    }

    /// Another program taking the same options (e.g. `redis-server`).
    pub fn prog(prog: &str) -> Launch {
        Launch {
            prog: prog.into(),
            config: None,
            args: Vec::new(),
            log: None,
            wait_loaded: false,
            timeout: Duration::from_secs(10),
        }
    }

    /// A configuration file, passed first; its `bind` is kept (no `--bind` is added).
    pub fn config_file(mut self, path: &str) -> Launch {
        self.config = Some(path.into());
        self
    }

    pub fn args(mut self, args: &[&str]) -> Launch {
        self.args.extend(args.iter().map(|s| s.to_string()));
        self
    }

    /// Send stdout and stderr to `<base>.<port>.log` (by default they are discarded). The log
    /// is what `try_start` returns when the server exits before it is ready.
    pub fn log(mut self, base: &Path) -> Launch {
        self.log = Some(base.into());
        self
    }

    /// Also wait until PING is answered without `-LOADING` (the AOF is loaded).
    pub fn wait_loaded(mut self) -> Launch {
        self.wait_loaded = true;
        self
    }

    /// How long the start may take in all (10 s by default).
    pub fn timeout(mut self, timeout: Duration) -> Launch {
        self.timeout = timeout;
        self
    }

    /// Start, panicking if the server does not come up.
    pub fn start(self) -> Podium {
        let prog = self.prog.clone();
        self.try_start()
            .unwrap_or_else(|e| panic!("{prog} did not start: {e}"))
    }

    /// Start; `Err` with the log (or the exit status when there is no log) if the server exits
    /// for a reason other than its port being taken. Panics if it is not ready in time.
    pub fn try_start(self) -> Result<Podium, String> {
        let deadline = Instant::now() + self.timeout;
        let mut last = String::new();
        for _ in 0..ATTEMPTS {
            let port = free_port();
            let log = self
                .log
                .as_ref()
                .map(|base| base.with_extension(format!("{port}.log")));
            let mut cmd = Command::new(&self.prog);
            if let Some(config) = &self.config {
                cmd.arg(config);
            }
            let scratch = if !self.args.iter().any(|a| a == "--dir") {
                let dir = tempfile::tempdir().map_err(|e| format!("scratch dir: {e}"))?;
                cmd.current_dir(dir.path());
                Some(dir)
            } else {
                None
            };
            cmd.args(["--port", &port.to_string()]);
            if self.config.is_none() {
                cmd.args(["--bind", "127.0.0.1"]);
            }
            cmd.args(&self.args);
            match &log {
                Some(path) => {
                    let out = std::fs::File::create(path)
                        .map_err(|e| format!("create {}: {e}", path.display()))?;
                    let err = out.try_clone().map_err(|e| e.to_string())?;
                    cmd.stdout(Stdio::from(out)).stderr(Stdio::from(err));
                }
                None => {
                    cmd.stdout(Stdio::null()).stderr(Stdio::null());
                }
            }
            let child = cmd
                .spawn()
                .map_err(|e| format!("spawn {}: {e}", self.prog))?;
            let mut srv = Podium {
                child,
                port,
                _scratch: scratch,
            };
            let read_log = || {
                log.as_ref()
                    .map(|p| std::fs::read_to_string(p).unwrap_or_default())
                    .unwrap_or_default()
            };
            loop {
                if let Ok(Some(status)) = srv.child.try_wait() {
                    let out = read_log();
                    if log.is_some() && !out.contains("Address already in use") {
                        return Err(out);
                    }
                    // Port taken (or no log to tell): try another port.
                    last = format!("port {port}: exited with {status}: {out}");
                    break;
                }
                match probe(port, srv.child.id(), self.wait_loaded) {
                    Probe::Ready => return Ok(srv),
                    Probe::Other(owner) => {
                        last = format!("port {port} is served by process {owner}");
                        break;
                    }
                    Probe::NotYet => {}
                }
                if Instant::now() > deadline {
                    panic!(
                        "{} {:?} not ready on port {port} after {:?}: {}",
                        self.prog,
                        self.args,
                        self.timeout,
                        read_log()
                    );
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            // `srv` is dropped here: the child is killed and waited for.
        }
        panic!(
            "{} {:?}: no start in {ATTEMPTS} attempts; last: {last}",
            self.prog, self.args
        );
    }
}

enum Probe {
    /// Ours, and (if asked) loaded.
    Ready,
    /// Nothing answers yet, or ours is still loading.
    NotYet,
    /// Another process answers on the port.
    Other(String),
}

/// Ask the server on `port` (plain RESP on a socket with timeouts, so that a listener that
/// never answers cannot hang the start) whose it is, and if asked whether it has loaded.
fn probe(port: u16, pid: u32, wait_loaded: bool) -> Probe {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
        return Probe::NotYet;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
    let mut s = BufReader::new(s);
    let Some(Ok(info)) = call(&mut s, &["INFO", "server"]) else {
        return Probe::NotYet;
    };
    let owner = info
        .lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    if owner != pid.to_string() {
        return Probe::Other(owner);
    }
    if !wait_loaded {
        return Probe::Ready;
    }
    // Any answer but `-LOADING` means the server is up.
    match call(&mut s, &["PING"]) {
        Some(Ok(_)) => Probe::Ready,
        Some(Err(e)) if !e.starts_with("LOADING") => Probe::Ready,
        _ => Probe::NotYet,
    }
}

/// Send a command and read a simple, error or bulk string reply (`Err` for an error reply);
/// `None` if there is no such reply in time.
fn call(s: &mut BufReader<TcpStream>, args: &[&str]) -> Option<Result<String, String>> {
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    s.get_mut().write_all(req.as_bytes()).ok()?;
    let mut line = String::new();
    s.read_line(&mut line).ok()?;
    let line = line.trim_end();
    match line.as_bytes().first()? {
        b'+' => Some(Ok(line[1..].to_string())),
        b'-' => Some(Err(line[1..].to_string())),
        b'$' => {
            let n: usize = line[1..].parse().ok()?;
            let mut buf = vec![0; n + 2];
            s.read_exact(&mut buf).ok()?;
            buf.truncate(n);
            Some(Ok(String::from_utf8_lossy(&buf).into_owned()))
        }
        _ => None,
    }
}

/// INFO memory's `used_memory`.
pub fn used_memory(c: &mut Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("memory").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// The variable that lets a test whose external tool is missing skip instead of failing. CI
/// never sets it: there a missing tool must fail the run, not turn a comparison with Redis into
/// a pass that checked nothing.
pub const ALLOW_SKIP: &str = "PODIUM_ALLOW_SKIP";

/// The path of `tool` (e.g. `redis-server`, `redis-check-rdb`), found on PATH, for a test that
/// checks Podium against Redis's own programs.
///
/// When the tool is missing this panics, naming it and the Debian package that installs it,
/// unless `PODIUM_ALLOW_SKIP=1` is set: then it prints a notice and returns `None`, and the
/// caller skips what needs the tool (usually by returning from the test).
pub fn require_tool(tool: &str) -> Option<String> {
    if let Some(path) = find_on_path(tool) {
        return Some(path);
    }
    let package = match tool {
        "redis-server" => "redis-server",
        "redis-cli" | "redis-benchmark" | "redis-check-aof" | "redis-check-rdb" => "redis-tools",
        other => other,
    };
    if std::env::var_os(ALLOW_SKIP).is_some_and(|v| v == "1") {
        eprintln!("NOTICE: {tool} is not installed; {ALLOW_SKIP}=1, so what needs it is skipped");
        return None;
    }
    panic!(
        "missing dependency: {tool} is not on PATH. This test checks Podium against Redis's own \
         {tool} and would check nothing without it. Install it with \
         `apt-get install {package}` (Debian/Ubuntu), or set {ALLOW_SKIP}=1 to skip such \
         checks on purpose"
    );
}

/// The python3 that can `import module` of redis-py (Debian's python3-redis): `python3` on
/// PATH, else /usr/bin/python3 (Debian's, where PATH starts with another Python, such as
/// pyenv's). Missing, it panics with the package to install, unless `PODIUM_ALLOW_SKIP=1`
/// (then `None`: the caller skips what needs it). `purpose` says what the test does with it.
pub fn python_with(module: &str, purpose: &str) -> Option<String> {
    let mut candidates: Vec<String> = find_on_path("python3").into_iter().collect();
    candidates.push("/usr/bin/python3".to_string());
    for python in &candidates {
        let imports = std::process::Command::new(python)
            .args(["-c", &format!("import {module}")])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if imports {
            return Some(python.clone());
        }
    }
    if std::env::var_os(ALLOW_SKIP).is_some_and(|v| v == "1") {
        eprintln!("NOTICE: no python3 with {module}; {ALLOW_SKIP}=1, so what needs it is skipped");
        return None;
    }
    panic!(
        "missing dependency: none of {candidates:?} can `import {module}`. This test {purpose}. \
         Install it with `apt-get install python3-redis`, or set {ALLOW_SKIP}=1 to skip such \
         checks on purpose"
    );
}

/// The first executable file named `tool` in PATH's directories, as the shell would run it.
fn find_on_path(tool: &str) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let dirs = std::env::var_os("PATH")?;
    let found = std::env::split_paths(&dirs)
        .map(|dir| dir.join(tool))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })?;
    // Callers pass the path on as a `&str` (Launch, Command); a PATH directory that is not
    // UTF-8 is a broken setup worth a clear failure rather than a skip.
    Some(
        found
            .to_str()
            .unwrap_or_else(|| panic!("{tool} found at a non-UTF-8 path {found:?}"))
            .to_string(),
    )
}
