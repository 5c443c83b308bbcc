//! The `inferd` command line.

mod cmd;
mod device;
mod loaded;
mod pull;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "inferd",
    version,
    about = "A native LLM inference server for fleets of AI agents"
)]
struct Cli {
    /// Worker threads for compute (default: all cores).
    #[arg(long, global = true, env = "INFERD_THREADS", value_parser = cmd::sizes(1..=1024))]
    threads: Option<usize>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate text from a prompt, streaming it to stdout.
    Generate(cmd::generate::Args),
    /// Fetch a built-in model into the cache (checksum-verified).
    Pull(cmd::pull::Args),
    /// Measure prefill and decode speed of a model on this machine.
    Speed(cmd::speed::Args),
    /// Run the OpenAI-compatible server in the foreground.
    Serve(cmd::serve::Args),
    /// Start the server in the background (arguments as for `serve`).
    Start(cmd::daemon::StartArgs),
    /// Report whether the background server runs, its address, model, uptime, queue and KV use.
    Status(cmd::daemon::StatusArgs),
    /// Stop the background server gracefully (running requests finish first).
    Stop(cmd::daemon::StopArgs),
    /// Run an agent-fleet workload against any OpenAI-compatible server.
    Bench(cmd::bench::Args),
}

/// Keeps freed activation buffers in the heap instead of returning them to the OS:
/// glibc otherwise maps (and the kernel zeroes) fresh pages for every large buffer of
/// every forward pass, measured at 14% of decode time.
fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator thresholds; called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 512 << 20);
    }
}

fn main() {
    tune_allocator();
    let cli = Cli::parse();
    if let Some(n) = cli.threads {
        // Read by the CPU backend when it creates its worker pool.
        std::env::set_var("INFERD_THREADS", n.to_string());
    }
    let r = match cli.command {
        Command::Generate(a) => cmd::generate::run(a),
        Command::Pull(a) => cmd::pull::run(a),
        Command::Speed(a) => cmd::speed::run(a),
        Command::Serve(a) => cmd::serve::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Start(a) => cmd::daemon::start(a),
        Command::Status(a) => cmd::daemon::status(a),
        Command::Stop(a) => cmd::daemon::stop(a),
    };
    if let Err(e) = r {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
