//! `podium [config-file] [--option value ...]`, started like redis-server.

use clap::Parser;

#[global_allocator]
static GLOBAL: podium::alloc::CountingAlloc = podium::alloc::COUNTING_JEMALLOC;

/// jemalloc's options, read before `main` (a `_RJEM_MALLOC_CONF` environment variable still
/// overrides them). `dirty_decay_ms:100`/`muzzy_decay_ms:0`: pages freed by a resize (a member
/// index doubling, a Vec growing) return to the OS within 100 ms instead of over ~10 s, so RSS
/// follows the data; not at once (0), because then a connection's output buffer, grown for a
/// pipeline of range replies and given back after it, faulted its pages in again for the next
/// one (0.8 page faults per top-100 request at P=16, ~0.06 with 100 ms). The purging thread
/// (`jemalloc-bg-thread`) keeps that promise for an idle server. `cache_oblivious:false`: no
/// random in-page offset for large blocks, which costs a whole extra page per 64 KiB skip-list
/// arena chunk (+6% RSS on the sorted set). Measured on a 1M-member fill: RSS growth 55.7
/// B/member with the defaults, 48.3 with decay 0 and this (39.2 since; 39.5 with decay 100).
#[export_name = "_rjem_malloc_conf"]
pub static MALLOC_CONF: &[u8; 58] = b"cache_oblivious:false,dirty_decay_ms:100,muzzy_decay_ms:0\0";

/// A Redis-compatible sorted-set server for real-time leaderboards.
#[derive(Parser)]
#[command(version, about, long_about = None, disable_help_subcommand = true)]
#[command(
    override_usage = "podium [config-file] [--port 6379] [--bind 127.0.0.1] [--appendonly yes] [--option value ...]"
)]
struct Cli {
    /// A redis.conf-syntax file, then any directive as `--name value`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

fn main() {
    // Before any thread: it moves the environment to make room for the process title.
    podium::proctitle::init();
    podium::alloc::defrag::mark_global_jemalloc();
    let cli = Cli::parse();
    podium::commands::install_hooks();
    let config = match podium::config::Config::from_args(&cli.args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("podium: configuration error: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = podium::server::run(config) {
        // As redis-server: with a logfile, why the server stops goes there alone; its stderr
        // stays quiet (Redis's instance suites count any stderr output as a failure, and
        // retry a start that lost its port to a race, as an operator's supervisor would).
        if podium::server::logs_to_file() {
            tracing::warn!("{e}");
        } else {
            eprintln!("podium: {e}");
        }
        std::process::exit(1);
    }
    // Connections still open are abandoned here, as redis-server does on SHUTDOWN.
    std::process::exit(0);
}
