//! Argument vectors through the dispatcher: the input is split on NUL bytes into arguments
//! and run as one client's commands (ACL checks, MULTI queueing, every handler), against a
//! server with a small keyspace. No command may panic; SHUTDOWN, DEBUG-like and blocking
//! outcomes are just results.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use podium::config::Config;
use podium::connection::{Client, ClientInfo};
use podium::server::Server;
use std::sync::{Arc, OnceLock};

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
        Server::new(config).into_arc()
    })
}

fn client() -> Client {
    let info = Arc::new(ClientInfo::new(
        1,
        "127.0.0.1:1".into(),
        "127.0.0.1:2".into(),
        0,
    ));
    let mut c = Client::new(1, info);
    c.authenticated = true;
    // The default user, so every command goes through the ACL check too.
    c.set_user(server().acl.default_user());
    c
}

/// Commands not run: those that end the process, block, change the process (CONFIG SET
/// dir), pause clients, or run scripts (an endless Lua loop is a hang, not a finding).
fn skipped(name: &[u8]) -> bool {
    let lower = name.to_ascii_lowercase();
    let blocking = podium::commands::lookup(&lower)
        .is_some_and(|c| c.flags & podium::commands::flags::BLOCKING != 0);
    blocking
        || matches!(
            &lower[..],
            b"shutdown"
                | b"debug"
                | b"bgrewriteaof"
                | b"save"
                | b"bgsave"
                | b"config"
                | b"client"
                | b"eval"
                | b"evalsha"
                | b"eval_ro"
                | b"evalsha_ro"
                | b"script"
                | b"function"
                | b"fcall"
                | b"fcall_ro"
        )
}

fuzz_target!(|data: &[u8]| {
    let srv = server();
    let mut c = client();
    for line in data.split(|&b| b == b'\n').take(16) {
        let args: Vec<Bytes> = line
            .split(|&b| b == 0)
            .map(Bytes::copy_from_slice)
            .collect();
        if args.is_empty() || args[0].is_empty() || skipped(&args[0]) {
            continue;
        }
        let _ = podium::commands::dispatch(srv, &mut c, args);
    }
    podium::commands::tx::unwatch_all(srv, &mut c);
});
