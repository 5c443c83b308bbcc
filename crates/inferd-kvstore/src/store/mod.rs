//! [`SpillStore`]: KV blocks on disk under a byte budget. This file holds the
//! block operations; `open.rs` rebuilds the index at open, `records.rs` holds
//! the named records.

#[cfg(test)]
mod fault_tests;
mod open;
mod records;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::atomic;
use crate::block_file::{self, BlobKind, BlockMeta, Expected, MAX_BLOCK_TOKENS};
use crate::codec::{self, ReadFailure, CRC_LEN};
use crate::error::StoreError;
use crate::identity::StoreIdentity;
use crate::index::Index;
use crate::names;
use crate::warnings::Warnings;

/// A set of keys shared with the store's caller: see [`SpillStore::hold_with`].
pub type Held = std::sync::Arc<std::sync::Mutex<std::collections::HashSet<u64>>>;

/// The SSD tier for KV blocks of one model and KV layout.
///
/// Owned by one thread of one process (the engine thread). It holds an exclusive
/// lock on its identity directory while open, so a second store (another server
/// on the same directory) is refused instead of removing the first one's temp
/// files and overwriting its records. All state besides the files (LRU order, pins) is in
/// memory: after a restart the LRU order is the files' modification times and
/// nothing is pinned.
#[derive(Debug)]
pub struct SpillStore {
    /// The identity directory: `<store dir>/<identity hash>`.
    dir: PathBuf,
    id: StoreIdentity,
    /// Blocks or snapshots.
    kind: BlobKind,
    budget: u64,
    index: Index,
    warnings: Warnings,
    /// Evictions for a full disk not yet warned about (blocks, bytes), and when the
    /// last warning went out (one a minute).
    full_evictions: (usize, u64),
    full_warned: Option<std::time::Instant>,
    /// Keys no eviction may take while they are in the set (the caller's: blocks about to
    /// be pinned by a job still queued behind the writes that would evict them).
    held: Held,
    /// `<store dir>/<identity hash>.<kind>.lock`, locked exclusively while the store is
    /// open (released when the file closes, also when the process dies).
    _lock: crate::lock::FileLock,
}

impl SpillStore {
    /// True if block `key` is indexed (its header was valid when indexed; the
    /// payload is only verified by [`get`](Self::get)).
    pub fn contains(&self, key: u64) -> bool {
        self.index.contains(key)
    }

    /// The metadata of block `key` as its header records it: parent and tokens,
    /// so the caller can walk chains after a restart.
    pub fn meta(&self, key: u64) -> Option<&BlockMeta> {
        self.index.meta(key)
    }

    /// The keys of all indexed blocks, in no particular order.
    pub fn keys(&self) -> impl Iterator<Item = u64> + '_ {
        self.index.keys()
    }

    /// Stores a block atomically (temp file, fsync, rename, fsync of the
    /// directory). `data` must be exactly `block_bytes` long. If the key is
    /// already stored, only its LRU position is refreshed (keys name contents).
    /// Least recently used unpinned blocks are evicted first to stay within the
    /// budget. On `Err` nothing was stored and no temp file is left; evictions
    /// made to free room stay done.
    pub fn put(&mut self, meta: &BlockMeta, data: &[u8]) -> Result<(), StoreError> {
        if data.len() != self.id.block_bytes {
            return Err(StoreError::WrongLength {
                key: meta.key,
                got: data.len(),
                expected: self.id.block_bytes,
            });
        }
        if meta.tokens.len() > MAX_BLOCK_TOKENS {
            return Err(StoreError::InvalidMeta {
                key: meta.key,
                reason: format!("{} tokens, at most {MAX_BLOCK_TOKENS}", meta.tokens.len()),
            });
        }
        if self.index.contains(meta.key) {
            self.index.touch(meta.key);
            return Ok(());
        }
        let header = block_file::encode_header(self.kind, &self.id, meta, data.len());
        let file_len = (header.len() + data.len() + CRC_LEN) as u64;
        self.make_room(meta.key, file_len)?;
        let crc = codec::crc32(&[&header, data]).to_le_bytes();
        let name = names::blob_name(self.kind, meta.key);
        if let Err(e) = self.write_making_room(&name, &[&header, data, &crc]) {
            // A failure after the rename leaves the file; unindexed, it must go.
            let _ = fs::remove_file(self.dir.join(&name));
            return Err(e);
        }
        self.index.insert(meta.clone(), file_len);
        Ok(())
    }

    /// [`atomic::write_atomic`] of `parts` to `name`; on a disk full before the budget,
    /// once more after [`free_disk`](Self::free_disk) made room.
    pub(crate) fn write_making_room(
        &mut self,
        name: &str,
        parts: &[&[u8]],
    ) -> Result<(), StoreError> {
        match atomic::write_atomic(&self.dir, name, parts) {
            Err(e) if e.is_out_of_space() => {
                let len = parts.iter().map(|p| p.len() as u64).sum();
                if self.free_disk(len) {
                    atomic::write_atomic(&self.dir, name, parts)
                } else {
                    Err(e)
                }
            }
            r => r,
        }
    }

    /// The disk is full before the budget is: evicts least recently used unpinned
    /// blocks until twice `file_len` bytes are free (the next writes need room too),
    /// with a warning. Whether anything was evicted (then the write is tried again).
    pub(crate) fn free_disk(&mut self, file_len: u64) -> bool {
        let (mut blocks, mut bytes) = (0usize, 0u64);
        while bytes < 2 * file_len {
            let Some(victim) = self.victim() else {
                break;
            };
            bytes += self.index.remove(victim).unwrap_or(0);
            self.remove_file(&self.block_path(victim));
            blocks += 1;
        }
        self.full_evictions.0 += blocks;
        self.full_evictions.1 += bytes;
        let due = self
            .full_warned
            .is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(60));
        if blocks > 0 && due {
            let (n, b) = std::mem::take(&mut self.full_evictions);
            self.warnings.push(format!(
                "the disk under {} is full before the budget: removed {n} least recently \
                 used unpinned block file(s) ({b} bytes) to make room (at most one such line \
                 a minute)",
                self.dir.display()
            ));
            self.full_warned = Some(std::time::Instant::now());
        }
        blocks > 0
    }

    /// Reads block `key` and verifies everything (magic, format version,
    /// identity, key, parent == `expect_parent`, tokens == `expect_tokens`,
    /// lengths, checksum). Returns `None` if the key is not stored or anything
    /// fails to verify or read; in the latter case the file is removed from disk
    /// and index and a warning is recorded, and the caller recomputes. Never
    /// returns unverified bytes. A hit refreshes the block's LRU position.
    pub fn get(&mut self, key: u64, expect_parent: u64, expect_tokens: &[u32]) -> Option<Vec<u8>> {
        if !self.index.contains(key) {
            return None;
        }
        let mut buf = vec![0u8; self.id.block_bytes];
        match self.get_into(key, expect_parent, expect_tokens, &mut buf) {
            Ok(true) => Some(buf),
            _ => None,
        }
    }

    /// [`get`](Self::get) into the caller's buffer (e.g. a staging buffer for
    /// the KV pool), which must be `block_bytes` long. `Ok(true)`: `out` holds
    /// the verified payload. `Ok(false)`: a miss, `out` is zeroed. `Err` only
    /// for a buffer of the wrong length.
    pub fn get_into(
        &mut self,
        key: u64,
        expect_parent: u64,
        expect_tokens: &[u32],
        out: &mut [u8],
    ) -> Result<bool, StoreError> {
        if out.len() != self.id.block_bytes {
            return Err(StoreError::WrongLength {
                key,
                got: out.len(),
                expected: self.id.block_bytes,
            });
        }
        if !self.index.contains(key) {
            out.fill(0);
            return Ok(false);
        }
        let path = self.block_path(key);
        let expected = Expected {
            key,
            parent: expect_parent,
            tokens: expect_tokens,
        };
        match block_file::read_verified(self.kind, &path, &self.id, &expected, out) {
            Ok(()) => {
                self.index.touch(key);
                Ok(true)
            }
            Err(ReadFailure::Io(why)) => {
                // Unreadable now, perhaps intact: a miss, and the file stays.
                out.fill(0);
                self.skip(&path, &why);
                Ok(false)
            }
            Err(ReadFailure::Invalid(why)) => {
                out.fill(0);
                self.index.remove(key);
                self.discard(&path, &why);
                Ok(false)
            }
        }
    }

    /// Pins or unpins block `key` (unknown keys are ignored). Pinned blocks are
    /// never evicted for the budget. In memory only: re-apply after a restart.
    pub fn set_pinned(&mut self, key: u64, pinned: bool) {
        self.index.set_pinned(key, pinned);
    }

    /// True if block `key` is stored and pinned.
    pub fn is_pinned(&self, key: u64) -> bool {
        self.index.is_pinned(key)
    }

    /// Removes block `key` from index and disk (pinned or not). Problems
    /// removing the file become warnings.
    pub fn remove(&mut self, key: u64) {
        if self.index.remove(key).is_some() {
            let path = self.block_path(key);
            self.remove_file(&path);
        }
    }

    /// Removes the blocks `keys` (those stored) from index and disk, durably: one fsync
    /// of the directory after them, so none comes back after a power loss. Problems
    /// become warnings.
    pub fn remove_all(&mut self, keys: &[u64]) {
        let mut removed = false;
        for &k in keys {
            if self.index.contains(k) {
                self.remove(k);
                removed = true;
            }
        }
        if removed {
            if let Err(e) = atomic::sync_dir(&self.dir) {
                self.warnings
                    .push(format!("fsync {}: {e}", self.dir.display()));
            }
        }
    }

    /// Bytes of the indexed block files (headers and checksums included).
    pub fn bytes_used(&self) -> u64 {
        self.index.used()
    }

    /// Bytes of the pinned block files.
    pub fn bytes_pinned(&self) -> u64 {
        self.index.pinned_bytes()
    }

    /// Number of indexed blocks.
    pub fn num_blocks(&self) -> usize {
        self.index.len()
    }

    /// The budget for block files in bytes (records are not counted).
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// Changes the budget, evicting least recently used unpinned blocks until
    /// the store fits (pinned blocks may keep it above a lowered budget).
    pub fn set_budget(&mut self, budget_bytes: u64) {
        self.budget = budget_bytes;
        self.enforce_budget();
    }

    /// The file size of a block with `n_tokens` tokens: what it counts against
    /// the budget.
    pub fn file_bytes(&self, n_tokens: usize) -> u64 {
        let meta = BlockMeta {
            key: 0,
            parent: 0,
            tokens: vec![0; n_tokens],
        };
        (block_file::encode_header(self.kind, &self.id, &meta, self.id.block_bytes).len()
            + self.id.block_bytes
            + CRC_LEN) as u64
    }

    /// The identity the store was opened with.
    pub fn identity(&self) -> &StoreIdentity {
        &self.id
    }

    /// The identity directory the files live in (`<dir>/<identity hash>`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Warnings (corrupt or mismatching files removed, IO problems) since the
    /// last call, for the caller to log.
    pub fn take_warnings(&mut self) -> Vec<String> {
        self.warnings.take()
    }

    /// Evictions skip the keys in `held` (a set the caller fills and empties).
    pub fn hold_with(&mut self, held: Held) {
        self.held = held;
    }

    /// The least recently used unpinned block that is not held.
    fn victim(&self) -> Option<u64> {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        self.index.oldest_unpinned(|k| !held.contains(&k))
    }

    fn block_path(&self, key: u64) -> PathBuf {
        self.dir.join(names::blob_name(self.kind, key))
    }

    /// Evicts unpinned blocks, oldest first, until a file of `file_len` bytes fits.
    fn make_room(&mut self, key: u64, file_len: u64) -> Result<(), StoreError> {
        if file_len > self.budget {
            return Err(StoreError::TooLarge {
                key,
                file_bytes: file_len,
                budget: self.budget,
            });
        }
        let no_room = |s: &Self| StoreError::NoRoom {
            key,
            file_bytes: file_len,
            pinned_bytes: s.index.pinned_bytes(),
            budget: s.budget,
        };
        if self.index.pinned_bytes() + file_len > self.budget {
            return Err(no_room(self));
        }
        while self.index.used() + file_len > self.budget {
            let Some(victim) = self.victim() else {
                return Err(no_room(self));
            };
            self.remove(victim);
        }
        Ok(())
    }

    /// Evicts unpinned blocks, oldest first, while over budget.
    fn enforce_budget(&mut self) {
        while self.index.used() > self.budget {
            let Some(victim) = self.victim() else {
                break;
            };
            self.remove(victim);
        }
    }

    /// Removes a file found corrupt or mismatching, with a warning saying why.
    /// A file that could not be read (not shown to be bad): kept, with a warning.
    fn skip(&mut self, path: &Path, why: &str) {
        self.warnings
            .push(format!("skipped {} (kept): {why}", path.display()));
    }

    fn discard(&mut self, path: &Path, why: &str) {
        self.warnings
            .push(format!("removed {}: {why}", path.display()));
        self.remove_file(path);
    }

    /// Removes a file; a file already gone is fine, other failures are warnings.
    fn remove_file(&mut self, path: &Path) {
        match fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => self
                .warnings
                .push(format!("could not remove {}: {e}", path.display())),
        }
    }
}
