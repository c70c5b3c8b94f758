//! The `flue` command-line tool, as a library so it can be tested: argument types,
//! the commands, and how their results and errors are shown.

mod args;
mod check;
mod cloud_init;
mod creds;
mod describe;
mod events;
pub mod exit;
mod inputs;
mod mapping;
mod render;
mod stack;
mod submit;
mod transfer;
mod upgrade;
mod validate;
mod watch;

use std::io::{self, Write};
use std::path::PathBuf;
use std::time::Duration;

use flue_proto::poll::Transport;
use flue_proto::{
    Action, CreateDeployment, CreateTenant, DeploymentId, DeploymentStatus, RegisterServer,
};

pub use args::{
    Cli, Command, ConfigCommand, CreateConfigArgs, DEFAULT_GATEWAY, DeployArgs, DeploymentCommand,
    EventsArgs, GATEWAY_OPTIONS, ServerCommand, StackApplyArgs, StackCommand, StackOpArgs,
    StackValidateArgs, TenantCommand, WatchArgs,
};
pub use render::error_message;

use flue_client::{Client, ClientError};

/// How a command that ran to its end turned out; it decides the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Everything worked (exit code 0).
    Success,
    /// A deployment waited for ended FAILED (exit code 1).
    DeploymentFailed,
    /// A stack operation ended FAILED (exit code 1).
    Failed,
}

impl Outcome {
    /// The process exit code for this outcome.
    pub fn exit_code(self) -> u8 {
        match self {
            Self::Success => exit::SUCCESS,
            Self::DeploymentFailed | Self::Failed => exit::FAILED,
        }
    }
}

/// Why a command could not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The flags do not make sense together, or a value is malformed.
    #[error("{0}")]
    Usage(String),
    /// The gateway refused the request or could not be reached.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// A file named on the command line could not be read.
    #[error("cannot read {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A file could not be written.
    #[error("cannot write {}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A `--spec` file is not a valid ConfigSpec.
    #[error("{}: not a valid config spec", path.display())]
    Spec {
        /// The file.
        path: PathBuf,
        /// What serde found wrong.
        #[source]
        source: serde_json::Error,
    },
    /// `deployment show --output NAME` named an output the deployment does not have.
    #[error(
        "deployment {id} has no output {name:?} (available: {})",
        list_or_none(available)
    )]
    UnknownOutput {
        /// The deployment.
        id: DeploymentId,
        /// The requested output.
        name: String,
        /// The outputs it has.
        available: Vec<String>,
    },
    /// A template could not be loaded or is invalid.
    #[error("{}: {error}", path.display())]
    Template {
        /// The template file.
        path: PathBuf,
        /// What is wrong, naming the resource and field.
        error: flue_stack::template::TemplateError,
    },
    /// `flue stack validate` found the template, an environment or a parameter wrong.
    #[error("{}: {error}", path.display())]
    Invalid {
        /// The file the error is about.
        path: PathBuf,
        /// What is wrong, naming the resource and field.
        error: flue_stack::template::TemplateError,
    },
    /// A stack operation could not run.
    #[error(transparent)]
    Engine(#[from] flue_stack::driver::EngineError),
    /// `deployment show --output NAME` named a hidden output: no read shows its value.
    #[error(
        "output {name:?} of deployment {id} is hidden: no API read shows it (another deployment can take it as an input through input_refs)"
    )]
    HiddenOutput {
        /// The deployment.
        id: DeploymentId,
        /// The output.
        name: String,
    },
    /// The event stream broke and could not be resumed.
    #[error(transparent)]
    Events(#[from] flue_client::events::EventStreamError),
    /// Standard output could not be written (a closed pipe, say).
    #[error("cannot write to standard output")]
    Output(#[from] io::Error),
}

impl CliError {
    /// The process exit code: 1 for a missing output (like a failed lookup) and for a
    /// template `flue stack validate` finds wrong, 2 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::UnknownOutput { .. } | Self::HiddenOutput { .. } | Self::Invalid { .. } => {
                exit::FAILED
            }
            _ => exit::ERROR,
        }
    }

    /// An environment file that cannot be read (a usage error) or is wrong.
    fn from_environment(error: flue_stack::template::TemplateError) -> Self {
        match error.message.strip_prefix("cannot read: ") {
            Some(_) => Self::Usage(error.to_string()),
            None => Self::Usage(format!("environment {error}")),
        }
    }
}

fn list_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

/// The `flue` command line as clap describes it (its subcommands, usage and help).
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

/// Runs one parsed command line against the gateway, writing results to `out`.
pub async fn run(cli: Cli, out: &mut impl Write) -> Result<Outcome, CliError> {
    // Several URLs are gateways of one cluster: requests go to the first, and
    // `flue stack …` follows its operation through the others when one stops answering.
    let mut gateways = Vec::new();
    for url in cli.gateway.split(',').map(str::trim) {
        let mut client = Client::with_ca(url, cli.ca.as_deref())?;
        if let Some(token) = &cli.token {
            client = client.with_token(token);
        }
        gateways.push(client);
    }
    let others = gateways.split_off(1);
    let client = gateways
        .pop()
        .expect("split always gives one piece")
        .with_other_gateways(others);
    match cli.command {
        Command::Config(ConfigCommand::Create(args)) => {
            let spec = inputs::config_spec(&args, |p| std::fs::read_to_string(p))?;
            let config = client.create_config(&spec).await?;
            out.write_all(render::pretty_json(&config).as_bytes())?;
        }
        Command::Config(ConfigCommand::Show { id }) => {
            let config = client.get_config(&id).await?;
            out.write_all(render::pretty_json(&config).as_bytes())?;
        }
        Command::Server(ServerCommand::Upgrade(args)) => {
            return upgrade::run(&client, args, out).await;
        }
        Command::Release(command) => return upgrade::release(command, out),
        Command::Server(command) => server(&client, command, out).await?,
        Command::Tenant(command) => tenant(&client, command, out).await?,
        Command::Deploy(args) => return deploy(&client, args, out).await,
        Command::Stack(command) => return stack::run(&client, command, out).await,
        Command::Events(args) => return events::run(&client, args, out).await,
        Command::Watch(args) => {
            // Redraw in place only for a person at a terminal; a pipe gets change lines.
            let screen = if std::io::IsTerminal::is_terminal(&io::stdout()) {
                watch::Screen::Redraw
            } else {
                watch::Screen::Lines
            };
            return watch::run(&client, args, screen, out).await;
        }
        Command::Deployment(DeploymentCommand::List {
            server,
            limit,
            json,
        }) => {
            let deployments = client
                .list_deployments_up_to(server.as_ref(), limit.unwrap_or(usize::MAX))
                .await?;
            let text = if json {
                render::pretty_json(&deployments)
            } else {
                render::deployments_table(&deployments)
            };
            out.write_all(text.as_bytes())?;
        }
        Command::Deployment(DeploymentCommand::Show { id, output }) => {
            let deployment = client.get_deployment(&id).await?;
            let Some(name) = output else {
                out.write_all(render::pretty_json(&deployment).as_bytes())?;
                return Ok(Outcome::Success);
            };
            let Some(value) = deployment.outputs.get(&name) else {
                return Err(CliError::UnknownOutput {
                    id,
                    name,
                    available: deployment.outputs.into_keys().collect(),
                });
            };
            // A pipeline must not take the placeholder for the value.
            if value.as_str() == Some("<hidden>") {
                let config = client.get_config(&deployment.config_id).await?;
                if config.outputs.iter().any(|o| o.name == name && o.hidden) {
                    return Err(CliError::HiddenOutput { id, name });
                }
            }
            writeln!(out, "{}", render::output_value(value))?;
        }
    }
    Ok(Outcome::Success)
}

async fn server(
    client: &Client,
    command: ServerCommand,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let text = match command {
        ServerCommand::Register {
            id,
            name,
            env,
            creds,
            force,
            transport,
            cloud_init,
        } => {
            if let Some(path) = &creds {
                creds::check_writable(path, force)?;
            }
            if cloud_init.cloud_init {
                if transport == Transport::Poll {
                    return Err(CliError::Usage(
                        "--cloud-init installs a flue-agent; a polling server (--transport poll) has none".to_owned(),
                    ));
                }
                cloud_init::check(&cloud_init)?;
            }
            let body = RegisterServer {
                transport,
                id,
                name: name.unwrap_or_default(),
            };
            let mut registration = client.register_server(&body).await?;
            if transport == Transport::Poll {
                let text = polling_registered(&mut registration, creds.as_deref(), force)?;
                out.write_all(text.as_bytes())?;
                return Ok(());
            }
            if cloud_init.cloud_init {
                let text = cloud_init_registered(&cloud_init, &mut registration)?;
                out.write_all(text.as_bytes())?;
                return Ok(());
            }
            // The secret goes to the file only, never to the terminal.
            match (registration.credentials.take(), &creds) {
                (Some(text), Some(path)) => creds::write(path, &text, force)?,
                (Some(_), None) => eprintln!(
                    "credentials were minted but not saved (no --creds FILE); get new ones with `flue server rotate-credentials {} --creds FILE`",
                    registration.server.id
                ),
                (None, Some(path)) => eprintln!(
                    "server {} was registered before: no new credentials; {} not written (use `flue server rotate-credentials`)",
                    registration.server.id,
                    path.display()
                ),
                (None, None) => {}
            }
            match (env, &creds) {
                // The agent reads FLUE_CREDS: the environment printed is then complete.
                (true, Some(path)) => format!(
                    "{}FLUE_CREDS={}\n",
                    render::agent_env(&registration),
                    std::path::absolute(path)
                        .unwrap_or_else(|_| path.clone())
                        .display()
                ),
                (true, None) => render::agent_env(&registration),
                (false, _) => render::pretty_json(&registration),
            }
        }
        ServerCommand::RotateCredentials {
            id,
            creds,
            force,
            cloud_init,
        } => {
            let Some(creds) = creds else {
                cloud_init::check(&cloud_init)?;
                let mut registration = client.rotate_server_credentials(&id).await?;
                let text = cloud_init_registered(&cloud_init, &mut registration)?;
                out.write_all(text.as_bytes())?;
                return Ok(());
            };
            creds::check_writable(&creds, force)?;
            let mut registration = client.rotate_server_credentials(&id).await?;
            if let Some(poll) = registration.poll.take() {
                creds::write(&creds, &poll.os_collect_config, force)?;
                let text = format!(
                    "new metadata URL of server {id}: its os-collect-config.conf written to {}; install it on the server (the old URL is refused from now on)\n",
                    creds.display()
                );
                out.write_all(text.as_bytes())?;
                return Ok(());
            }
            let text = registration
                .credentials
                .take()
                .ok_or_else(|| CliError::Usage("the gateway returned no credentials".to_owned()))?;
            creds::write(&creds, &text, force)?;
            format!(
                "new credentials of server {id} written to {}; restart its agent with them (the old ones are refused from now on)\n",
                creds.display()
            )
        }
        ServerCommand::List { json, limit } => {
            let servers = client
                .list_servers_up_to(limit.unwrap_or(usize::MAX))
                .await?;
            if json {
                render::pretty_json(&servers)
            } else {
                render::servers_table(&servers)
            }
        }
        ServerCommand::Show { id } => render::pretty_json(&client.get_server(&id).await?),
        ServerCommand::Deployments { id, json } => {
            let deployments = client.list_server_deployments(&id).await?;
            if json {
                render::pretty_json(&deployments)
            } else {
                render::deployments_table(&deployments)
            }
        }
        // Handled by `run`.
        ServerCommand::Upgrade(_) => return Ok(()),
        ServerCommand::Deregister { id } => {
            client.delete_server(&id).await?;
            format!("server {id} deregistered\n")
        }
    };
    out.write_all(text.as_bytes())?;
    Ok(())
}

/// The user data of `--cloud-init` for the credentials `registration` just minted, with
/// the warning that it is a secret on stderr; an error saying how to get credentials when
/// the server was registered before (the gateway hands them out once).
fn cloud_init_registered(
    args: &cloud_init::CloudInitArgs,
    registration: &mut flue_proto::Registration,
) -> Result<String, CliError> {
    let id = registration.server.id.clone();
    if registration.poll.is_some() {
        return Err(CliError::Usage(format!(
            "server {id} polls its metadata (--transport poll): it runs no flue-agent for --cloud-init to install"
        )));
    }
    let Some(credentials) = registration.credentials.take() else {
        return Err(CliError::Usage(format!(
            "server {id} was registered before, so its credentials are not handed out again and no user data was printed; `flue server rotate-credentials {id} --cloud-init --agent-url URL …` mints new ones (the old ones stop working)"
        )));
    };
    let text = cloud_init::user_data(args, registration, &credentials)?;
    eprintln!(
        "the user data printed holds server {id}'s agent credentials: a secret. Keep it out of logs and shared files; whatever can read the server's user data (the metadata service, the cloud's API) can read them (docs/agent.md, \"Installing with cloud-init\")"
    );
    Ok(text)
}

/// What `flue server register --transport poll` shows: the os-collect-config.conf
/// snippet with the secret metadata URL, printed or written to `path` (mode 0600).
fn polling_registered(
    registration: &mut flue_proto::Registration,
    path: Option<&std::path::Path>,
    force: bool,
) -> Result<String, CliError> {
    let id = &registration.server.id;
    let Some(poll) = registration.poll.take() else {
        return Ok(format!(
            "server {id} was registered before: its metadata URL is not shown again (use `flue server rotate-credentials {id} --creds FILE` for a new one)\n"
        ));
    };
    match path {
        Some(path) => {
            creds::write(path, &poll.os_collect_config, force)?;
            Ok(format!(
                "polling server {id} registered; its os-collect-config.conf (a secret: the metadata URL) written to {}\n",
                path.display()
            ))
        }
        None => Ok(format!(
            "# /etc/os-collect-config.conf of server {id}; the metadata URL is a secret, shown only now\n{}",
            poll.os_collect_config
        )),
    }
}

async fn tenant(
    client: &Client,
    command: TenantCommand,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let text = match command {
        TenantCommand::Create { id, name } => {
            let body = CreateTenant {
                id,
                name: name.unwrap_or_default(),
            };
            render::pretty_json(&client.create_tenant(&body).await?)
        }
        TenantCommand::List { json } => {
            let tenants = client.list_tenants().await?;
            if json {
                render::pretty_json(&tenants)
            } else {
                render::tenants_table(&tenants)
            }
        }
    };
    out.write_all(text.as_bytes())?;
    Ok(())
}

async fn deploy(
    client: &Client,
    args: DeployArgs,
    out: &mut impl Write,
) -> Result<Outcome, CliError> {
    let action = Action::new(args.action.as_str())
        .map_err(|e| CliError::Usage(format!("--action {:?}: {e}", args.action)))?;
    let body = CreateDeployment {
        id: args.id,
        config_id: args.config,
        server_id: args.server,
        action,
        input_values: inputs::input_values(&args.inputs, &args.input_json)?,
        name: args.name,
        timeout_secs: args.timeout_secs,
        stack_id: None,
        resource_name: None,
        inputs_from: None,
        skip_if_unchanged_from: None,
        input_refs: Default::default(),
    };
    let queued = client.create_deployment(&body).await?;
    if !args.wait {
        let text = if args.json {
            render::pretty_json(&queued)
        } else {
            format!("{}\n", render::progress_line(&queued))
        };
        out.write_all(text.as_bytes())?;
        return Ok(Outcome::Success);
    }

    // Progress lines go out as statuses change; a write error is kept and reported
    // once the wait is over, since the callback cannot return it.
    let mut write_error = None;
    let timeout = Duration::from_secs(args.wait_timeout_secs);
    let done = client
        .wait_until_terminal(&queued.id, timeout, |d| {
            if args.json || write_error.is_some() {
                return;
            }
            let line = format!("{}\n", render::progress_line(d));
            if let Err(e) = out.write_all(line.as_bytes()).and_then(|()| out.flush()) {
                write_error = Some(e);
            }
        })
        .await?;
    if let Some(e) = write_error {
        return Err(e.into());
    }
    let text = if args.json {
        render::pretty_json(&done)
    } else {
        render::result_block(&done)
    };
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(match done.status {
        DeploymentStatus::Complete => Outcome::Success,
        _ => Outcome::DeploymentFailed,
    })
}

#[cfg(test)]
mod tests;
