//! Persistence: the append-only file.
//!
//! (Interim: the AOF writer lands with the persistence work; until then `feed` only counts.)

use bytes::Bytes;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Default)]
pub struct Aof {
    fed: AtomicU64,
}

impl Aof {
    /// Log one command that changed database `db`. Called under the command's shard locks, so
    /// it must only buffer.
    pub fn feed(&self, _db: usize, _argv: Vec<Bytes>) {
        self.fed.fetch_add(1, Ordering::Relaxed);
    }

    /// Sequence number of the last fed command.
    pub fn last_seq(&self) -> u64 {
        self.fed.load(Ordering::Relaxed)
    }

    /// Wait until everything up to `seq` is as durable as the fsync policy promises.
    pub async fn wait_durable(&self, _seq: u64) {}
}

/// Load the AOF (if `appendonly yes`) before the server accepts clients.
pub fn startup(_srv: &crate::server::Server) -> Result<(), String> {
    Ok(())
}

/// Flush and fsync before exit (SHUTDOWN, SIGTERM).
pub fn shutdown(_srv: &crate::server::Server) {}

/// INFO persistence fields, in order.
pub fn info_fields(_srv: &crate::server::Server) -> Vec<(String, String)> {
    vec![
        ("loading".into(), "0".into()),
        ("aof_enabled".into(), "0".into()),
        ("aof_rewrite_in_progress".into(), "0".into()),
    ]
}

/// BGREWRITEAOF.
pub fn bgrewriteaof(_srv: &crate::server::Server) -> crate::protocol::Reply {
    crate::protocol::Reply::Status("Background append only file rewriting started")
}

/// CONFIG SET appendonly yes|no at run time.
pub fn set_appendonly(_srv: &crate::server::Server, _on: bool) -> Result<(), String> {
    Ok(())
}
