//! The SSD tier for KV cache blocks: parked agent sessions and pinned contexts
//! survive memory pressure and server restarts. No model, no tensors: blocks are
//! opaque byte blobs of a fixed size, named by the caller's 64-bit hash-chain key.
//!
//! [`SpillStore`] keeps blocks in files under a byte budget (LRU eviction of
//! unpinned blocks), writes atomically (temp file, fsync, rename, fsync of the
//! directory), and verifies every byte on read: a corrupt, truncated or
//! mismatching file is removed and reported as a miss plus a warning, so the
//! caller recomputes. It also stores small named records (the engine's session
//! and context manifests) the same way. A store opened with
//! [`SpillStore::open_snapshots`] holds hybrid models' recurrent-state snapshots
//! instead of blocks: the same envelope with magic `INFDKVS1`, files
//! `s-<key:016x>.kvs`, keyed by the block at whose end the snapshot was taken (its
//! parent and tokens in the header), under an identity naming the state layout.
//!
//! # Directory layout
//!
//! `<dir>/<identity hash>/` (16 hex digits, [`StoreIdentity::dir_name`]) holds
//! `b-<key:016x>.kvb` block files, `r-<kind>-<hex of id>.rec` record files (ids over 100
//! bytes: `r-<kind>-h<SHA-256 of id>.rec`, the id in the header) and,
//! only while a write is in flight, `.<name>.<pid>.<n>.tmp` temp files (deleted at
//! open: after a crash they are incomplete by definition).
//!
//! # File format (little-endian)
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `INFDKVB1` |
//! | 8 | 4 | format version, u32 = 1 |
//! | 12 | 4 | header length H, u32: bytes before the payload, these fields included |
//! | 16 | 4 + m | model fingerprint: u32 length m, then UTF-8 |
//! | | 4 + l | KV layout: u32 length l, then UTF-8 |
//! | | 8 | block_bytes, u64 |
//! | | 8 | key, u64 |
//! | | 8 | parent key, u64 |
//! | | 4 + 4n | n_tokens u32, then n tokens, u32 each |
//! | H − 8 | 8 | payload length P, u64 (always block_bytes) |
//! | H | P | payload |
//! | H + P | 4 | CRC-32 (IEEE) of bytes `0..H+P` |
//!
//! The file is exactly `H + P + 4` bytes; any other size is truncation. A
//! record file has the same envelope with magic `INFDREC1` and, after the
//! identity, the kind and the id (each a u32 length, then UTF-8) instead of
//! key, parent and tokens; its payload is the record's bytes.
//!
//! **Why CRC-32** (`crc32fast`, hardware-accelerated, many GB/s, so checking a
//! block costs far less than reading it): the threat is accidental corruption —
//! torn or partial writes, bit rot, a misplaced file — not an adversary. CRC-32
//! detects every burst error of up to 32 bits and misses random damage with
//! probability 2⁻³²; what a checksum would catch poorly (a well-formed file of
//! another model, layout or chain position) is checked field by field instead.
//! A 64-bit hash would need another dependency for no practical gain.
//!
//! # Guarantees
//!
//! - **Crash safety**: a process killed at any point leaves only complete files
//!   under final names (data is fsynced before the rename); `open` deletes temp
//!   files. Power loss: renames are made durable by fsyncing the directory.
//! - **Verified reads**: [`SpillStore::get`] checks magic, version, identity, key,
//!   parent, tokens, lengths and checksum before returning a byte.
//! - **Errors, not panics**: IO failures (disk full, read-only filesystem, the
//!   directory removed or replaced by a file) return [`StoreError`] naming the
//!   path, leave no temp file and leave the index consistent with the disk.
//! - **One owner**: one process (and one thread: `&mut self`) per identity
//!   directory.

mod atomic;
mod block_file;
mod codec;
mod error;
mod identity;
mod index;
mod lock;
mod names;
mod record_file;
mod store;
mod warnings;

pub use block_file::{BlobKind, BlockMeta, MAX_BLOCK_TOKENS};
pub use error::StoreError;
pub use identity::{StoreIdentity, MAX_IDENTITY_STR};
pub use lock::FileLock;
pub use names::{MAX_RECORD_ID_BYTES, MAX_RECORD_KIND};
pub use record_file::MAX_RECORD_BYTES;
pub use store::{Held, SpillStore};
