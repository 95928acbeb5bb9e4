//! Podium: a Redis-protocol-compatible sorted-set server for real-time leaderboards.
//!
//! Layers, each one module: [`protocol`] (RESP parse/encode), [`server`] and [`connection`]
//! (I/O, pipelining, client state), [`commands`] (one file per command family), [`keyspace`]
//! (databases, shards, expiry), [`types`] (the skip list and other value types),
//! [`persistence`] (the append-only file) and [`config`].

pub mod acl;
pub mod acl_commands;
pub mod alloc;
pub mod arrival;
pub mod blocking;
pub mod client;
pub(crate) mod client_evict;
pub mod clock;
pub mod cmdspec;
pub mod commands;
pub mod config;
pub mod config_rewrite;
pub mod connection;
pub(crate) mod crash;
/// Moved to `config::directives`; the old path stays for code written against it.
pub use config::directives;
pub mod evict;
pub mod keyspace;
pub(crate) mod listeners;
pub mod log;
pub mod net;
pub mod notify;
pub(crate) mod obuf;
pub mod persistence;
pub mod process;
pub mod proctitle;
pub mod protocol;
pub mod pubsub;
pub(crate) mod querybuf;
pub mod replication;

pub mod server;
pub(crate) mod shutdown;
pub mod state;
pub mod tracking;
pub mod types;
pub mod util;
pub mod version;
pub mod watchdog;
