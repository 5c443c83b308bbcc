//! Opening a store: create the directories, check they are usable, delete temp
//! files left by a crash, rebuild the index from block headers (headers only;
//! payloads are verified on `get`), and trim to the budget.

use std::fs::{self, OpenOptions};
use std::io;
use std::path::Path;
use std::time::SystemTime;

use super::{Held, SpillStore};
use crate::atomic;
use crate::block_file::{self, BlobKind, BlockMeta};
use crate::codec::ReadFailure;
use crate::error::StoreError;
use crate::identity::StoreIdentity;
use crate::index::Index;
use crate::lock::FileLock;
use crate::names;
use crate::warnings::Warnings;

/// Takes the lock of identity directory `name` in the store directory `dir` for a store
/// of `kind` (`<name>.blocks.lock` beside it, before anything in it is touched): `InUse`
/// while another store holds it.
fn lock_dir(dir: &Path, name: &str, kind: BlobKind) -> Result<FileLock, StoreError> {
    let suffix = match kind {
        BlobKind::Block => "blocks",
        BlobKind::Snapshot => "snapshots",
    };
    let path = dir.join(format!("{name}.{suffix}.lock"));
    FileLock::try_take(&path)
        .map_err(|e| StoreError::io("lock", &path, e))?
        .ok_or_else(|| StoreError::InUse {
            path: dir.join(name),
        })
}

impl SpillStore {
    /// Opens (creating) the store in `dir` for identity `id` with a budget of
    /// `budget_bytes` for block files. Files live in `dir/<identity hash>/`
    /// (see [`StoreIdentity::dir_name`]); other identities' directories are
    /// left alone. Leftover temp files are deleted; the index is rebuilt from
    /// the block files' headers; a file whose header is unreadable, whose
    /// identity differs, or whose size disagrees with its header is removed
    /// (with a warning). If the files exceed the budget, the oldest (by
    /// modification time) are evicted.
    ///
    /// `Err` if `dir` (or a parent) is not a directory, cannot be created,
    /// listed or written to, or the identity cannot be stored.
    pub fn open(dir: &Path, id: StoreIdentity, budget_bytes: u64) -> Result<Self, StoreError> {
        Self::open_kind(dir, id, budget_bytes, BlobKind::Block)
    }

    /// [`Self::open`] for a store of recurrent-state snapshots (hybrid models): the same
    /// envelope, checks and budget rules, with the snapshot magic and file names; `id`
    /// names the state layout, `block_bytes` the bytes of one snapshot.
    pub fn open_snapshots(
        dir: &Path,
        id: StoreIdentity,
        budget_bytes: u64,
    ) -> Result<Self, StoreError> {
        Self::open_kind(dir, id, budget_bytes, BlobKind::Snapshot)
    }

    fn open_kind(
        dir: &Path,
        id: StoreIdentity,
        budget_bytes: u64,
        kind: BlobKind,
    ) -> Result<Self, StoreError> {
        id.validate()?;
        ensure_dir(dir)?;
        let sub = dir.join(id.dir_name());
        ensure_dir(&sub)?;
        // A full disk (bytes or inodes) still lets the files on it be read, and a write
        // makes room by eviction: only another failure makes the directory unusable.
        let full = match probe_writable(&sub) {
            Err(e) if e.is_out_of_space() => Some(e),
            r => r.map(|()| None)?,
        };
        let lock = lock_dir(dir, &id.dir_name(), kind)?;
        let mut store = SpillStore {
            dir: sub,
            id,
            kind,
            budget: budget_bytes,
            index: Index::default(),
            warnings: Warnings::default(),
            full_evictions: (0, 0),
            full_warned: None,
            held: Held::default(),
            _lock: lock,
        };
        if let Some(e) = full {
            store.warnings.push(format!(
                "{e}: the disk is full; what is on it is read, and writes make room by \
                 evicting the least recently used blocks"
            ));
        }
        store.rebuild_index()?;
        store.enforce_budget();
        Ok(store)
    }

    /// Scans the identity directory: removes temp files, indexes valid block
    /// files in modification-time order (oldest first), removes invalid ones.
    fn rebuild_index(&mut self) -> Result<(), StoreError> {
        let entries =
            fs::read_dir(&self.dir).map_err(|e| StoreError::io("list directory", &self.dir, e))?;
        let mut found: Vec<(SystemTime, BlockMeta, u64)> = Vec::new();
        let mut temps = 0usize;
        let mut removed_any = false;
        for entry in entries {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    self.warnings
                        .push(format!("listing {}: {e}", self.dir.display()));
                    continue;
                }
            };
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                continue;
            };
            let path = entry.path();
            if names::is_temp(name) {
                self.remove_file(&path);
                temps += 1;
                removed_any = true;
                continue;
            }
            let Some(key) = names::parse_blob_name(self.kind, name) else {
                continue;
            };
            match read_block_header(self.kind, &path, &self.id, key) {
                Ok(found_block) => found.push(found_block),
                Err(ReadFailure::Io(why)) => self.skip(&path, &why),
                Err(ReadFailure::Invalid(why)) => {
                    self.discard(&path, &why);
                    removed_any = true;
                }
            }
        }
        if temps > 0 {
            self.warnings.push(format!(
                "removed {temps} leftover temp file(s) in {} (interrupted writes)",
                self.dir.display()
            ));
        }
        if removed_any {
            if let Err(e) = atomic::sync_dir(&self.dir) {
                self.warnings
                    .push(format!("fsync {}: {e}", self.dir.display()));
            }
        }
        found.sort_by_key(|(mtime, meta, _)| (*mtime, meta.key));
        for (_, meta, file_len) in found {
            self.index.insert(meta, file_len);
        }
        Ok(())
    }
}

/// Reads the header of the block file at `path`, named for `key`; returns its
/// modification time, metadata and size.
fn read_block_header(
    kind: BlobKind,
    path: &Path,
    id: &StoreIdentity,
    key: u64,
) -> Result<(SystemTime, BlockMeta, u64), ReadFailure> {
    let mut file = atomic::open_read(path).map_err(|e| ReadFailure::io("open", e))?;
    let header = block_file::read_header(kind, &mut file, id)?;
    if header.meta.key != key {
        return Err(format!(
            "header key {:016x} differs from the file name",
            header.meta.key
        )
        .into());
    }
    let mtime = file
        .metadata()
        .and_then(|m| m.modified())
        .unwrap_or(SystemTime::UNIX_EPOCH);
    Ok((mtime, header.meta, header.file_len))
}

/// Creates `path` as a directory if missing; `Err` if it is something else.
fn ensure_dir(path: &Path) -> Result<(), StoreError> {
    match fs::metadata(path) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(StoreError::NotADirectory {
            path: path.to_path_buf(),
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fs::create_dir_all(path).map_err(|e| StoreError::io("create directory", path, e))
        }
        Err(e) => Err(StoreError::io("stat", path, e)),
    }
}

/// Creates and deletes a temp file, so an unwritable directory fails at open
/// rather than at the first spill.
fn probe_writable(dir: &Path) -> Result<(), StoreError> {
    let probe = dir.join(names::temp_name("probe"));
    atomic::fault(atomic::Step::Create)
        .and_then(|()| OpenOptions::new().write(true).create_new(true).open(&probe))
        .map_err(|e| StoreError::io("create probe file in", dir, e))?;
    fs::remove_file(&probe).map_err(|e| StoreError::io("remove probe file", &probe, e))
}
