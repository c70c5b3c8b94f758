//! The agent's NATS user JWT, which carries its broker rights: the credentials file's at
//! first, then the newer one a verified request brings when its server joins a stack
//! (its rights then include that stack's data-space keys).
//!
//! A new JWT is taken only when it is for this agent's own user key (`sub`), issued by
//! the account that issued the credentials file's (`iss`), and not older than the one
//! held (`iat`). It is saved as `<state-dir>/user.jwt` (0600) and used from the next
//! start on instead of the file's, as long as it matches the file's user and account
//! (new credentials from a rotation have another user key, so they win). Every
//! connection, reconnections included, authenticates with the JWT held at that moment
//! ([`Rights::connect_options`]); adopting one forces a reconnection, so the broker
//! applies the new rights before the hook runs.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::{Auth, AuthError, ConnectOptions};
use flue_proto::creds::{UserCreds, UserJwtClaims};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::config::Config;
use crate::error::Error;

/// The saved JWT's file name in the state directory.
pub const SAVED_JWT: &str = "user.jwt";

/// Longest wait for the reconnection with a new JWT before the hook runs anyway (it then
/// has the old rights, and its data-space calls to the new stack are refused).
pub const REAUTH_TIMEOUT: Duration = Duration::from_secs(10);

/// The JWT held and what it says.
#[derive(Debug, Clone)]
struct Held {
    jwt: String,
    issued_at: i64,
}

/// The agent's current user JWT, shared with the connection's auth callback.
#[derive(Debug)]
pub struct Rights {
    held: Arc<Mutex<Held>>,
    user_key: String,
    account: String,
    saved: PathBuf,
}

/// Why a JWT a request brought was not taken.
#[derive(Debug, thiserror::Error)]
pub enum RefusedJwt {
    /// Not a NATS user JWT, or its signature does not verify.
    #[error(transparent)]
    Invalid(#[from] flue_proto::creds::CredsError),
    /// For another user key.
    #[error("it is for user {0}, not this agent's")]
    OtherUser(String),
    /// Issued by another account.
    #[error("it was issued by account {0}, not this agent's")]
    OtherAccount(String),
    /// Older than the one held.
    #[error("it was issued before the one held")]
    Older,
    /// It could not be saved in the state directory.
    #[error("cannot save it as {path}: {source}")]
    Save {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
}

impl Rights {
    /// The rights of `user` (the credentials file's NATS user), or the saved JWT when it
    /// is newer and for the same user and account. `None` when the file holds no JWT
    /// (a broker that does not check users).
    pub fn load(config: &Config, user: &UserCreds) -> Result<Option<Self>, Error> {
        if user.jwt.is_empty() {
            return Ok(None);
        }
        let refuse = |reason: String| Error::Credentials {
            path: config.creds_file.clone().unwrap_or_default(),
            reason,
        };
        let claims = UserJwtClaims::verified(&user.jwt).map_err(|e| refuse(e.to_string()))?;
        let key = nkeys::KeyPair::from_seed(&user.seed)
            .map_err(|e| refuse(format!("the user nkey seed is not valid: {e}")))?;
        if claims.subject != key.public_key() {
            return Err(refuse("its JWT is not for its user nkey".to_owned()));
        }
        let mut rights = Self {
            held: Arc::new(Mutex::new(Held {
                jwt: user.jwt.clone(),
                issued_at: claims.issued_at,
            })),
            user_key: claims.subject,
            account: claims.issuer,
            saved: config.state_dir.join(SAVED_JWT),
        };
        if let Ok(text) = std::fs::read_to_string(&rights.saved) {
            match rights.check(text.trim()) {
                Ok(held) => {
                    info!(path = %rights.saved.display(), "using the user JWT saved after joining a stack");
                    rights.held = Arc::new(Mutex::new(held));
                }
                Err(e) => {
                    info!(path = %rights.saved.display(), reason = %e, "not using the saved user JWT")
                }
            }
        }
        Ok(Some(rights))
    }

    /// The JWT held now.
    pub fn jwt(&self) -> String {
        self.lock().jwt.clone()
    }

    /// Connect options authenticating every connection with the JWT held at that moment,
    /// signing the broker's nonce with `key` (the user's seed).
    pub fn connect_options(&self, key: nkeys::KeyPair) -> ConnectOptions {
        let held = self.held.clone();
        let key = Arc::new(key);
        ConnectOptions::with_auth_callback(move |nonce| {
            let jwt = held.lock().unwrap_or_else(|p| p.into_inner()).jwt.clone();
            let key = key.clone();
            async move {
                let mut auth = Auth::new();
                auth.jwt = Some(jwt);
                auth.signature = Some(key.sign(&nonce).map_err(AuthError::new)?);
                Ok(auth)
            }
        })
    }

    /// Takes `jwt` if it is another one than held, for this user, of this account, not
    /// older; saves it. True when it was taken (the connection must be made again).
    pub fn adopt(&self, jwt: &str) -> Result<bool, RefusedJwt> {
        if self.lock().jwt == jwt {
            return Ok(false);
        }
        let held = self.check(jwt)?;
        write_private(&self.saved, jwt).map_err(|source| RefusedJwt::Save {
            path: self.saved.clone(),
            source,
        })?;
        *self.lock() = held;
        Ok(true)
    }

    fn check(&self, jwt: &str) -> Result<Held, RefusedJwt> {
        let claims = UserJwtClaims::verified(jwt)?;
        if claims.subject != self.user_key {
            return Err(RefusedJwt::OtherUser(claims.subject));
        }
        if claims.issuer != self.account {
            return Err(RefusedJwt::OtherAccount(claims.issuer));
        }
        // Two JWTs of the same second are in request order; each request of a stack
        // carries one that grants it, so the hook it precedes has its rights.
        if claims.issued_at < self.lock().issued_at {
            return Err(RefusedJwt::Older);
        }
        Ok(Held {
            jwt: jwt.to_owned(),
            issued_at: claims.issued_at,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Adopts the JWT a verified request brought and, when it is a new one, reconnects with
/// it and waits (at most [`REAUTH_TIMEOUT`]) until the connection is made again, so the
/// hook runs with the new rights. A refused JWT is logged and changes nothing.
pub async fn take(
    rights: Option<&Rights>,
    client: &async_nats::Client,
    connects: &watch::Receiver<u64>,
    jwt: &str,
) {
    let Some(rights) = rights else {
        warn!("a request brought a user JWT, but this agent's broker connection uses none");
        return;
    };
    match rights.adopt(jwt) {
        Ok(false) => {}
        Ok(true) => reconnect(client, connects).await,
        Err(e) => warn!(reason = %e, "not taking the user JWT a request brought"),
    }
}

async fn reconnect(client: &async_nats::Client, connects: &watch::Receiver<u64>) {
    let mut connects = connects.clone();
    connects.borrow_and_update();
    info!("new broker rights (joined a stack): reconnecting with the new user JWT");
    if let Err(e) = client.force_reconnect().await {
        warn!(error = %e, "cannot force a reconnection with the new user JWT");
        return;
    }
    match tokio::time::timeout(REAUTH_TIMEOUT, connects.changed()).await {
        Ok(Ok(())) => info!("reconnected with the new user JWT"),
        _ => warn!(
            timeout_secs = REAUTH_TIMEOUT.as_secs(),
            "not reconnected with the new user JWT in time; the hook runs with the rights held"
        ),
    }
}

/// Writes `text` to `path` with mode 0600, replacing it whole (a temporary file renamed
/// over it), so a crash leaves either the old JWT or the new one.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}
