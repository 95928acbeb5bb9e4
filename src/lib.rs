//! Podium: a Redis-protocol-compatible sorted-set server for real-time leaderboards.
//!
//! Layers, each one module: [`protocol`] (RESP parse/encode), [`server`] and [`connection`]
//! (I/O, pipelining, client state), [`commands`] (one file per command family), [`keyspace`]
//! (databases, shards, expiry), [`types`] (the skip list and other value types),
//! [`persistence`] (the append-only file) and [`config`].

pub mod acl;
pub mod acl_commands;
pub mod alloc;
pub mod blocking;
pub mod clock;
pub mod commands;
pub mod config;
pub mod config_rewrite;
pub mod connection;
pub mod directives;
pub mod evict;
pub mod keyspace;
pub mod log;
pub mod net;
pub mod notify;
pub mod persistence;
pub mod process;
pub mod protocol;
pub mod pubsub;
pub mod scripting;
pub mod server;
pub mod tracking;
pub mod types;
pub mod util;
pub mod version;
