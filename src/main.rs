//! `podium [config-file] [--option value ...]`, started like redis-server.

use clap::Parser;

#[global_allocator]
static GLOBAL: podium::alloc::CountingAlloc = podium::alloc::CountingAlloc;

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
    let cli = Cli::parse();
    podium::alloc::tune_malloc();
    let config = match podium::config::Config::from_args(&cli.args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("podium: configuration error: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = podium::server::run(config) {
        eprintln!("podium: {e}");
        std::process::exit(1);
    }
    // Connections still open are abandoned here, as redis-server does on SHUTDOWN.
    std::process::exit(0);
}
