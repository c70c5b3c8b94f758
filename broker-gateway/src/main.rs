//! `flue-gateway`: parses the flags, logs to stderr, and runs the gateway until SIGINT or SIGTERM
//! (or runs one administration command: `init`, `tenant create`, `leaf-config`; or
//! `token`, minting an HTTP API token offline, [`flue_gateway::auth::command`]; or
//! `openapi`, printing the API's OpenAPI document, the one served at `/openapi.json`).

use anyhow::Context as _;
use clap::Parser;
use flue_gateway::natsauth::admin::{self, Admin};
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;

/// The gateway's flags, or an administration command.
#[derive(Parser)]
#[command(name = "flue-gateway", version, about = "Flue broker gateway")]
struct Cli {
    #[command(flatten)]
    config: flue_gateway::Config,
    #[command(subcommand)]
    admin: Option<Admin>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    if std::env::args().nth(1).as_deref() == Some("token") {
        let command =
            flue_gateway::auth::command::TokenCommand::parse_from(std::env::args().skip(1));
        let token = command.run().context("cannot mint the token")?;
        println!("{token}");
        return Ok(());
    }
    if std::env::args().nth(1).as_deref() == Some("openapi") {
        println!("{}", flue_gateway::api::openapi::json());
        return Ok(());
    }
    let Cli { config, admin } = Cli::parse();
    if let Some(admin) = admin {
        return admin::run(admin).context("flue-gateway failed");
    }
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .init();
    let shutdown = CancellationToken::new();
    let mut terminate = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    let on_signal = shutdown.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate.recv() => {}
        }
        tracing::info!("shutdown requested");
        on_signal.cancel();
    });
    flue_gateway::run(config, shutdown)
        .await
        .context("flue-gateway failed")
}
