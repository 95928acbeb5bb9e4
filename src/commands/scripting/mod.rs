//! Lua scripting: EVAL, EVALSHA, EVAL_RO, EVALSHA_RO and SCRIPT (LOAD, EXISTS, FLUSH, KILL).
//!
//! `EVAL script numkeys [key ...] [arg ...]` runs a Lua 5.1 script (Redis's language version)
//! with `KEYS` and `ARGV` set, atomically: before the script starts, EVAL holds every shard it
//! may reach (the caller's database; every database when the script's text shows it may leave
//! it, [`stays_in_one_db`]; only the shards of its KEYS when [`scope`] shows those are all it
//! reaches), so no command on its keys runs in between, and the clock is frozen for the whole
//! script (Redis judges expiry by the script's start time too). Inside, `redis.call` / `redis.pcall` run commands through
//! the normal dispatcher with the locks already held ([`api`]); replies cross between Lua and
//! RESP by Redis's rules ([`convert`]). SELECT inside a script changes only the script's
//! database.
//!
//! Scripts run in a long-lived Lua state per worker thread ([`engine`]) that keeps every
//! script compiled by SHA; the sandbox (`sandbox.lua`) makes everything a script can reach
//! read-only, as Redis 7.0 does, so nothing one script does is seen by the next. Scripts are
//! remembered by SHA1 for EVALSHA (every EVAL'd script too, as Redis does) until SCRIPT FLUSH,
//! which also discards every thread's Lua state. FUNCTION libraries are [`functions`]' (their
//! `redis.register_function` is [`register`]'s), and the errors that cross between Lua and the
//! host are [`error`]'s.
//!
//! A script may start with a shebang line (`#!lua flags=no-writes,allow-oom`): a script
//! with one runs under the flags it declares (Redis 7.0's rules: without `no-writes` it may not
//! run through EVAL_RO or while the AOF cannot be written; without `allow-oom` or `no-writes`
//! it may not start over `maxmemory`), one without keeps the old EVAL behaviour.
//!
//! Errors read as Redis 7.0's: a runtime error is `ERR user_script:LINE: <message> script:
//! <sha>, on @user_script:LINE.`; a failing `redis.call` gives the command's own error with
//! the same suffix; a script that does not compile is `ERR Error compiling script (new
//! function): user_script:LINE: <message>`.
//!
//! Logging: the commands a script ran, not the script, are written to the AOF (Redis 7.0's
//! effects replication), wrapped in MULTI/EXEC once it wrote anything, so a replay applies
//! them as a unit and does not depend on the script's determinism.
//!
//! A long script: once it has run for `busy-reply-threshold` (`lua-time-limit`) ms, other
//! clients' commands get -BUSY (the dispatcher checks [`Scripts::busy`]) except those Redis
//! allows then (SCRIPT KILL, SHUTDOWN, MULTI/DISCARD, AUTH, HELLO ...); SCRIPT KILL stops a
//! script that has not written yet (its caller gets an error), through a Lua hook that looks
//! every 10,000 instructions. Commands sent before the threshold wait for the script, as in
//! Redis. This needs the multi-threaded runtime (the default with two or more cores): with one
//! thread nothing else is served until the script returns.

mod api;
mod convert;
mod debugger;
mod engine;
mod error;
mod functions;
mod libs;
mod register;
mod scope;

pub use debugger::{kill_forked_sessions, DebugIo, DebugMode};
pub(crate) use functions::restore_libraries;

use crate::commands::args::{eq, int};
use crate::commands::flags::*;
use crate::commands::{CmdResult, Ctx, Keys, Spec};
use crate::protocol::{Reply, Resp};
pub use crate::state::scripts::Scripts;
use crate::state::scripts::{RunningScript, Script, ScriptFlags};
use bytes::Bytes;
use std::sync::atomic::Ordering;

pub static COMMANDS: &[Spec] = &[
    Spec::new(
        "eval",
        -3,
        NOSCRIPT | STALE | MAY_REPLICATE | MOVABLE_KEYS | RUNS_SCRIPT,
        Keys::Custom(eval_key_positions),
        eval,
        "scripting",
    ),
    Spec::new(
        "evalsha",
        -3,
        NOSCRIPT | STALE | MAY_REPLICATE | MOVABLE_KEYS | RUNS_SCRIPT,
        Keys::Custom(eval_key_positions),
        eval,
        "scripting",
    ),
    Spec::new(
        "eval_ro",
        -3,
        NOSCRIPT | READONLY | STALE | MOVABLE_KEYS | RUNS_SCRIPT,
        Keys::Custom(eval_key_positions),
        eval,
        "scripting",
    ),
    Spec::new(
        "evalsha_ro",
        -3,
        NOSCRIPT | READONLY | STALE | MOVABLE_KEYS | RUNS_SCRIPT,
        Keys::Custom(eval_key_positions),
        eval,
        "scripting",
    ),
    Spec::new("script", -2, NOSCRIPT, Keys::None, script, "scripting"),
    Spec::new(
        "fcall",
        -3,
        NOSCRIPT | STALE | MAY_REPLICATE | MOVABLE_KEYS | RUNS_SCRIPT,
        Keys::Custom(eval_key_positions),
        fcall,
        "scripting",
    ),
    Spec::new(
        "fcall_ro",
        -3,
        NOSCRIPT | READONLY | STALE | MOVABLE_KEYS | RUNS_SCRIPT,
        Keys::Custom(eval_key_positions),
        fcall,
        "scripting",
    ),
    Spec::new(
        "function",
        -2,
        NOSCRIPT | MAY_REPLICATE,
        Keys::None,
        functions::function,
        "scripting",
    ),
];

impl Script {
    /// Read a script's shebang line; Redis's error when it is not valid.
    fn parse(body: &Bytes) -> Result<Script, String> {
        let (flags, code_start) = shebang(body)?;
        Ok(Script {
            body: body.clone(),
            flags,
            one_db: stays_in_one_db(&body[code_start..]),
            declared_keys_only: scope::touches_only_declared_keys(&body[code_start..]),
            code_start,
        })
    }

    fn code(&self) -> &[u8] {
        &self.body[self.code_start..]
    }
}

/// A shebang / register_function flag by name.
pub(crate) fn shebang_flag(name: &str) -> Option<u8> {
    Some(match name {
        "no-writes" => ScriptFlags::NO_WRITES,
        "allow-oom" => ScriptFlags::ALLOW_OOM,
        "allow-stale" => ScriptFlags::ALLOW_STALE,
        "no-cluster" => ScriptFlags::NO_CLUSTER,
        "allow-cross-slot-keys" => ScriptFlags::ALLOW_CROSS_SLOT,
        _ => return None,
    })
}

impl ScriptFlags {
    const NO_WRITES: u8 = 1;
    const ALLOW_OOM: u8 = 2;
    const ALLOW_STALE: u8 = 4;
    const NO_CLUSTER: u8 = 8;
    const ALLOW_CROSS_SLOT: u8 = 16;

    fn has(self, flag: u8) -> bool {
        self.0.is_some_and(|f| f & flag != 0)
    }
}

/// Argument positions of EVAL's keys (COMMAND GETKEYS, and the shards the dispatcher locks
/// first).
fn eval_key_positions(a: &[Bytes]) -> Vec<usize> {
    match a.get(2).map(|n| int(n)) {
        Some(Ok(n)) if n >= 0 && (n as u64) <= (a.len() - 3) as u64 => {
            (3..3 + n as usize).collect()
        }
        _ => Vec::new(),
    }
}

/// True when the script's text shows it can only run commands on the caller's database, so
/// locking that database's shards keeps it atomic. Conservative, by the text alone: every
/// mention of `redis` must be `redis.<name>`, `redis.call` / `redis.pcall` must be called with
/// a plain string literal as the command, and that command must be neither SELECT nor one
/// that works across databases (MOVE, COPY, SWAPDB, FLUSHALL); `_G`, `load` and `loadstring`
/// (other ways to reach `redis` or to run text) must not appear. Anything else (a computed
/// command name, `local call = redis.call`, `pairs(redis)` ...) makes the script lock every
/// database, as before.
pub(crate) fn stays_in_one_db(code: &[u8]) -> bool {
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let skip_blank = |mut i: usize| {
        while i < code.len() && code[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    let mut i = 0;
    while i < code.len() {
        if !(code[i].is_ascii_alphabetic() || code[i] == b'_') || (i > 0 && is_ident(code[i - 1])) {
            i += 1;
            continue;
        }
        let start = i;
        while i < code.len() && is_ident(code[i]) {
            i += 1;
        }
        match &code[start..i] {
            b"_G" | b"load" | b"loadstring" => return false,
            b"redis" => {
                if code.get(i) != Some(&b'.') {
                    return false;
                }
                let name_start = i + 1;
                let mut j = name_start;
                while j < code.len() && is_ident(code[j]) {
                    j += 1;
                }
                let name = &code[name_start..j];
                if name.is_empty() {
                    return false;
                }
                if name == b"call" || name == b"pcall" {
                    let k = skip_blank(j);
                    if code.get(k) != Some(&b'(') {
                        return false;
                    }
                    let q = skip_blank(k + 1);
                    let Some(&quote) = code.get(q) else {
                        return false;
                    };
                    if quote != b'\'' && quote != b'"' {
                        return false;
                    }
                    let Some(len) = code[q + 1..].iter().position(|&b| b == quote) else {
                        return false;
                    };
                    let command = &code[q + 1..q + 1 + len];
                    if command.iter().any(|&b| b == b'\\' || b == b'\n') {
                        return false;
                    }
                    if command.eq_ignore_ascii_case(b"select") {
                        return false;
                    }
                    if let Some(spec) = crate::commands::lookup(command) {
                        if matches!(spec.keys, Keys::All) {
                            return false;
                        }
                    }
                }
                i = j;
            }
            _ => {}
        }
    }
    true
}

/// Read a script's shebang line: its flags and the length of the line (blanked before
/// compiling, keeping the newline so line numbers stay the user's). Redis's error texts.
pub(crate) fn shebang(body: &[u8]) -> Result<(ScriptFlags, usize), String> {
    if !body.starts_with(b"#!") {
        return Ok((ScriptFlags(None), 0));
    }
    let Some(end) = body.iter().position(|&b| b == b'\n') else {
        return Err("ERR Invalid script shebang".into());
    };
    let line = String::from_utf8_lossy(&body[..end]);
    let parts: Vec<&str> = line.split_ascii_whitespace().collect();
    if parts.is_empty() {
        return Err("ERR Invalid engine in script shebang".into());
    }
    if parts[0] != "#!lua" {
        return Err(format!(
            "ERR Unexpected engine in script shebang: {}",
            parts[0]
        ));
    }
    let mut flags = 0u8;
    for part in &parts[1..] {
        let Some(list) = part.strip_prefix("flags=") else {
            return Err(format!("ERR Unknown lua shebang option: {part}"));
        };
        // `flags=` with nothing after it declares no flags (Redis splits an empty list into
        // none); an empty name between commas is still an unknown flag.
        for name in list.split(',').filter(|_| !list.is_empty()) {
            flags |= shebang_flag(name)
                .ok_or_else(|| format!("ERR Unexpected flag in script shebang: {name}"))?;
        }
    }
    Ok((ScriptFlags(Some(flags)), end))
}

/// What other clients get while a script has run past `busy-reply-threshold`.
pub const BUSY: &str =
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";

/// The same while a FUNCTION runs.
pub const BUSY_FUNCTION: &str =
    "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.";

impl Scripts {
    /// Scripts in the EVAL cache and the bytes they hold (their text and SHA names): MEMORY
    /// STATS `lua.caches`, MEMORY DOCTOR's many-scripts check.
    pub(crate) fn cache_usage(&self) -> (usize, usize) {
        self.cache.lock().usage()
    }

    /// Bytes the FUNCTION libraries hold (their code and names): MEMORY STATS
    /// `functions.caches`.
    pub(crate) fn functions_bytes(&self) -> usize {
        self.functions.lock().memory_bytes()
    }

    /// What other clients get while the running script is busy: -BUSY naming the KILL that
    /// applies (SCRIPT KILL for EVAL, FUNCTION KILL for FCALL).
    pub fn busy_reply(&self) -> &'static str {
        match self.running.lock().first() {
            Some(r) if !r.function.is_empty() => BUSY_FUNCTION,
            _ => BUSY,
        }
    }

    /// True when a script has been running for `threshold_ms` or longer: other clients'
    /// commands are then refused with -BUSY (see the dispatcher) instead of waiting for it.
    #[inline]
    pub fn busy(&self, threshold_ms: i64) -> bool {
        self.running_count.load(Ordering::Acquire) != 0 && self.busy_running(threshold_ms)
    }

    /// [`Scripts::busy`] while a script runs.
    #[cold]
    fn busy_running(&self, threshold_ms: i64) -> bool {
        // A debugging session waits for its client, not a busy script: others wait for its
        // locks, as Redis's clients wait while its debugger holds the server.
        self.running
            .lock()
            .first()
            .is_some_and(|r| !r.debugging && r.started.elapsed().as_millis() as i64 >= threshold_ms)
    }

    /// The running function's name and how long it has run (FUNCTION STATS).
    fn running_function(&self) -> Option<(String, Vec<Bytes>, i64)> {
        if self.running_count.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.running
            .lock()
            .iter()
            .find(|r| !r.function.is_empty())
            .map(|r| {
                let ms = r.started.elapsed().as_millis() as i64;
                (r.function.clone(), r.command.clone(), ms)
            })
    }

    /// Record a script run starting (`function`: the FCALL'd name and the command as sent;
    /// None for EVAL, whose SHA is `sha`; `debugging`: under the Lua debugger); its id.
    fn start_run(
        &self,
        function: Option<(&str, &[Bytes])>,
        sha: &str,
        debugging: bool,
        started: std::time::Instant,
    ) -> u64 {
        let id = self.next_run_id.fetch_add(1, Ordering::Relaxed);
        let mut eval_sha = [0u8; 40];
        if function.is_none() && sha.len() == 40 {
            eval_sha.copy_from_slice(sha.as_bytes());
        }
        self.running.lock().push(RunningScript {
            id,
            started,
            function: function.map(|f| f.0.to_string()).unwrap_or_default(),
            command: function.map(|f| f.1.to_vec()).unwrap_or_default(),
            kill: false,
            wrote: false,
            eval_sha,
            slow_logged: false,
            debugging,
        });
        self.running_count.fetch_add(1, Ordering::AcqRel);
        id
    }

    /// Record run `id` ending.
    fn end_run(&self, id: u64) {
        self.running.lock().retain(|r| r.id != id);
        self.running_count.fetch_sub(1, Ordering::AcqRel);
    }

    /// Run `id`'s instruction hook: log Redis's warning once the run passes `threshold_ms`
    /// (`busy-reply-threshold`, also while the AOF loads, where no client sees -BUSY), and
    /// say whether SCRIPT KILL / FUNCTION KILL asked it to stop.
    fn poll_run(&self, id: u64, threshold_ms: i64) -> bool {
        let mut running = self.running.lock();
        let Some(r) = running.iter_mut().find(|r| r.id == id) else {
            return false;
        };
        if !r.slow_logged {
            let elapsed = r.started.elapsed().as_millis() as i64;
            if elapsed >= threshold_ms {
                r.slow_logged = true;
                let name = if r.function.is_empty() {
                    format!("f_{}", String::from_utf8_lossy(&r.eval_sha))
                } else {
                    r.function.clone()
                };
                tracing::warn!(
                    "Slow script detected: still in execution after {elapsed} milliseconds. You can try killing the script using the {} command. Script name is: {name}.",
                    if r.function.is_empty() { "SCRIPT KILL" } else { "FUNCTION KILL" },
                );
            }
        }
        r.kill
    }

    /// Run `id` wrote: it can no longer be killed.
    fn mark_wrote(&self, id: u64) {
        if let Some(r) = self.running.lock().iter_mut().find(|r| r.id == id) {
            r.wrote = true;
        }
    }

    /// INFO memory's script counters: cached EVAL scripts, FUNCTION functions and libraries.
    pub fn info_memory_fields(&self) -> [(&'static str, String); 3] {
        let (functions, libraries) = self.functions.lock().counts();
        [
            (
                "number_of_cached_scripts",
                self.cache.lock().len().to_string(),
            ),
            ("number_of_functions", functions.to_string()),
            ("number_of_libraries", libraries.to_string()),
        ]
    }

    /// Which Lua state generation a thread must run scripts of this server in.
    fn engine_id(&self) -> engine::EngineId {
        engine::EngineId {
            scripts_addr: self as *const Scripts as usize,
            generation: self.generation.load(Ordering::Acquire),
        }
    }
}

/// Free the calling thread's Lua state if SCRIPT FLUSH left it stale (the runtime calls this
/// as a worker thread goes idle, so a flush gives its memory back without waiting for the
/// thread's next script).
pub fn release_stale_engine(scripts: &Scripts) {
    engine::drop_stale(scripts.engine_id());
}

/// DEBUG SET-DISABLE-DENY-SCRIPTS: scripts may run commands flagged `noscript` (Redis's
/// testing switch, used by its suites to call CLIENT or DEBUG from a script).
static DENY_SCRIPT_DISABLED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Set by DEBUG SET-DISABLE-DENY-SCRIPTS.
pub fn set_deny_script_disabled(disabled: bool) {
    DENY_SCRIPT_DISABLED.store(disabled, Ordering::Relaxed);
}

/// Commands flagged `noscript` are refused to scripts (unless DEBUG lifted that).
pub(crate) fn deny_script_commands() -> bool {
    !DENY_SCRIPT_DISABLED.load(Ordering::Relaxed)
}

/// SCRIPT KILL, FUNCTION KILL and FUNCTION STATS (which a busy server still serves).
pub fn is_script_kill(args: &[Bytes]) -> bool {
    args.len() == 2
        && ((eq(&args[0], "script") && eq(&args[1], "kill"))
            || (eq(&args[0], "function") && (eq(&args[1], "kill") || eq(&args[1], "stats"))))
}

/// Lowercase hex SHA1 of `data` (script names, `redis.sha1hex`).
pub fn sha1_hex(data: &[u8]) -> String {
    sha1_smol::Sha1::from(data).digest().to_string()
}

/// One running script: what `redis.call` and the other `redis.*` functions work with.
pub(crate) struct Invocation<'x, 'c, 'a> {
    ctx: &'x mut Ctx<'c, 'a>,
    /// EVAL_RO / EVALSHA_RO, or a script declaring `no-writes`: write commands are refused.
    read_only: bool,
    /// The script declared `allow-oom`: commands that may grow memory run over maxmemory.
    allow_oom: bool,
    /// The script has run a write command (Redis's SCRIPT_WRITE_DIRTY).
    wrote: bool,
    /// MULTI was written to the AOF for this script's effects (EXEC follows at the end).
    /// `redis.setresp(3)` was called: replies reach the script as RESP3.
    resp3: bool,
    /// `redis.set_repl` flags (REPL_AOF | REPL_REPLICA by default).
    repl: u8,
    /// Only the caller's database is locked (see [`stays_in_one_db`]).
    one_db: bool,
    /// Only the shards of KEYS are locked (see [`scope`]).
    declared_keys_only: bool,
    /// This run's id in [`Scripts::running`] (0 before it starts).
    run_id: u64,
    /// Cluster mode: the keys of the commands the script calls may be in any slot (an EVAL
    /// without a shebang, or the `allow-cross-slot-keys` flag).
    cross_slot: bool,
    /// Cluster mode: the slot of the caller's declared keys, else of the first key a called
    /// command reached (Redis's `c->slot`); a later command in another slot is refused.
    slot: Option<u16>,
}

impl Invocation<'_, '_, '_> {
    /// SCRIPT KILL asked this script to stop.
    fn killed(&self) -> bool {
        let threshold = self
            .ctx
            .srv
            .config
            .hot
            .busy_reply_threshold
            .load(Ordering::Relaxed);
        self.ctx.srv.scripts.poll_run(self.run_id, threshold)
    }

    /// When the running script started (fuzz builds hold scripts to a time budget).
    #[cfg(fuzzing)]
    fn started(&self) -> Option<std::time::Instant> {
        self.ctx
            .srv
            .scripts
            .running
            .lock()
            .iter()
            .find(|r| r.id == self.run_id)
            .map(|r| r.started)
    }
}

/// Numbers of keys and arguments, as EVAL validates them.
fn parse_numkeys(a: &[Bytes]) -> Result<usize, Reply> {
    let n = int(&a[2]).map_err(|_| Reply::error(crate::commands::args::NOT_INT))?;
    if n < 0 {
        return Err(Reply::error("ERR Number of keys can't be negative"));
    }
    if n as u64 > (a.len() - 3) as u64 {
        return Err(Reply::error(
            "ERR Number of keys can't be greater than number of args",
        ));
    }
    Ok(n as usize)
}

fn eval(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let by_sha = eq(&a[0], "evalsha") || eq(&a[0], "evalsha_ro");
    if let Some(mode) = ctx.client.lua_debug {
        if !debugger::active() {
            if by_sha {
                if a[1].len() != 40 {
                    return Err(Reply::error(
                        "NOSCRIPT No matching script. Please use EVAL.",
                    ));
                }
                return Err(Reply::error(
                    "ERR Please use EVAL instead of EVALSHA for debugging",
                ));
            }
            return Ok(eval_debugging(ctx, a, mode));
        }
    }
    let read_only_command = eq(&a[0], "eval_ro") || eq(&a[0], "evalsha_ro");
    let numkeys = parse_numkeys(a)?;
    let scripts = &ctx.srv.scripts;
    // A SHA as clients send it (40 hex digits) is looked up without an allocation.
    let mut lower = [0u8; 40];
    // Cache the script once it compiled: an EVAL of a body not cached yet.
    let mut remember = !by_sha;
    let (sha, script) = if by_sha {
        let sha = if a[1].len() == 40 && a[1].is_ascii() {
            lower.copy_from_slice(&a[1]);
            lower.make_ascii_lowercase();
            std::borrow::Cow::Borrowed(std::str::from_utf8(&lower).unwrap_or_default())
        } else {
            std::borrow::Cow::Owned(lowercase_name(&a[1]))
        };
        match scripts.cache.lock().get(sha.as_ref()) {
            Some(s) => (sha, s.clone()),
            None => {
                return Err(Reply::error(
                    "NOSCRIPT No matching script. Please use EVAL.",
                ))
            }
        }
    } else {
        // A body run before is found by its text; a new one is named by its SHA1.
        let cached = scripts
            .cache
            .lock()
            .find_body(&a[1])
            .map(|(sha, s)| (sha, s.clone()));
        match cached {
            Some((sha, s)) => {
                lower = sha;
                remember = false;
                let sha = std::str::from_utf8(&lower).unwrap_or_default();
                (std::borrow::Cow::Borrowed(sha), s)
            }
            None => match Script::parse(&a[1]) {
                Ok(s) => (std::borrow::Cow::Owned(sha1_hex(&a[1])), s),
                Err(e) => return Err(Reply::Error(e)),
            },
        }
    };
    let keys = &a[3..3 + numkeys];
    let argv = &a[3 + numkeys..];
    let target = Target::Eval {
        sha: &sha,
        script: &script,
        remember,
    };
    Ok(run_atomically(ctx, target, read_only_command, keys, argv))
}

/// Commands that may start a debugging session for a client that asked for SCRIPT DEBUG
/// (EXEC: an EVAL queued in the transaction).
pub fn may_start_debugging(name: &[u8]) -> bool {
    ["eval", "eval_ro", "exec"].iter().any(|n| eq(name, n))
}

/// EVAL for a client that asked for SCRIPT DEBUG: the script runs in a debugging session
/// (see [`debugger`]): here (SYNC) or in a forked child (YES). Either way the connection
/// closes once the session ends, as in Redis.
fn eval_debugging(ctx: &mut Ctx, a: &[Bytes], mode: DebugMode) -> Reply {
    let Some(io) = ctx.client.debug_io.take() else {
        // Only the connection loop can hand a session its socket (not, say, the AOF loader).
        return Reply::error("ERR SCRIPT DEBUG needs a client connection");
    };
    // Every shard, before anything else: the debugger's `redis` command may reach any key,
    // and a forked child must own every lock it will need.
    ctx.g.lock_all();
    if mode == DebugMode::Forked {
        // SAFETY: fork(2) with every shard locked by this thread: the child (this thread
        // only) owns every lock a script's commands take on the keyspace; it talks to the
        // client with plain system calls and ends with _exit without running destructors.
        // Covered by tests/script_debug.rs (a forked session, then the server's data
        // unchanged).
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            ctx.client.lua_debug = None;
            return Reply::Error(format!(
                "ERR Fork() failed: can't run EVAL in debugging mode: {}",
                crate::util::strerror(&std::io::Error::last_os_error())
            ));
        }
        if pid > 0 {
            // The child serves the session on the same socket: this side lets go of the
            // client without a reply (Redis's freeClientAsync).
            debugger::watch_child(pid);
            ctx.client.lua_debug = None;
            ctx.client.info.kill();
            return Reply::Ok;
        }
        crate::log::mark_child();
        debugger::mark_forked_child();
        // SAFETY: signal(2) setting SIGTERM and SIGINT to be ignored in this process.
        unsafe {
            libc::signal(libc::SIGTERM, libc::SIG_IGN);
            libc::signal(libc::SIGINT, libc::SIG_IGN);
        }
        crate::log::line(crate::log::WARNING, "Redis forked for debugging eval");
    } else {
        tracing::warn!("Redis synchronous debugging eval session started");
    }
    debugger::start(io, &a[1]);
    let reply = crate::commands::reply_of(eval(ctx, a));
    let sock = debugger::end();
    if mode == DebugMode::Forked {
        if let Some(sock) = sock {
            debugger::write_reply(&sock, &reply, ctx.client.resp);
        }
        crate::log::line(crate::log::WARNING, "Lua debugging session child exiting");
        // SAFETY: _exit(2) ends the child without destructors (its memory, locks included,
        // is only its copy).
        unsafe { libc::_exit(0) };
    }
    tracing::warn!("Redis synchronous debugging eval session ended");
    ctx.close_after_reply = true;
    reply
}

/// A script name as sent (`EVALSHA`'s first argument), lowercased as Redis compares them.
fn lowercase_name(name: &[u8]) -> String {
    match std::str::from_utf8(name) {
        Ok(text) => text.to_ascii_lowercase(),
        Err(_) => String::from_utf8_lossy(name).to_ascii_lowercase(),
    }
}

/// What a call runs: an EVAL script or a FUNCTION.
enum Target<'t> {
    Eval {
        sha: &'t str,
        script: &'t Script,
        /// Cache the script for EVALSHA once it compiled (EVAL, not EVALSHA).
        remember: bool,
    },
    Function {
        library: &'t functions::Library,
        info: &'t functions::FunctionInfo,
        /// The FCALL as sent.
        command: &'t [Bytes],
    },
}

/// Run `target` as one atomic unit for the caller: lock scope, the flags' checks, the Lua
/// call (out of the runtime's way, see the module doc), the AOF's MULTI/EXEC and the caller's
/// database restored.
fn run_atomically(
    ctx: &mut Ctx,
    target: Target,
    read_only_command: bool,
    keys: &[Bytes],
    argv: &[Bytes],
) -> Reply {
    let (flags, mut one_db, mut declared_keys_only) = match &target {
        Target::Eval { script, .. } => (script.flags, script.one_db, script.declared_keys_only),
        Target::Function { library, info, .. } => {
            (ScriptFlags(Some(info.flags)), library.one_db, false)
        }
    };
    // A debugging session holds every database (its `redis` command may reach any key).
    let debugging = debugger::active() && matches!(target, Target::Eval { .. });
    if debugging {
        one_db = false;
        declared_keys_only = false;
    }
    if let Some(refusal) = refuse_to_start(ctx, flags, read_only_command) {
        return refusal;
    }
    // The dispatcher locked the shards of KEYS; nothing has run yet, so widening now (in the
    // global lock order) keeps the script atomic: the caller's database, or every database
    // for a script that may leave it.
    if declared_keys_only {
        // The dispatcher locked the shards of KEYS: all this script can reach.
    } else if one_db {
        ctx.g.lock_db(ctx.client.db);
    } else {
        ctx.g.lock_all();
    }
    let saved_db = ctx.client.db;
    let caller_resp3 = ctx.client.resp == Resp::V3;
    let mut inv = Invocation {
        ctx,
        read_only: read_only_command || flags.has(ScriptFlags::NO_WRITES),
        allow_oom: flags.has(ScriptFlags::ALLOW_OOM),
        wrote: false,
        resp3: false,
        repl: api::REPL_ALL,
        one_db,
        declared_keys_only,
        run_id: 0,
        cross_slot: flags.0.is_none() || flags.has(ScriptFlags::ALLOW_CROSS_SLOT),
        slot: keys
            .first()
            .map(|k| crate::keyspace::slots::key_hash_slot(k)),
    };
    let id = inv.ctx.srv.scripts.engine_id();
    let run = |inv: &mut Invocation| -> Reply {
        let outcome = engine::with_engine(id, |engine| {
            let (callee, name) = match &target {
                Target::Eval { sha, script, .. } => match engine.compile(sha, script.code()) {
                    Ok(reference) => (engine::Callee::Script(reference), *sha),
                    Err(e) => return (e, false),
                },
                Target::Function { library, info, .. } => {
                    match engine.library_function(
                        &library.name,
                        library.load_id,
                        &library.code[library.code_start..],
                        &info.name,
                    ) {
                        Ok(f) => (engine::Callee::Function(f), info.name.as_str()),
                        Err(e) => return (Reply::Error(e), false),
                    }
                }
            };
            let scripts = &inv.ctx.srv.scripts;
            let function = match &target {
                Target::Function { command, .. } => Some((name, *command)),
                Target::Eval { .. } => None,
            };
            // The dispatcher's clock reading serves the run's record (-BUSY, SCRIPT KILL) and
            // its hook.
            let started = inv.ctx.started.instant();
            inv.run_id = scripts.start_run(function, name, debugging, started);
            if debugging {
                engine.debugging(true);
            }
            let reply = engine.run(inv, callee, name, keys, argv, caller_resp3, started);
            if debugging {
                engine.debugging(false);
            }
            inv.ctx.srv.scripts.end_run(inv.run_id);
            (reply, true)
        });
        match outcome {
            Ok((reply, compiled)) => {
                // A script that compiled is remembered for EVALSHA, as Redis caches every
                // EVAL'd body.
                if let Target::Eval {
                    sha,
                    script,
                    remember: true,
                } = &target
                {
                    if compiled {
                        inv.ctx.srv.scripts.cache.lock().insert(sha, script);
                    }
                }
                reply
            }
            Err(e) => Reply::Error(e),
        }
    };
    // The script runs here, on the worker that read the command; one that runs long gives
    // the worker's other tasks to another thread from its instruction hook (see
    // engine::hand_off_worker), so the server keeps answering: -BUSY after
    // `busy-reply-threshold`, SCRIPT KILL. (The server runs the multi-threaded scheduler even
    // with one worker so that this hand-off exists; see server::run.)
    let collecting = crate::state::scripts::start_script_feed();
    let reply = run(&mut inv);
    // What the script logged goes out in one piece, wrapped in MULTI/EXEC when it is more
    // than one command (as Redis 7.0's propagatePendingCommands; inside EXEC the
    // transaction collects it with its own commands).
    if collecting {
        let logged = crate::state::scripts::take_script_feed();
        ctx.srv.propagate_script(logged, true);
        if ctx.srv.repl.is_active() {
            ctx.client.repl.woff = ctx.srv.repl.offset();
        }
    }
    if ctx.client.db != saved_db {
        ctx.client.select(saved_db);
    }
    reply
}

/// FCALL / FCALL_RO function numkeys [key ...] [arg ...].
fn fcall(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let read_only_command = eq(&a[0], "fcall_ro");
    let name = String::from_utf8_lossy(&a[1]).into_owned();
    let Some((library, info)) = functions::find(ctx, &name) else {
        return Err(Reply::error("ERR Function not found"));
    };
    let Ok(n) = int(&a[2]) else {
        return Err(Reply::error("ERR Bad number of keys provided"));
    };
    if n > (a.len() - 3) as i64 {
        return Err(Reply::error(
            "ERR Number of keys can't be greater than number of args",
        ));
    }
    if n < 0 {
        return Err(Reply::error("ERR Number of keys can't be negative"));
    }
    let numkeys = n as usize;
    let keys = &a[3..3 + numkeys];
    let argv = &a[3 + numkeys..];
    Ok(run_atomically(
        ctx,
        Target::Function {
            library: &library,
            info: &info,
            command: a,
        },
        read_only_command,
        keys,
        argv,
    ))
}

/// SCRIPT KILL / FUNCTION KILL (`eval`: which of the two asks).
///
/// Redis runs one script at a time; Podium may run several (in disjoint databases). The
/// command stops every running script of its kind that has not written; it is refused as
/// Redis refuses it for the oldest running script when none of its kind qualifies.
fn kill_running(scripts: &Scripts, eval: bool) -> Reply {
    let mut running = scripts.running.lock();
    let Some(oldest_wrote) = running.first().map(|r| r.wrote) else {
        return Reply::error("NOTBUSY No scripts in execution right now.");
    };
    let of_kind = |r: &RunningScript| r.function.is_empty() == eval;
    let mut killed = false;
    for r in running.iter_mut().filter(|r| of_kind(r) && !r.wrote) {
        r.kill = true;
        killed = true;
    }
    if killed {
        return Reply::Ok;
    }
    if oldest_wrote || running.iter().any(of_kind) {
        Reply::error("UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.")
    } else if eval {
        Reply::error(BUSY_FUNCTION)
    } else {
        Reply::error(BUSY)
    }
}

/// The command flags an EVAL / FCALL request runs under (Redis's getCommandFlags): a script
/// or function that declares flags replaces the command's write, deny-oom and stale flags
/// with what it declared (`no-writes` implies `allow-oom`); one that declares nothing keeps
/// the command's own. EXEC judges what it queued by these.
pub(crate) fn effective_command_flags(
    srv: &crate::state::Server,
    name: &str,
    args: &[Bytes],
    command_flags: u32,
) -> u32 {
    if !matches!(
        name,
        "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall" | "fcall_ro"
    ) {
        return command_flags;
    }
    let Some(declared) = declared_flags(srv, name, args) else {
        return command_flags;
    };
    let mut fl = command_flags & !(STALE | DENYOOM | WRITE | MAY_REPLICATE);
    if !declared.has(ScriptFlags::ALLOW_OOM) && !declared.has(ScriptFlags::NO_WRITES) {
        fl |= DENYOOM;
    }
    if !declared.has(ScriptFlags::NO_WRITES) {
        fl |= WRITE;
    }
    if declared.has(ScriptFlags::ALLOW_STALE) {
        fl |= STALE;
    }
    fl
}

/// The flags an EVAL / FCALL request's script or function declares; None when it declares
/// none (no shebang) or is not known.
fn declared_flags(srv: &crate::state::Server, name: &str, args: &[Bytes]) -> Option<ScriptFlags> {
    let body = args.get(1)?;
    let flags = match name {
        "fcall" | "fcall_ro" => ScriptFlags(Some(functions::flags_of(srv, body)?)),
        "evalsha" | "evalsha_ro" => {
            if body.len() != 40 {
                return None;
            }
            let sha = String::from_utf8_lossy(body).to_ascii_lowercase();
            srv.scripts.cache.lock().get(&sha)?.flags
        }
        _ => {
            let cached = srv
                .scripts
                .cache
                .lock()
                .find_body(body)
                .map(|(_, s)| s.flags);
            match cached {
                Some(f) => f,
                None => shebang(body).ok()?.0,
            }
        }
    };
    flags.0?;
    Some(flags)
}

/// Why a script with `flags` may not start now (Redis's scriptPrepareForRun), if it may not.
fn refuse_to_start(ctx: &Ctx, flags: ScriptFlags, read_only_command: bool) -> Option<Reply> {
    if flags.0.is_none() {
        // A script without a shebang (the old EVAL) is only held back by a stale link, with
        // the error other commands get then (Redis's scriptPrepareForRun).
        if crate::state::replica_link::running_stale(ctx.srv) {
            return Some(Reply::error(
                "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
            ));
        }
        return None;
    }
    if flags.has(ScriptFlags::NO_CLUSTER) && crate::cluster::get(ctx.srv).is_some() {
        return Some(Reply::error(
            "ERR Can not run script on cluster, 'no-cluster' flag is set.",
        ));
    }
    if !flags.has(ScriptFlags::ALLOW_STALE) && crate::state::replica_link::running_stale(ctx.srv) {
        return Some(Reply::error(
            "MASTERDOWN Link with MASTER is down, replica-serve-stale-data is set to 'no' and 'allow-stale' flag is not set on the script.",
        ));
    }
    if !flags.has(ScriptFlags::NO_WRITES) {
        if crate::state::replica_link::read_only(ctx.srv) && !ctx.client.repl.is_master {
            return Some(Reply::error(
                "READONLY Can not run script with write flag on readonly replica",
            ));
        }
        if crate::persistence::snapshot::write_refusal(ctx.srv).is_some() {
            return Some(Reply::error(
                "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk. Writable scripts are blocked. Use 'no-writes' flag for read only scripts.",
            ));
        }
        if let Some(e) = ctx.srv.aof.write_error() {
            return Some(Reply::Error(format!(
                "MISCONF Redis is configured to persist data to AOF, but it's currently unable to persist to disk. Writable scripts are blocked. Use 'no-writes' flag for read only scripts. AOF error: {e}"
            )));
        }
        if read_only_command {
            return Some(Reply::error(
                "ERR Can not execute a script with write flag using *_ro command.",
            ));
        }
        if let Some(refusal) = crate::commands::no_good_replicas(ctx.srv) {
            return Some(refusal);
        }
    }
    if !flags.has(ScriptFlags::ALLOW_OOM)
        && !flags.has(ScriptFlags::NO_WRITES)
        && over_maxmemory(ctx)
    {
        return Some(Reply::error(
            "OOM allow-oom flag is not set on the script, can not run it when used memory > 'maxmemory'",
        ));
    }
    None
}

/// Used memory is over a configured `maxmemory`.
fn over_maxmemory(ctx: &Ctx) -> bool {
    let max = ctx.srv.config.hot.maxmemory.load(Ordering::Relaxed);
    max > 0 && crate::alloc::used_memory() as i64 > max
}

/// SCRIPT LOAD | EXISTS | FLUSH | KILL | HELP.
fn script(ctx: &mut Ctx, a: &[Bytes]) -> CmdResult {
    let sub = String::from_utf8_lossy(&a[1]).to_ascii_lowercase();
    let scripts = &ctx.srv.scripts;
    match sub.as_str() {
        "load" if a.len() == 3 => {
            let sha = sha1_hex(&a[2]);
            let script = match Script::parse(&a[2]) {
                Ok(s) => s,
                Err(e) => return Err(Reply::Error(e)),
            };
            // Compiled now, as Redis does, so a script that does not compile is refused.
            match engine::with_engine(scripts.engine_id(), |e| e.compile(&sha, script.code())) {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(e),
                Err(e) => return Err(Reply::Error(e)),
            }
            scripts.cache.lock().insert(&sha, &script);
            Ok(Reply::Bulk(Bytes::from(sha)))
        }
        "exists" if a.len() >= 3 => {
            let cache = scripts.cache.lock();
            Ok(Reply::Array(
                a[2..]
                    .iter()
                    .map(|s| {
                        let sha = String::from_utf8_lossy(s).to_ascii_lowercase();
                        Reply::Int(i64::from(cache.contains(&sha)))
                    })
                    .collect(),
            ))
        }
        "flush" if a.len() <= 3 => {
            if a.len() == 3 && !(eq(&a[2], "async") || eq(&a[2], "sync")) {
                return Err(Reply::error("ERR SCRIPT FLUSH only support SYNC|ASYNC option"));
            }
            scripts.cache.lock().clear();
            scripts.generation.fetch_add(1, Ordering::AcqRel);
            Ok(Reply::Ok)
        }
        "kill" if a.len() == 2 => Ok(kill_running(scripts, true)),
        "debug" if a.len() == 3 => {
            if ctx.client.output_pending {
                return Err(Reply::error("ERR SCRIPT DEBUG must be called outside a pipeline"));
            }
            let mode = if eq(&a[2], "no") {
                None
            } else if eq(&a[2], "yes") {
                Some(DebugMode::Forked)
            } else if eq(&a[2], "sync") {
                Some(DebugMode::Sync)
            } else {
                return Err(Reply::error("ERR Use SCRIPT DEBUG YES/SYNC/NO"));
            };
            ctx.client.lua_debug = mode;
            Ok(Reply::Ok)
        }
        "help" if a.len() == 2 => Ok(Reply::Array(
            [
                "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "DEBUG (YES|SYNC|NO)",
                "    Set the debug mode for subsequent scripts executed.",
                "EXISTS <sha1> [<sha1> ...]",
                "    Return information about the existence of the scripts in the script cache.",
                "FLUSH [ASYNC|SYNC]",
                "    Flush the Lua scripts cache. Very dangerous on replicas.",
                "    When called without the optional mode argument, the behavior is determined by the",
                "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
                "    * ASYNC: Asynchronously flush the scripts cache.",
                "    * SYNC: Synchronously flush the scripts cache.",
                "KILL",
                "    Kill the currently executing Lua script.",
                "LOAD <script>",
                "    Load a script into the scripts cache without executing it.",
                "HELP",
                "    Prints this help.",
            ]
            .iter()
            .map(|s| Reply::StatusOwned(s.to_string()))
            .collect(),
        )),
        "load" | "exists" | "flush" | "kill" | "help" | "debug" => {
            Err(crate::cmdspec::wrong_arity(&format!("script|{sub}")))
        }
        _ => Err(Reply::error(format!(
            "ERR unknown subcommand '{}'. Try SCRIPT HELP.",
            String::from_utf8_lossy(&a[1])
        ))),
    }
}

/// What `redis.error_reply(s)` makes of its argument (Redis 7.0: a leading `-` is dropped; a
/// text without a space gets the generic `ERR` code).
pub(crate) fn error_reply_text(s: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(s);
    let text = text.trim_end_matches(['\r', '\n']);
    let body = text.strip_prefix('-').unwrap_or(text);
    if body.contains(' ') {
        body.as_bytes().to_vec()
    } else {
        format!("ERR {body}").into_bytes()
    }
}

/// REDIS_VERSION as Redis's packed number (0x00MMmmpp).
pub(crate) fn redis_version_num() -> i64 {
    let mut parts = crate::version::REDIS_VERSION
        .split('.')
        .map(|p| p.parse::<i64>().unwrap_or(0));
    let (a, b, c) = (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    );
    (a << 16) | (b << 8) | c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha1_matches_redis() {
        // SCRIPT LOAD "return 1" on redis-server 7.0.
        assert_eq!(
            sha1_hex(b"return 1"),
            "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"
        );
    }

    #[test]
    fn scripts_that_stay_in_one_database() {
        for code in [
            "return redis.call('zincrby', KEYS[1], 1, ARGV[1])",
            "local v = redis.pcall(\"GET\", 'k') redis.log(redis.LOG_NOTICE, v) return v",
            "return redis.call ( 'set' , 'a', 'b')",
            "return 1",
            "local myredis = 1 return myredis",
        ] {
            assert!(stays_in_one_db(code.as_bytes()), "{code}");
        }
        for code in [
            "return redis.call('select', 1)",
            "return redis.call('SELECT', 1)",
            "return redis.call('move', 'k', 1)",
            "return redis.call('swapdb', 0, 1)",
            "return redis.call('flushall')",
            "return redis.call('copy', 'a', 'b', 'db', 1)",
            "return redis.call(ARGV[1], 1)",
            "local c = redis.call return c('select', 1)",
            "for k, f in pairs(redis) do end",
            "return _G.redis.call('select', 1)",
            "return loadstring(ARGV[1])()",
            "return redis.call('sel\\101ct', 1)",
            "return redis.call([[select]], 1)",
            "return redis['call']('select', 1)",
            "return redis . call('select', 1)",
        ] {
            assert!(!stays_in_one_db(code.as_bytes()), "{code}");
        }
    }

    #[test]
    fn error_reply_codes() {
        assert_eq!(error_reply_text(b"My Error"), b"My Error");
        assert_eq!(error_reply_text(b"-ERR x y"), b"ERR x y");
        assert_eq!(error_reply_text(b"oops"), b"ERR oops");
    }
}
