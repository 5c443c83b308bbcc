//! The store's error type: every failure names the path (or key) involved and
//! keeps the underlying cause.

use std::io;
use std::path::PathBuf;

/// Why a store operation failed. Corrupt or mismatching files are not errors
/// (reads treat them as misses and record a warning); these are the failures
/// the caller must act on.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A filesystem operation failed (disk full, read-only filesystem, the
    /// directory vanished or was replaced by a file, ...).
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// What was being done, e.g. "write temp file".
        op: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The store directory (or the identity directory inside it) exists but is
    /// not a directory.
    #[error("{}: not a directory", path.display())]
    NotADirectory {
        /// The offending path.
        path: PathBuf,
    },
    /// Another store (of this process or another) holds the identity directory.
    #[error("{}: in use by another inferd process (its lock file is held)", path.display())]
    InUse {
        /// The identity directory.
        path: PathBuf,
    },
    /// The identity cannot be stored (a string too long, `block_bytes` zero).
    #[error("invalid store identity: {0}")]
    InvalidIdentity(String),
    /// `put` got a payload whose length is not the store's `block_bytes`, or a
    /// `get_into` buffer of the wrong length.
    #[error("block {key:016x}: {got} bytes given, the store's blocks are {expected} bytes")]
    WrongLength {
        /// The block key.
        key: u64,
        /// The length given.
        got: usize,
        /// The store's `block_bytes`.
        expected: usize,
    },
    /// `put` got block metadata the format cannot hold (too many tokens).
    #[error("block {key:016x}: {reason}")]
    InvalidMeta {
        /// The block key.
        key: u64,
        /// What is wrong.
        reason: String,
    },
    /// The block's file alone is larger than the whole budget.
    #[error(
        "block {key:016x}: its file of {file_bytes} bytes exceeds the budget of {budget} bytes"
    )]
    TooLarge {
        /// The block key.
        key: u64,
        /// Size of the block's file (header, payload, checksum).
        file_bytes: u64,
        /// The store's budget.
        budget: u64,
    },
    /// Pinned blocks leave no room for the block under the budget.
    #[error(
        "block {key:016x}: no room for {file_bytes} bytes, {pinned_bytes} of the {budget} byte budget are pinned"
    )]
    NoRoom {
        /// The block key.
        key: u64,
        /// Size of the block's file.
        file_bytes: u64,
        /// Bytes held by pinned blocks.
        pinned_bytes: u64,
        /// The store's budget.
        budget: u64,
    },
    /// A record larger than [`MAX_RECORD_BYTES`](crate::MAX_RECORD_BYTES).
    #[error("record {kind:?}/{id:?}: {bytes} bytes, at most {max}")]
    RecordTooLarge {
        /// The record kind.
        kind: String,
        /// The record id.
        id: String,
        /// The record's size.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// A record kind or id that cannot be used as a file name.
    #[error("record {kind:?}/{id:?}: {reason}")]
    InvalidRecordName {
        /// The record kind.
        kind: String,
        /// The record id.
        id: String,
        /// What is wrong.
        reason: &'static str,
    },
}

impl StoreError {
    /// Wraps an IO error with what was being done and where.
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        StoreError::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// True when the cause is a full disk or exhausted quota (ENOSPC / EDQUOT):
    /// the caller may lower the budget or stop spilling.
    pub fn is_out_of_space(&self) -> bool {
        match self {
            StoreError::Io { source, .. } => matches!(
                source.kind(),
                io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
            ),
            _ => false,
        }
    }
}
