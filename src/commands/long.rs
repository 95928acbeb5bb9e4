//! Commands expected to run long, and running them off the thread that drives I/O.
//!
//! Every command runs on a tokio worker thread while it holds its shard locks. tokio polls the
//! sockets' readiness (its I/O driver) only from a worker that has run out of tasks; a worker
//! busy inside one long command never does, and a worker that went to sleep while the first
//! one still held the driver is not woken for I/O. So a ZUNIONSTORE of two 1M-member sets used
//! to stall every other client, PING included, for its whole run (seconds), whatever keys
//! they used. This module decides, once a command holds its locks, whether its work is
//! proportional to a large input (by the sizes of the values it names, or of the database);
//! such a command runs under `tokio::task::block_in_place`, which hands this worker's queue and
//! the I/O driver to another thread for the command's duration. Clients whose keys are not in
//! the command's shards keep being served; the command itself is as atomic as before (it keeps
//! its locks throughout). Short commands are not touched: the hand-over costs a thread wake-up
//! (tens of microseconds), nothing next to a command that works through thousands of elements.

use super::{Cmd, Keys};
use crate::keyspace::Guards;
use bytes::Bytes;

/// Elements above which a command that combines or copies whole values (set algebra, SORT,
/// ZRANGESTORE, COPY, DUMP) runs off the I/O thread: a few hundred microseconds of work.
const COMBINE_ELEMENTS: usize = 1_000;
/// Elements above which a command that only walks or frees whole values (SMEMBERS, HGETALL,
/// DEL of a big collection, KEYS, FLUSHDB, a SCAN with a big COUNT) runs off the I/O thread.
const WALK_ELEMENTS: usize = 16_384;

/// How a command's cost grows, for the commands whose cost can grow without bound.
enum Cost {
    /// Proportional to the elements of the keys it names, a few microseconds each.
    Combine,
    /// Proportional to the elements of the keys it names, tens of nanoseconds each.
    Walk,
    /// Proportional to the keys of the client's database (or of all of them).
    Database,
    /// Proportional to SCAN's COUNT.
    Scan,
    /// Waits on another server (MIGRATE): always off the I/O thread.
    Network,
}

fn cost_of(name: &str) -> Option<Cost> {
    Some(match name {
        "zunionstore" | "zinterstore" | "zdiffstore" | "zunion" | "zinter" | "zdiff"
        | "zintercard" | "zrangestore" | "sunion" | "sunionstore" | "sinter" | "sinterstore"
        | "sdiff" | "sdiffstore" | "sintercard" | "sort" | "sort_ro" | "copy" | "dump" => {
            Cost::Combine
        }
        "smembers" | "hgetall" | "hkeys" | "hvals" | "del" | "unlink" | "rename" | "renamenx"
        | "lrange" | "zrange" | "zrevrange" | "zrangebyscore" | "zrevrangebyscore"
        | "zrangebylex" | "zrevrangebylex" => Cost::Walk,
        "keys" | "flushdb" | "flushall" => Cost::Database,
        "scan" => Cost::Scan,
        "migrate" => Cost::Network,
        _ => return None,
    })
}

/// Elements stored under the keys `spec` names in `args` (locks already held).
fn named_elements(g: &mut Guards<'_>, db: usize, spec: &Cmd, args: &[Bytes]) -> usize {
    let positions = match spec.keys {
        Keys::DbNamed(f) => f(args),
        Keys::Db | Keys::All | Keys::None => Vec::new(),
        _ => spec.key_positions(args),
    };
    let mut n = 0usize;
    for i in positions {
        let Some(key) = args.get(i) else { continue };
        let shard = g.ks.shard_of(key);
        if let Some(e) = g.shard_mut(db, shard).raw_get(key) {
            n = n.saturating_add(e.value.elements());
        }
    }
    n
}

/// Ranges cost what they return: a ZRANGE/LRANGE whose both indexes are small non-negative
/// numbers (the top of a leaderboard) is short whatever the value's size.
fn small_range(name: &str, args: &[Bytes]) -> bool {
    if !matches!(name, "lrange" | "zrange" | "zrevrange") || args.len() < 4 {
        return false;
    }
    let by_value = args[4..]
        .iter()
        .any(|a| a.eq_ignore_ascii_case(b"byscore") || a.eq_ignore_ascii_case(b"bylex"));
    if by_value {
        return false;
    }
    let num = |b: &Bytes| crate::util::numtext::parse_i64(b);
    matches!((num(&args[2]), num(&args[3])), (Some(a), Some(b))
        if (0..=i64::MAX).contains(&a) && (0..WALK_ELEMENTS as i64).contains(&b.saturating_sub(a)))
}

/// True if `spec` with `args`, whose locks `g` holds, is expected to run long enough that it
/// should not hold up the clients this worker serves.
#[inline]
pub(crate) fn expected_long(g: &mut Guards<'_>, db: usize, spec: &Cmd, args: &[Bytes]) -> bool {
    // Commands flagged fast (GET, ZSCORE, ZADD ...) are O(1) or O(log N): one bit decides.
    spec.flags & super::flags::FAST == 0 && expected_long_by_cost(g, db, spec, args)
}

/// [`expected_long`] for a command not flagged fast: by its cost class and its arguments.
fn expected_long_by_cost(g: &mut Guards<'_>, db: usize, spec: &Cmd, args: &[Bytes]) -> bool {
    let Some(cost) = cost_of(spec.name) else {
        return false;
    };
    match cost {
        Cost::Combine => named_elements(g, db, spec, args) >= COMBINE_ELEMENTS,
        Cost::Walk => {
            !small_range(spec.name, args) && named_elements(g, db, spec, args) >= WALK_ELEMENTS
        }
        Cost::Database => {
            let dbs: Vec<usize> = match spec.keys {
                Keys::All => (0..g.ks.num_dbs()).collect(),
                _ => vec![db],
            };
            let mut keys = 0usize;
            for d in dbs {
                keys = keys.saturating_add(g.db(d).len());
            }
            keys >= WALK_ELEMENTS
        }
        Cost::Network => true,
        Cost::Scan => {
            let count = args
                .windows(2)
                .filter(|w| w[0].eq_ignore_ascii_case(b"count"))
                .filter_map(|w| crate::util::numtext::parse_i64(&w[1]))
                .max()
                .unwrap_or(0);
            count >= WALK_ELEMENTS as i64 && g.db(db).len() >= WALK_ELEMENTS
        }
    }
}

/// Run `f` so that the worker's other clients are served meanwhile, when `long` and the
/// runtime allows it (the multi-threaded runtime; otherwise, and outside any runtime, `f` runs
/// in place).
pub(crate) fn run_maybe_off_io<R>(long: bool, f: impl FnOnce() -> R) -> R {
    if long
        && tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
    {
        crate::util::write_turn::block_in_place(f)
    } else {
        f()
    }
}
