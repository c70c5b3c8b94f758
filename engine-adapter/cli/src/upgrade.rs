//! `flue release keygen | sign` and `flue server upgrade`: agent builds signed by an
//! offline release key, uploaded in chunks and rolled out to servers as deployments of the
//! group `flue-agent-upgrade`, a batch at a time (`docs/agent.md`, "Upgrading agents").
//!
//! The rollout keeps no state of its own: each server's upgrade is a deployment whose id
//! names the build, the attempt and the server, so running the same command again (after
//! Ctrl-C, or a halt) adopts the deployments already made and goes on with the rest.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Subcommand};
use flue_client::Client;
use flue_proto::poll::Transport;
use flue_proto::upgrade::{AgentBuild, CHUNK_SIZE, UPGRADE_GROUP, sha256_hex};
use flue_proto::{
    Action, ConfigId, ConfigSpec, CreateDeployment, Deployment, DeploymentId, DeploymentStatus,
    ServerId,
};

use crate::{CliError, Outcome};

/// `flue release …`
#[derive(Debug, Subcommand)]
pub enum ReleaseCommand {
    /// Make a release key pair, once, offline: writes the seed (a secret, mode 0600) and
    /// prints the public key to give agents (`flue-agent run --release-key`).
    Keygen {
        /// Where to write the seed.
        #[arg(long, value_name = "FILE")]
        seed_file: PathBuf,
        /// Overwrite the file if it exists.
        #[arg(long)]
        force: bool,
    },
    /// Sign an agent build: prints its manifest (version, size, SHA-256, signature) as
    /// JSON, for `flue server upgrade --manifest`.
    Sign {
        /// The release key's seed file (`flue release keygen`).
        #[arg(long, value_name = "FILE")]
        seed_file: PathBuf,
        /// The version the build reports (`flue-agent version` prints it).
        #[arg(long, value_name = "VERSION")]
        agent_version: String,
        /// The agent binary.
        build: PathBuf,
    },
}

/// `flue server upgrade`
#[derive(Debug, Args)]
pub struct UpgradeArgs {
    /// The servers to upgrade, in this order (or --all).
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub servers: Vec<ServerId>,
    /// Every registered agent server, oldest first.
    #[arg(long)]
    pub all: bool,
    /// The agent binary.
    #[arg(long, value_name = "FILE")]
    pub build: PathBuf,
    /// Its signed manifest (`flue release sign`).
    #[arg(long, value_name = "FILE")]
    pub manifest: PathBuf,
    /// Servers upgraded at once; the next batch starts when one has ended.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub batch_size: u64,
    /// Stop starting upgrades once this many have failed.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_failures: u64,
    /// Seconds one server's upgrade may take (download, check, restart, answer).
    #[arg(long, default_value_t = 300)]
    pub timeout_secs: u64,
    /// A new attempt after a halt: servers whose upgrade failed are tried again (the
    /// ones that succeeded are skipped, being at the version already).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=999))]
    pub attempt: u64,
}

/// Runs `flue release …`.
pub fn release(command: ReleaseCommand, out: &mut impl Write) -> Result<Outcome, CliError> {
    match command {
        ReleaseCommand::Keygen { seed_file, force } => {
            crate::creds::check_writable(&seed_file, force)?;
            let (public, seed) = flue_proto::upgrade::new_release_key();
            crate::creds::write(&seed_file, &format!("{seed}\n"), force)?;
            writeln!(out, "{public}")?;
        }
        ReleaseCommand::Sign {
            seed_file,
            agent_version: version,
            build,
        } => {
            let seed = read_text(&seed_file)?;
            let bytes = read(&build)?;
            let signed = AgentBuild::sign(&version, &bytes, seed.trim())
                .map_err(|e| CliError::Usage(format!("cannot sign {}: {e}", build.display())))?;
            out.write_all(crate::render::pretty_json(&signed).as_bytes())?;
        }
    }
    Ok(Outcome::Success)
}

/// Runs `flue server upgrade`: uploads the build, then upgrades the servers batch by
/// batch, printing one line per server as it ends; halts at `--max-failures`.
pub async fn run(
    client: &Client,
    args: UpgradeArgs,
    out: &mut impl Write,
) -> Result<Outcome, CliError> {
    let text = read_text(&args.manifest)?;
    let build: AgentBuild = serde_json::from_str(&text).map_err(|e| {
        CliError::Usage(format!(
            "{}: not a signed build manifest (flue release sign): {e}",
            args.manifest.display()
        ))
    })?;
    let bytes = read(&args.build)?;
    if bytes.len() as u64 != build.size || sha256_hex(&bytes) != build.sha256 {
        return Err(CliError::Usage(format!(
            "{} is not the build {} signs (size or sha256 differ)",
            args.build.display(),
            args.manifest.display()
        )));
    }
    let servers = match args.all {
        true => client
            .list_servers()
            .await?
            .into_iter()
            .filter(|s| s.transport == Transport::Nats)
            .map(|s| s.id)
            .collect(),
        false => args.servers.clone(),
    };
    for (n, chunk) in bytes.chunks(CHUNK_SIZE as usize).enumerate() {
        client
            .put_build_chunk(&build.sha256, n as u64, chunk.to_vec())
            .await?;
    }
    let config_id = config_id(&build);
    let spec = ConfigSpec {
        id: Some(config_id.clone()),
        name: format!("flue-agent {}", build.version),
        group: UPGRADE_GROUP.to_owned(),
        config: serde_json::to_value(&build).unwrap_or_default(),
        ..ConfigSpec::default()
    };
    client.create_config(&spec).await?;
    writeln!(
        out,
        "build {} uploaded ({} bytes); upgrading {} server(s), {} at a time",
        build.version,
        build.size,
        servers.len(),
        args.batch_size
    )?;
    let mut failed: BTreeMap<ServerId, String> = BTreeMap::new();
    let mut upgraded = 0usize;
    let mut rest = servers.iter();
    'batches: loop {
        let batch: Vec<&ServerId> = rest.by_ref().take(args.batch_size as usize).collect();
        if batch.is_empty() {
            break;
        }
        let mut started = Vec::new();
        for server in batch {
            let body = CreateDeployment {
                id: Some(deployment_id(&build, args.attempt, server)),
                config_id: config_id.clone(),
                server_id: server.clone(),
                action: Action::create(),
                input_values: BTreeMap::new(),
                name: Some(format!("upgrade to {}", build.version)),
                timeout_secs: Some(args.timeout_secs),
                stack_id: None,
                resource_name: None,
                inputs_from: None,
                skip_if_unchanged_from: None,
                input_refs: BTreeMap::new(),
            };
            match client.create_deployment(&body).await {
                Ok(d) => started.push((server.clone(), d.id)),
                Err(e) => {
                    let reason = crate::render::error_message(&e);
                    writeln!(out, "{server}: FAILED: {reason}")?;
                    failed.insert(server.clone(), reason);
                }
            }
        }
        for (server, id) in started {
            let limit = Duration::from_secs(args.timeout_secs + 60);
            let done = client.wait_until_terminal(&id, limit, |_| {}).await?;
            match ended(&done) {
                Ok(note) => {
                    upgraded += 1;
                    writeln!(out, "{server}: upgraded: {note}")?;
                }
                Err(reason) => {
                    writeln!(out, "{server}: FAILED: {reason}")?;
                    failed.insert(server, reason);
                }
            }
        }
        if failed.len() as u64 >= args.max_failures {
            break 'batches;
        }
    }
    let untouched: Vec<String> = rest.map(ToString::to_string).collect();
    if failed.is_empty() {
        writeln!(out, "{upgraded} server(s) at {}", build.version)?;
        return Ok(Outcome::Success);
    }
    writeln!(
        out,
        "{} failed, {upgraded} upgraded{}",
        failed.len(),
        if untouched.is_empty() {
            String::new()
        } else {
            format!(
                "; halted at --max-failures {}, not started: {}",
                args.max_failures,
                untouched.join(" ")
            )
        }
    )?;
    for (server, reason) in &failed {
        writeln!(out, "  {server}: {reason}")?;
    }
    Ok(Outcome::DeploymentFailed)
}

/// What an upgrade deployment's end says: the note of a COMPLETE one, the reason of a
/// FAILED one.
fn ended(d: &Deployment) -> Result<String, String> {
    let reason = d.status_reason.clone().unwrap_or_default();
    match d.status {
        DeploymentStatus::Complete => Ok(reason),
        _ if reason.is_empty() => Err("failed".to_owned()),
        _ => Err(reason),
    }
}

/// The config of a build: named by its SHA-256 (the same build, the same config).
fn config_id(build: &AgentBuild) -> ConfigId {
    ConfigId::new(format!("agent-build-{}", &build.sha256[..32])).expect("hex is a valid id")
}

/// The upgrade deployment of `server` to `build`, attempt `attempt`: the same every
/// time the command runs, so a second run adopts the first one's.
fn deployment_id(build: &AgentBuild, attempt: u64, server: &ServerId) -> DeploymentId {
    let id = format!("upgrade-{}-{attempt}-{server}", &build.sha256[..12]);
    DeploymentId::new(&id).unwrap_or_else(|_| {
        let server = &sha256_hex(server.as_str().as_bytes())[..24];
        DeploymentId::new(format!(
            "upgrade-{}-{attempt}-{server}",
            &build.sha256[..12]
        ))
        .expect("hex is a valid id")
    })
}

fn read(path: &Path) -> Result<Vec<u8>, CliError> {
    std::fs::read(path).map_err(|source| CliError::Read {
        path: path.to_owned(),
        source,
    })
}

fn read_text(path: &Path) -> Result<String, CliError> {
    std::fs::read_to_string(path).map_err(|source| CliError::Read {
        path: path.to_owned(),
        source,
    })
}
