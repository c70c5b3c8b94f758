//! The `flue` command line, declared with clap's derive API.

use std::path::PathBuf;

use clap::{ArgGroup, Args, Parser, Subcommand};
use flue_proto::poll::Transport;
use flue_proto::{ConfigId, DeploymentId, EventType, ServerId, StackId, TenantId};
use time::OffsetDateTime;

/// Default gateway address, the gateway's own default `--listen`.
pub const DEFAULT_GATEWAY: &str = "http://127.0.0.1:8470";

/// The help heading of the flags every command takes to reach the gateway: optional in
/// every usage line (each has an environment variable, `--gateway` a default).
pub const GATEWAY_OPTIONS: &str = "Gateway options (every command; also from the environment)";

/// Create configs, register servers and run deployments through a Flue gateway.
#[derive(Debug, Parser)]
#[command(
    name = "flue",
    version,
    propagate_version = true,
    after_help = crate::exit::help()
)]
pub struct Cli {
    /// Base URL of the flue-gateway HTTP API. Several, comma-separated, are gateways of
    /// one cluster: requests go to the first, and `flue stack …` moves on to the next
    /// when one stops answering while it submits or follows an operation.
    #[arg(
        long,
        global = true,
        env = "FLUE_GATEWAY_URL",
        default_value = DEFAULT_GATEWAY,
        value_name = "URL",
        help_heading = GATEWAY_OPTIONS
    )]
    pub gateway: String,
    /// Bearer token for the gateway's API (`flue-gateway token`, `POST /v1/tokens`).
    /// Prefer the environment variable: a flag shows in the process list.
    #[arg(
        long,
        global = true,
        env = "FLUE_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN",
        help_heading = GATEWAY_OPTIONS
    )]
    pub token: Option<String>,
    /// CA certificate (PEM) an `https://` gateway's certificate must chain to; without
    /// it, the system's root certificates are trusted.
    #[arg(
        long,
        global = true,
        env = "FLUE_CA",
        value_name = "FILE",
        help_heading = GATEWAY_OPTIONS
    )]
    pub ca: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Top-level commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create and read software configs.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Register servers and look at them.
    #[command(subcommand)]
    Server(ServerCommand),
    /// Queue a deployment of a config on a server, and optionally wait for its result.
    Deploy(DeployArgs),
    /// Read deployments.
    #[command(subcommand)]
    Deployment(DeploymentCommand),
    /// Run HOT-style templates as stacks: create, update, delete, suspend, resume, action,
    /// check, converge, abandon, adopt, show, operations, list, validate.
    #[command(subcommand)]
    Stack(StackCommand),
    /// Print lifecycle events as JSON lines (CloudEvents): replay what the gateway keeps,
    /// or follow new ones.
    Events(EventsArgs),
    /// A live view of a stack's or a server's deployments: state and latest output.
    Watch(WatchArgs),
    /// Create and list the tenants a gateway serves (an operator's commands).
    #[command(subcommand)]
    Tenant(TenantCommand),
    /// Release keys and signed agent builds (offline; `flue server upgrade` installs them).
    #[command(subcommand)]
    Release(crate::upgrade::ReleaseCommand),
}

/// `flue tenant …`
#[derive(Debug, Subcommand)]
pub enum TenantCommand {
    /// Create a tenant (idempotent): its broker accounts, then its runtime in the
    /// gateway; prints the tenant.
    Create {
        /// Tenant id (letters, digits, '_' and '-'; also its broker account's name).
        id: TenantId,
        /// Human name.
        #[arg(long)]
        name: Option<String>,
    },
    /// List the tenants the gateway serves.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// `flue events`
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("start").args(["after", "since", "all"])))]
#[command(args_conflicts_with_subcommands = true)]
pub struct EventsArgs {
    /// `flue events credentials`, instead of printing events.
    #[command(subcommand)]
    pub command: Option<EventsCommand>,
    /// Only events of this type (repeatable, or comma-separated), e.g.
    /// `deployment.completed` or `io.flue.deployment.completed`.
    #[arg(long = "type", value_name = "TYPE", value_delimiter = ',')]
    pub types: Vec<EventType>,
    /// Only events about this server.
    #[arg(long)]
    pub server: Option<ServerId>,
    /// Only events about this stack.
    #[arg(long)]
    pub stack: Option<StackId>,
    /// Only events about this deployment.
    #[arg(long)]
    pub deployment: Option<DeploymentId>,
    /// Start after this stream sequence (see --with-seq).
    #[arg(long, value_name = "SEQ")]
    pub after: Option<u64>,
    /// Start at this time: RFC 3339 (`2025-01-31T12:00:00Z`) or a duration ago (`90s`,
    /// `15m`, `2h`, `1d`).
    #[arg(long, value_name = "TIME", value_parser = parse_since)]
    pub since: Option<OffsetDateTime>,
    /// Start with the oldest event kept (the default without --follow).
    #[arg(long)]
    pub all: bool,
    /// Keep printing new events (from now, unless a start is given); a dropped
    /// connection is resumed after the last event printed, so none is missed or repeated.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Add each event's stream sequence as a top-level `"seq"` field (resume with --after).
    #[arg(long)]
    pub with_seq: bool,
}

/// `flue events …`
#[derive(Debug, Subcommand)]
pub enum EventsCommand {
    /// Mint NATS credentials for an event listener of your tenant (admin): read its
    /// events and replay them with its own consumers (at most 8, whose names are
    /// printed), nothing else. Written with mode 0600; use them with `nats --creds FILE`
    /// or nats-py (`--creds FILE --domain flue --consumer NAME`).
    Credentials {
        /// Where to write the `.creds` file.
        #[arg(long)]
        out: PathBuf,
        /// Overwrite the file if it exists.
        #[arg(long)]
        force: bool,
    },
    /// List the NATS listeners' consumers on your tenant's event stream (admin).
    Consumers {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Delete a NATS listener's consumer from your tenant's event stream (admin).
    DeleteConsumer {
        /// The consumer's name, as `flue events consumers` lists it.
        name: String,
    },
}

/// `flue watch`
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("target").args(["stack", "server"]).required(true)))]
pub struct WatchArgs {
    /// Watch this stack's units.
    #[arg(long)]
    pub stack: Option<StackId>,
    /// Watch this server's deployments.
    #[arg(long)]
    pub server: Option<ServerId>,
    /// Exit when the stack's operation ends (exit code 1 if it FAILED); with --server,
    /// when none of its deployments is queued or in progress (1 if one watched FAILED).
    #[arg(long)]
    pub until_complete: bool,
}

/// `--since`: an RFC 3339 time, or `<N>s|m|h|d` before now.
fn parse_since(text: &str) -> Result<OffsetDateTime, String> {
    if let Ok(at) = OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339) {
        return Ok(at);
    }
    let (number, suffix) = text
        .split_at_checked(text.len().saturating_sub(1))
        .unwrap_or((text, ""));
    let seconds: Option<i64> = match suffix {
        "s" => Some(1),
        "m" => Some(60),
        "h" => Some(3600),
        "d" => Some(86_400),
        _ => None,
    };
    match (number.parse::<i64>(), seconds) {
        (Ok(n), Some(unit)) if n >= 0 => n
            .checked_mul(unit)
            .and_then(|s| OffsetDateTime::now_utc().checked_sub(time::Duration::seconds(s)))
            .ok_or_else(|| format!("{text:?} is too far back")),
        _ => Err(format!(
            "{text:?} is neither an RFC 3339 time (2025-01-31T12:00:00Z) nor a duration ago (90s, 15m, 2h, 1d)"
        )),
    }
}

/// `flue stack …`
#[derive(Debug, Subcommand)]
pub enum StackCommand {
    /// Create a stack from a template: submitted to the gateway's engine workers and
    /// followed (killing `flue` stops nothing; run it again to follow it, or to resume an
    /// interrupted creation or retry a failed one).
    Create(StackApplyArgs),
    /// Apply a changed template or parameters: only what changed runs.
    Update(StackApplyArgs),
    /// Run delete hooks in reverse dependency order, then forget the stack.
    Delete(StackOpArgs),
    /// Run suspend hooks, dependents first.
    Suspend(StackOpArgs),
    /// Run resume hooks, dependencies first.
    Resume(StackOpArgs),
    /// Run an ad-hoc action declared by a resource's config (e.g. a backup).
    Action {
        /// Stack name.
        name: StackId,
        /// Deployment resource (every member, for a group).
        resource: String,
        /// Action name, as declared in the config's `actions`.
        action: String,
        /// Take over from another operation still marked in progress.
        #[arg(long)]
        force: bool,
        /// Run the action in this process (offline or development use) instead of
        /// submitting it to the gateway's engine workers and following it.
        #[arg(long)]
        local: bool,
        /// What every command does now (kept so older scripts keep working).
        #[arg(long, hide = true, conflicts_with = "local")]
        submit: bool,
    },
    /// Ask each unit's server whether what it last applied is still in place: runs the
    /// `CHECK` hook of each unit whose config declares one (exit 0: in place; non-zero:
    /// drifted, with its output) and reports per unit, changing nothing; a unit whose
    /// inputs read outputs that changed since it ran is `inputs_changed`. Exit 0 when
    /// nothing drifted, 1 otherwise.
    Check {
        /// Stack name.
        name: StackId,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// How long to wait for every check, in seconds.
        #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=86_400))]
        timeout_secs: u64,
    },
    /// Check the stack (as `flue stack check`), then re-apply the drifted and missing
    /// units, each with the config and inputs it last applied, dependencies first, then
    /// every unit whose inputs read outputs that changed, re-run with the new values:
    /// submitted to the gateway's engine workers and followed. Exit 0 when nothing needed
    /// it or the converge completed.
    Converge {
        /// Stack name.
        name: StackId,
        /// How long to wait for every check, in seconds.
        #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=86_400))]
        timeout_secs: u64,
        /// Take over from another operation still marked in progress.
        #[arg(long)]
        force: bool,
        /// Only report the units whose inputs read outputs the converge changed, instead
        /// of re-running them (`flue stack check` then finds them `inputs_changed`).
        #[arg(long)]
        no_follow: bool,
    },
    /// Take a stack out of Flue without running any hook: write its whole record
    /// (units, their deployments and configs, outputs, data space; hidden values stay
    /// sealed) to a file (mode 0600, synced), then forget the stack. Its servers keep
    /// running what they run. Refused while an operation runs on it.
    Abandon {
        /// Stack name.
        name: StackId,
        /// Where to write the record (default: NAME.stack.json in the current directory).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Overwrite the file if it exists.
        #[arg(long)]
        force: bool,
    },
    /// Recreate a stack from the record `flue stack abandon` wrote, without running
    /// anything; update, delete and the other operations then work as before.
    Adopt {
        /// Stack name (the one the record was abandoned under).
        name: StackId,
        /// The record.
        #[arg(long = "from", value_name = "FILE")]
        from: PathBuf,
    },
    /// Show a stack: status, units, outputs, recent actions.
    Show {
        /// Stack name.
        name: StackId,
        /// Print the stored record as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List a stack's operations (submitted to the engine workers), newest first.
    Operations {
        /// Stack name.
        name: StackId,
        /// How many to show at most (the newest).
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        limit: u32,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// List stacks.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Check a template (with its environments and parameters) without contacting the
    /// gateway: exit 0 when valid, 1 when not (each error names the resource or field),
    /// 2 when a file cannot be read.
    Validate(StackValidateArgs),
}

/// `flue stack create|update`
#[derive(Debug, Args)]
pub struct StackApplyArgs {
    /// Stack name (letters, digits, '_' and '-').
    pub name: StackId,
    /// The HOT template (YAML or JSON); `get_file` paths are relative to it.
    #[arg(short = 't', long, value_name = "FILE")]
    pub template: PathBuf,
    /// A parameter value (repeatable). On update, parameters given before keep their
    /// value unless given again; hidden ones are never stored and must be given again.
    #[arg(short = 'P', long = "parameter", value_name = "NAME=VALUE")]
    pub parameters: Vec<String>,
    /// A parameter whose value is a file's contents (repeatable): the way to pass a
    /// hidden parameter without it showing in the process list or shell history.
    #[arg(long = "parameter-file", value_name = "NAME=PATH")]
    pub parameter_files: Vec<String>,
    /// Map an `OS::Nova::Server` resource onto a registered server (repeatable); kept
    /// by the stack for later operations. Unmapped, a server resource stands for the
    /// registered server named by its `name` property, else by its resource name.
    #[arg(long = "server", value_name = "RESOURCE=SERVER_ID")]
    pub servers: Vec<String>,
    /// A value Flue cannot know for a mapped server or an external resource
    /// (repeatable; kept by the stack): `RESOURCE.ATTR=VALUE` answers `get_attr`,
    /// `RESOURCE=VALUE` is what `get_resource` of an external resource gives. A VALUE
    /// starting with `{` or `[` is read as JSON.
    #[arg(long = "attr", value_name = "RESOURCE[.ATTR]=VALUE")]
    pub attrs: Vec<String>,
    /// An environment file (repeatable, merged in order, the later winning):
    /// `parameters`, `parameter_defaults`, `resource_registry`.
    #[arg(short = 'e', long = "environment", value_name = "FILE")]
    pub environments: Vec<PathBuf>,
    /// What the stack does when one of its servers is rebuilt under the same id (a new
    /// agent with an empty ledger): `manual` (reported as `server.rebuilt`) or `auto` (its
    /// units there are re-applied at once, by a converge). Kept by the stack; an update
    /// without it keeps the one it had.
    #[arg(long, value_name = "POLICY")]
    pub converge: Option<flue_proto::ConvergePolicy>,
    /// Take over from another operation still marked in progress (its driver is gone).
    #[arg(long)]
    pub force: bool,
    /// Drive the operation in this process (offline or development use: it stops if
    /// this process does) instead of submitting it to the gateway's engine workers and
    /// following it.
    #[arg(long)]
    pub local: bool,
    /// What every command does now (kept so older scripts keep working).
    #[arg(long, hide = true, conflicts_with = "local")]
    pub submit: bool,
}

/// `flue stack validate`
#[derive(Debug, Args)]
pub struct StackValidateArgs {
    /// The HOT template (YAML or JSON).
    #[arg(short = 't', long, value_name = "FILE")]
    pub template: PathBuf,
    /// A parameter value (repeatable).
    #[arg(short = 'P', long = "parameter", value_name = "NAME=VALUE")]
    pub parameters: Vec<String>,
    /// A parameter whose value is a file's contents (repeatable).
    #[arg(long = "parameter-file", value_name = "NAME=PATH")]
    pub parameter_files: Vec<String>,
    /// An environment file (repeatable, merged in order).
    #[arg(short = 'e', long = "environment", value_name = "FILE")]
    pub environments: Vec<PathBuf>,
    /// Map an `OS::Nova::Server` resource onto a server id (repeatable), as with
    /// `flue stack create` (the server's registration is not checked here).
    #[arg(long = "server", value_name = "RESOURCE=SERVER_ID")]
    pub servers: Vec<String>,
    /// A value for a mapped server or an external resource (repeatable), as with `flue
    /// stack create`: `RESOURCE.ATTR=VALUE` or `RESOURCE=VALUE`.
    #[arg(long = "attr", value_name = "RESOURCE[.ATTR]=VALUE")]
    pub attrs: Vec<String>,
    /// The stack name `OS::stack_name` and `OS::stack_id` stand for.
    #[arg(long, value_name = "NAME", default_value = "validate")]
    pub stack_name: StackId,
    /// The tenant `OS::project_id` stands for.
    #[arg(long, value_name = "TENANT", default_value = "validate")]
    pub project_id: TenantId,
}

/// `flue stack delete|suspend|resume`
#[derive(Debug, Args)]
pub struct StackOpArgs {
    /// Stack name.
    pub name: StackId,
    /// Take over from another operation still marked in progress (its driver is gone).
    #[arg(long)]
    pub force: bool,
    /// Drive the operation in this process (offline or development use: it stops if
    /// this process does) instead of submitting it to the gateway's engine workers and
    /// following it.
    #[arg(long)]
    pub local: bool,
    /// What every command does now (kept so older scripts keep working).
    #[arg(long, hide = true, conflicts_with = "local")]
    pub submit: bool,
}

/// `flue config …`
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Create a config from flags or from a JSON spec file; prints the stored config.
    Create(Box<CreateConfigArgs>),
    /// Print a config as JSON.
    Show {
        /// Config id.
        id: ConfigId,
    },
}

/// `flue config create`: either `--spec FILE` or `--group` with a config body.
#[derive(Debug, Default, Args)]
pub struct CreateConfigArgs {
    /// A whole ConfigSpec as a JSON file (instead of the flags below).
    #[arg(long, value_name = "FILE.json")]
    pub spec: Option<PathBuf>,
    /// Hook group that applies the config (`script`, or a hook's name).
    #[arg(long)]
    pub group: Option<String>,
    /// Read the config body (e.g. the script) from this file.
    #[arg(long, value_name = "PATH")]
    pub config_file: Option<PathBuf>,
    /// The config body as text.
    #[arg(long, value_name = "TEXT")]
    pub config: Option<String>,
    /// Config id; the gateway picks one when absent.
    #[arg(long)]
    pub id: Option<ConfigId>,
    /// Human name.
    #[arg(long)]
    pub name: Option<String>,
    /// Declare an input (repeatable).
    #[arg(long = "input", value_name = "NAME")]
    pub inputs: Vec<String>,
    /// Declare an input whose value is never shown (repeatable).
    #[arg(long = "hidden-input", value_name = "NAME")]
    pub hidden_inputs: Vec<String>,
    /// Declare an output (repeatable).
    #[arg(long = "output", value_name = "NAME")]
    pub outputs: Vec<String>,
    /// Declare an output that fails the deployment when non-empty (repeatable).
    #[arg(long = "error-output", value_name = "NAME")]
    pub error_outputs: Vec<String>,
    /// Hook options, a JSON object.
    #[arg(long, value_name = "JSON")]
    pub options: Option<String>,
}

/// `flue server …`
#[derive(Debug, Subcommand)]
pub enum ServerCommand {
    /// Register a server (idempotent); prints its registration.
    Register {
        /// Server id.
        id: ServerId,
        /// Human name.
        #[arg(long)]
        name: Option<String>,
        /// Print the agent's environment (FLUE_NATS_URL=… lines) instead of JSON.
        #[arg(long, conflicts_with = "cloud_init")]
        env: bool,
        /// Write the agent's credentials file here (mode 0600); the gateway hands it out
        /// only on the first registration.
        #[arg(long, conflicts_with = "cloud_init")]
        creds: Option<PathBuf>,
        /// Overwrite the --creds file if it exists.
        #[arg(long, requires = "creds")]
        force: bool,
        /// How the server gets its deployments: `nats` (a flue-agent) or `poll` (stock
        /// os-collect-config reading a secret metadata URL; prints the
        /// os-collect-config.conf snippet, or writes it to --creds).
        #[arg(long, default_value = "nats", value_parser = parse_transport)]
        transport: Transport,
        /// `--cloud-init` and its flags.
        #[command(flatten)]
        cloud_init: crate::cloud_init::CloudInitArgs,
    },
    /// Mint new credentials for a registered server and write them (mode 0600); answers
    /// signed with the old ones are refused from then on. For a polling server: a new
    /// metadata URL (its os-collect-config.conf snippet is written); the old one stops
    /// working at once.
    RotateCredentials {
        /// Server id.
        id: ServerId,
        /// Where to write the new credentials file (or give --cloud-init).
        #[arg(
            long,
            required_unless_present = "cloud_init",
            conflicts_with = "cloud_init"
        )]
        creds: Option<PathBuf>,
        /// Overwrite the file if it exists (the old credentials file, usually).
        #[arg(long)]
        force: bool,
        /// `--cloud-init` and its flags: user data that installs the agent with the new
        /// credentials.
        #[command(flatten)]
        cloud_init: crate::cloud_init::CloudInitArgs,
    },
    /// List registered servers, oldest first (every one, read page by page).
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Show at most this many.
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
    },
    /// Print a server as JSON.
    Show {
        /// Server id.
        id: ServerId,
    },
    /// List a server's deployments, oldest first.
    Deployments {
        /// Server id.
        id: ServerId,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Upgrade the agents of servers to a signed build, a batch at a time, halting after
    /// --max-failures failures (which servers failed and why are printed). Interrupted,
    /// the upgrades under way go on; the same command run again resumes the rollout.
    Upgrade(crate::upgrade::UpgradeArgs),
    /// Remove a server: its queue and consumer go, its deployment records stay
    /// (refused while it has queued or running deployments).
    Deregister {
        /// Server id.
        id: ServerId,
    },
}

/// `flue deploy`
#[derive(Debug, Args)]
pub struct DeployArgs {
    /// Config to apply.
    #[arg(long)]
    pub config: ConfigId,
    /// Server to apply it on.
    #[arg(long)]
    pub server: ServerId,
    /// Action: CREATE, UPDATE, SUSPEND, RESUME, DELETE or an ad-hoc action name.
    #[arg(long, default_value = "CREATE")]
    pub action: String,
    /// An input value as a string (repeatable).
    #[arg(long = "input", value_name = "NAME=VALUE")]
    pub inputs: Vec<String>,
    /// An input value as JSON (repeatable), e.g. `port=5432` or `tags=["a","b"]`.
    #[arg(long = "input-json", value_name = "NAME=JSON")]
    pub input_json: Vec<String>,
    /// Deployment id; the gateway picks one when absent.
    #[arg(long)]
    pub id: Option<DeploymentId>,
    /// Name handed to the hook; the deployment id when absent.
    #[arg(long)]
    pub name: Option<String>,
    /// Seconds the gateway waits for the agent before failing it; the gateway's default when absent.
    #[arg(long, value_name = "N")]
    pub timeout_secs: Option<u64>,
    /// Wait until the deployment is COMPLETE or FAILED, printing each status change.
    #[arg(long)]
    pub wait: bool,
    /// With --wait, give up after this many seconds.
    #[arg(long, value_name = "N", default_value_t = 600)]
    pub wait_timeout_secs: u64,
    /// Print only the deployment as JSON (the final one with --wait).
    #[arg(long)]
    pub json: bool,
}

/// `flue deployment …`
#[derive(Debug, Subcommand)]
pub enum DeploymentCommand {
    /// List deployments in creation order, as summaries (every one, read page by page).
    List {
        /// Only this server's.
        #[arg(long)]
        server: Option<ServerId>,
        /// Show at most this many.
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Print a deployment as JSON, or one of its outputs.
    Show {
        /// Deployment id.
        id: DeploymentId,
        /// Print only this output's value (strings raw, anything else as JSON).
        #[arg(long, value_name = "NAME")]
        output: Option<String>,
    },
}

/// `--transport`: `nats` or `poll`.
fn parse_transport(text: &str) -> Result<Transport, String> {
    match text {
        "nats" => Ok(Transport::Nats),
        "poll" => Ok(Transport::Poll),
        other => Err(format!("unknown transport {other:?}: use `nats` or `poll`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn since_takes_times_and_durations_and_never_panics() {
        assert!(parse_since("2026-01-31T12:00:00Z").is_ok());
        assert!(parse_since("15m").is_ok());
        for bad in ["99999999999d", "9223372036854775807s", "-1h", "soon", ""] {
            assert!(parse_since(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn deploy_flags_parse() {
        let cli = Cli::try_parse_from([
            "flue",
            "deploy",
            "--config",
            "db",
            "--server",
            "db",
            "--input",
            "port=5432",
            "--input",
            "dir=/tmp/x",
            "--wait",
            "--gateway",
            "http://h:1",
        ])
        .expect("parses");
        assert_eq!(cli.gateway, "http://h:1");
        let Command::Deploy(args) = cli.command else {
            panic!("not deploy")
        };
        assert_eq!(args.inputs, ["port=5432", "dir=/tmp/x"]);
        assert!(args.wait);
        assert_eq!(args.wait_timeout_secs, 600);
        assert_eq!(args.action, "CREATE");
    }

    #[test]
    fn event_flags_parse() {
        let cli = Cli::try_parse_from([
            "flue",
            "events",
            "--type",
            "deployment.completed,io.flue.deployment.failed",
            "--type",
            "server.online",
            "--server",
            "web1",
            "--since",
            "15m",
            "-f",
        ])
        .expect("parses");
        let Command::Events(args) = cli.command else {
            panic!("not events")
        };
        assert_eq!(
            args.types,
            [
                EventType::DeploymentCompleted,
                EventType::DeploymentFailed,
                EventType::ServerOnline
            ]
        );
        let ago = OffsetDateTime::now_utc() - args.since.expect("since");
        assert!(ago >= time::Duration::minutes(15) && ago < time::Duration::minutes(16));
        assert!(args.follow);
        let err = Cli::try_parse_from(["flue", "events", "--all", "--after", "3"])
            .expect_err("two starts");
        assert!(err.to_string().contains("cannot be used with"), "{err}");
        let err =
            Cli::try_parse_from(["flue", "events", "--type", "deployment.done"]).expect_err("type");
        assert!(err.to_string().contains("unknown event type"), "{err}");
        let err =
            Cli::try_parse_from(["flue", "events", "--since", "yesterday"]).expect_err("time");
        assert!(err.to_string().contains("RFC 3339"), "{err}");
    }

    #[test]
    fn watch_needs_a_stack_or_a_server() {
        assert!(Cli::try_parse_from(["flue", "watch"]).is_err());
        assert!(Cli::try_parse_from(["flue", "watch", "--stack", "s", "--server", "w"]).is_err());
        let cli = Cli::try_parse_from(["flue", "watch", "--server", "w", "--until-complete"])
            .expect("parses");
        let Command::Watch(args) = cli.command else {
            panic!("not watch")
        };
        assert!(args.until_complete && args.server.is_some());
    }

    #[test]
    fn ids_are_validated_by_clap() {
        let err = Cli::try_parse_from(["flue", "server", "show", "a.b"]).expect_err("bad id");
        assert!(err.to_string().contains("'.'"), "{err}");
        let err = Cli::try_parse_from(["flue", "tenant", "create", "a>"]).expect_err("bad id");
        assert!(err.to_string().contains("'>'"), "{err}");
    }
}
