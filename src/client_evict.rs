//! Client eviction (`maxmemory-clients`), as Redis 7.0 does it: when the memory of all
//! clients together (query buffers, arguments, pending output: [`ClientInfo::memory_bytes`])
//! reaches the limit, the biggest clients are disconnected, one after another, until the
//! total is under it. Clients that ran `CLIENT NO-EVICT on` are never chosen but still count
//! toward the total. The limit is bytes, or a percentage of `maxmemory`, and never under
//! 128 KiB (so a bad setting cannot cut every client off).
//!
//! Redis keeps clients in memory buckets updated as their buffers change; Podium measures
//! when asked: before every command (ahead of key eviction, as Redis's `processCommand`
//! evicts clients first) and on each cron tick. The scan is skipped while the whole process
//! uses less memory than the limit, since the clients' buffers are part of that memory.
//!
//! [`ClientInfo::memory_bytes`]: crate::client::ClientInfo::memory_bytes

use crate::config::dir;
use crate::state::Server;
use std::sync::atomic::{AtomicU64, Ordering};

/// INFO stats `evicted_clients`.
pub(crate) static EVICTED_CLIENTS: AtomicU64 = AtomicU64::new(0);

/// The limit in bytes now in force (0: no client eviction).
static LIMIT: AtomicU64 = AtomicU64::new(0);

/// Redis's floor for the limit.
const MIN_LIMIT: u64 = 128 * 1024;

/// The limit `maxmemory-clients` = `value` gives with `maxmemory` = `maxmemory` (0 = none).
pub(crate) fn limit_for(value: &str, maxmemory: i64) -> u64 {
    let bytes = if let Some(p) = value.strip_suffix('%') {
        match p.parse::<u64>() {
            Ok(p) if p > 0 && maxmemory > 0 => (maxmemory as f64 * p as f64 / 100.0) as u64,
            _ => 0,
        }
    } else {
        crate::config::parse_memory(value).map_or(0, |n| n.max(0) as u64)
    };
    if bytes == 0 {
        0
    } else {
        bytes.max(MIN_LIMIT)
    }
}

/// Read the configuration again (at startup, on CONFIG SET of `maxmemory-clients` or
/// `maxmemory`, and each cron tick).
pub(crate) fn configure(srv: &Server) {
    let value = srv.config.text(dir::MAXMEMORY_CLIENTS);
    let max = srv.config.hot.maxmemory.load(Ordering::Relaxed);
    LIMIT.store(limit_for(&value, max), Ordering::Relaxed);
}

/// Disconnect the biggest evictable clients while the clients' memory is at or over the
/// limit. Returns how many were disconnected.
#[inline]
pub(crate) fn evict_clients(srv: &Server) -> usize {
    let limit = LIMIT.load(Ordering::Relaxed);
    if limit == 0 || (crate::alloc::used_memory() as u64) < limit {
        return 0;
    }
    evict_clients_over(srv, limit)
}

/// [`evict_clients`] once the process is at or over `limit`: the clients' own total decides.
#[cold]
fn evict_clients_over(srv: &Server, limit: u64) -> usize {
    let mut total = 0u64;
    let mut candidates: Vec<(u64, std::sync::Arc<crate::client::ClientInfo>)> = Vec::new();
    for c in srv.clients.lock().values() {
        if c.killed.load(Ordering::Relaxed) {
            continue;
        }
        let mem = c.memory_bytes() as u64;
        total += mem;
        if !c.no_evict.load(Ordering::Relaxed) {
            candidates.push((mem, c.clone()));
        }
    }
    if total < limit {
        return 0;
    }
    candidates.sort_by_key(|c| std::cmp::Reverse(c.0));
    let mut evicted = 0;
    for (mem, c) in candidates {
        if total < limit {
            break;
        }
        tracing::info!("Evicting client: {}", c.describe());
        c.kill();
        total -= mem;
        evicted += 1;
    }
    if total >= limit {
        tracing::warn!("Over client maxmemory after evicting all evictable clients");
    }
    EVICTED_CLIENTS.fetch_add(evicted as u64, Ordering::Relaxed);
    evicted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_as_redis_computes_them() {
        assert_eq!(limit_for("0", 0), 0);
        assert_eq!(limit_for("3mb", 0), 3 << 20);
        assert_eq!(limit_for("1000", 0), MIN_LIMIT);
        assert_eq!(limit_for("50%", 100 << 20), 50 << 20);
        // A percentage of no maxmemory is no limit.
        assert_eq!(limit_for("50%", 0), 0);
        assert_eq!(limit_for("0%", 100 << 20), 0);
    }
}
