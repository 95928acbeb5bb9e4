//! Podium's integration tests, linked into one test binary.
//!
//! Each file beside this one is a module: the behaviour it covers, tested against the real
//! `podium` binary started on a free port (and, where a format or protocol is shared, against
//! redis-server too). One binary instead of one per file because every test binary links the
//! whole crate with thin LTO: forty links took ten minutes of a CI build on two cores, one
//! takes seconds. `cargo test --release --test integration acl::` runs one file's tests.

mod common;

mod acl;
mod aof_manifest;
mod blocking_order;
mod client_memory;
mod cluster;
mod cluster_mixed;
mod command_docs;
mod debug_digest;
mod defrag;
mod differential;
mod diskless;
mod dump_restore;
mod expire;
mod failover;
mod geo_bits_hll;
mod hash_set_list;
mod layering;
mod lazyfree;
mod leaderboard_flow;
mod logging;
mod long_commands;
mod lua_hardening;
mod migrate;
mod operators;
mod persistence;
mod pubsub;
mod rdb;
mod replication;
mod script_debug;
mod scripting;
mod scripting_function_dump;
mod scripting_parallel;
mod scripting_rdb;
mod security;
mod server;
mod sort;
mod stream;
mod tls;
mod zset_commands;
mod zset_memory;
mod zset_prop;
