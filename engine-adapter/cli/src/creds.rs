//! Writing an agent's credentials file (`--creds FILE`): mode 0600 from the first byte,
//! never over an existing file unless `--force`, checked before the gateway mints anything
//! (minted credentials are handed out once).

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

use super::CliError;

/// Refuses early when `path` exists and `force` is off, so that nothing is minted for a
/// file that could not be written.
pub fn check_writable(path: &Path, force: bool) -> Result<(), CliError> {
    if !force && path.exists() {
        return Err(CliError::Usage(format!(
            "{} exists; pass --force to overwrite it (the old credentials stop working once new ones are minted)",
            path.display()
        )));
    }
    Ok(())
}

/// Writes `text` to `path` with mode 0600, replacing an existing file only with `force`.
pub fn write(path: &Path, text: &str, force: bool) -> Result<(), CliError> {
    let io = |source| CliError::Write {
        path: path.to_owned(),
        source,
    };
    check_writable(path, force)?;
    // A file written elsewhere first and renamed would keep its mode; a fresh file made
    // with 0600 never exists with wider rights.
    let tmp = path.with_extension("creds.tmp");
    let _ = fs::remove_file(&tmp);
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io)?;
    file.write_all(text.as_bytes()).map_err(io)?;
    file.sync_all().map_err(io)?;
    fs::rename(&tmp, path).map_err(io)?;
    Ok(())
}
