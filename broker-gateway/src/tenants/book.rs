//! What the gateway remembers of each tenant besides its broker accounts: its name and
//! when it was created, one file per tenant in `<state-dir>/tenants/<id>.json`.
//!
//! Which tenants exist is the [`super::Connector`]'s to say (development mode: the
//! default tenant; operator mode: the accounts in the state directory); a tenant without
//! a record here (made offline, or by an older gateway) gets one, named after its id,
//! when it is first served.

use std::path::Path;

use flue_proto::{Tenant, TenantId};
use time::OffsetDateTime;

use crate::state::{StateDir, StateError};

/// Directory of the tenant records in the state directory.
pub const TENANTS_DIR: &str = "tenants";

/// The mark of a tenant being created ([`TenantBook::mark_creating`]).
fn creating_file(id: &TenantId) -> String {
    format!("{id}.creating")
}

/// The tenant records; cheap to clone.
#[derive(Debug, Clone)]
pub struct TenantBook {
    dir: StateDir,
}

impl TenantBook {
    /// Opens (making it, mode 0700) `<state_dir>/tenants`.
    pub fn open(state_dir: &Path) -> Result<Self, StateError> {
        Ok(Self {
            dir: StateDir::open(&state_dir.join(TENANTS_DIR))?,
        })
    }

    /// Marks `id` as being created by `POST /v1/tenants`, before it is provisioned: a
    /// gateway start that cannot start a tenant so marked leaves it out instead of failing
    /// (it was never served, so nothing is lost; the operator's POST was refused).
    pub fn mark_creating(&self, id: &TenantId) -> Result<(), StateError> {
        self.dir.write_secret(&creating_file(id), "")
    }

    /// Removes the mark of [`TenantBook::mark_creating`]: `id` is served.
    pub fn created(&self, id: &TenantId) -> Result<(), StateError> {
        let path = self.dir.path().join(creating_file(id));
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(StateError::Io { path, source: e })
            }
            _ => Ok(()),
        }
    }

    /// Whether `id` was marked by [`TenantBook::mark_creating`] and never served since.
    pub fn is_creating(&self, id: &TenantId) -> bool {
        self.dir.path().join(creating_file(id)).exists()
    }

    /// The record of `id`, written first (named `name`, or the id when empty) when
    /// missing. An existing record is kept as it is.
    pub fn load_or_create(&self, id: &TenantId, name: &str) -> Result<Tenant, StateError> {
        let file = format!("{id}.json");
        let text = self.dir.load_or_create(&file, || {
            let record = Tenant {
                id: id.clone(),
                name: if name.is_empty() {
                    id.to_string()
                } else {
                    name.to_owned()
                },
                created_at: OffsetDateTime::now_utc(),
            };
            serde_json::to_string_pretty(&record).map_err(|e| e.to_string())
        })?;
        let record: Tenant = serde_json::from_str(&text).map_err(|e| StateError::Invalid {
            path: self.dir.path().join(&file),
            reason: e.to_string(),
        })?;
        if record.id != *id {
            return Err(StateError::Invalid {
                path: self.dir.path().join(&file),
                reason: format!("holds tenant {}, not {id}", record.id),
            });
        }
        Ok(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_made_once_and_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let book = TenantBook::open(&dir.path().join("state")).expect("opens");
        let id = TenantId::new("acme").expect("id");
        let first = book.load_or_create(&id, "Acme Ltd").expect("made");
        assert_eq!(first.name, "Acme Ltd");
        let again = book.load_or_create(&id, "Other").expect("read");
        assert_eq!(again, first, "an existing record is not renamed");
        let unnamed = TenantId::new("bare").expect("id");
        assert_eq!(
            book.load_or_create(&unnamed, "").expect("made").name,
            "bare"
        );
    }
}
