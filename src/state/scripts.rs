//! The scripting data the server holds: the script cache, the FUNCTION libraries, the
//! scripts running now, and whether the running command's effects are kept out of the AOF.
//! Only data lives here, below [`crate::state::Server`]; the Lua engine, the `redis` API and
//! the commands that fill it are [`crate::scripting`], above.

use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::Arc;

/// A cached script: its body and the flags its shebang line declares.
#[derive(Clone)]
pub(crate) struct Script {
    pub(crate) body: Bytes,
    pub(crate) flags: ScriptFlags,
    /// The script can only reach the caller's database (see [`stays_in_one_db`]): it locks
    /// that database's shards instead of every database's.
    pub(crate) one_db: bool,
    /// Every key the script's commands take is one of its KEYS (see `scripting::scope`): the
    /// shards of its KEYS, locked by the dispatcher, are all it needs.
    pub(crate) declared_keys_only: bool,
    /// Where the code starts: after the shebang line (its newline kept, so line numbers stay
    /// the user's).
    pub(crate) code_start: usize,
}

/// The flags a script declares in its shebang line (`#!lua flags=...`); `None` for a script
/// without one (Redis's EVAL compatibility mode).
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub(crate) struct ScriptFlags(pub(crate) Option<u8>);

/// The server's scripting state.
#[derive(Default)]
pub struct Scripts {
    /// Scripts by lowercase hex SHA1.
    pub(crate) cache: Mutex<HashMap<String, Script>>,
    /// Bumped by SCRIPT FLUSH: a thread's Lua state built for an older generation is dropped.
    pub(crate) generation: AtomicU64,
    /// The scripts running now, oldest first: several at once when they lock disjoint
    /// databases (see [`stays_in_one_db`]).
    pub(crate) running: Mutex<Vec<RunningScript>>,
    /// How many scripts run (what the dispatcher's -BUSY check reads, without the lock).
    pub(crate) running_count: AtomicUsize,
    /// The id the next script run gets.
    pub(crate) next_run_id: AtomicU64,
    /// FUNCTION libraries.
    pub(crate) functions: Mutex<Registry>,
}

/// One script run in progress: what -BUSY, SCRIPT KILL / FUNCTION KILL and FUNCTION STATS
/// look at.
pub(crate) struct RunningScript {
    pub(crate) id: u64,
    pub(crate) started: std::time::Instant,
    /// The FCALL'd function's name; empty for EVAL.
    pub(crate) function: String,
    /// The FCALL command as sent (FUNCTION STATS shows it); empty for EVAL.
    pub(crate) command: Vec<Bytes>,
    /// SCRIPT KILL / FUNCTION KILL asked it to stop (its instruction hook looks).
    pub(crate) kill: bool,
    /// It has written (it can no longer be killed).
    pub(crate) wrote: bool,
    /// Redis's name for it in the slow-script warning (`f_<sha>` for EVAL), and whether that
    /// warning was logged.
    pub(crate) log_name: String,
    pub(crate) slow_logged: bool,
}

#[derive(Clone)]
pub(crate) struct FunctionInfo {
    pub(crate) name: String,
    pub(crate) description: Option<Bytes>,
    pub(crate) flags: u8,
}

/// A loaded library.
pub(crate) struct Library {
    pub(crate) name: String,
    /// The whole payload, shebang line included (FUNCTION LIST WITHCODE, the AOF).
    pub(crate) code: Bytes,
    /// Where the code after the shebang line starts.
    pub(crate) code_start: usize,
    pub(crate) functions: Vec<FunctionInfo>,
    /// Unique per load: a Lua state holding an older load of the same name reloads it.
    pub(crate) load_id: u64,
    /// The library's text shows its functions cannot leave the caller's database.
    pub(crate) one_db: bool,
}

/// The server's libraries.
#[derive(Default)]
pub(crate) struct Registry {
    pub(crate) libraries: BTreeMap<String, Arc<Library>>,
    /// Function name, lowercased (Redis matches function names without regard to ASCII
    /// case) -> library name.
    pub(crate) functions: HashMap<String, String>,
}

thread_local! {
    /// Set while a script command runs under `redis.set_repl` without REPL_AOF.
    static AOF_SUPPRESSED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `f` with what it would log kept out of the AOF when `suppress` is set (a script's
/// `redis.set_repl(redis.REPL_NONE)` or `REPL_REPLICA`; Podium has no replicas).
pub(crate) fn without_aof_if<R>(suppress: bool, f: impl FnOnce() -> R) -> R {
    if !suppress {
        return f();
    }
    AOF_SUPPRESSED.with(|s| s.set(true));
    let r = f();
    AOF_SUPPRESSED.with(|s| s.set(false));
    r
}

/// True while the running command's effects must not reach the AOF (see [`without_aof_if`]).
pub fn aof_suppressed() -> bool {
    AOF_SUPPRESSED.with(|s| s.get())
}

thread_local! {
    /// Set when the script that just ended on this thread replied with an error a command it
    /// called already counted (in errorstats and total_error_replies, when that command
    /// failed): its own reply must not count it again, as Redis's
    /// ERR_REPLY_FLAG_NO_STATS_UPDATE. Read (and cleared) by the dispatcher.
    static ERROR_ALREADY_COUNTED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The key a Lua error table carries when a command's error put it there (Redis's field of
/// the same meaning).
pub const ERROR_COUNTED_FIELD: &str = "ignore_error_stats_update";

pub fn set_error_already_counted(counted: bool) {
    ERROR_ALREADY_COUNTED.with(|c| c.set(counted));
}

pub fn take_error_already_counted() -> bool {
    ERROR_ALREADY_COUNTED.with(|c| c.replace(false))
}

/// A command logged for the AOF: its database and its arguments.
pub(crate) type LoggedCommand = (usize, Vec<Bytes>);

thread_local! {
    /// The commands the script running on this thread has logged so far (None when no
    /// script runs): fed to the AOF together when it ends, so that scripts running at the
    /// same time on other threads cannot interleave their MULTI ... EXEC blocks.
    static SCRIPT_FEED: std::cell::RefCell<Option<Vec<LoggedCommand>>> =
        const { std::cell::RefCell::new(None) };
}

/// Keep `argv` (logged for database `db`) for the script running on this thread; gives it
/// back when no script runs.
pub(crate) fn collect_for_script(db: usize, argv: Vec<Bytes>) -> Option<Vec<Bytes>> {
    SCRIPT_FEED.with(|f| match f.borrow_mut().as_mut() {
        Some(cmds) => {
            cmds.push((db, argv));
            None
        }
        None => Some(argv),
    })
}

/// A script starts on this thread: what it logs is kept until [`take_script_feed`].
pub(crate) fn start_script_feed() {
    SCRIPT_FEED.with(|f| *f.borrow_mut() = Some(Vec::new()));
}

/// The script on this thread ended: what it logged, to feed to the AOF in one piece.
pub(crate) fn take_script_feed() -> Vec<LoggedCommand> {
    SCRIPT_FEED
        .with(|f| f.borrow_mut().take())
        .unwrap_or_default()
}
