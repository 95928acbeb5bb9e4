//! The append-only file's and the snapshots' state as the server holds it: the write buffer
//! and sequence numbers of the group commit, the open incremental file, the manifest, rewrite
//! and BGSAVE statistics. Only data lives here, below [`crate::state::Server`]; the writer
//! thread, loading, rewriting and saving are [`crate::persistence`], above.

use parking_lot::{Condvar, Mutex};
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, AtomicU64, AtomicU8};
use std::sync::Arc;
use std::time::Instant;

pub const FSYNC_ALWAYS: u8 = 0;
pub const FSYNC_EVERYSEC: u8 = 1;
pub const FSYNC_NO: u8 = 2;

/// Commands fed but not yet written.
#[derive(Default)]
pub(crate) struct Feed {
    pub buf: Vec<u8>,
    /// Sequence number of the last command appended to `buf`.
    pub seq: u64,
    /// Database the log is positioned on (None: emit SELECT before the next command).
    pub db: Option<usize>,
    /// Unix second of the last `#TS:` annotation written (`aof-timestamp-enabled`).
    pub ts: i64,
}

/// The incremental file being appended to.
pub(crate) struct Out {
    pub file: Arc<File>,
    pub size: u64,
}

/// Manifest state and rewrite statistics.
#[derive(Default)]
pub(crate) struct State {
    pub dir: PathBuf,
    pub filename: String,
    pub manifest: Manifest,
    pub base_size: u64,
    /// Sizes of the incremental files other than the one being appended to.
    pub other_incr_size: u64,
    /// Size of the AOF after the last rewrite (for auto-aof-rewrite-percentage).
    pub rewrite_base_size: u64,
    pub rewrites: u64,
    pub consecutive_failures: u64,
    pub last_rewrite_ok: bool,
    pub last_rewrite_secs: i64,
    pub rewrite_started: Option<Instant>,
    /// The running rewrite writes an RDB base (`aof-use-rdb-preamble` at its fork).
    pub rewrite_preamble: bool,
    /// The last rewrite child's copy-on-write bytes (INFO aof_last_cow_size).
    pub last_cow: u64,
    /// Rewrite limiting after repeated failures (see `rewrite::limited`): the current delay
    /// and the Unix second before which automatic rewrites wait (0: none).
    pub limit_delay_minutes: i64,
    pub limit_next_try: i64,
}

pub(crate) struct Inner {
    /// Logging is on (feed buffers commands).
    pub enabled: AtomicBool,
    pub feed: Mutex<Feed>,
    /// Wakes the writer thread (waits with the `feed` mutex).
    pub wake: Condvar,
    /// Sequence of the last command fed.
    pub fed: AtomicU64,
    /// Sequence up to which the log was handed to the kernel.
    pub written: AtomicU64,
    /// Sequence up to which the log is fsynced.
    pub synced: AtomicU64,
    pub durable: tokio::sync::Notify,
    /// The writer's one wake-up per fsync for the runtime: a single task (`relay_durable`)
    /// waits on it and wakes the connections waiting in `durable` from inside the runtime.
    /// Waking each of them from the writer thread would cost an eventfd write(2) apiece.
    pub synced_signal: tokio::sync::Notify,
    pub mode: AtomicU8,
    /// Lock order: `out` before `feed`; neither is held while taking a shard lock.
    pub out: Mutex<Option<Out>>,
    pub state: Mutex<State>,
    /// An AOF rewrite child runs (Redis's child_type == CHILD_TYPE_AOF).
    pub rewriting: AtomicBool,
    /// Its pid, 0 when none runs.
    pub rewrite_child: AtomicI32,
    /// `appendonly yes` was set and the first rewrite has not yet succeeded (Redis's
    /// AOF_WAIT_REWRITE): commands are logged to the temporary incremental file only while
    /// that rewrite's child runs.
    pub waiting_rewrite: AtomicBool,
    pub loading: AtomicBool,
    /// A replica loads its master's image beside the old data set, which it keeps serving
    /// (Redis's async_loading, `repl-diskless-load swapdb` with the same history).
    pub async_loading: AtomicBool,
    /// The load under way reads the master's socket (a diskless load), not a file: clients
    /// are refused at once, never held ([`crate::persistence`]'s `hold_for_load`).
    pub loading_from_socket: AtomicBool,
    pub last_write_ok: AtomicBool,
    /// errno of the last failed write or fsync (meaningful while `last_write_ok` is false).
    pub last_write_errno: std::sync::atomic::AtomicI32,
    /// `aof-max-size` (0: none), refreshed by the writer thread from the config.
    pub max_size: AtomicU64,
    pub fsync_in_progress: AtomicBool,
    /// `dirty` counter value at the last save/load (rdb_changes_since_last_save).
    pub dirty_base: AtomicU64,
    pub writer_started: AtomicBool,
    pub last_fsync_ms: AtomicI64,
    /// `always`: the executor went idle with commands not yet fsynced (see
    /// `Aof::executor_idle`); the writer starts the next group commit.
    pub kick: AtomicBool,
    /// `aof-timestamp-enabled`: a `#TS:<unix seconds>` line precedes the first command of each
    /// second, as Redis writes it (see `Aof::config_changed`).
    pub timestamps: AtomicBool,
    /// Set when the server stops the running rewrite itself (appendonly turned off, SHUTDOWN):
    /// its outcome is ignored.
    pub rewrite_cancel: AtomicBool,
    /// DEBUG AOF-FLUSH-SLEEP: microseconds each write of buffered commands waits first, so
    /// tests can see that no reply goes out before its command is in the file.
    pub flush_sleep_us: AtomicU64,
    /// RDB snapshots (SAVE, BGSAVE, save points).
    pub snap: SnapState,
}

impl Default for Inner {
    fn default() -> Self {
        Inner {
            enabled: AtomicBool::new(false),
            feed: Mutex::new(Feed::default()),
            wake: Condvar::new(),
            fed: AtomicU64::new(0),
            written: AtomicU64::new(0),
            synced: AtomicU64::new(0),
            durable: tokio::sync::Notify::new(),
            synced_signal: tokio::sync::Notify::new(),
            mode: AtomicU8::new(FSYNC_EVERYSEC),
            out: Mutex::new(None),
            state: Mutex::new(State {
                last_rewrite_ok: true,
                last_rewrite_secs: -1,
                ..State::default()
            }),
            rewriting: AtomicBool::new(false),
            rewrite_child: AtomicI32::new(0),
            waiting_rewrite: AtomicBool::new(false),
            loading: AtomicBool::new(false),
            async_loading: AtomicBool::new(false),
            loading_from_socket: AtomicBool::new(false),
            last_write_ok: AtomicBool::new(true),
            last_write_errno: std::sync::atomic::AtomicI32::new(0),
            max_size: AtomicU64::new(0),
            fsync_in_progress: AtomicBool::new(false),
            dirty_base: AtomicU64::new(0),
            writer_started: AtomicBool::new(false),
            last_fsync_ms: AtomicI64::new(0),
            kick: AtomicBool::new(false),
            timestamps: AtomicBool::new(false),
            rewrite_cancel: AtomicBool::new(false),
            flush_sleep_us: AtomicU64::new(0),
            snap: SnapState::default(),
        }
    }
}

/// The AOF as the rest of the server sees it.
#[derive(Default, Clone)]
pub struct Aof {
    pub(crate) inner: Arc<Inner>,
}

/// One file listed in the manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    pub name: String,
    pub seq: i64,
}

/// The parsed manifest.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Manifest {
    pub base: Option<Part>,
    /// Files a finished rewrite replaced, to delete (type `h`), newest first.
    pub history: Vec<Part>,
    pub incrs: Vec<Part>,
    /// The last base and incremental sequence numbers handed out (Redis's
    /// curr_base_file_seq / curr_incr_file_seq): read from the listed files when the manifest
    /// is parsed, then only ever raised, so a file that became history and was deleted does
    /// not give its number to the next one.
    pub curr_base_seq: i64,
    pub curr_incr_seq: i64,
}

/// Snapshot state (Redis's rdb_* server fields).
pub(crate) struct SnapState {
    /// The BGSAVE child's pid, 0 when none runs.
    pub child: AtomicI32,
    /// The running BGSAVE writes to replicas' sockets (diskless sync), not to the file.
    pub child_to_sockets: AtomicBool,
    pub child_started: Mutex<Option<Instant>>,
    pub last_bgsave_ok: AtomicBool,
    pub last_bgsave_secs: AtomicI64,
    /// Unix seconds of the last BGSAVE attempt (retry delay after a failure).
    pub last_bgsave_try: AtomicI64,
    pub saves: AtomicU64,
    pub last_cow: AtomicU64,
    /// The running child's reports (INFO current_*): keys written of the total, its
    /// copy-on-write bytes, the peak of those, and when they were measured.
    pub keys_total: AtomicU64,
    pub keys_processed: AtomicU64,
    pub cow: AtomicU64,
    pub cow_peak: AtomicU64,
    pub cow_at: Mutex<Option<Instant>>,
    /// The `dirty` counter when the running BGSAVE forked.
    pub dirty_at_fork: AtomicU64,
    /// BGSAVE SCHEDULE waiting for an AOF rewrite to end.
    pub scheduled: AtomicBool,
    pub last_load_loaded: AtomicU64,
    pub last_load_expired: AtomicU64,
    /// A rewrite to start from the cron once no child runs (Redis's aof_rewrite_scheduled):
    /// BGREWRITEAOF during a BGSAVE or EXEC, appendonly turned on meanwhile, or a failed
    /// rewrite that was to turn the AOF on.
    pub rewrite_scheduled: AtomicBool,
    /// Held while checking that no child runs and forking one (BGSAVE or rewrite).
    pub fork_lock: Mutex<()>,
    /// SHUTDOWN already saved (or was told NOSAVE): the exit path must not save again.
    pub shutdown_handled: AtomicBool,
    /// The load in progress (INFO loading_*): Unix seconds it started, the bytes of its
    /// file(s), and how many of those are loaded.
    pub load_started: AtomicI64,
    pub load_total_bytes: AtomicU64,
    pub load_done_bytes: AtomicU64,
    pub load_rdb_used_mem: AtomicU64,
    /// How long the last fork(2) took, and how many there were (INFO latest_fork_usec,
    /// total_forks).
    pub latest_fork_usec: AtomicU64,
    pub total_forks: AtomicU64,
}

impl Default for SnapState {
    fn default() -> Self {
        SnapState {
            child: AtomicI32::new(0),
            child_to_sockets: AtomicBool::new(false),
            child_started: Mutex::new(None),
            last_bgsave_ok: AtomicBool::new(true),
            last_bgsave_secs: AtomicI64::new(-1),
            last_bgsave_try: AtomicI64::new(0),
            saves: AtomicU64::new(0),
            last_cow: AtomicU64::new(0),
            keys_total: AtomicU64::new(0),
            keys_processed: AtomicU64::new(0),
            cow: AtomicU64::new(0),
            cow_peak: AtomicU64::new(0),
            cow_at: Mutex::new(None),
            dirty_at_fork: AtomicU64::new(0),
            scheduled: AtomicBool::new(false),
            last_load_loaded: AtomicU64::new(0),
            last_load_expired: AtomicU64::new(0),
            rewrite_scheduled: AtomicBool::new(false),
            fork_lock: Mutex::new(()),
            shutdown_handled: AtomicBool::new(false),
            load_started: AtomicI64::new(0),
            load_total_bytes: AtomicU64::new(0),
            load_done_bytes: AtomicU64::new(0),
            load_rdb_used_mem: AtomicU64::new(0),
            latest_fork_usec: AtomicU64::new(0),
            total_forks: AtomicU64::new(0),
        }
    }
}
