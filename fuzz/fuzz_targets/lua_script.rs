//! Lua script text through EVAL: the input is the script, run by the real engine with the
//! sandbox in place (`EVAL <input> 2 {k}1 {k}2 a1 a2`) as one client's command, RESP2 or RESP3
//! by the input's length. Whatever the text does (syntax errors, bytecode, breaking the
//! sandbox, deep recursion, running out of memory, calling commands), the process must not
//! crash or abort: every outcome is a reply.
//!
//! Scripts run under the fuzz builds' budget (`src/scripting/engine.rs`, `over_fuzz_budget`:
//! 200,000 instructions, 100 ms, 512 MiB), since an endless or ever-growing script is
//! legitimate in Redis. The server caps strings at 1 MiB (`proto-max-bulk-len`) and has no
//! save points, the keyspace is emptied after every input, and the script cache every 1,000
//! inputs (Redis keeps every EVAL'd script until SCRIPT FLUSH).
//!
//! Run: `cargo +nightly fuzz run -O lua_script fuzz/corpus/lua_script fuzz/seeds/lua_script
//! -- -dict=fuzz/lua.dict -max_total_time=600`.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use podium::config::Config;
use podium::connection::{Client, ClientInfo};
use podium::server::Server;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// Counted, so that the script budget sees the memory the process holds.
#[global_allocator]
static GLOBAL: podium::alloc::Counting<std::alloc::System> = podium::alloc::COUNTING_SYSTEM;

fn server() -> &'static Arc<Server> {
    static SRV: OnceLock<Arc<Server>> = OnceLock::new();
    SRV.get_or_init(|| {
        let config = Config::new();
        config
            .set_startup("databases", &["2".to_string()])
            .expect("databases");
        // No save points: FLUSHALL would write dump.rdb (with an fsync) into the working
        // directory on every input.
        config.set_startup("save", &[String::new()]).expect("save");
        config
            .set_startup("proto-max-bulk-len", &["1mb".to_string()])
            .expect("proto-max-bulk-len");
        Server::new(config).into_arc()
    })
}

fn client(resp: u8) -> Client {
    let info = Arc::new(ClientInfo::new(
        1,
        "127.0.0.1:1".into(),
        "127.0.0.1:2".into(),
        0,
    ));
    let mut c = Client::new(1, info);
    c.authenticated = true;
    // The default user, so the script's commands go through the ACL check too.
    c.set_user(server().acl.default_user());
    if resp == 3 {
        c.resp = podium::protocol::Resp::V3;
        c.info.resp.store(3, Ordering::Relaxed);
    }
    c
}

fn args(words: &[&[u8]]) -> Vec<Bytes> {
    words.iter().map(|w| Bytes::copy_from_slice(w)).collect()
}

static RUNS: AtomicUsize = AtomicUsize::new(0);

fuzz_target!(|data: &[u8]| {
    let srv = server();
    let mut c = client(if data.len() % 2 == 0 { 2 } else { 3 });
    let eval = vec![
        Bytes::from_static(b"EVAL"),
        Bytes::copy_from_slice(data),
        Bytes::from_static(b"2"),
        Bytes::from_static(b"{k}1"),
        Bytes::from_static(b"{k}2"),
        Bytes::from_static(b"a1"),
        Bytes::from_static(b"a2"),
    ];
    let _ = podium::commands::dispatch(srv, &mut c, eval);
    let _ = podium::commands::dispatch(srv, &mut c, args(&[b"FLUSHALL"]));
    if RUNS.fetch_add(1, Ordering::Relaxed) % 1000 == 999 {
        let _ = podium::commands::dispatch(srv, &mut c, args(&[b"SCRIPT", b"FLUSH"]));
    }
});
