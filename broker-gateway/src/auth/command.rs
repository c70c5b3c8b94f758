//! `flue-gateway token`: mints a token offline from the state directory's `token.key`
//! (the first admin token of a tenant, an operator token) and prints only the token.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use flue_proto::TenantId;
use flue_proto::auth::Role;
use time::OffsetDateTime;

use super::token::{self, MintError, NewToken};
use crate::config::DEFAULT_STATE_DIR;
use crate::state::{StateDir, StateError};

/// `flue-gateway token --role R [--tenant T] [--ttl 12h] [--name N]`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "flue-gateway token",
    bin_name = "flue-gateway token",
    about = "Mint an HTTP API token offline; prints only the token"
)]
pub struct TokenCommand {
    /// The state directory holding `token.key` (made, with the other keys, when missing).
    #[arg(long, env = "FLUE_STATE_DIR", default_value = DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
    /// operator, admin, engine, listener or viewer.
    #[arg(long)]
    pub role: Role,
    /// The tenant (every role but operator); default `default`.
    #[arg(long)]
    pub tenant: Option<TenantId>,
    /// Lifetime: a number with s, m, h or d (`90d`), at most 366 days.
    #[arg(long, default_value = "12h", value_parser = parse_ttl)]
    pub ttl: Duration,
    /// A name for the holder (the token's `sub`).
    #[arg(long, default_value = "cli")]
    pub name: String,
}

/// Why `flue-gateway token` failed.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// The state directory or its key could not be used.
    #[error(transparent)]
    State(#[from] StateError),
    /// The token could not be minted.
    #[error(transparent)]
    Mint(#[from] MintError),
}

impl TokenCommand {
    /// Mints the token this command describes.
    pub fn run(&self) -> Result<String, CommandError> {
        let keys = StateDir::open(&self.state_dir)?.gateway_keys()?;
        let tenant = match (self.role, &self.tenant) {
            (Role::Operator, t) => t.clone(),
            (_, Some(t)) => Some(t.clone()),
            (_, None) => Some(TenantId::new("default").expect("\"default\" is a valid tenant id")),
        };
        let new = NewToken {
            name: self.name.clone(),
            tenant,
            role: self.role,
            ttl: self.ttl,
        };
        Ok(token::mint(&keys.token_secret, &new, OffsetDateTime::now_utc())?.token)
    }
}

/// `30s`, `15m`, `12h`, `90d`.
pub fn parse_ttl(text: &str) -> Result<Duration, String> {
    let (digits, unit) = text.split_at(text.len().saturating_sub(1));
    let unit = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => {
            return Err(format!(
                "{text:?}: give a number and a unit: s, m, h or d (e.g. 12h)"
            ));
        }
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?}: give a number and a unit: s, m, h or d (e.g. 12h)"))?;
    Ok(Duration::from_secs(n.saturating_mul(unit)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_read_with_their_unit() {
        assert_eq!(parse_ttl("12h"), Ok(Duration::from_secs(43_200)));
        assert_eq!(parse_ttl("90d"), Ok(Duration::from_secs(90 * 86_400)));
        assert!(parse_ttl("12").is_err() && parse_ttl("h").is_err() && parse_ttl("").is_err());
    }
}
