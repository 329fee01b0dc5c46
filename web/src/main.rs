//! The `amdahl` binary: a thin CLI over the engine (one file per command under `cli/`).

use amdahl::cli;
use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = cli::Cli::parse();
    cli::init_logging(args.verbose);
    if let Some(n) = args.threads {
        // Only fails if a pool already exists, which cannot happen this early.
        let _ = rayon_threads(n);
    }
    match cli::run(args.command) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn rayon_threads(n: usize) -> anyhow::Result<()> {
    amdahl_engine::set_cpu_threads(n)?;
    Ok(())
}
