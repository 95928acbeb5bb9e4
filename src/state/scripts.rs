//! The scripting data the server holds: the script cache, the FUNCTION libraries, the
//! scripts running now, and whether the running command's effects are kept out of the AOF.
//! Only data lives here, below [`crate::state::Server`]; the Lua engine, the `redis` API and
//! the commands that fill it are [`crate::commands::scripting`], above.

use super::repl::TO_ALL;
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};

/// The script cache: scripts by SHA (EVALSHA, SCRIPT EXISTS), and the SHA of each cached body
/// (EVAL), so that an EVAL of a script already cached costs a hash-table probe instead of a
/// SHA1 of its text. Both maps use hashbrown's default hasher (seeded per map), which is
/// looked up on every EVAL and EVALSHA; a body is kept once, shared by the two maps.
#[derive(Default)]
pub(crate) struct ScriptCache {
    by_sha: hashbrown::HashMap<String, Script>,
    sha_of_body: hashbrown::HashMap<Bytes, [u8; 40]>,
}

impl ScriptCache {
    /// The script named `sha` (lowercase hex).
    pub(crate) fn get(&self, sha: &str) -> Option<&Script> {
        self.by_sha.get(sha)
    }

    /// The SHA and script of a cached body.
    pub(crate) fn find_body(&self, body: &[u8]) -> Option<([u8; 40], &Script)> {
        let sha = *self.sha_of_body.get(body)?;
        let script = self.by_sha.get(std::str::from_utf8(&sha).ok()?)?;
        Some((sha, script))
    }

    /// Cache `script` under `sha` unless it is there already. Its body is copied: the one
    /// given may be a slice of a client's read buffer, which the cache must not keep alive.
    pub(crate) fn insert(&mut self, sha: &str, script: &Script) {
        if self.by_sha.contains_key(sha) {
            return;
        }
        let mut script = script.clone();
        script.body = Bytes::copy_from_slice(&script.body);
        if let Ok(name) = <[u8; 40]>::try_from(sha.as_bytes()) {
            self.sha_of_body.insert(script.body.clone(), name);
        }
        self.by_sha.insert(sha.to_string(), script);
    }

    pub(crate) fn contains(&self, sha: &str) -> bool {
        self.by_sha.contains_key(sha)
    }

    pub(crate) fn len(&self) -> usize {
        self.by_sha.len()
    }

    /// Cached scripts and the bytes they hold (their text and SHA names).
    pub(crate) fn usage(&self) -> (usize, usize) {
        let bytes = self
            .by_sha
            .iter()
            .map(|(sha, s)| sha.len() + s.body.len())
            .sum();
        (self.by_sha.len(), bytes)
    }

    pub(crate) fn clear(&mut self) {
        self.by_sha.clear();
        self.sha_of_body.clear();
    }

    /// Active defrag: move the cached scripts' names and bodies out of sparse slabs (Redis
    /// defragments its script dictionary once per pass the same way). The maps are rebuilt,
    /// as their keys cannot be changed in place; a body still shared with a running script
    /// keeps its old block until that script lets go of it.
    pub(crate) fn defrag(&mut self, r: &mut crate::alloc::defrag::Relocator) {
        let old = std::mem::take(&mut self.by_sha);
        self.sha_of_body.clear();
        self.by_sha.reserve(old.len());
        for (mut sha, mut script) in old {
            r.string(&mut sha);
            if let Some(copy) = r.copy_out(&script.body) {
                script.body = Bytes::from(copy);
            }
            if let Ok(name) = <[u8; 40]>::try_from(sha.as_bytes()) {
                self.sha_of_body.insert(script.body.clone(), name);
            }
            self.by_sha.insert(sha, script);
        }
    }
}
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
    pub(crate) cache: Mutex<ScriptCache>,
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
    /// For EVAL, the script's SHA (Redis names it `f_<sha>` in the slow-script warning; a
    /// function goes by its name); and whether that warning was logged.
    pub(crate) eval_sha: [u8; 40],
    pub(crate) slow_logged: bool,
    /// Runs under the Lua debugger (SCRIPT DEBUG): never -BUSY for others.
    pub(crate) debugging: bool,
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

/// How restored libraries meet the loaded ones (FUNCTION RESTORE's policies; loading an RDB
/// file uses FLUSH, APPEND for NOFLUSH, REPLACE for NOFLUSH MERGE).
#[derive(PartialEq, Eq, Clone, Copy, Debug)]
pub enum LibraryPolicy {
    /// Every loaded library goes first.
    Flush,
    /// A library name already loaded refuses the whole restore.
    Append,
    /// Same-named libraries are replaced.
    Replace,
}

impl Scripts {
    /// Every loaded library's code (its FUNCTION LOAD payload), in name order: what an RDB
    /// file or an AOF base keeps of them.
    pub(crate) fn library_codes(&self) -> Vec<Bytes> {
        self.functions
            .lock()
            .libraries
            .values()
            .map(|l| l.code.clone())
            .collect()
    }
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
    /// The log targets (`TO_AOF`, `TO_REPLICAS`) the command running on this thread must not
    /// reach: a script's `redis.set_repl`, or everything while the AOF is replayed.
    static SUPPRESSED: std::cell::Cell<u8> = const { std::cell::Cell::new(0) };
}

/// Run `f` with what it logs kept away from the targets in `mask` (besides those already
/// kept away).
pub(crate) fn without_targets<R>(mask: u8, f: impl FnOnce() -> R) -> R {
    if mask == 0 {
        return f();
    }
    let before = SUPPRESSED.with(|s| s.replace(s.get() | mask));
    let r = f();
    SUPPRESSED.with(|s| s.set(before));
    r
}

/// Run `f` with nothing it does logged anywhere when `suppress` is set (AOF replay).
pub(crate) fn without_aof_if<R>(suppress: bool, f: impl FnOnce() -> R) -> R {
    without_targets(if suppress { TO_ALL } else { 0 }, f)
}

/// The targets the running command's effects must not reach (see [`without_targets`]).
pub fn suppressed_targets() -> u8 {
    SUPPRESSED.with(|s| s.get())
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

/// A command logged by a script: its database, its arguments and its targets (`TO_AOF`,
/// `TO_REPLICAS`).
pub(crate) type LoggedCommand = (usize, Vec<Bytes>, u8);

thread_local! {
    /// The commands the script running on this thread has logged so far (None when no
    /// script runs): fed to the AOF together when it ends, so that scripts running at the
    /// same time on other threads cannot interleave their MULTI ... EXEC blocks.
    static SCRIPT_FEED: std::cell::RefCell<Option<Vec<LoggedCommand>>> =
        const { std::cell::RefCell::new(None) };
}

/// Keep `argv` (logged for database `db`, to `targets`) for the script running on this thread; gives it
/// back when no script runs.
pub(crate) fn collect_for_script(db: usize, argv: Vec<Bytes>, targets: u8) -> Option<Vec<Bytes>> {
    SCRIPT_FEED.with(|f| match f.borrow_mut().as_mut() {
        Some(cmds) => {
            cmds.push((db, argv, targets));
            None
        }
        None => Some(argv),
    })
}

/// A script (or EXEC) starts on this thread: what it logs is kept until [`take_script_feed`].
/// False when a collection is already running on this thread (a script inside EXEC): the
/// inner one adds to it, and only the outer one takes and feeds what was collected.
pub(crate) fn start_script_feed() -> bool {
    SCRIPT_FEED.with(|f| {
        let mut f = f.borrow_mut();
        if f.is_some() {
            return false;
        }
        *f = Some(Vec::new());
        true
    })
}

/// The script on this thread ended: what it logged, to feed to the AOF in one piece.
pub(crate) fn take_script_feed() -> Vec<LoggedCommand> {
    SCRIPT_FEED
        .with(|f| f.borrow_mut().take())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn script(body: Bytes) -> Script {
        Script {
            body,
            flags: ScriptFlags(None),
            one_db: true,
            declared_keys_only: true,
            code_start: 0,
        }
    }

    /// EVAL finds a cached body by its text, under the SHA it was cached with; the cache keeps
    /// its own copy of the body (not the request buffer it came in), and FLUSH forgets both.
    #[test]
    fn bodies_are_found_by_text_and_copied() {
        let sha = "e0e1f9fabfc9d4800c877a703b823ac0578ff8db";
        let request = Bytes::from_static(b"*3\r\n$4\r\neval\r\n$8\r\nreturn 1\r\n");
        let body = request.slice(18..26);
        assert_eq!(&body[..], b"return 1");
        let mut cache = ScriptCache::default();
        assert!(cache.find_body(b"return 1").is_none());
        cache.insert(sha, &script(body.clone()));
        let (name, found) = cache.find_body(b"return 1").expect("cached");
        assert_eq!(&name[..], sha.as_bytes());
        assert_eq!(&found.body[..], b"return 1");
        assert_ne!(
            found.body.as_ptr(),
            body.as_ptr(),
            "the cache copies the body"
        );
        assert!(cache.contains(sha));
        assert_eq!(cache.usage(), (1, 40 + 8));
        // A second insert under the same name keeps the first entry.
        cache.insert(sha, &script(Bytes::from_static(b"return 2")));
        assert_eq!(cache.len(), 1);
        assert!(cache.find_body(b"return 2").is_none());
        cache.clear();
        assert!(cache.find_body(b"return 1").is_none());
        assert!(!cache.contains(sha));
    }
}
