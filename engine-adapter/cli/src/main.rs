//! The `flue` command: parses the command line, sets up logging and runs [`flue_cli`].

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use flue_cli::{self as cli, Cli};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .init();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(cli::exit::ERROR);
        }
    };
    let mut stdout = std::io::stdout();
    let result = runtime.block_on(cli::run(cli, &mut stdout));
    let _ = stdout.flush();
    match result {
        Ok(outcome) => ExitCode::from(outcome.exit_code()),
        Err(e) => {
            eprintln!("{}", cli::error_message(&e));
            ExitCode::from(e.exit_code())
        }
    }
}
