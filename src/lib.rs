//! Podium: a Redis-protocol-compatible sorted-set server for real-time leaderboards.
//!
//! The main layers, top to bottom (each imports only from the ones after it; the README's
//! "Layering" lists every module, and `tests/layering.rs` checks the order, inside folders
//! too): [`server`] (the runtime, the accept loops' start, the cron), [`connection`] (a
//! client's socket loop, pipelining), `replication`, [`commands`] (the command table, the
//! dispatcher, one file per command family, scripting among them), [`persistence`] (RDB
//! snapshots, the append-only file with its manifest and rewrites, the RDB object codec that
//! DUMP/RESTORE share), `state` (the shared `Server`), `pubsub`, `client` (a connection's own
//! state), [`config`], [`keyspace`] (databases, shards, expiry), [`protocol`] (RESP
//! parse/encode), [`types`] (the skip list and other value types) and [`util`].

pub(crate) mod acl;
pub mod alloc;
pub(crate) mod arrival;
pub(crate) mod blocking;
pub(crate) mod client;
pub(crate) mod client_evict;
pub(crate) mod clock;
pub(crate) mod cluster;
pub(crate) mod cmdspec;
pub(crate) mod command_table;
pub mod commands;
pub mod config;
pub(crate) mod config_rewrite;
pub mod connection;
pub(crate) mod crash;
/// Moved to `config::directives`; the old path stays for code written against it.
pub use config::directives;
pub(crate) mod evict;
pub mod keyspace;
pub(crate) mod listeners;
pub(crate) mod log;
pub(crate) mod net;
pub(crate) mod notify;
pub(crate) mod obuf;
pub mod persistence;
pub(crate) mod process;
pub mod proctitle;
pub mod protocol;
pub(crate) mod pubsub;
pub(crate) mod querybuf;
pub(crate) mod replication;

pub mod server;
pub(crate) mod shutdown;
pub(crate) mod state;
pub(crate) mod takeover;
pub(crate) mod tls;
pub(crate) mod tracking;
pub mod types;
pub mod util;
pub(crate) mod version;
pub(crate) mod watchdog;
