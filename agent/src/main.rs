//! `flue-agent`: parses flags, sets up logging and signals, and runs [`flue_agent::run`];
//! `flue-agent data …` instead runs the data-space command a hook uses, `flue-agent doctor`
//! checks what `run` needs and says what is wrong, and the hidden
//! `flue-agent hook-guard …` the guard every hook runs under when `flue-hook-guard` is not
//! installed next to it (taken before anything is set up: it runs once per hook, and its
//! start is part of every deployment's latency).

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::Context;

use clap::{Parser, Subcommand};
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;
use tracing::{error, info};
use tracing_subscriber::EnvFilter;

/// Flue's in-server agent.
#[derive(Debug, Parser)]
#[command(name = "flue-agent", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Pull this server's request queue and apply each deployment with its hook.
    Run(Box<flue_agent::RunArgs>),
    /// Inside a hook: put, get (optionally waiting) or delete a key of the running
    /// deployment's stack data space. Exits 0 on success, 1 when `get` finds no value,
    /// 2 on any other error.
    Data(flue_agent::data::cli::DataArgs),
    /// Check what `run` needs, with the same flags and environment: the credentials file,
    /// the state dir, the hook dirs, the small guard, the broker (connecting with the
    /// credentials) and this server's request consumer. One `ok`/`FAIL` line each; exits 0
    /// when all pass, 1 otherwise. Prints no secret.
    Doctor(Box<flue_agent::doctor::DoctorArgs>),
    /// Print this build's version (`0.1.0+<build id>`) and exit: also the check an
    /// upgrade runs on a new build before starting it.
    Version,
}

/// This build's version: `FLUE_BUILD_ID` is read when this file is compiled, so a second
/// build with another id recompiles only this crate's binary.
fn version() -> String {
    flue_agent::config::build_version(option_env!("FLUE_BUILD_ID"))
}

fn main() -> ExitCode {
    // The hook guard (internal, hidden): between the agent and a hook, it prints nothing
    // of its own and needs neither the argument parser nor a runtime.
    let mut argv = std::env::args_os().skip(1);
    if argv
        .next()
        .is_some_and(|first| first == flue_agent::guard::SUBCOMMAND)
    {
        return flue_agent::guard::main(argv);
    }
    // One thing at a time: a single-threaded runtime keeps the idle agent small.
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(agent_main()),
        Err(e) => {
            eprintln!("flue-agent: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn agent_main() -> ExitCode {
    let cli = Cli::parse();
    let args = match cli.command {
        // A hook's helper: its only output is the value or the error, no logs.
        Command::Data(args) => return flue_agent::data::cli::run(args).await,
        // A report on stdout, no logs.
        Command::Doctor(args) => return flue_agent::doctor::main(*args).await,
        Command::Version => {
            println!("{}", version());
            return ExitCode::SUCCESS;
        }
        Command::Run(args) => args,
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .init();

    let mut config: flue_agent::Config = (*args).into();
    config.version = version();
    match run(config).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!(error = format!("{e:#}"), "agent failed");
            ExitCode::FAILURE
        }
    }
}

async fn run(config: flue_agent::Config) -> anyhow::Result<()> {
    let shutdown = CancellationToken::new();
    watch_signals(shutdown.clone()).context("cannot install signal handlers")?;
    match flue_agent::run(config, shutdown).await {
        // An upgrade (or its rollback): the same process goes on as `exe`.
        Err(flue_agent::Error::Restart { exe }) => {
            info!(exe = %exe.display(), "restarting");
            let err = flue_agent::upgrade::exec(&exe);
            Err(err).with_context(|| format!("cannot run {}", exe.display()))
        }
        outcome => Ok(outcome?),
    }
}

/// Cancels `shutdown` on the first SIGTERM or SIGINT; later ones are only logged, so a
/// second Ctrl-C cannot orphan a running hook.
fn watch_signals(shutdown: CancellationToken) -> anyhow::Result<()> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        loop {
            let name = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            };
            if shutdown.is_cancelled() {
                info!(signal = name, "shutdown already in progress");
            } else {
                info!(signal = name, "shutting down");
                shutdown.cancel();
            }
        }
    });
    Ok(())
}
