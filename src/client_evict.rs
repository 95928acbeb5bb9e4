//! Client eviction (`maxmemory-clients`), as Redis 7.0 does it: when the memory of all
//! normal and pubsub clients together ([`ClientInfo::memory_bytes`]: query buffer, arguments,
//! output, MULTI queue, WATCHed keys, subscriptions, tracking prefixes) reaches the limit, the
//! biggest clients are disconnected, one after another, until the total is under it. Clients
//! that ran `CLIENT NO-EVICT on` are never chosen but still count toward the total; replicas
//! and the link to our master neither count nor are chosen. The limit is bytes, or a
//! percentage of `maxmemory`, and never under 128 KiB (so a bad setting cannot cut every
//! client off).
//!
//! As in Redis, each client's memory is recorded at the moments it changes ([`note`] by the
//! connection after a read, after each command and as its output drains; [`record`] by
//! whoever queues a push message for it; see `ClientInfo::record_memory`), the records add up to one running total, and
//! eviction compares that total with the limit: before every command (ahead of key eviction,
//! as Redis's `processCommand` evicts clients first), after each of a connection's records,
//! and on each cron tick, when every client is recorded again. Records are kept only while a
//! limit is set; setting one records every client first.

use crate::client::ClientInfo;
use crate::config::dir;
use crate::state::Server;
use std::sync::atomic::{AtomicU64, Ordering};

/// INFO stats `evicted_clients`.
pub(crate) static EVICTED_CLIENTS: AtomicU64 = AtomicU64::new(0);

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
/// `maxmemory`, and each cron tick). A limit set where there was none records every client,
/// and clients over the new limit are evicted at once.
pub(crate) fn configure(srv: &Server) {
    let value = srv.config.text(dir::MAXMEMORY_CLIENTS);
    let max = srv.config.hot.maxmemory.load(Ordering::Relaxed);
    let limit = limit_for(&value, max);
    let before = crate::client::set_evict_limit(limit);
    if limit != 0 && before != limit {
        record_all(srv);
        evict_clients(srv);
    }
}

/// Record every client's memory now (and evict if the total is over the limit): the cron's
/// visit, which also catches changes that were not recorded as they happened.
pub(crate) fn cron(srv: &Server) {
    if crate::client::evict_limit() == 0 {
        return;
    }
    record_all(srv);
    evict_clients(srv);
}

fn record_all(srv: &Server) {
    let clients: Vec<_> = srv.clients.lock().values().cloned().collect();
    for c in clients {
        c.record_memory();
    }
}

/// Record `info`'s memory, then evict if the total is over the limit (`info` itself may go:
/// its connection sees it killed).
#[inline]
pub(crate) fn note(srv: &Server, info: &ClientInfo) {
    if info.record_memory() {
        evict_clients(srv);
    }
}

/// Disconnect the biggest evictable clients while the clients' recorded memory is at or over
/// the limit. Returns how many were disconnected.
#[inline]
pub(crate) fn evict_clients(srv: &Server) -> usize {
    let limit = crate::client::evict_limit();
    if limit == 0 || crate::client::counted_memory() < limit {
        return 0;
    }
    evict_clients_over(srv, limit)
}

/// [`evict_clients`] once the total is at or over `limit`.
#[cold]
fn evict_clients_over(srv: &Server, limit: u64) -> usize {
    let mut candidates: Vec<(u64, std::sync::Arc<ClientInfo>)> = srv
        .clients
        .lock()
        .values()
        .filter_map(|c| {
            let mem = c.counted_record()?;
            (!c.no_evict.load(Ordering::Relaxed) && !c.killed.load(Ordering::Relaxed))
                .then(|| (mem, c.clone()))
        })
        .collect();
    // The biggest first, by bucket and within one.
    // Biggest first: Redis takes its biggest memory bucket first, an order the bytes give.
    candidates.sort_by_key(|(mem, _)| std::cmp::Reverse(*mem));
    let mut evicted = 0;
    for (_, c) in candidates {
        if crate::client::counted_memory() < limit {
            break;
        }
        tracing::info!("Evicting client: {}", c.describe());
        c.kill();
        evicted += 1;
    }
    if crate::client::counted_memory() >= limit {
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
