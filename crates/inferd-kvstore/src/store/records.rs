//! Named records: small byte strings (the engine's session and context
//! manifests, JSON) stored beside the blocks, atomically and checksummed like
//! them, read back verified. Records do not count against the block budget and
//! are never evicted.

use std::fs;

use super::SpillStore;
use crate::atomic;
use crate::codec::{self, ReadFailure};
use crate::error::StoreError;
use crate::names::{self, RecordId};
use crate::record_file::{self, MAX_RECORD_BYTES};

impl SpillStore {
    /// Stores (or replaces) record `kind`/`id` atomically and durably. `kind`
    /// is 1 to 32 characters of `a-z`, `0-9`, `_` (e.g. `"session"`); `id` is
    /// any string of 1 to 256 bytes (see [`crate::MAX_RECORD_ID_BYTES`]). On `Err`
    /// the record holds its old bytes or, if only the final directory fsync
    /// failed, the new ones: always a complete version, never a mix.
    pub fn put_record(&mut self, kind: &str, id: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let name =
            names::record_name(kind, id).map_err(|reason| StoreError::InvalidRecordName {
                kind: kind.to_string(),
                id: id.to_string(),
                reason,
            })?;
        if bytes.len() > MAX_RECORD_BYTES {
            return Err(StoreError::RecordTooLarge {
                kind: kind.to_string(),
                id: id.to_string(),
                bytes: bytes.len(),
                max: MAX_RECORD_BYTES,
            });
        }
        let header = record_file::encode_header(&self.id, kind, id, bytes.len());
        let crc = codec::crc32(&[&header, bytes]).to_le_bytes();
        // A full disk: room is made by evicting blocks (records are never evicted).
        self.write_making_room(&name, &[&header, bytes, &crc])
    }

    /// Record `kind`/`id`, verified; `None` if absent or invalid (an invalid
    /// file is removed with a warning).
    pub fn record(&mut self, kind: &str, id: &str) -> Option<Vec<u8>> {
        let name = names::record_name(kind, id).ok()?;
        let path = self.dir.join(name);
        if !path.exists() {
            return None;
        }
        match record_file::read_verified(&path, &self.id, kind, Some(id)) {
            Ok((_, bytes)) => Some(bytes),
            Err(ReadFailure::Io(why)) => {
                self.skip(&path, &why);
                None
            }
            Err(ReadFailure::Invalid(why)) => {
                self.discard(&path, &why);
                None
            }
        }
    }

    /// All records of `kind` as `(id, bytes)`, sorted by id, each verified.
    /// Invalid files are removed and skipped with a warning; an unlistable
    /// directory gives a warning and no records.
    pub fn records(&mut self, kind: &str) -> Vec<(String, Vec<u8>)> {
        if names::check_kind(kind).is_err() {
            return Vec::new();
        }
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) => {
                self.warnings
                    .push(format!("listing {}: {e}", self.dir.display()));
                return Vec::new();
            }
        };
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                continue;
            };
            let Some(named) = names::parse_record_name(name, kind) else {
                continue;
            };
            let spelled = match &named {
                RecordId::Spelled(id) => Some(id.as_str()),
                RecordId::Hashed => None,
            };
            let path = entry.path();
            match record_file::read_verified(&path, &self.id, kind, spelled) {
                // A hashed name must be the name of the id its header holds.
                Ok((id, _))
                    if named == RecordId::Hashed
                        && names::record_name(kind, &id).ok().as_deref() != Some(name) =>
                {
                    self.discard(&path, "record id differs from its file name")
                }
                Ok((id, bytes)) => out.push((id, bytes)),
                Err(ReadFailure::Io(why)) => self.skip(&path, &why),
                Err(ReadFailure::Invalid(why)) => self.discard(&path, &why),
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Removes record `kind`/`id` if present, durably (so a deleted session
    /// does not come back after a power loss). Problems become warnings.
    pub fn remove_record(&mut self, kind: &str, id: &str) {
        let Ok(name) = names::record_name(kind, id) else {
            return;
        };
        let path = self.dir.join(name);
        if path.exists() {
            self.remove_file(&path);
            if let Err(e) = atomic::sync_dir(&self.dir) {
                self.warnings
                    .push(format!("fsync {}: {e}", self.dir.display()));
            }
        }
    }
}
