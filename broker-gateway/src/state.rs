//! The gateway's state directory (`--state-dir`): the keys only the gateway holds.
//!
//! The directory is mode 0700 and every file in it 0600; a key file another user can
//! read is refused rather than used. Missing keys are made on first use and never
//! replaced: losing `signing.nk` means re-registering every agent (they pin its public
//! key), losing `sealing.xk` makes the hidden values already stored unreadable.
//!
//! | file | what |
//! |---|---|
//! | `signing.nk` | ed25519 nkey seed signing every request (agents pin the public key) |
//! | `sealing.xk` | curve25519 xkey seed: hidden values are sealed to its public key at rest |
//! | `token.key` | secret signing the HTTP API's bearer tokens (HS256) |

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nkeys::{KeyPair, XKey};

/// File of the request-signing key.
pub const SIGNING_KEY_FILE: &str = "signing.nk";
/// File of the sealing key.
pub const SEALING_KEY_FILE: &str = "sealing.xk";
/// File of the HTTP token secret.
pub const TOKEN_KEY_FILE: &str = "token.key";

/// Bytes of the HTTP token secret.
const TOKEN_SECRET_BYTES: usize = 32;

/// An opened state directory.
#[derive(Debug, Clone)]
pub struct StateDir {
    path: PathBuf,
}

/// The gateway's own keys, loaded from its state directory.
#[derive(Clone)]
pub struct GatewayKeys {
    /// Signs requests; its public key is handed to agents at registration.
    pub signing: Arc<KeyPair>,
    /// Opens what is sealed to the gateway (hidden values at rest, hidden outputs).
    pub sealing: Arc<XKey>,
    /// Signs and checks the HTTP API's bearer tokens.
    pub token_secret: Arc<[u8]>,
}

impl std::fmt::Debug for GatewayKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayKeys")
            .field("signing", &self.signing.public_key())
            .field("sealing", &self.sealing.public_key())
            .field("token_secret", &"<hidden>")
            .finish()
    }
}

impl StateDir {
    /// Opens `path`, making it (mode 0700) when missing.
    pub fn open(path: &Path) -> Result<Self, StateError> {
        let io = |source| StateError::Io {
            path: path.to_owned(),
            source,
        };
        if !path.exists() {
            fs::create_dir_all(path).map_err(io)?;
            fs::set_permissions(path, fs::Permissions::from_mode(0o700)).map_err(io)?;
        }
        let meta = fs::metadata(path).map_err(io)?;
        if !meta.is_dir() {
            return Err(StateError::NotADirectory(path.to_owned()));
        }
        if meta.permissions().mode() & 0o077 != 0 {
            return Err(StateError::TooOpen(path.to_owned()));
        }
        Ok(Self {
            path: path.to_owned(),
        })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Loads the gateway's keys, making the missing ones.
    pub fn gateway_keys(&self) -> Result<GatewayKeys, StateError> {
        let signing = self.load_or_create(SIGNING_KEY_FILE, || {
            KeyPair::new_server().seed().map_err(|e| e.to_string())
        })?;
        let signing = KeyPair::from_seed(&signing).map_err(|e| self.bad(SIGNING_KEY_FILE, e))?;
        let sealing = self.load_or_create(SEALING_KEY_FILE, || {
            XKey::new().seed().map_err(|e| e.to_string())
        })?;
        let sealing = XKey::from_seed(&sealing).map_err(|e| self.bad(SEALING_KEY_FILE, e))?;
        let token = self.load_or_create(TOKEN_KEY_FILE, || {
            let mut bytes = [0_u8; TOKEN_SECRET_BYTES];
            ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
                .map_err(|_| "no randomness available".to_owned())?;
            Ok(data_encoding::BASE64URL_NOPAD.encode(&bytes))
        })?;
        let token_secret = data_encoding::BASE64URL_NOPAD
            .decode(token.as_bytes())
            .map_err(|e| self.bad(TOKEN_KEY_FILE, e))?;
        if token_secret.len() < TOKEN_SECRET_BYTES {
            return Err(self.bad(TOKEN_KEY_FILE, "shorter than 32 bytes"));
        }
        Ok(GatewayKeys {
            signing: Arc::new(signing),
            sealing: Arc::new(sealing),
            token_secret: token_secret.into(),
        })
    }

    /// The trimmed text of `name`, written first by `generate` (mode 0600) when missing.
    /// A file others can read or write is refused.
    pub fn load_or_create(
        &self,
        name: &str,
        generate: impl FnOnce() -> Result<String, String>,
    ) -> Result<String, StateError> {
        let path = self.path.join(name);
        let io = |source| StateError::Io {
            path: path.clone(),
            source,
        };
        if !path.exists() {
            let text = generate().map_err(|reason| StateError::Invalid {
                path: path.clone(),
                reason,
            })?;
            self.write_secret(name, &text)?;
        }
        let meta = fs::metadata(&path).map_err(io)?;
        if meta.permissions().mode() & 0o077 != 0 {
            return Err(StateError::TooOpen(path));
        }
        Ok(fs::read_to_string(&path).map_err(io)?.trim().to_owned())
    }

    /// Writes `text` to `name` with mode 0600, atomically (a temporary file renamed), so
    /// a crash leaves the old file or the new one, never half of one.
    pub fn write_secret(&self, name: &str, text: &str) -> Result<(), StateError> {
        let path = self.path.join(name);
        let tmp = self.path.join(format!(".{name}.tmp"));
        let io = |source| StateError::Io {
            path: path.clone(),
            source,
        };
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(io)?;
        }
        let _ = fs::remove_file(&tmp);
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io)?;
        file.write_all(text.as_bytes()).map_err(io)?;
        file.write_all(b"\n").map_err(io)?;
        file.sync_all().map_err(io)?;
        fs::rename(&tmp, &path).map_err(io)?;
        Ok(())
    }

    fn bad(&self, name: &str, reason: impl std::fmt::Display) -> StateError {
        StateError::Invalid {
            path: self.path.join(name),
            reason: reason.to_string(),
        }
    }
}

/// Why the state directory could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// A read or write failed.
    #[error("cannot use {}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The path exists and is not a directory.
    #[error("{} is not a directory", .0.display())]
    NotADirectory(PathBuf),
    /// Others may read or write it.
    #[error("{} is open to other users (group or other permission bits set); chmod it 0700 (directory) or 0600 (file)", .0.display())]
    TooOpen(PathBuf),
    /// A key file does not hold a valid key.
    #[error("{} is not valid: {reason}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_made_once_and_kept_private() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("state");
        let state = StateDir::open(&root).expect("opens");
        let first = state.gateway_keys().expect("made");
        let again = StateDir::open(&root)
            .expect("reopens")
            .gateway_keys()
            .expect("loaded");
        assert_eq!(first.signing.public_key(), again.signing.public_key());
        assert_eq!(first.sealing.public_key(), again.sealing.public_key());
        assert_eq!(first.token_secret, again.token_secret);
        for name in [SIGNING_KEY_FILE, SEALING_KEY_FILE, TOKEN_KEY_FILE] {
            let mode = fs::metadata(root.join(name))
                .expect("file")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{name}");
        }
        let mode = fs::metadata(&root).expect("dir").permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        assert!(!format!("{first:?}").contains(&first.signing.seed().expect("seed")));
    }

    #[test]
    fn open_files_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("state");
        let state = StateDir::open(&root).expect("opens");
        state.gateway_keys().expect("made");
        let key = root.join(SIGNING_KEY_FILE);
        fs::set_permissions(&key, fs::Permissions::from_mode(0o644)).expect("chmod");
        let e = state.gateway_keys().expect_err("too open");
        assert!(matches!(e, StateError::TooOpen(_)), "{e}");
        fs::set_permissions(&key, fs::Permissions::from_mode(0o600)).expect("chmod");
        fs::write(&key, "not a seed").expect("write");
        let e = state.gateway_keys().expect_err("invalid");
        assert!(e.to_string().contains("signing.nk is not valid"), "{e}");
        fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).expect("chmod");
        let e = StateDir::open(&root).expect_err("directory too open");
        assert!(matches!(e, StateError::TooOpen(_)), "{e}");
    }
}
