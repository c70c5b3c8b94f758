//! `flue stack abandon` and `flue stack adopt`: a stack taken out of Flue into a file,
//! and brought back from it, without running anything.
//!
//! Abandoning reads the stack's export, writes it to the file and syncs it (file and
//! directory), and only then asks the gateway to forget the stack, at the revision it
//! exported: a stack changed in between is not forgotten (export again), and a stack is
//! never forgotten without its record on disk.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use flue_client::{Client, ClientError};
use flue_proto::StackId;
use flue_proto::stack_export::StackExport;

use super::{CliError, Outcome};

/// `flue stack abandon NAME [--out FILE] [--force]`.
pub async fn abandon(
    client: &Client,
    name: &StackId,
    file: Option<PathBuf>,
    force: bool,
    out: &mut impl Write,
) -> Result<Outcome, CliError> {
    let path = file.unwrap_or_else(|| PathBuf::from(format!("{name}.stack.json")));
    if !force && path.exists() {
        return Err(CliError::Usage(format!(
            "{} exists; pass --force to overwrite it, or --out another file",
            path.display()
        )));
    }
    let export = client.export_stack(name).await?;
    let mut text = serde_json::to_string_pretty(&export)
        .map_err(|e| CliError::Usage(format!("cannot encode the record: {e}")))?;
    text.push('\n');
    write_synced(&path, text.as_bytes()).map_err(|source| CliError::Write {
        path: path.clone(),
        source,
    })?;
    if let Err(e) = client.abandon_stack(name, export.stack.revision).await {
        // Refused (an operation runs, the stack moved on): the stack stays, and so
        // would a stale record; on any other failure the stack may be gone, so the
        // record is kept.
        if matches!(&e, ClientError::Api { status, .. } if (400..500).contains(status)) {
            let _ = fs::remove_file(&path);
        } else {
            eprintln!(
                "the stack may or may not have been abandoned; its record is in {} (check with `flue stack show {name}`)",
                path.display()
            );
        }
        return Err(e.into());
    }
    writeln!(
        out,
        "stack {name} abandoned ({}): {} units, {} deployments, {} configs, {} data keys; nothing ran.\n\
         Its record is in {} ({} bytes, mode 0600; hidden values sealed). Bring it back with:\n  \
         flue stack adopt {name} --from {}",
        export.stack.status,
        export.stack.state.units.len(),
        export.deployments.len(),
        export.configs.len(),
        export.data.len(),
        path.display(),
        text.len(),
        path.display(),
    )?;
    Ok(Outcome::Success)
}

/// `flue stack adopt NAME --from FILE`.
pub async fn adopt(
    client: &Client,
    name: &StackId,
    from: &Path,
    out: &mut impl Write,
) -> Result<Outcome, CliError> {
    let text = fs::read(from).map_err(|source| CliError::Read {
        path: from.to_owned(),
        source,
    })?;
    let export: StackExport = serde_json::from_slice(&text).map_err(|e| {
        CliError::Usage(format!(
            "{}: not a stack record written by `flue stack abandon`: {e}",
            from.display()
        ))
    })?;
    let stack = client.adopt_stack(name, &export).await?;
    writeln!(
        out,
        "stack {name} adopted ({}): {} units, revision {}; nothing ran.",
        stack.status,
        stack.state.units.len(),
        stack.revision
    )?;
    Ok(Outcome::Success)
}

/// Writes `bytes` to `path` (mode 0600 from the first byte) through a temporary file,
/// synced, renamed, and the directory synced: once this returns, the file survives a
/// crash.
fn write_synced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    };
    let mut tmp_name = path.file_name().unwrap_or_default().to_owned();
    tmp_name.push(".tmp");
    let tmp = dir.join(tmp_name);
    let _ = fs::remove_file(&tmp);
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    fs::rename(&tmp, path)?;
    fs::File::open(&dir)?.sync_all()
}
