//! Podium: a Redis-protocol-compatible sorted-set server for real-time leaderboards.
//!
//! Layers, each one module: [`protocol`] (RESP parse/encode), [`server`] and [`connection`]
//! (I/O, pipelining, client state), [`commands`] (one file per command family), [`keyspace`]
//! (databases, shards, expiry), [`types`] (the skip list and other value types),
//! [`persistence`] (the append-only file) and [`config`].

pub mod alloc;
pub mod blocking;
pub mod commands;
pub mod config;
pub mod connection;
pub mod keyspace;
pub mod net;
pub mod persistence;
pub mod protocol;
pub mod scripting;
pub mod server;
pub mod types;
pub mod util;
